"""The one internal-error policy: our failures at a boundary are logged and recovered from in a
user's program, and raised under GROUNDLENS_RAISE_INTERNAL_ERRORS, which this suite turns on
(tests/conftest.py), so that a bug in a listener, an exporter or an adapter fails a test."""

from __future__ import annotations

import logging
import os

import pytest

from groundlens_core import internal_errors, settings
from groundlens_core.errors import GroundlensInputError
from groundlens_core.internal_errors import InternalError, internal_error
from groundlens_core.trace import recorder as recorder_mod
from groundlens_core.trace.recorder import CallRecord, Recorder


class Boom:
    """A listener with a bug."""

    def __init__(self) -> None:
        self.steps: list[str] = []

    def on_step(self, trace, step):
        self.steps.append(step.id)
        raise KeyError("listener bug")


def _tool(key: str = "k", text: str = "result") -> CallRecord:
    return CallRecord(trace_key=key, node="lookup", kind="tool", response=text)


def test_the_suite_runs_with_the_setting_on():
    assert os.environ[internal_errors.ENV] == "1"
    assert internal_errors.raising()


def test_a_listener_that_raises_fails_the_flush_with_its_error():
    boom = Boom()
    rec = Recorder("test", listeners=[boom], worker_torch_threads=None)
    step_id = rec.record(_tool())
    with pytest.raises(InternalError, match=r"listener Boom\.on_step failed: KeyError") as info:
        rec.flush()
    assert isinstance(info.value.__cause__, KeyError)
    assert boom.steps == [step_id]  # it was called: the failure is its own
    assert internal_errors.take_seen() == []  # claimed by the flush


def test_a_listener_failure_nobody_flushed_is_left_for_the_suite_to_fail_on():
    rec = Recorder("test", listeners=[Boom()], worker_torch_threads=None)
    rec.record(_tool())
    with pytest.raises(InternalError):  # waits for the worker; what the autouse check would see is the same
        rec.get_trace("k")
    rec.record(_tool())
    for _ in range(2000):  # bounded: the worker gets to it within seconds
        seen = internal_errors.take_seen()
        if seen:
            break
        import time

        time.sleep(0.01)
    assert [where for where, _ in seen] == ["listener Boom.on_step"]


def test_without_the_setting_a_listener_failure_is_logged_and_the_trace_goes_on(internal_errors_logged, caplog):
    class Quiet(Boom):  # logged with its traceback once per process: a name no other test uses
        pass

    caplog.set_level(logging.DEBUG, logger="groundlens.recorder")
    rec = Recorder("test", listeners=[Quiet()], worker_torch_threads=None)
    rec.record(_tool(text="one"))
    rec.record(_tool(text="two"))
    assert rec.flush()
    trace = rec.get_trace("k")
    assert [s.response for s in trace.steps] == ["one", "two"]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "listener Quiet.on_step" in r.message]
    assert len(warnings) == 1 and warnings[0].exc_info is not None  # once, with the traceback
    assert any("failed again" in r.message for r in caplog.records if r.levelno == logging.DEBUG)


def test_a_bug_in_the_exporter_fails_the_test(monkeypatch):
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from groundlens_core.trace import otel

    def broken(*args, **kwargs):
        raise TypeError("exporter bug")

    monkeypatch.setattr(otel, "step_span", broken)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    rec = Recorder("test", listeners=[otel.OTelExporter(tracer_provider=provider)], worker_torch_threads=None)
    rec.record(_tool())
    with pytest.raises(InternalError, match="the OpenTelemetry export failed: TypeError: exporter bug"):
        rec.flush()


def test_record_raises_our_bug_in_the_test_suite_and_swallows_it_otherwise(monkeypatch):
    def broken(call):
        raise ZeroDivisionError("recorder bug")

    monkeypatch.setattr(recorder_mod, "text_bytes", broken)
    rec = Recorder("test", worker_torch_threads=None)
    with pytest.raises(ZeroDivisionError):
        rec.record(_tool())
    assert [where for where, _ in internal_errors.take_seen()] == ["Recorder.record"]
    monkeypatch.setenv(internal_errors.ENV, "0")
    assert rec.record(_tool()) == ""  # the agent never sees it


def test_the_adapter_guard_raises_on_the_callers_thread():
    from groundlens_core.plugins.kit.shell import AdapterShell
    from groundlens_core.plugins.kit.shell import handle_internal_errors as adapter_guard

    class Adapter(AdapterShell):
        framework = "demo"

        @adapter_guard(default="fallback")
        def on_event(self) -> str:
            raise IndexError("adapter bug")

    with pytest.raises(IndexError, match="adapter bug"):
        Adapter(recorder=Recorder("demo", worker_torch_threads=None)).on_event()
    assert [where for where, _ in internal_errors.take_seen()] == ["Adapter inside on_event"]


def test_our_errors_raised_on_purpose_are_outcomes_not_bugs():
    """A GroundlensError (a missing model, an input we cannot score) is the boundary's documented
    result: the setting does not raise it."""
    try:
        raise GroundlensInputError("blank response")
    except GroundlensInputError as exc:
        internal_error(exc, "scoring", None)
    assert internal_errors.take_seen() == []


def test_a_boundary_hands_its_failure_to_the_policy(monkeypatch, caplog):
    """Raised where it happened under the setting; a background thread's is kept, not raised; with
    the setting off it is logged and the boundary goes on."""

    def boundary(where: str, logger: logging.Logger | None, **kw: bool) -> str:
        try:
            raise ValueError("bug")
        except ValueError as exc:
            internal_error(exc, where, logger, **kw)
        return "went on"

    with pytest.raises(ValueError):
        boundary("a block", logging.getLogger("groundlens.test"))
    assert boundary("a block", None, deferred=True) == "went on"
    assert [where for where, _ in internal_errors.take_seen()] == ["a block", "a block"]

    monkeypatch.setenv(internal_errors.ENV, "off")
    assert boundary("a function", logging.getLogger("groundlens.test")) == "went on"
    assert internal_errors.take_seen() == []
    assert "groundlens: a function failed: ValueError: bug" in caplog.text


def test_the_setting_reads_like_every_flag(monkeypatch, caplog):
    for value, expected in (("1", True), ("TRUE", True), ("on", True), ("0", False), ("no", False), ("", False)):
        monkeypatch.setenv("GROUNDLENS_TEST_FLAG", value)
        assert settings.flag("GROUNDLENS_TEST_FLAG") is expected
    monkeypatch.setenv("GROUNDLENS_TEST_FLAG", "maybe")
    assert settings.flag("GROUNDLENS_TEST_FLAG") is False
    assert "GROUNDLENS_TEST_FLAG='maybe' is not 1 or 0" in caplog.text
