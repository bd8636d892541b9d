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
from groundlens_core.trace.recorder.events import Call

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
    process = rec._worker.process

    def gated(items):  # the parent's worker holds its batch until the child has answered
        if os.getpid() == parent and any(isinstance(it, Call) for it in items):
            entered.set()
            gate.wait(120)
        return process(items)

    rec._worker.process = gated  # type: ignore[method-assign]
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
            if os.getpid() == parent and held and threading.current_thread() is rec._worker.thread and not gate.is_set():
                entered.set()
                # the fork must wait for the lock to be let go: the gate opens by itself after a while
                # (with the lock held across the fork by the recorder, the fork waits that long; without,
                # the fork happens at once and the child inherits a lock nobody will release)
                gate.wait(3)
            return super().get(*args)

    rec._store.traces = GatedTraces(rec._store.traces)
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


_FIRST_LOAD_PROGRAM = r'''
import importlib.abc, json, os, select, signal, sys, threading

from groundlens_core.trace.recorder import CallRecord, Recorder

assert "torch" not in sys.modules, "torch was imported before the worker's first batch"
GATED = sys.argv[1]
entered, release = threading.Event(), threading.Event()


class Gate(importlib.abc.MetaPathFinder):
    """Holds the recorder's worker inside its first import of GATED until a fork() begins."""

    def find_spec(self, name, path=None, target=None):
        if name == GATED and threading.current_thread().name.startswith("groundlens-") and not release.is_set():
            entered.set()
            release.wait(120)
        return None


sys.meta_path.insert(0, Gate())
# registered after groundlens's own hooks, so it runs before them: the fork begins, the gate opens,
# and only then may groundlens make the fork wait
os.register_at_fork(before=release.set)


def call(i):
    return CallRecord(trace_key="k", node="answer", question=f"When does the shop open on day {i}?",
                      context=["The shop opens at nine every weekday."], response="It opens at nine.")


rec = Recorder("test")
rec.record(call(0))
rec.flush(0)  # the worker starts its first batch now
assert entered.wait(120), "the worker never reached the gated import"
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    out = {"hung": True}
    try:
        signal.alarm(100)
        rec.record(call(1))
        trace = rec.get_trace("k", timeout=90)
        out = {"steps": [[s.index, s.method, s.error] for s in trace.steps]}
    except BaseException as exc:
        out = {"error": repr(exc)}
    finally:
        os.write(write, json.dumps(out).encode())
        os._exit(0)
os.close(write)
child = {"hung": True}
if select.select([read], [], [], 120)[0]:
    data = os.read(read, 65536)
    child = json.loads(data) if data else {"hung": True}
if os.waitpid(pid, os.WNOHANG) == (0, 0):
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
parent = rec.get_trace("k", timeout=120)
print(json.dumps({"child": child, "parent": [[s.index, s.method, s.error] for s in parent.steps]}))
'''


@pytest.mark.parametrize(
    "gated",
    [
        "torch._tensor",  # inside the worker's first ``import torch`` ("partially initialized module 'torch'")
        "safetensors.torch",  # inside the model load, with the embedder's lock held (the child hung on it)
    ],
)
def test_a_child_forked_during_the_first_model_load_scores(gated):
    """A pre-fork server forks soon after start-up, while the worker may still be importing torch or
    loading the model. The child must score: the fork waits for the load in progress. The gate holds
    the worker inside the import until the fork begins (a fork hook opens it), so without that wait
    the child is forked with the import half done."""
    import subprocess
    import sys
    from pathlib import Path

    done = subprocess.run(
        [sys.executable, "-c", _FIRST_LOAD_PROGRAM, gated],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=Path(__file__).resolve().parents[1],
        env={**os.environ, "GROUNDLENS_BACKEND": "packed-torch"},  # the gates are inside torch's import and load
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["child"] == {"steps": [[0, "sgi", None], [1, "sgi", None]]}, (got, done.stderr[-3000:])
    assert got["parent"] == [[0, "sgi", None]], got


def test_a_child_forked_while_the_worker_encodes_scores(monkeypatch, dgi_calibration):
    """The embedder holds its lock while it encodes; a fork then (any batch, not only the first)
    left that lock held for good in the child, whose first encode hung."""
    from groundlens_core import get_embedder

    monkeypatch.setenv("GROUNDLENS_BACKEND", "packed-torch")  # the gate is the packed pass's forward
    inner = get_embedder().inner
    parent = os.getpid()
    entered, gate = threading.Event(), threading.Event()
    forward = inner._forward

    def gated(*args, **kwargs):  # the parent's forward passes wait until the child has answered
        if os.getpid() == parent and not gate.is_set():
            entered.set()
            gate.wait(120)
        return forward(*args, **kwargs)

    monkeypatch.setattr(inner, "_forward", gated)
    tag = os.urandom(6).hex()  # texts no earlier test embedded: the cache must not answer for them

    def call(i: int) -> CallRecord:
        return CallRecord(trace_key="k", node="answer", question=f"Which plan suits team {tag} number {i}?",
                          context=[f"Team {tag} has {i} members and needs the annual plan."],
                          response=f"The annual plan suits team {tag}.")

    rec = Recorder("test", calibration=dgi_calibration, quiet_seconds=3600)
    rec.record(call(0))
    assert rec.flush(0) is False
    assert entered.wait(120)

    def child() -> dict:
        rec.record(call(1))
        trace = rec.get_trace("k", timeout=90)
        return {"steps": [[s.index, s.method] for s in trace.steps]}

    try:
        got = _in_child(child)
    finally:
        gate.set()
    assert got.get("hung") is not True, "the child hung on the embedder's lock"
    assert got == {"steps": [[0, "sgi"], [1, "sgi"]]}, got
    assert [s.method for s in rec.get_trace("k").steps] == ["sgi"]
