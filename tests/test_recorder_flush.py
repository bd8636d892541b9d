"""``flush()`` / ``get_trace(timeout=)`` while other threads keep recording: a flush waits for what
was recorded before it, not for a moment when the whole recorder is idle (under a steady load from
other agents that moment never comes, and every ``get_trace()`` waited out its whole timeout).

No model is needed (tool steps are recorded unscored). The steady load is forced, not timed: each
batch the worker handles records one more call before it finishes, so the recorder is never idle."""

from __future__ import annotations

import threading

from groundlens_core.trace.recorder import CallRecord, Recorder
from groundlens_core.trace.recorder.events import Call, FlushMarker


def _tool(key: str, i: int) -> CallRecord:
    return CallRecord(trace_key=key, node="lookup", kind="tool", response=f"result {i}")


def test_flush_returns_once_what_came_before_it_is_done_while_others_keep_recording():
    rec = Recorder("test", quiet_seconds=0.001)
    busy = threading.Event()
    more = [0]
    process = rec._worker.process

    def steady(items):  # another agent's call arrives while each batch is being handled
        if busy.is_set() and more[0] < 1_000_000:  # bounded: stops when the flush returns
            more[0] += 1
            rec.record(_tool("other", more[0]))
        return process(items)

    rec._worker.process = steady  # type: ignore[method-assign]
    for i in range(3):
        rec.record(_tool("mine", i))
    busy.set()
    try:
        done = rec.flush(60)  # the old flush waited for an idle recorder: False after 60 s (a niced worker, loaded machine)
        mine = rec.get_trace("mine", wait=False)
    finally:
        busy.clear()
    assert done is True, f"flush timed out with {more[0]} calls of the other agent handled meanwhile"
    assert [s.index for s in mine.steps] == [0, 1, 2] and all(s.skip_reason != "pending" for s in mine.steps)
    assert rec.flush(60)


def test_a_call_recorded_while_get_trace_flushes_is_listed_not_left_out():
    """get_trace's flush returns once what came before it is done; a call another thread recorded
    meanwhile is still waiting, and the returned copy lists it (as the worker's queue has it)."""
    # an hour of quiet: the worker takes nothing before get_trace's flush. With a short one it could
    # score both calls before the flush looked (the test's thread held up for ~1 ms on a loaded
    # machine), no marker was queued then, and the late call was never recorded
    rec = Recorder("test", quiet_seconds=3600)
    gate, late = threading.Event(), threading.Event()
    process = rec._worker.process

    def held(items):  # a call of the same trace arrives while the flush's batch is handled; its own
        if any(isinstance(it, FlushMarker) for it in items) and not late.is_set():  # batch waits at the gate
            late.set()
            rec.record(_tool("k", 9))
        elif late.is_set() and any(isinstance(it, Call) and it.call.response == "result 9" for it in items):
            gate.wait(60)
        return process(items)

    rec._worker.process = held  # type: ignore[method-assign]
    for i in range(2):
        rec.record(_tool("k", i))
    try:
        trace = rec.get_trace("k", timeout=30)
        waiting = not rec.idle()  # read before the gate opens
    finally:
        gate.set()
    assert late.is_set()
    # the late call is not on the trace yet (its batch waits at the gate): it is listed, not left out
    assert [s.index for s in trace.steps] == [0, 1, 2] and waiting
    assert [s.index for s in rec.get_trace("k").steps] == [0, 1, 2]


def test_the_exit_stops_a_worker_that_still_has_calls_after_the_flush():
    """At exit, calls can keep coming after the exit flush's marker (an agent on a daemon thread):
    the flush itself then returns, but the worker must still be stopped between batches (a worker
    left inside torch while the interpreter finalizes aborts the process). Forced: each batch
    records one more call, so there is always one after the marker."""
    import subprocess
    import sys

    code = """
import atexit
seen = {}
atexit.register(lambda: print("parked", seen["rec"]._worker.parked.is_set(), flush=True))  # runs after the exit flush
from groundlens_core.trace.recorder import CallRecord, Recorder
rec = seen["rec"] = Recorder("x", quiet_seconds=0.001, worker_torch_threads=None)  # no torch import: the
# flush returns well inside the exit's 10 s (a loaded machine took ~10 s to import it on the niced worker,
# and the flush then timed out: the path under test, a flush that returns with calls after it, was missed)
process = rec._worker.process
def steady(items):
    rec.record(CallRecord(trace_key="k", node="n", kind="tool", response="more"))
    return process(items)
rec._worker.process = steady
rec.record(CallRecord(trace_key="k", node="n", kind="tool", response="first"))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "parked True" in done.stdout, (done.stdout, done.stderr[-2000:])


def test_a_listener_that_reads_the_trace_does_not_stall_the_worker():
    """Listeners run on the worker's thread; one that asks for the trace (``get_trace()``, which
    flushes) waited for the worker, i.e. for itself: until its timeout, or for good with none."""
    rec = Recorder("test", quiet_seconds=0.001)
    got: list = []

    class Reader:
        def on_trace_start(self, trace):
            pass

        def on_step(self, trace, step):
            pass

        def on_trace_end(self, trace):
            got.append(rec.get_trace("k", timeout=None))

    rec.add_listener(Reader())
    rec.record(_tool("k", 0))
    rec.end_trace("k")
    rec.record(_tool("other", 1))
    assert rec.flush(30), "the worker is stuck in its own listener's flush"
    assert len(got) == 1 and [s.index for s in got[0].steps] == [0]
