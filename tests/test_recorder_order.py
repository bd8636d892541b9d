"""Calls of one trace recorded by two threads at once (parallel branches of a graph): the steps
reach the trace (and the listeners) in the order of their indexes. The interleaving is forced: the
first thread is held after it has its index, until the second has recorded."""

from __future__ import annotations

import threading

from groundlens_core.trace import recorder as recorder_module
from groundlens_core.trace.recorder import CallRecord, Recorder


def test_two_threads_recording_into_one_trace_keep_the_index_order(monkeypatch):
    rec = Recorder("test", quiet_seconds=0.001)
    rec.start_trace("k")
    first_in, second_done = threading.Event(), threading.Event()
    new_id = recorder_module.new_id

    def held_new_id():  # the step id is made between the index and the queue: hold the first thread there
        if threading.current_thread().name == "first":
            first_in.set()
            second_done.wait(5)  # bounded: with index and queue taken together the second waits for us
        return new_id()

    monkeypatch.setattr(recorder_module, "new_id", held_new_id)
    seen: list[int] = []

    class Listener:
        def on_trace_start(self, trace):
            pass

        def on_step(self, trace, step):
            seen.append(step.index)

        def on_trace_end(self, trace):
            pass

    rec.add_listener(Listener())

    def second() -> None:
        first_in.wait(60)
        rec.record(CallRecord(trace_key="k", node="b", kind="tool", response="second"))
        second_done.set()

    threads = [
        threading.Thread(target=rec.record, args=(CallRecord(trace_key="k", node="a", kind="tool", response="first"),),
                         name="first"),
        threading.Thread(target=second, name="second"),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    steps = rec.get_trace("k").steps
    assert [s.index for s in steps] == [0, 1] and seen == [0, 1], ([(s.index, s.node) for s in steps], seen)
