"""OpenTelemetry export of traces, in-process: SDK in-memory span and log exporters, the real model."""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from groundlens_core.trace import CallRecord, ContextPiece, Recorder, Trace
from groundlens_core.trace.model import redaction_digest

pytest.importorskip("opentelemetry.sdk")

from demo_trace import (  # noqa: E402
    ANSWER_DGI,
    CONTEXT_SGI,
    GROUNDED,
    QUESTION_DGI,
    QUESTION_SGI,
    RAW_TEXTS,
    RETURNS_ANSWER,
    RETURNS_CONTEXT,
    RETURNS_FINDINGS,
    RETURNS_WEAKEST,
    T0,
    TOOL_RESULT,
    record_returns,
    record_run,
)
from missing_extras import hints, run_without  # noqa: E402
from opentelemetry.sdk._logs import LoggerProvider  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.trace import StatusCode  # noqa: E402
from otel_memory import MemoryTelemetry  # noqa: E402

from groundlens_core.trace.otel import OTelExporter, configure_otlp, export_trace, iso_to_ns  # noqa: E402


@pytest.fixture(scope="module")
def calibration(dgi_calibration):
    """The shared small DGI direction (conftest.py): tests don't depend on the bundled one."""
    return dgi_calibration


class Sink(MemoryTelemetry):
    """A tracer and a logger provider that keep what they export in memory."""

    def by_node(self):
        return {s.attributes.get("groundlens.node"): s for s in self.spans() if "groundlens.node" in s.attributes}

    def root(self):
        roots = [s for s in self.spans() if s.parent is None]
        assert len(roots) == 1, [s.name for s in roots]
        return roots[0]


def live(calibration, **exporter_kwargs) -> tuple[Sink, Recorder]:
    sink = Sink()
    exporter = OTelExporter(sink.tracer_provider, sink.logger_provider, **exporter_kwargs)
    recorder = Recorder("test", calibration=calibration, listeners=[exporter])
    record_run(recorder)
    return sink, recorder


def all_exported_text(sink: Sink) -> str:
    parts = [s.to_json() for s in sink.spans()]
    parts += [json.dumps(dict(r.attributes or {}), default=str) + str(r.body) for r in sink.logs()]
    return "\n".join(parts)


# ---------------------------------------------------------------- live export


def test_live_spans_names_kinds_and_parentage(calibration):
    sink, recorder = live(calibration)
    trace = recorder.get_trace()
    assert [s.method for s in trace.steps] == ["skipped", "sgi", "sgi", "dgi", "error"]

    root = sink.root()
    assert root.name == "invoke_workflow demo"
    assert root.attributes["gen_ai.operation.name"] == "invoke_workflow"
    assert root.attributes["openinference.span.kind"] == "CHAIN"
    assert root.attributes["groundlens.trace.id"] == trace.id
    assert root.attributes["groundlens.steps"] == 5
    assert root.attributes["groundlens.count.error"] == 1
    assert root.attributes["groundlens.trace.complete"] is True

    nodes = sink.by_node()
    assert set(nodes) == {"search", "grounded", "off_topic", "no_context", "broken"}
    for span in nodes.values():
        assert span.parent is not None and span.parent.span_id == root.context.span_id
        assert span.context.trace_id == root.context.trace_id

    tool = nodes["search"]
    assert tool.name == "execute_tool web_search"
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool.attributes["openinference.span.kind"] == "TOOL"
    assert tool.attributes["gen_ai.tool.name"] == "web_search"
    assert tool.attributes["output.value"] == TOOL_RESULT
    assert tool.attributes["groundlens.method"] == "skipped"

    chat = nodes["grounded"]
    assert chat.name == "chat gpt-test"
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["openinference.span.kind"] == "LLM"
    assert chat.attributes["gen_ai.provider.name"] == "openai"
    assert chat.attributes["gen_ai.request.model"] == "gpt-test"
    assert chat.attributes["gen_ai.usage.input_tokens"] == 42
    assert chat.attributes["gen_ai.usage.output_tokens"] == 7
    assert chat.attributes["input.value"] == QUESTION_SGI
    assert chat.attributes["output.value"] == GROUNDED
    assert chat.attributes["groundlens.context.0.text"] == CONTEXT_SGI
    assert tuple(chat.attributes["groundlens.context.sources"]) == ("retriever",)
    assert "gen_ai.usage.input_tokens" not in nodes["no_context"].attributes


def test_live_evaluation_attributes_match_the_trace(calibration):
    sink, recorder = live(calibration)
    steps = {s.node: s for s in recorder.get_trace().steps}
    nodes = sink.by_node()

    for node, method in (("grounded", "sgi"), ("off_topic", "sgi"), ("no_context", "dgi")):
        a, step = nodes[node].attributes, steps[node]
        assert a["gen_ai.evaluation.name"] == f"groundlens.{method}"
        # the evaluation's value is the score (the value ranked), never the raw SGI/DGI
        assert a["gen_ai.evaluation.score.value"] == a["groundlens.score"] == pytest.approx(step.score)
        assert a[f"groundlens.{method}"] == a["groundlens.value"] == pytest.approx(step.value)
        assert a["groundlens.rule"] == step.decision.rule
        assert a["gen_ai.evaluation.score.label"] == step.triage
        assert a["gen_ai.evaluation.score.label"] in ("trusted", "review", "flagged")
        assert "not a verdict" in a["gen_ai.evaluation.explanation"]
        assert a["groundlens.method"] == method
        assert a["groundlens.normalized"] == pytest.approx(step.normalized)
        assert a["groundlens.flagged"] == (step.triage == "flagged")
        assert a["groundlens.fingerprint"] == step.result.fingerprint
        assert a["groundlens.scoring_latency_ms"] >= 0
    # the grounded answer is ranked as better grounded than the off-topic one
    assert (
        nodes["grounded"].attributes["gen_ai.evaluation.score.value"]
        > nodes["off_topic"].attributes["gen_ai.evaluation.score.value"]
    )

    for node in ("search", "broken"):
        assert not any(k.startswith("gen_ai.evaluation") for k in nodes[node].attributes)
    broken = nodes["broken"]
    assert broken.status.status_code == StatusCode.ERROR
    assert "RateLimitError: slow down" in broken.status.description
    assert broken.attributes["groundlens.method"] == "error"
    assert all(nodes[n].status.status_code != StatusCode.ERROR for n in ("search", "grounded", "no_context"))


def test_live_span_times_are_the_call_times(calibration):
    sink, recorder = live(calibration)
    trace = recorder.get_trace()
    nodes = sink.by_node()
    expected = {"search": (0.0, 0.1), "grounded": (0.2, 0.7), "off_topic": (0.8, 1.1), "no_context": (1.2, 1.5)}
    for node, (a, b) in expected.items():
        span = nodes[node]
        assert abs(span.start_time - int((T0 + a) * 1e9)) <= 2_000  # microsecond ISO precision
        assert abs(span.end_time - int((T0 + b) * 1e9)) <= 2_000
    root = sink.root()
    assert root.start_time == iso_to_ns(trace.started_at)
    assert root.end_time >= max(s.end_time for s in nodes.values())
    assert root.end_time >= iso_to_ns(trace.ended_at)


def test_evaluation_events_are_linked_to_their_step_spans(calibration):
    sink, _ = live(calibration)
    nodes = sink.by_node()
    logs = sink.logs()
    assert len(logs) == 3  # one per scored step: grounded, off_topic, no_context
    by_node = {r.attributes["groundlens.node"]: r for r in logs}
    assert set(by_node) == {"grounded", "off_topic", "no_context"}
    for node, record in by_node.items():
        span = nodes[node]
        assert record.event_name == "gen_ai.evaluation.result"
        assert record.attributes["event.name"] == "gen_ai.evaluation.result"
        assert record.trace_id == span.context.trace_id
        assert record.span_id == span.context.span_id
        for key in (
            "gen_ai.evaluation.name",
            "gen_ai.evaluation.score.value",
            "gen_ai.evaluation.score.label",
            "gen_ai.evaluation.explanation",
        ):
            assert record.attributes[key] == span.attributes[key]
        assert record.timestamp == span.end_time


def test_single_agent_trace_root_is_invoke_agent(calibration):
    sink = Sink()
    recorder = Recorder(
        "test", calibration=calibration, listeners=[OTelExporter(sink.tracer_provider, sink.logger_provider)]
    )
    recorder.start_trace("a", name="helper", metadata={"single_agent": True})
    recorder.record(
        CallRecord("a", "helper", question=QUESTION_DGI, response=ANSWER_DGI, started_at=T0, ended_at=T0 + 1)
    )
    recorder.end_trace("a", error="ValueError: agent crashed")
    recorder.flush()
    root = sink.root()
    assert root.name == "invoke_agent helper"
    assert root.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert root.attributes["gen_ai.agent.name"] == "helper"
    assert root.attributes["openinference.span.kind"] == "AGENT"
    assert root.status.status_code == StatusCode.ERROR
    assert "agent crashed" in root.status.description


def test_steps_of_a_trace_that_never_ends_are_still_exported(calibration):
    sink = Sink()
    exporter = OTelExporter(sink.tracer_provider, sink.logger_provider)
    recorder = Recorder("test", calibration=calibration, listeners=[exporter])
    record_run(recorder, "crashed", end=False)
    spans = sink.spans()
    assert len(spans) == 5 and all(s.parent is not None for s in spans)  # steps out, the root still open
    parent_ids = {s.parent.span_id for s in spans}
    assert len(parent_ids) == 1

    exporter.close()
    root = sink.root()
    assert root.context.span_id in parent_ids
    assert root.attributes["groundlens.trace.complete"] is False
    assert root.end_time >= max(s.end_time for s in spans)


def test_listener_added_later_and_a_failing_provider_never_reach_the_agent(internal_errors_logged, calibration, caplog):
    class Broken:
        def get_tracer(self, *a, **k):
            return self

        def get_logger(self, *a, **k):
            return self

        def start_span(self, *a, **k):
            raise RuntimeError("tracer exploded")

    recorder = Recorder("test", calibration=calibration)
    recorder.add_listener(OTelExporter(Broken(), Broken()))
    caplog.set_level(logging.WARNING, logger="groundlens")
    record_run(recorder)
    assert len(recorder.get_trace().steps) == 5
    ours = [r for r in caplog.records if r.name.startswith("groundlens") and r.levelno >= logging.WARNING]
    assert len(ours) == 1 and "tracer exploded" in ours[0].getMessage()


# ---------------------------------------------------------------- post-hoc export


def test_posthoc_export_of_a_saved_trace_matches_live(calibration, tmp_path):
    live_sink, recorder = live(calibration)
    path = tmp_path / "trace.json"
    recorder.get_trace().save(path)
    trace = Trace.load(path)

    sink = Sink()
    trace_id = export_trace(trace, sink.tracer_provider, sink.logger_provider)
    root = sink.root()
    assert trace_id == format(root.context.trace_id, "032x")
    assert trace_id != format(live_sink.root().context.trace_id, "032x")  # a new OTel trace, same content

    def shape(s):
        keep = {k: v for k, v in s.attributes.items() if k != "groundlens.scoring_latency_ms"}
        return s.name, s.start_time, s.end_time, s.status.status_code, json.dumps(keep, sort_keys=True, default=list)

    live_by_node, post_by_node = live_sink.by_node(), sink.by_node()
    assert set(post_by_node) == set(live_by_node)
    for node in live_by_node:
        assert shape(post_by_node[node]) == shape(live_by_node[node])
        assert post_by_node[node].parent.span_id == root.context.span_id
    # original timestamps from the file, converted to ns
    assert root.start_time == iso_to_ns(trace.started_at)
    assert root.end_time >= iso_to_ns(trace.ended_at)
    assert root.name == live_sink.root().name
    assert len(sink.logs()) == len(live_sink.logs()) == 3


def test_posthoc_export_of_an_unfinished_trace(calibration):
    recorder = Recorder("test", calibration=calibration)
    record_run(recorder, end=False)
    trace = recorder.get_trace()
    assert trace.ended_at is None
    sink = Sink()
    export_trace(trace, sink.tracer_provider, sink.logger_provider)
    root = sink.root()
    assert root.attributes["groundlens.trace.complete"] is False
    assert root.end_time >= max(s.end_time for s in sink.spans() if s is not root)


# ---------------------------------------------------------------- redaction and cutting


def _marker(text: str) -> str:
    return f"[redacted hmac-sha256={redaction_digest(text)} length={len(text)}]"


def test_redaction_keeps_no_raw_text_live(calibration):
    sink, _ = live(calibration, redact=True)
    exported = all_exported_text(sink)
    for text in RAW_TEXTS:
        assert text not in exported
    nodes = sink.by_node()
    assert nodes["grounded"].attributes["input.value"] == _marker(QUESTION_SGI)
    assert nodes["grounded"].attributes["output.value"] == _marker(GROUNDED)
    assert nodes["grounded"].attributes["groundlens.context.0.text"] == _marker(CONTEXT_SGI)
    assert nodes["search"].attributes["output.value"] == _marker(TOOL_RESULT)
    # the scores still travel
    assert nodes["grounded"].attributes["gen_ai.evaluation.name"] == "groundlens.sgi"
    assert len(sink.logs()) == 3


def test_redaction_keeps_no_raw_text_posthoc(calibration, tmp_path):
    _, recorder = live(calibration)
    trace = recorder.get_trace()
    for source in (trace, Trace.from_json(trace.to_json(redact=True))):  # raw trace, and an already redacted file
        sink = Sink()
        export_trace(source, sink.tracer_provider, sink.logger_provider, redact=True)
        exported = all_exported_text(sink)
        assert len(sink.spans()) == 6
        for text in RAW_TEXTS:
            assert text not in exported
        assert sink.by_node()["no_context"].attributes["input.value"] == _marker(QUESTION_DGI)


def test_max_text_chars_cuts_texts(calibration):
    sink, _ = live(calibration, max_text_chars=10)
    a = sink.by_node()["grounded"].attributes
    assert a["input.value"].startswith(QUESTION_SGI[:10])
    assert f"[cut: {len(QUESTION_SGI)} chars]" in a["input.value"]
    assert QUESTION_SGI not in all_exported_text(sink)


# ---------------------------------------------------------------- where the findings stand


def _returns(calibration, **exporter_kwargs):
    sink = Sink()
    exporter = OTelExporter(sink.tracer_provider, sink.logger_provider, **exporter_kwargs)
    recorder = Recorder("test", calibration=calibration, listeners=[exporter])
    record_returns(recorder)
    (log,) = sink.logs()
    return sink.by_node()["answer"].attributes, dict(log.attributes), recorder


def _failed(attrs) -> list[dict]:
    findings = json.loads(attrs["groundlens.findings"])
    assert attrs["groundlens.findings_count"] == len(findings)
    assert all(set(f) == {"text", "kind", "status", "source", "start", "end"} for f in findings)
    return findings


def test_the_step_span_points_at_each_failed_findings_characters_and_the_weakest_sentence(calibration):
    span, log, recorder = _returns(calibration)
    (step,) = recorder.get_trace("returns").steps
    assert step.triage == "flagged" and span["output.value"] == RETURNS_ANSWER
    for attrs in (span, log):  # the span, and the gen_ai.evaluation.result record beside it
        findings = _failed(attrs)
        pointed = {(RETURNS_ANSWER[f["start"] : f["end"]], f["status"], f["source"]) for f in findings}
        assert set(RETURNS_FINDINGS) <= pointed
        # each finding as the fact checker read it, in the order groundlens.facts lists them
        assert [f["text"] for f in findings] == [f.text for f in step.result.decision.findings]
        assert all(f["text"] in attrs["groundlens.facts"] for f in findings)
        start, end = attrs["groundlens.weakest_sentence_start"], attrs["groundlens.weakest_sentence_end"]
        assert RETURNS_ANSWER[start:end] == attrs["groundlens.weakest_sentence"] == RETURNS_WEAKEST


def test_finding_offsets_survive_redaction_and_their_texts_do_not(calibration):
    plain, _, _ = _returns(calibration)
    span, log, _ = _returns(calibration, redact=True)
    for attrs in (span, log):
        findings = _failed(attrs)
        assert [(f["start"], f["end"], f["kind"], f["status"]) for f in findings] == [
            (f["start"], f["end"], f["kind"], f["status"]) for f in _failed(plain)
        ]
        assert {f["text"] for f in findings} == {"[redacted]"}
        assert {f["source"] for f in findings} <= {"[redacted]", None}
        assert (attrs["groundlens.weakest_sentence_start"], attrs["groundlens.weakest_sentence_end"]) == (
            plain["groundlens.weakest_sentence_start"],
            plain["groundlens.weakest_sentence_end"],
        )
        exported = json.dumps(attrs, default=str)
        for raw in (
            RETURNS_ANSWER,
            RETURNS_CONTEXT,
            RETURNS_WEAKEST,
            *(t for f in RETURNS_FINDINGS for t in (f[0], f[2])),
        ):
            assert raw not in exported, raw


def test_finding_texts_are_cut_like_the_other_evidence_and_the_list_stays_bounded(calibration):
    from groundlens_core.trace.otel.attributes import span_attributes
    from groundlens_core.trace.otel.finding_spans import FINDINGS_MAX_CHARS

    span, _, recorder = _returns(calibration, max_text_chars=6)
    findings = _failed(span)
    assert {f["source"] for f in findings if f["source"]} == {"at mo…", "Retur…"}  # as the view cuts every text
    assert (
        RETURNS_ANSWER[findings[-1]["start"] : findings[-1]["end"]] == "Return shipping is free"
    )  # offsets stay whole
    # many long findings: whole ones are left out past the bound, and the count says how many there were
    (step,) = recorder.get_trace("returns").steps
    fact = step.result.evidence.failed_facts()[-1]
    many = type(step.result.evidence)(
        **{
            **step.result.evidence.__dict__,
            "facts": tuple(fact.__class__(**{**fact.__dict__, "source": "x" * 600}) for _ in range(40)),
        }
    )
    attrs = span_attributes(type(step.result)(**{**step.result.__dict__, "evidence": many, "decision": None}), 512)
    kept = json.loads(attrs["groundlens.findings"])
    assert attrs["groundlens.findings_count"] == 40 and 1 <= len(kept) < 40
    assert len(attrs["groundlens.findings"]) <= FINDINGS_MAX_CHARS
    assert all(f["source"] == "x" * 512 + "… [cut: 600 chars]" for f in kept)


# ---------------------------------------------------------------- backend down


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the with block ends


def test_backend_down_costs_one_warning_and_loses_no_trace(calibration, caplog):
    caplog.set_level(logging.WARNING)
    from groundlens_core.trace.otel import otlp

    provider = configure_otlp(f"http://127.0.0.1:{_closed_port()}", project="down", timeout=1.0)
    recorder = Recorder("test", calibration=calibration, listeners=[OTelExporter(provider)])
    # record() must never wait on the dead endpoint: no export may run inside a record() call
    # (checked by thread, not by a bound in milliseconds that a preempted thread can exceed)
    guarded = otlp._GUARDED_BY_PROVIDER[provider]
    real_export, in_record, exports = guarded.export, threading.local(), []

    def spy_export(spans):
        exports.append(getattr(in_record, "on", False))
        return real_export(spans)

    guarded.export = spy_export

    worst = 0.0
    for i in range(3):
        key = f"run-{i}"
        recorder.start_trace(key, name="down")
        for j in range(10):
            t = time.perf_counter()
            in_record.on = True
            try:
                recorder.record(
                    CallRecord(
                        key,
                        f"n{j}",
                        question=QUESTION_SGI,
                        context=[ContextPiece(CONTEXT_SGI, "retriever")],
                        response=GROUNDED,
                        started_at=T0 + j,
                        ended_at=T0 + j + 0.5,
                    )
                )
            finally:
                in_record.on = False
            worst = max(worst, time.perf_counter() - t)
        recorder.end_trace(key)
        assert recorder.flush(timeout=120)
        provider.force_flush(10_000)  # forces an export attempt per run: several failures, one warning
    assert exports and not any(exports), "an export ran inside record()"
    assert worst < 60, f"record() took {worst:.1f} s with the backend down"  # a hang guard only

    done = threading.Event()
    t = time.perf_counter()
    threading.Thread(target=lambda: (provider.shutdown(), done.set()), daemon=True).start()
    assert done.wait(120), "provider.shutdown() hung on a dead backend"  # a hang guard, not a speed target
    shutdown_s = time.perf_counter() - t

    ours = [r for r in caplog.records if r.name.startswith("groundlens") and r.levelno >= logging.WARNING]
    assert len(ours) == 1, [r.getMessage() for r in ours]
    assert "could not export spans" in ours[0].getMessage()
    otel_own = [r for r in caplog.records if r.name.startswith("opentelemetry.exporter")]
    assert len({r.msg for r in otel_own}) == len(otel_own)  # the OTLP exporter's repeats are deduplicated
    traces = recorder.get_traces()
    assert [len(tr.steps) for tr in traces] == [10, 10, 10]
    assert all(s.method == "sgi" for tr in traces for s in tr.steps)
    assert shutdown_s < 120


# ---------------------------------------------------------------- global providers, lazy import


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300)


def test_global_providers_are_used_when_none_is_passed(tmp_path):
    """In a subprocess: the global OTel providers can be set once per process only."""
    path = tmp_path / "trace.json"
    trace = Trace(
        id="t1",
        name="saved",
        framework="test",
        started_at="2025-01-02T03:04:05.000006Z",
        ended_at="2025-01-02T03:04:09.000000Z",
    )
    trace.save(path)
    proc = _run(f"""
        from opentelemetry import trace as api, _logs
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from opentelemetry.sdk._logs import LoggerProvider
        from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
        from groundlens_core.trace import Trace
        from groundlens_core.trace.otel import OTelExporter, export_trace
        exporter = OTelExporter()  # made before the globals are set: must follow them
        spans = InMemorySpanExporter(); tp = TracerProvider(); tp.add_span_processor(SimpleSpanProcessor(spans))
        logs = InMemoryLogRecordExporter(); lp = LoggerProvider(); lp.add_log_record_processor(SimpleLogRecordProcessor(logs))
        api.set_tracer_provider(tp); _logs.set_logger_provider(lp)
        trace = Trace.load({str(path)!r})
        exporter.on_trace_start(trace); exporter.on_trace_end(trace)
        export_trace(trace)
        print(sorted((s.name, s.start_time) for s in spans.get_finished_spans()))
    """)
    assert proc.returncode == 0, proc.stderr
    start = iso_to_ns("2025-01-02T03:04:05.000006Z")
    assert start == 1735787045000006000
    assert proc.stdout.strip() == str([("invoke_workflow saved", start)] * 2)


def test_trace_package_imports_without_opentelemetry():
    out = run_without(
        ("opentelemetry",),
        """
        import groundlens_core.trace
        from groundlens_core.trace import otel
        hint(lambda: otel.OTelExporter())
        hint(lambda: otel.configure_otlp("http://127.0.0.1:1"))
    """,
    )
    assert len(hints(out)) == 2
    assert all('pip install "groundlens-core[otel]"' in h for h in hints(out))


# ---------------------------------------------------------------- configure_otlp: spans and logs


def test_configure_otlp_ships_the_evaluation_log_records_beside_the_spans(calibration):
    """The ``gen_ai.evaluation.result`` records reach the backend with no LoggerProvider built by hand,
    each in the context of its step's span; the return value is still a TracerProvider."""
    from otlp_receiver import OTLPReceiver, attributes

    with OTLPReceiver() as rx:
        provider = configure_otlp(rx.url, project="logs", timeout=5.0)
        assert isinstance(provider, TracerProvider) and isinstance(provider.logger_provider, LoggerProvider)
        recorder = Recorder("test", calibration=calibration, listeners=[OTelExporter(provider)])
        record_run(recorder)
        assert provider.force_flush(10_000)  # flushes the logs too
        spans = {s.span_id: s for s in rx.spans()}
        logs = rx.logs()
        provider.shutdown()
    assert logs, "no evaluation log records arrived"
    assert {r.event_name for r in logs} == {"gen_ai.evaluation.result"}
    scored = {attributes(s).get("groundlens.node"): s for s in spans.values() if "groundlens.node" in attributes(s)}
    for record in logs:
        span = spans[record.span_id]  # each record in its step's span, in the same trace
        assert record.trace_id == span.trace_id
        assert attributes(record)["gen_ai.evaluation.score.label"] == attributes(span)["gen_ai.evaluation.score.label"]
    assert {attributes(spans[r.span_id])["groundlens.node"] for r in logs} >= {"grounded", "off_topic"}
    assert set(scored) >= {"grounded", "off_topic", "no_context"}


def test_a_backend_without_otlp_logs_is_one_info_line_and_logs_false_makes_no_logger(calibration, caplog):
    from otlp_receiver import OTLPReceiver

    caplog.set_level(logging.INFO, logger="groundlens")
    with OTLPReceiver(serve=("/v1/traces",)) as rx:  # as Phoenix: traces yes, logs 404
        provider = configure_otlp(rx.url, timeout=5.0)
        recorder = Recorder("test", calibration=calibration, listeners=[OTelExporter(provider)])
        for key in ("run-1", "run-2"):
            record_run(recorder, key)
            provider.force_flush(10_000)
        provider.shutdown()
        assert rx.spans() and len(rx._bodies("/v1/logs")) == 1  # tried once, then no more
    ours = [r for r in caplog.records if r.name.startswith("groundlens")]
    assert [r.levelno for r in ours] == [logging.INFO], [r.getMessage() for r in ours]
    assert "takes no OTLP logs" in ours[0].getMessage() and "logs=False" in ours[0].getMessage()
    assert not [
        r for r in caplog.records if r.name.startswith("opentelemetry.exporter") and r.levelno >= logging.WARNING
    ]

    no_logs = configure_otlp("http://127.0.0.1:1", logs=False)
    assert no_logs.logger_provider is None
    no_logs.shutdown()
