"""Joining the application's trace: the span active when a call is recorded, the instrumentor's LLM
span, and the standalone trace without either. In-process: SDK in-memory span and log exporters, the
real model, real LangGraph with OpenInference's real LangChain instrumentor."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("opentelemetry.sdk")

from app_trace import ANSWER, APP_SPAN, openinference_langchain, run_in_app_span  # noqa: E402
from demo_trace import record_run  # noqa: E402
from otel_memory import MemoryTelemetry  # noqa: E402

from groundlens_core.plugins.langgraph import GroundlensLangGraphCallback  # noqa: E402
from groundlens_core.trace import CallRecord, ContextPiece, Recorder, Trace  # noqa: E402
from groundlens_core.trace.otel import OTelExporter, export_trace  # noqa: E402
from groundlens_core.trace.recorder.app_span import META_OTEL_PARENT, span_ref  # noqa: E402


@pytest.fixture(scope="module")
def calibration(dgi_calibration):
    return dgi_calibration


class Backend(MemoryTelemetry):
    """One tracer provider for the application and for groundlens (as in an app that sets its own),
    and a logger provider for the evaluation events; everything kept in memory."""

    def __init__(self) -> None:
        super().__init__()
        self.tracer = self.tracer_provider.get_tracer("the-app")

    def one(self, predicate):
        found = [s for s in self.spans() if predicate(s)]
        assert len(found) == 1, [(s.name, dict(s.attributes)) for s in self.spans()]
        return found[0]

    def ours(self):
        return [s for s in self.spans() if s.instrumentation_scope.name == "groundlens"]


def _ids(span):
    ctx = span.get_span_context()
    return ctx.trace_id, ctx.span_id


def test_a_call_inside_an_app_span_goes_into_the_app_trace(calibration):
    app = Backend()
    recorder = Recorder("test", calibration=calibration,
                        listeners=[OTelExporter(app.tracer_provider, app.logger_provider)])
    with app.tracer.start_as_current_span(APP_SPAN) as request:
        record_run(recorder, "in-app")
    trace_id, request_id = _ids(request)
    ours = app.ours()
    assert len(ours) == 6 and {s.context.trace_id for s in ours} == {trace_id}  # no second trace
    root = next(s for s in ours if s.name.startswith("invoke_workflow"))
    assert root.parent.span_id == request_id  # our root under the request span
    assert all(s.parent.span_id == root.context.span_id for s in ours if s is not root)
    # the metadata keeps the ids, so a saved trace can be exported into the same trace again
    trace = recorder.get_trace("in-app")
    assert trace.metadata[META_OTEL_PARENT]["span_id"] == format(request_id, "016x")
    assert trace.steps[1].metadata[META_OTEL_PARENT] == {
        "trace_id": format(trace_id, "032x"), "span_id": format(request_id, "016x"), "sampled": True, "llm": False}
    # evaluation events sit on our step spans (no instrumentor span is known)
    step_spans = {s.context.span_id for s in ours if "gen_ai.evaluation.name" in s.attributes}
    assert {r.span_id for r in app.logs()} == step_spans and len(step_spans) == 3


def test_without_an_active_span_the_trace_stands_alone(calibration):
    app = Backend()
    recorder = Recorder("test", calibration=calibration, listeners=[OTelExporter(app.tracer_provider)])
    with app.tracer.start_as_current_span("before"):
        pass
    record_run(recorder, "alone")
    ours = app.ours()
    root = next(s for s in ours if s.parent is None)
    assert {s.context.trace_id for s in ours} == {root.context.trace_id}
    assert root.context.trace_id != app.one(lambda s: s.name == "before").context.trace_id
    assert META_OTEL_PARENT not in recorder.get_trace("alone").metadata


def test_an_instrumentors_llm_span_parents_the_step_and_its_evaluation(calibration):
    app = Backend()
    recorder = Recorder("test", calibration=calibration,
                        listeners=[OTelExporter(app.tracer_provider, app.logger_provider)])
    with app.tracer.start_as_current_span(APP_SPAN):
        with app.tracer.start_as_current_span("ChatOpenAI", attributes={"openinference.span.kind": "LLM"}) as llm:
            # an instrumentor that makes its span current: found by its attributes
            assert span_ref(llm).llm is True
            recorder.record(CallRecord("k", "answer", question="How tall is the Eiffel Tower in metres?",
                                       context=[ContextPiece("The Eiffel Tower is 330 metres tall.", "retriever")],
                                       response=ANSWER, otel_parent=span_ref(llm)))
    recorder.end_trace("k")
    assert recorder.flush(120)
    step = app.one(lambda s: s.attributes.get("groundlens.node") == "answer")
    assert step.parent.span_id == llm.get_span_context().span_id
    assert step.context.trace_id == llm.get_span_context().trace_id
    (event,) = app.logs()
    assert event.span_id == llm.get_span_context().span_id  # gen_ai.evaluation.result on the evaluated operation


def test_a_step_outside_the_roots_trace_goes_to_its_own_app_span(calibration):
    """A trace that outlives the request that opened it (a guard's trace block over two requests):
    each step goes to the request it was made in."""
    app = Backend()
    recorder = Recorder("test", calibration=calibration, listeners=[OTelExporter(app.tracer_provider)])
    with app.tracer.start_as_current_span("POST /first") as first:
        recorder.start_trace("long")
    with app.tracer.start_as_current_span("POST /second") as second:
        recorder.record(CallRecord("long", "answer", question="Which planet is known as the Red Planet?",
                                   response="Mars is known as the Red Planet."))
    recorder.end_trace("long")
    assert recorder.flush(120)
    root = app.one(lambda s: s.name.startswith("invoke_workflow"))
    step = app.one(lambda s: s.attributes.get("groundlens.node") == "answer")
    assert root.parent.span_id == first.get_span_context().span_id
    assert step.parent.span_id == second.get_span_context().span_id
    assert step.context.trace_id == second.get_span_context().trace_id


def test_a_saved_trace_is_exported_back_into_the_app_trace(calibration, tmp_path):
    app = Backend()
    recorder = Recorder("test", calibration=calibration)
    with app.tracer.start_as_current_span(APP_SPAN) as request:
        record_run(recorder, "saved")
    recorder.get_trace("saved").save(tmp_path / "t.json")
    exported = export_trace(Trace.load(tmp_path / "t.json"), app.tracer_provider)
    assert exported == format(request.get_span_context().trace_id, "032x")
    root = app.one(lambda s: s.name.startswith("invoke_workflow"))
    assert root.parent.span_id == request.get_span_context().span_id


def test_langgraph_with_openinference_puts_the_evaluation_on_its_llm_span(calibration):
    """The real OpenInference LangChain instrumentor: our step span and the evaluation event hang
    under its LLM span, everything in the application's one trace."""
    pytest.importorskip("openinference.instrumentation.langchain")
    app = Backend()
    with openinference_langchain(app.tracer_provider):
        cb = GroundlensLangGraphCallback(calibration=calibration, tracer_provider=app.tracer_provider)
        cb.recorder.add_listener(OTelExporter(app.tracer_provider, app.logger_provider))  # with events
        request = run_in_app_span(app.tracer, cb)
        trace = cb.get_trace()
    (step,) = [s for s in trace.steps if s.method != "skipped"]
    assert step.method == "sgi" and step.metadata[META_OTEL_PARENT]["llm"] is True
    trace_id, request_id = _ids(request)
    llm = app.one(lambda s: s.instrumentation_scope.name.startswith("openinference")
                  and s.attributes.get("openinference.span.kind") == "LLM")
    assert llm.context.trace_id == trace_id
    assert format(llm.context.span_id, "016x") == step.metadata[META_OTEL_PARENT]["span_id"]
    assert {s.context.trace_id for s in app.spans()} == {trace_id}  # one trace per request
    ours = [s for s in app.ours() if s.attributes.get("groundlens.step.id") == step.id]
    assert len(ours) == 2  # the exporter given as tracer_provider= and the one added with the logger
    assert {s.parent.span_id for s in ours} == {llm.context.span_id}
    roots = [s for s in app.ours() if s.name.startswith("invoke_workflow")]
    assert len(roots) == 2 and {s.parent.span_id for s in roots} == {request_id}  # our roots under the request
    (event,) = app.logs()
    assert event.span_id == llm.context.span_id and event.attributes["gen_ai.evaluation.score.label"] == step.triage


def test_recording_imports_no_opentelemetry():
    """The capture looks for a span only when the process uses OpenTelemetry: an app without it
    never imports it through us."""
    code = textwrap.dedent("""
        import sys
        from groundlens_core.trace import CallRecord, ContextPiece, Recorder
        r = Recorder("test")
        r.record(CallRecord("k", "search", kind="tool", context=[ContextPiece("a result", "tool:search")]))
        r.end_trace("k")
        assert r.flush(60)
        assert r.get_trace("k").steps[0].method == "skipped"
        assert not [m for m in sys.modules if m.startswith("opentelemetry")], "opentelemetry imported"
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]
