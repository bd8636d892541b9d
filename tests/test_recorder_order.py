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
        threading.Thread(
            target=rec.record, args=(CallRecord(trace_key="k", node="a", kind="tool", response="first"),), name="first"
        ),
        threading.Thread(target=second, name="second"),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    steps = rec.get_trace("k").steps
    assert [s.index for s in steps] == [0, 1] and seen == [0, 1], ([(s.index, s.node) for s in steps], seen)


def test_a_steady_stream_of_events_does_not_hold_the_worker_in_its_quiet_wait():
    """The worker waits for a quiet spell before a batch; events that need no model (tool steps,
    trace starts and ends) do not fill a batch. An agent that keeps sending them faster than the
    quiet spell (forced here: one arrives during every quiet wait) held every step back, unbounded
    in memory, until it paused."""
    rec = Recorder("test", quiet_seconds=0.001)
    rec.start_trace("k")
    assert rec.flush(60)
    sent = [0]
    first_seen: list[int] = []
    stepped = threading.Event()

    class Listener:
        def on_trace_start(self, trace):
            pass

        def on_step(self, trace, step):
            if not first_seen:
                first_seen.append(sent[0])
                stepped.set()

        def on_trace_end(self, trace):
            pass

    rec.add_listener(Listener())
    wake = rec._worker.wake

    class Busy:
        """The worker's event; each quiet wait sees one more event arrive (bounded)."""

        def wait(self, timeout=None):
            if timeout is not None and sent[0] < 5000 and not first_seen:
                sent[0] += 1
                rec.record(CallRecord(trace_key="k", node="tool", kind="tool", response=f"r{sent[0]}"))
                return False
            return wake.wait(timeout)

        def __getattr__(self, name):
            return getattr(wake, name)

    rec._worker.wake = Busy()  # type: ignore[assignment]
    rec.record(CallRecord(trace_key="k", node="tool", kind="tool", response="r0"))
    assert stepped.wait(60)  # no flush: a flush ends the quiet wait by itself
    assert rec.flush(60)
    assert first_seen and first_seen[0] <= 200, f"the first step reached the listener after {first_seen} more events"


def test_the_recorder_and_the_core_share_one_notion_of_blank():
    """A response or a context piece with nothing visible (a zero-width space, punctuation alone) is
    blank to the recorder as it is to the core: the call is skipped, not sent on to fail scoring."""
    from groundlens_core import evaluate
    from groundlens_core.errors import GroundlensInputError
    from groundlens_core.trace.recorder.calls import context_pieces, method_of

    for invisible in ("\u200b", " \u200d\ufeff ", "..."):
        call = CallRecord(trace_key="k", node="n", question="When?", response=invisible)
        assert method_of(call) == ("skipped", "no response text")
        try:
            evaluate(question="When?", response=invisible, context="Founded in 1998.")
        except GroundlensInputError:
            pass
        else:
            raise AssertionError(f"the core scored a blank response {invisible!r}")
    assert [p.text for p in context_pieces(["\u200b", "Founded in 1998.", "..."])] == ["Founded in 1998."]
    # one normaliser for a call's context, whatever handed it over: the first place a text was found names it
    pieces = context_pieces([("Founded in 1998.", "docs"), ("Founded in 1998. ", "tool:search"), b"raw bytes"])
    assert [(p.text, p.source) for p in pieces] == [("Founded in 1998.", "docs")]
    # a (value, source) pair keeps its source whatever the value: a tool's number, a document's text
    pairs = context_pieces([(42, "tool:calc"), ({"page_content": "Paris is the capital."}, "retriever"), (None, "x")])
    assert [(p.text, p.source) for p in pairs] == [("42", "tool:calc"), ("Paris is the capital.", "retriever")]
    no_context = CallRecord(trace_key="k", node="n", response="In 1998.", context=("\u200b",))
    assert method_of(no_context) == ("skipped", "no question and no context found for this call")
