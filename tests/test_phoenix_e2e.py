"""End to end: ship traces over OTLP/HTTP to a real Arize Phoenix server and read them back over REST.

Phoenix runs from its own venv (``bash .ci/install-phoenix.sh``). Without it the tests skip, except
under CI=true, where they fail: CI must run them.
"""

from __future__ import annotations

import time
import uuid
from datetime import datetime

import demo_trace
import pytest
from app_trace import APP_SPAN, openinference_langchain, run_in_app_span
from demo_trace import ERROR, GROUNDED_USAGE, QUESTION_SGI, TOOL_NAME
from phoenix_server import running_phoenix

from groundlens_core.trace import Recorder, Trace

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def phoenix():
    with running_phoenix() as server:
        # tests listen on loopback only: Phoenix's HTTP and gRPC receivers both (phoenix_loopback.py)
        deadline = time.monotonic() + 120  # the gRPC receiver may come up just after /healthz
        while {p for _, p in server.listening()} != {server.port, server.grpc_port} and time.monotonic() < deadline:
            time.sleep(0.5)
        listening = server.listening()
        assert {p for _, p in listening} == {server.port, server.grpc_port}, listening
        assert {ip for ip, _ in listening} == {"127.0.0.1"}, listening
        yield server


@pytest.fixture(scope="module")
def calibration(dgi_calibration):
    """The shared small DGI direction (conftest.py): tests don't depend on the bundled one."""
    return dgi_calibration


def record_run(recorder: Recorder, key: str) -> Trace:
    demo_trace.record_run(recorder, key, name="e2e")
    return recorder.get_trace(key)


def _ns(iso: str) -> int:
    dt = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    return int(dt.timestamp()) * 1_000_000_000 + dt.microsecond * 1000


def check_phoenix_spans(spans: list[dict], trace: Trace) -> None:
    """What Phoenix stored is the trace: names, parentage, kinds, evaluation attributes, times."""
    assert len(spans) == 6, [s["name"] for s in spans]
    assert len({s["context"]["trace_id"] for s in spans}) == 1
    roots = [s for s in spans if s["parent_id"] is None]
    assert len(roots) == 1
    root = roots[0]
    assert root["name"] == "invoke_workflow e2e"
    assert root["span_kind"] == "CHAIN"
    assert root["attributes"]["gen_ai.operation.name"] == "invoke_workflow"
    assert root["attributes"]["groundlens.trace.id"] == trace.id

    by_node = {s["attributes"]["groundlens.node"]: s for s in spans if s is not root}
    assert set(by_node) == {"search", "grounded", "off_topic", "no_context", "broken"}
    for span in by_node.values():
        assert span["parent_id"] == root["context"]["span_id"]
    assert by_node["search"]["name"] == f"execute_tool {TOOL_NAME}"
    assert by_node["search"]["span_kind"] == "TOOL"
    assert by_node["grounded"]["name"] == "chat gpt-test"
    assert by_node["grounded"]["span_kind"] == "LLM"
    assert by_node["grounded"]["attributes"]["gen_ai.usage.input_tokens"] == GROUNDED_USAGE.input_tokens
    assert by_node["grounded"]["attributes"]["input.value"] == QUESTION_SGI

    steps = {s.node: s for s in trace.steps}
    for node, method in (("grounded", "sgi"), ("off_topic", "sgi"), ("no_context", "dgi")):
        a = by_node[node]["attributes"]
        assert a["gen_ai.evaluation.name"] == f"groundlens.{method}"
        assert a["gen_ai.evaluation.score.value"] == pytest.approx(steps[node].score)
        assert a["gen_ai.evaluation.score.value"] == pytest.approx(a["groundlens.score"])
        assert a["gen_ai.evaluation.score.label"] == steps[node].triage
        assert "not a verdict" in a["gen_ai.evaluation.explanation"]
        assert a["groundlens.normalized"] == pytest.approx(steps[node].normalized)
        assert abs(_ns(by_node[node]["start_time"]) - _ns(steps[node].started_at)) <= 1000
        assert abs(_ns(by_node[node]["end_time"]) - _ns(steps[node].ended_at)) <= 1000
    assert by_node["grounded"]["attributes"]["gen_ai.evaluation.score.value"] > \
        by_node["off_topic"]["attributes"]["gen_ai.evaluation.score.value"]
    assert by_node["broken"]["status_code"] == "ERROR"
    assert ERROR in by_node["broken"]["status_message"]
    assert not any(k.startswith("gen_ai.evaluation") for k in by_node["broken"]["attributes"])


def test_live_export_arrives_in_phoenix(phoenix, calibration, monkeypatch):
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from groundlens_core.trace.otel import OTelExporter

    project = f"groundlens-live-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", phoenix.url)  # the only endpoint configuration
    provider = TracerProvider(resource=Resource.create({"openinference.project.name": project}))
    # a generous time-out per export: the default 10 s can pass while Phoenix, on a loaded machine,
    # is busy ingesting, and a failed export loses the spans the test then waits for
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(timeout=60)))
    recorder = Recorder("test", calibration=calibration, listeners=[OTelExporter(provider)])
    trace = record_run(recorder, "live")
    provider.shutdown()

    spans = phoenix.wait_for_spans(project, 6)
    check_phoenix_spans(spans, trace)


def test_saved_trace_exported_post_hoc_arrives_in_phoenix(phoenix, calibration, monkeypatch, tmp_path):
    from groundlens_core.trace.otel import configure_otlp, export_trace

    recorder = Recorder("test", calibration=calibration)
    path = tmp_path / "trace.json"
    record_run(recorder, "saved").save(path)
    trace = Trace.load(path)

    project = f"groundlens-posthoc-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", phoenix.url)
    # no endpoint: the OTLP exporter reads the env var; 60 s per export, not the default 3 s (see above)
    provider = configure_otlp(project=project, timeout=60)
    trace_id = export_trace(trace, provider)
    provider.shutdown()

    spans = phoenix.wait_for_spans(project, 6)
    check_phoenix_spans(spans, trace)
    assert {s["context"]["trace_id"] for s in spans} == {trace_id}
    root = next(s for s in spans if s["parent_id"] is None)
    assert abs(_ns(root["start_time"]) - _ns(trace.started_at)) <= 1000  # the original time, not the export's


def _wait(what, probe, timeout: float = 180.0):
    """Poll ``probe()`` until it returns something truthy (Phoenix ingests in the background)."""
    deadline = time.monotonic() + timeout
    while True:
        found = probe()
        if found or time.monotonic() > deadline:
            assert found, f"Phoenix never showed {what}"
            return found
        time.sleep(0.5)


def test_evaluation_joins_the_app_trace_and_annotates_the_llm_span(phoenix, calibration):
    """A LangGraph run inside the application's request span, OpenInference instrumenting LangChain:
    Phoenix has one trace, our spans in it under OpenInference's LLM span, and the groundlens
    annotation on that LLM span, sent by the Phoenix sink through Phoenix's own client."""
    pytest.importorskip("openinference.instrumentation.langchain")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from phoenix.client import Client

    from groundlens_core.plugins.langgraph import GroundlensLangGraphCallback
    from groundlens_core.plugins.phoenix import PhoenixAnnotations

    project = f"groundlens-app-{uuid.uuid4().hex[:8]}"
    provider = TracerProvider(resource=Resource.create({"openinference.project.name": project}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{phoenix.url}/v1/traces", timeout=60)))
    client = Client(base_url=phoenix.url)
    sink = PhoenixAnnotations(client)
    with openinference_langchain(provider):
        cb = GroundlensLangGraphCallback(calibration=calibration, tracer_provider=provider, listeners=[sink])
        request = run_in_app_span(provider.get_tracer("the-app"), cb)
        trace = cb.get_trace()
    assert sink.flush(120) and sink.stats["sent"] == 1, sink.stats
    provider.shutdown()
    (step,) = [s for s in trace.steps if s.method == "sgi"]
    trace_id = format(request.get_span_context().trace_id, "032x")

    def ours_arrived():
        spans = phoenix.spans(project)
        ready = any(s["attributes"].get("groundlens.step.id") == step.id for s in spans) and \
            any(s["attributes"].get("groundlens.trace.id") == trace.id for s in spans) and \
            any(s["name"] == APP_SPAN for s in spans)
        return spans if ready else None

    spans = _wait("the run's spans", ours_arrived)
    assert {s["context"]["trace_id"] for s in spans} == {trace_id}  # one trace for the request
    by_id = {s["context"]["span_id"]: s for s in spans}
    (app,) = [s for s in spans if s["name"] == APP_SPAN]
    (llm,) = [s for s in spans if s["span_kind"] == "LLM" and "groundlens.step.id" not in s["attributes"]]
    (ours,) = [s for s in spans if s["attributes"].get("groundlens.step.id") == step.id]
    (root,) = [s for s in spans if s["attributes"].get("groundlens.trace.id") == trace.id
               and s["name"].startswith("invoke_workflow")]
    assert root["parent_id"] == app["context"]["span_id"]  # our root in the request's trace
    assert ours["parent_id"] == llm["context"]["span_id"]  # our step under OpenInference's LLM span
    assert ours["attributes"]["gen_ai.evaluation.score.label"] == step.triage
    # OpenInference's LLM span is in the request's trace (app > graph > answer node > LLM)
    parent, hops = by_id.get(llm["parent_id"]), 0
    while parent is not None and parent is not app and hops < 20:
        parent, hops = by_id.get(parent["parent_id"]), hops + 1
    assert parent is app

    annotations = _wait("the annotation", lambda: [
        a for a in client.spans.get_span_annotations(span_ids=[llm["context"]["span_id"]], project_identifier=project)
        if a["name"] == "groundlens"])
    (annotation,) = annotations
    assert annotation["span_id"] == llm["context"]["span_id"]
    assert annotation["annotator_kind"] == "CODE"
    assert annotation["result"]["score"] == pytest.approx(step.score)
    assert annotation["result"]["label"] == step.triage
    assert annotation["result"]["explanation"] == step.explanation
    assert annotation["metadata"]["groundlens_step_id"] == step.id
