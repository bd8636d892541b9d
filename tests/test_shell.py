"""The adapter shell (plugins/kit/shell.py): the one constructor, error guard, inline scoring, usage
parser, lazy import and guard modes every adapter shares. Real model, real OTel SDK."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace

import pytest
from conftest import BrokenEmbedder

from groundlens_core import DGIResult, SGIResult
from groundlens_core.plugins.kit import shell
from groundlens_core.trace import CallRecord, Recorder, Usage

QUESTION = "What is the population of Paris?"
FACTS = "Paris is the capital of France and has about 2.1 million inhabitants."
GROUNDED = "Paris has about 2.1 million inhabitants and is the capital of France."
UNGROUNDED = "Paris population statistics: the number of residents living in Paris."


class DemoAdapter(shell.AdapterShell):
    framework = "shelltest"
    extra = "shelltest"

    @shell.handle_internal_errors(trace_key=lambda self, key, **kw: (key, "demo-node"), default="fallback")
    def on_event(self, key: str, *, fail: bool = False) -> str:
        if fail:
            raise ValueError("simulated adapter bug")
        return "ok"

    @shell.handle_internal_errors
    async def on_async_event(self, fail: bool) -> str:
        if fail:
            raise KeyError("simulated async bug")
        return "ok"


class ListenerSpy:
    def __init__(self) -> None:
        self.steps: list[str] = []

    def on_step(self, trace, step) -> None:
        self.steps.append(step.node)


# ---------------------------------------------------------------- lazy import


def test_require_imports_or_names_the_install_line():
    assert shell.require("json", "all").dumps([1]) == "[1]"
    with pytest.raises(ImportError) as info:
        shell.require("groundlens_no_such_framework", "crewai", "CrewAI")
    assert 'pip install "groundlens-core[crewai]"' in str(info.value) and "CrewAI" in str(info.value)
    assert "\n" not in str(info.value)


def test_optional_base_is_the_class_or_object():
    assert shell.optional_base("collections", "OrderedDict").__name__ == "OrderedDict"
    assert shell.optional_base("groundlens_no_such_framework", "Base") is object


# ---------------------------------------------------------------- usage


@pytest.mark.parametrize("raw, expected", [
    ({"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}, Usage(12, 5, 17)),  # OpenAI
    (SimpleNamespace(input_tokens=7, output_tokens=3), Usage(7, 3, 10)),  # Anthropic: total summed
    ({"prompt_token_count": 4, "candidates_token_count": 6, "total_token_count": 11}, Usage(4, 6, 11)),  # Google
    (SimpleNamespace(usage=SimpleNamespace(prompt_tokens=2, completion_tokens=1)), Usage(2, 1, 3)),  # a response
    ({"token_usage": {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10}}, Usage(9, 1, 10)),  # llm_output
    (SimpleNamespace(usage_metadata={"input_tokens": 5, "output_tokens": 5, "total_tokens": 10}), Usage(5, 5, 10)),
    ({"input_tokens": 3}, Usage(3, None, 3)),
    ({"prompt_tokens": True, "completion_tokens": "5"}, None),  # not counts
    ({"model": "x"}, None),
    (None, None),
    ("12 tokens", None),
])
def test_parse_usage_reads_every_sdk_shape(raw, expected):
    assert shell.parse_usage(raw) == expected


# ---------------------------------------------------------------- construction


def test_the_shell_owns_or_shares_a_recorder():
    owned = DemoAdapter(name="demo", max_traces=2)
    assert isinstance(owned.recorder, Recorder) and owned.recorder.framework == "shelltest"
    assert owned.recorder.name == "demo"
    spy = ListenerSpy()
    shared = Recorder("team")
    a, b = DemoAdapter(recorder=shared, listeners=[spy]), DemoAdapter(recorder=shared)
    assert a.recorder is b.recorder is shared
    shared.record(CallRecord("k", "tool-node", kind="tool", response="x"))
    assert b.flush() and spy.steps == ["tool-node"]
    with pytest.raises(TypeError, match="Recorder"):
        DemoAdapter(recorder=object())
    for i in range(3):  # max_traces keeps the newest
        owned.recorder.record(CallRecord(f"t{i}", "n", kind="tool", response="x"))
    assert [t.metadata for t in owned.get_traces()] == [{}, {}] and len(owned.get_traces()) == 2


def test_a_broken_tracer_provider_is_one_warning_never_a_raise(caplog):
    class BrokenProvider:
        def get_tracer(self, *args, **kwargs):
            raise RuntimeError("tracer provider exploded")

    with caplog.at_level("WARNING", logger="groundlens"):
        adapter = DemoAdapter(tracer_provider=BrokenProvider())
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "tracer provider exploded" in warnings[0].getMessage()
    adapter.recorder.record(CallRecord("k", "n", kind="tool", response="x"))
    assert adapter.get_trace().steps[0].node == "n"


def test_tracer_provider_exports_live_spans():
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    adapter = DemoAdapter(name="otel-demo", tracer_provider=provider)
    adapter.recorder.start_trace("k", name="otel-demo")
    adapter.recorder.record(CallRecord("k", "lookup", kind="tool", response="facts"))
    adapter.recorder.end_trace("k")
    assert adapter.flush()
    names = sorted(s.name for s in spans.get_finished_spans())
    assert names == ["execute_tool lookup", "invoke_workflow otel-demo"]
    provider.shutdown()


# ---------------------------------------------------------------- the error guard


def test_the_guard_swallows_logs_once_and_records_an_error_step(internal_errors_logged, caplog):
    adapter = DemoAdapter()
    with caplog.at_level("DEBUG", logger="groundlens.shelltest"):
        assert adapter.on_event("run-1") == "ok"
        assert adapter.on_event("run-1", fail=True) == "fallback"
        assert adapter.on_event("run-1", fail=True) == "fallback"
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "simulated adapter bug" in warnings[0].getMessage()
    assert warnings[0].name == "groundlens.shelltest" and "on_event" in warnings[0].getMessage()
    assert any(r.levelno == logging.DEBUG and "again" in r.getMessage() for r in caplog.records)
    steps = adapter.get_trace("run-1").steps
    assert [(s.method, s.node, s.kind) for s in steps] == [("error", "demo-node", "agent")] * 2
    assert "simulated adapter bug" in steps[0].error and steps[0].metadata["internal_error"] is True


def test_the_guard_as_context_manager_and_on_coroutines(internal_errors_logged, caplog):
    adapter = DemoAdapter()
    with caplog.at_level("WARNING", logger="groundlens.shelltest"):
        with shell.handle_internal_errors(adapter, "after_call", trace_key="run-2", node="n2"):
            raise RuntimeError("inside a with block")
        assert asyncio.run(adapter.on_async_event(True)) is None
        assert asyncio.run(adapter.on_async_event(False)) == "ok"

        async def async_block() -> str:
            async with shell.handle_internal_errors(adapter, "async_block", trace_key="run-2"):
                raise OSError("inside async with")
            return "went on"

        assert asyncio.run(async_block()) == "went on"
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 3
    errors = adapter.get_trace("run-2").steps
    assert [s.node for s in errors] == ["n2", "groundlens"]
    assert adapter.get_trace("groundlens-internal").steps[0].error.count("simulated async bug") == 1


def test_the_guard_never_swallows_base_exceptions_or_the_users_errors(internal_errors_logged):
    adapter = DemoAdapter()
    with pytest.raises(KeyboardInterrupt):
        with shell.handle_internal_errors(adapter, "x"):
            raise KeyboardInterrupt
    with shell.handle_internal_errors(framework="shelltest"):  # no adapter: logged only
        raise ValueError("no adapter")
    assert adapter.recorder.get_traces(wait=True) == []


# ---------------------------------------------------------------- inline scoring


@pytest.fixture(scope="module")
def adapter(dgi_calibration):
    return DemoAdapter(calibration=dgi_calibration)


def test_score_inline_decides_like_the_recorder(adapter, dgi_calibration):
    sgi = adapter.score_inline(question=QUESTION, response=GROUNDED, context=[FACTS])
    assert isinstance(sgi.result, SGIResult) and sgi.error is None and sgi.latency_ms > 0
    dgi = adapter.score_inline(question=QUESTION, response=GROUNDED, context="  ")
    assert isinstance(dgi.result, DGIResult) and dgi.result.direction == dgi_calibration.direction_id
    support = adapter.score_inline(question=None, response=GROUNDED, context=FACTS)  # a context, no question
    assert support.result.method == "support" and support.result.evidence.support == 1.0
    skipped = adapter.score_inline(question=None, response=GROUNDED, context="  ")
    assert skipped.result is None and skipped.error is None and "no question and no context" in skipped.skipped
    # the same call through the recorder gives the same score, bit for bit
    adapter.recorder.record(CallRecord("same", "n", question=QUESTION, response=GROUNDED,
                                       context=[("" + FACTS, "tool:x")]))
    assert adapter.get_trace("same").steps[0].value == sgi.result.value


def test_score_inline_never_raises_and_its_score_is_kept_not_rescored(internal_errors_logged, adapter):
    broken = DemoAdapter(embedder=BrokenEmbedder())
    failed = broken.score_inline(question=QUESTION, response=GROUNDED, context=[FACTS])
    assert failed.result is None and "embedder exploded" in failed.error
    good = adapter.score_inline(question=QUESTION, response=GROUNDED, context=[FACTS])
    # a broken recorder proves the step keeps the inline result instead of scoring again
    broken.recorder.record(CallRecord("k", "n", question=QUESTION, response=GROUNDED, **good.record_fields()))
    broken.recorder.record(CallRecord("k", "m", question=QUESTION, response=GROUNDED, **failed.record_fields()))
    kept, errored = broken.get_trace("k").steps
    assert kept.method == "sgi" and kept.value == good.result.value and kept.scoring_latency_ms == good.latency_ms
    assert errored.method == "error" and "embedder exploded" in errored.error


# ---------------------------------------------------------------- guard modes


def test_guard_modes(adapter):
    flagged = adapter.score_inline(question=QUESTION, response=UNGROUNDED, context=[FACTS])
    passed = adapter.score_inline(question=QUESTION, response=GROUNDED, context=[FACTS])
    assert flagged.flagged and not passed.flagged and passed.triage in ("trusted", "review")
    seen: list[tuple[shell.InlineResult, str]] = []
    assert shell.apply_guard(flagged, mode="annotate", response="r1", on_flagged=lambda s, r: seen.append((s, r))) is None
    assert shell.apply_guard(passed, mode="raise", response="r2", on_flagged=lambda s, r: seen.append((s, r))) is None
    assert seen == [(flagged, "r1")]
    err = shell.apply_guard(flagged, mode="raise", response={"text": UNGROUNDED}, node="qa", step_id="s1")
    assert isinstance(err, shell.GroundlensFlaggedError) and err.result is flagged.result
    assert err.response == {"text": UNGROUNDED} and err.node == err.function_name == "qa" and err.step_id == "s1"
    assert str(err).startswith("groundlens flagged the answer of qa (SGI=")
    try:
        try:
            raise err
        except shell.GroundlensFlaggedError as inner:
            raise RuntimeError("a framework wraps it") from inner
    except RuntimeError as outer:
        assert shell.GroundlensFlaggedError.find(outer) is err
    assert shell.GroundlensFlaggedError.find(ValueError("x")) is None
    assert shell.check_mode("raise") == "raise"
    with pytest.raises(ValueError, match="mode must be one of annotate, raise"):
        shell.check_mode("replace")
    with pytest.raises(ValueError, match="on_flagged must be callable"):
        shell.check_mode("annotate", on_flagged="print")


def test_the_older_names_of_the_inline_result_still_work_and_warn():
    result = object()
    inline = shell.InlineResult(result)
    assert shell.InlineScore is shell.InlineResult
    with pytest.warns(DeprecationWarning, match=r"use \.result"):
        assert inline.score is result


def test_the_flagged_errors_older_score_attribute_still_works_and_warns():
    result = object()
    err = shell.GroundlensFlaggedError("flagged", result=result, response="r")
    with pytest.warns(DeprecationWarning, match=r"use \.result"):
        assert err.score is result
