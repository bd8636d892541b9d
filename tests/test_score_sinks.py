"""Score sinks through the vendors' real clients: Langfuse scores and LangSmith feedback against
loopback servers that speak their REST APIs (tests/review_servers.py), Phoenix's client against a
loopback server for the failure policy (the real Phoenix server is in test_phoenix_e2e.py)."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid

import pytest

pytest.importorskip("opentelemetry.sdk")

from app_trace import QUESTION, rag_graph  # noqa: E402
from demo_trace import RETURNS_ANSWER, RETURNS_FINDINGS, RETURNS_WEAKEST, record_returns, record_run  # noqa: E402
from fake_llm_server import FakeLLMServer, Reply  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from review_servers import LangfuseServer, LangSmithServer  # noqa: E402

from groundlens_core.plugins.langgraph import GroundlensLangGraphCallback  # noqa: E402
from groundlens_core.scoring.bands import SCORED_METHODS  # noqa: E402
from groundlens_core.trace import Recorder  # noqa: E402
from groundlens_core.trace.otel import OTelExporter  # noqa: E402
from groundlens_core.trace.score_sink import ranked_score  # noqa: E402


@pytest.fixture(scope="module")
def calibration(dgi_calibration):
    return dgi_calibration


def scored(trace):
    steps = [s for s in trace.steps if s.method in SCORED_METHODS]
    assert steps
    return steps


def langfuse_client(Langfuse, server):
    """A real Langfuse client for ``server``: its own key (Langfuse keeps one client's resources per
    public key, and a test shuts its client down) and its own tracer provider (a Langfuse client
    would otherwise install a global one)."""
    return Langfuse(
        public_key=f"pk-lf-{uuid.uuid4().hex[:8]}",
        secret_key="sk-lf-test",
        base_url=server.url,
        tracer_provider=TracerProvider(),
        flush_interval=0.1,
    )


def sink_warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "groundlens.sinks"]


def test_langfuse_gets_one_score_per_scored_step_on_its_exported_span(calibration):
    from langfuse import Langfuse

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    with LangfuseServer() as server:
        client = langfuse_client(Langfuse, server)
        from groundlens_core.plugins.langfuse import LangfuseScores

        sink = LangfuseScores(client)
        recorder = Recorder("test", calibration=calibration, listeners=[sink, OTelExporter(provider)])
        record_run(recorder, "lf")
        assert sink.flush(60)
        trace = recorder.get_trace("lf")
        client.shutdown()
    span_of = {
        s.attributes["groundlens.step.id"]: s.context
        for s in spans.get_finished_spans()
        if "groundlens.step.id" in s.attributes
    }
    got = {score["metadata"]["groundlens_step_id"]: score for score in server.scores}
    steps = scored(trace)
    assert set(got) == {s.id for s in steps}
    for step in steps:
        score = got[step.id]
        assert score["name"] == "groundlens" and score["dataType"] == "NUMERIC"
        assert score["value"] == pytest.approx(ranked_score(step)) == pytest.approx(step.score)
        assert score["comment"] == step.explanation and "not a verdict" in score["comment"]
        assert score["metadata"]["label"] == step.triage == step.band
        assert score["metadata"]["method"] == step.method
        # on the observation our exporter made for the step (Langfuse's ids are OpenTelemetry's)
        assert score["traceId"] == format(span_of[step.id].trace_id, "032x")
        assert score["observationId"] == format(span_of[step.id].span_id, "016x")
    assert sink.stats == {"sent": len(steps), "failed": 0, "skipped": 0, "dropped": 0}


def test_langfuse_without_spans_scores_a_trace_named_by_the_groundlens_trace(calibration):
    from langfuse import Langfuse

    from groundlens_core.plugins.langfuse import LangfuseScores

    with LangfuseServer() as server:
        client = langfuse_client(Langfuse, server)
        sink = LangfuseScores(client)
        recorder = Recorder("test", calibration=calibration, listeners=[sink])
        record_run(recorder, "lf-alone")
        assert sink.flush(60)
        trace = recorder.get_trace("lf-alone")
        client.shutdown()
    assert len(server.scores) == len(scored(trace))
    assert {s["traceId"] for s in server.scores} == {Langfuse.create_trace_id(seed=trace.id)}
    assert not any("observationId" in s for s in server.scores)


def test_langsmith_feedback_lands_on_the_langchain_run_it_scores(calibration):
    from langsmith import Client

    from groundlens_core.plugins.langsmith import LangSmithFeedback

    project = str(uuid.uuid4())
    with LangSmithServer() as server:
        sink = LangSmithFeedback(Client(api_url=server.url, api_key="ls-test"), session_id=project)
        cb = GroundlensLangGraphCallback(calibration=calibration, listeners=[sink])
        rag_graph().invoke({"question": QUESTION}, config={"callbacks": [cb]})
        trace = cb.get_trace()
        assert sink.flush(60)
    (step,) = scored(trace)
    (feedback,) = server.feedback
    assert feedback["run_id"] == step.id  # LangChain's run id of the chat model call: LangSmith's run
    # one request on the sink's thread; with a trace_id the client would only queue it for its own
    assert "trace_id" not in feedback and trace.metadata["root_run_id"]
    assert feedback["session_id"] == project
    assert feedback["key"] == "groundlens"
    assert feedback["score"] == pytest.approx(step.score, abs=5e-5)  # the client rounds to 4 places
    assert feedback["value"] == step.triage
    assert feedback["comment"] == step.explanation
    assert feedback["feedback_source"]["type"] == "model"
    assert feedback["feedback_source"]["metadata"]["groundlens_step_id"] == step.id


@pytest.mark.parametrize("vendor", ["phoenix", "langfuse", "langsmith"])
def test_each_sink_points_at_the_failed_findings_and_the_weakest_sentence(calibration, vendor):
    """The annotation's, score's or feedback's metadata, as the vendor's client sent it over the wire."""
    server = {"langfuse": LangfuseServer, "langsmith": LangSmithServer}.get(
        vendor, lambda: FakeLLMServer(default=lambda r: Reply.json({}))
    )()
    with server:
        sink = _sink(vendor, server.url)
        # a LangGraph trace whose step id is a run id, so that LangSmith has a run to give feedback on
        recorder = Recorder("langgraph", calibration=calibration, listeners=[sink, OTelExporter(TracerProvider())])
        record_returns(recorder, step_id=str(uuid.uuid4()))
        assert sink.flush(60)
        if vendor == "langfuse":
            sink.client.shutdown()
    if vendor == "phoenix":
        (post,) = [r for r in server.requests if r.path.startswith("/v1/span_annotations")]
        (sent,) = [a["metadata"] for a in post.json["data"]]
    elif vendor == "langfuse":
        (sent,) = [s["metadata"] for s in server.scores]
    else:
        (sent,) = [f["feedback_source"]["metadata"] for f in server.feedback]
    (step,) = recorder.get_trace("returns").steps
    assert sink.stats["sent"] == 1 and sent["groundlens_step_id"] == step.id
    findings = sent["findings"]
    assert sent["findings_count"] == len(findings) == len(step.result.decision.findings)
    assert all(set(f) == {"text", "kind", "status", "source", "start", "end"} for f in findings)
    assert [f["text"] for f in findings] == [f.text for f in step.result.decision.findings]
    assert set(RETURNS_FINDINGS) <= {
        (RETURNS_ANSWER[f["start"] : f["end"]], f["status"], f["source"]) for f in findings
    }
    weakest = sent["weakest_sentence"]
    assert weakest["text"] == RETURNS_ANSWER[weakest["start"] : weakest["end"]] == RETURNS_WEAKEST


def test_langsmith_skips_steps_without_a_run_with_one_warning(calibration, caplog):
    from langsmith import Client

    from groundlens_core.plugins.langsmith import LangSmithFeedback

    with LangSmithServer() as server:
        sink = LangSmithFeedback(Client(api_url=server.url, api_key="ls-test"))
        recorder = Recorder("test", calibration=calibration, listeners=[sink])
        with caplog.at_level(logging.WARNING, logger="groundlens.sinks"):
            record_run(recorder, "a")
            record_run(recorder, "b")
            assert sink.flush(60)
    assert server.feedback == []
    assert sink.stats["skipped"] == 2 * len(scored(recorder.get_trace("a")))
    (warning,) = sink_warnings(caplog)
    assert "LangSmith" in warning and "no LangSmith run" in warning


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_dead_backend_costs_one_warning_and_never_reaches_the_agent(calibration, caplog):
    from phoenix.client import Client

    from groundlens_core.plugins.phoenix import PhoenixAnnotations

    sink = PhoenixAnnotations(Client(base_url=f"http://127.0.0.1:{_closed_port()}"))
    recorder = Recorder("test", calibration=calibration, listeners=[sink, OTelExporter(TracerProvider())])
    with caplog.at_level(logging.WARNING, logger="groundlens.sinks"):
        for key in ("d1", "d2", "d3"):
            record_run(recorder, key)  # each run is scored and handed over before the next
        assert sink.flush(60)
    per_run = len(scored(recorder.get_trace("d1")))
    assert all(recorder.get_trace(k).status == "ok" for k in ("d1", "d2", "d3"))
    assert sink.stats == {"sent": 0, "failed": 3 * per_run, "skipped": 0, "dropped": 0}
    (warning,) = sink_warnings(caplog)  # three failed batches, one warning
    assert "Phoenix" in warning and "ConnectError" in warning


def test_a_slow_backend_drops_whole_batches_never_blocks_and_says_so_once(calibration, caplog):
    """The sender is held on the first batch; the queue holds one more; the rest are dropped and
    counted, while the recorder goes on. Phoenix's client speaks to a loopback server here, which
    also shows what goes over the wire."""
    from phoenix.client import Client

    from groundlens_core.plugins.phoenix import PhoenixAnnotations

    release = threading.Event()

    def answer(request):
        release.wait(60)
        return Reply.json({})

    with FakeLLMServer(default=answer) as server:
        sink = PhoenixAnnotations(Client(base_url=server.url), max_queued_batches=1)
        recorder = Recorder("test", calibration=calibration, listeners=[sink, OTelExporter(TracerProvider())])
        with caplog.at_level(logging.WARNING, logger="groundlens.sinks"):
            for key in ("s1", "s2", "s3", "s4"):
                record_run(recorder, key)  # never waits for the backend
            release.set()
            assert sink.flush(60)
        per_run = len(scored(recorder.get_trace("s1")))
        assert sink.stats == {"sent": 2 * per_run, "failed": 0, "skipped": 0, "dropped": 2 * per_run}
        (warning,) = sink_warnings(caplog)
        assert "queue full" in warning
        first = server.requests[0]
        assert first.method == "POST" and first.path.startswith("/v1/span_annotations")
        trace = recorder.get_trace("s1")
    sent = first.json["data"]
    assert [a["identifier"] for a in sent] == [s.id for s in scored(trace)]
    for annotation, step in zip(sent, scored(trace)):
        assert annotation["name"] == "groundlens" and annotation["annotator_kind"] == "CODE"
        assert annotation["result"] == {
            "score": pytest.approx(step.score),
            "label": step.triage,
            "explanation": step.explanation,
        }
        assert len(annotation["span_id"]) == 16


def test_sinks_need_their_extra_and_say_how_to_install_it():
    from missing_extras import run_without

    out = run_without(
        ("phoenix", "langfuse", "langsmith"),
        """
        for module, cls, extra in (("phoenix", "PhoenixAnnotations", "phoenix"),
                                   ("langfuse", "LangfuseScores", "langfuse"),
                                   ("langsmith", "LangSmithFeedback", "langsmith")):
            mod = __import__(f"groundlens_core.plugins.{module}", fromlist=[cls])
            try:
                getattr(mod, cls)()
            except ImportError as exc:
                assert f'pip install "groundlens-core[{extra}]"' in str(exc), exc
            else:
                raise AssertionError(cls)
        print("ok")
    """,
    )
    assert out.strip().endswith("ok")


def test_what_a_sink_holds_is_sent_at_exit_after_the_recorder_scored_it():
    """A script that never flushes: at exit the recorder scores what is queued, then the sink sends it."""
    import subprocess
    import sys
    import textwrap

    with FakeLLMServer(default=lambda request: Reply.json({})) as server:
        code = textwrap.dedent(f"""
            from opentelemetry.sdk.trace import TracerProvider
            from phoenix.client import Client
            from groundlens_core.plugins.phoenix import PhoenixAnnotations
            from groundlens_core.trace import CallRecord, ContextPiece, Recorder
            from groundlens_core.trace.otel import OTelExporter

            sink = PhoenixAnnotations(Client(base_url={server.url!r}))
            r = Recorder("test", listeners=[sink, OTelExporter(TracerProvider())])
            r.record(CallRecord("k", "answer", question="How tall is the Eiffel Tower in metres?",
                                context=[ContextPiece("The Eiffel Tower is 330 metres tall.", "retriever")],
                                response="The Eiffel Tower is 330 metres tall."))
            print("recorded")
        """)
        # the exit waits long enough for the model's first load on a loaded machine
        env = {**os.environ, "GROUNDLENS_EXIT_FLUSH_SECONDS": "240"}
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
        assert out.returncode == 0 and out.stdout.strip() == "recorded", out.stderr[-3000:]
        posts = [r for r in server.requests if r.path.startswith("/v1/span_annotations")]
    (post,) = posts
    (annotation,) = post.json["data"]
    assert annotation["result"]["label"] in ("trusted", "review", "flagged")


# ---------------------------------------------------------------- bounds: a backend that never answers


def _items(n: int, framework: str = "langgraph") -> list:
    from groundlens_core.trace.score_sink import ScoreItem, SpanIds

    return [
        ScoreItem(step_id=str(uuid.uuid4()), trace_id="t", framework=framework, name="groundlens", score=0.5,
                  label="review", comment="why", span=SpanIds(uuid.uuid4().hex, uuid.uuid4().hex[:16]),
                  run_id=str(uuid.uuid4()), root_run_id=None)
        for _ in range(n)
    ]  # fmt: skip


def _hand(sink, items) -> None:
    """What the recorder's worker does at the end of a batch: the sink gets the batch's items."""
    sink._items.extend(items)
    sink.on_batch_end()


def _sink(vendor: str, url: str, own_client: bool = False):
    """A sink of ``vendor`` for ``url``; ``own_client``: the client the sink makes itself (LangSmith)."""
    if vendor == "langfuse":
        from langfuse import Langfuse

        from groundlens_core.plugins.langfuse import LangfuseScores

        return LangfuseScores(Langfuse(public_key=f"pk-lf-{uuid.uuid4().hex[:8]}", secret_key="sk-lf-test",
                                       base_url=url, tracer_provider=TracerProvider(), flush_interval=0.1))  # fmt: skip
    if vendor == "langsmith":
        from langsmith import Client

        from groundlens_core.plugins.langsmith import LangSmithFeedback

        if own_client:
            os.environ.update(LANGSMITH_ENDPOINT=url, LANGSMITH_API_KEY="ls-test")
            return LangSmithFeedback(session_id=str(uuid.uuid4()))
        return LangSmithFeedback(Client(api_url=url, api_key="ls-test"), session_id=str(uuid.uuid4()))
    from phoenix.client import Client

    from groundlens_core.plugins.phoenix import PhoenixAnnotations

    return PhoenixAnnotations(Client(base_url=url))


@pytest.mark.parametrize("vendor", ["langfuse", "langsmith", "phoenix"])
def test_flush_returns_by_its_timeout_when_the_backend_accepts_and_never_answers(vendor):
    from review_servers import SilentServer

    with SilentServer() as server:
        sink = _sink(vendor, server.url)
        _hand(sink, _items(3))
        start = time.monotonic()
        assert sink.flush(timeout=2) is False
        assert time.monotonic() - start < 3.5
        assert sink.stats["sent"] == 0


def test_langfuse_counts_as_sent_only_what_langfuse_accepted():
    """A Langfuse that refuses every score (401), then one that accepts two of three (207)."""
    with FakeLLMServer(default=lambda request: Reply.json({"message": "unauthorized"}, status=401)) as server:
        sink = _sink("langfuse", server.url)
        _hand(sink, _items(3))
        assert sink.flush(30)
        assert sink.stats == {"sent": 0, "failed": 3, "skipped": 0, "dropped": 0}
    partial = {"accepted": 2, "rejected": 1, "errors": [{"index": 2, "message": "bad value"}]}
    with FakeLLMServer(default=lambda request: Reply.json(partial, status=207)) as server:
        sink = _sink("langfuse", server.url)
        _hand(sink, _items(3))
        assert sink.flush(30)
        assert sink.stats == {"sent": 2, "failed": 1, "skipped": 0, "dropped": 0}
        assert len(server.requests[0].json) == 3


def test_the_exit_waits_a_bounded_time_for_sinks_whose_backend_never_answers():
    """Three sinks, each with a score in hand and a backend that accepts and never answers: the
    process exits after each sink's exit time (2 s here), not after the vendors' retries. (A
    LangSmith client made by the application keeps LangSmith's own tracing thread, which the
    interpreter waits for; the sink's own client has none.)"""
    import subprocess
    import sys
    import textwrap

    from review_servers import SilentServer

    with SilentServer() as server:
        code = textwrap.dedent(f"""
            import sys
            sys.path.insert(0, {os.path.dirname(__file__)!r})
            import test_score_sinks as t
            from groundlens_core.trace import score_sink
            score_sink.EXIT_FLUSH_SECONDS = 2.0
            for vendor in ("langfuse", "langsmith", "phoenix"):
                t._hand(t._sink(vendor, {server.url!r}, own_client=True), t._items(2))
            print("handed", flush=True)
        """)
        start = time.monotonic()
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        took = time.monotonic() - start
    assert out.returncode == 0 and out.stdout.strip() == "handed", out.stderr[-3000:]
    assert took < 25, took  # three sinks of 2 s each, and the imports
