"""The recorder across ``os.fork()``: a child forked while the parent's worker is busy must neither
hang on a lock nor wait out its flush for a batch nobody in the child will ever finish.

The interleavings are forced with gates on the worker (in the parent only); no step here needs the
model (tool steps are recorded unscored), so the children never load torch. Each child reports
through a pipe and is bounded: one that hangs is killed, not left behind."""

from __future__ import annotations

import json
import os
import select
import signal
import threading

import pytest

from groundlens_core.trace.recorder import CallRecord, Recorder

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def _tool_calls(n: int, key: str) -> list[CallRecord]:
    return [CallRecord(trace_key=key, node="lookup", kind="tool", response=f"result {i}") for i in range(n)]


def _in_child(work, seconds: float = 120.0) -> dict:
    """Fork; the child runs ``work()`` on its main thread (a new thread there could get the id of the
    parent's worker and so "own" a lock the worker held) and sends back its JSON result; a child that
    hangs is ended by an alarm and reported as ``{"hung": True}``."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, never return into pytest
        out: dict = {"hung": True}
        try:
            signal.signal(signal.SIGALRM, signal.SIG_DFL)  # not pytest-timeout's handler
            signal.alarm(100)  # the default action ends the child: the parent reads nothing
            out = work()
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            out = {"error": repr(exc)}
        finally:
            os.write(write, json.dumps(out).encode())
            os._exit(0)
    os.close(write)
    try:
        assert select.select([read], [], [], seconds)[0], "the forked child did not answer"
        data = os.read(read, 65536)
        return json.loads(data.decode()) if data else {"hung": True}
    finally:
        os.close(read)
        if os.waitpid(pid, os.WNOHANG) == (0, 0):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


def test_a_child_forked_mid_batch_gets_the_batch_and_its_flush_returns():
    rec = Recorder("test", quiet_seconds=3600)
    parent = os.getpid()
    entered, gate = threading.Event(), threading.Event()
    process = rec._process

    def gated(items):  # the parent's worker holds its batch until the child has answered
        if os.getpid() == parent and any(it[0] == "call" for it in items):
            entered.set()
            gate.wait(120)
        return process(items)

    rec._process = gated  # type: ignore[method-assign]
    for call in _tool_calls(3, "k"):
        rec.record(call)
    assert rec.flush(0) is False  # a flush marker: the worker takes the batch at once
    assert entered.wait(60)

    def child() -> dict:
        done = rec.flush(60)
        trace = rec.get_trace("k", wait=False)
        return {"flushed": done, "steps": [(s.index, s.skip_reason) for s in trace.steps]}

    try:
        got = _in_child(child)
    finally:
        gate.set()
    assert got.get("flushed") is True, got  # not False after waiting out the timeout
    assert [i for i, _ in got["steps"]] == [0, 1, 2] and "pending" not in {r for _, r in got["steps"]}
    assert rec.flush(60) and len(rec.get_trace("k").steps) == 3  # the parent's own copy is intact


def test_a_child_forked_while_the_worker_holds_the_lock_can_record():
    rec = Recorder("test", quiet_seconds=3600)
    parent = os.getpid()
    entered, gate = threading.Event(), threading.Event()

    class GatedTraces(dict):
        """The worker looks its traces up under the recorder's lock: hold it there (parent only)."""

        def get(self, *args):
            held = rec._lock._is_owned()  # type: ignore[attr-defined]
            if os.getpid() == parent and held and threading.current_thread() is rec._worker and not gate.is_set():
                entered.set()
                # the fork must wait for the lock to be let go: the gate opens by itself after a while
                # (with the lock held across the fork by the recorder, the fork waits that long; without,
                # the fork happens at once and the child inherits a lock nobody will release)
                gate.wait(3)
            return super().get(*args)

    rec._traces = GatedTraces(rec._traces)
    rec.record(_tool_calls(1, "k")[0])
    assert rec.flush(0) is False
    assert entered.wait(60)

    def child() -> dict:
        rec.record(_tool_calls(2, "k")[1])
        done = rec.flush(60)
        return {"flushed": done, "steps": len(rec.get_trace("k", wait=False).steps)}

    try:
        got = _in_child(child)
    finally:
        gate.set()
    assert got.get("hung") is not True, "the child hung on the recorder's lock"
    assert got == {"flushed": True, "steps": 2}, got


def test_a_child_forked_midway_through_a_batch_records_each_step_once():
    """The parent's worker has put the batch's first step on the trace (and is telling a listener)
    when the fork comes: the child finishes the batch without a second copy of that step."""
    parent = os.getpid()
    entered, gate = threading.Event(), threading.Event()

    class Slow:
        def on_trace_start(self, trace):
            pass

        def on_step(self, trace, step):
            if os.getpid() == parent and not gate.is_set():
                entered.set()
                gate.wait(120)

        def on_trace_end(self, trace):
            pass

    rec = Recorder("test", quiet_seconds=3600, listeners=[Slow()])
    for call in _tool_calls(3, "k"):
        rec.record(call)
    rec.end_trace("k")
    assert rec.flush(0) is False
    assert entered.wait(60)

    def child() -> dict:
        done = rec.flush(60)
        trace = rec.get_trace("k", wait=False)
        return {"flushed": done, "indexes": [s.index for s in trace.steps], "ended": trace.ended_at is not None}

    try:
        got = _in_child(child)
    finally:
        gate.set()
    assert got == {"flushed": True, "indexes": [0, 1, 2], "ended": True}, got


def test_a_child_forked_while_an_exporter_holds_its_lock_can_export():
    """The OTel exporter's lock is held by the recorder's worker while it starts a span; a fork at that
    moment left the lock held for good in the child, whose worker then blocked on it."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from groundlens_core.trace.otel import OTelExporter

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    exporter = OTelExporter(provider)
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with exporter._lock:
            held.set()
            release.wait(120)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert held.wait(60)

    def child() -> dict:
        # the export runs on the child's main thread: a new thread there can get the id of the dead
        # holder and so "own" its lock, which would hide the hang (see _in_child)
        rec = Recorder("test", worker_torch_threads=None)
        rec.start_trace("k", name="child")
        rec.record(_tool_calls(1, "k")[0])
        rec.end_trace("k")
        trace = rec.get_trace("k", timeout=60)
        exporter.export(trace)
        return {"steps": len(trace.steps), "spans": len(spans.get_finished_spans())}

    try:
        got = _in_child(child)
    finally:
        release.set()
        holder.join(60)
    assert got.get("hung") is not True, "the child hung on the exporter's lock"
    assert got == {"steps": 1, "spans": 2}, got  # the root span and the tool step's span
