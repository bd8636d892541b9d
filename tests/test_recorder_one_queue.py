"""The recorder's one queue: an adapter's raw events and direct records share it, in the order they
came, whoever translates the raw events (the worker as it takes them, a reader or an overflowing
agent thread in place), within the bounds and whatever a translation raises."""

from __future__ import annotations

import random
import threading
import time

import pytest

from groundlens_core.trace.recorder import CallRecord, Recorder
from groundlens_core.trace.recorder.backlog import Backlog
from groundlens_core.trace.recorder.events import OVERLOAD, Call, FlushMarker, HeldMarker, Raw


class Heard:
    """A listener that notes what it hears, per trace (``metadata["k"]`` names the trace)."""

    def __init__(self) -> None:
        self.seen: list[tuple] = []
        self.lock = threading.Lock()

    def on_trace_start(self, trace) -> None:
        with self.lock:
            self.seen.append(("start", trace.metadata.get("k")))

    def on_step(self, trace, step) -> None:
        with self.lock:
            self.seen.append(("step", trace.metadata.get("k"), step.node))

    def on_trace_end(self, trace) -> None:
        with self.lock:
            self.seen.append(("end", trace.metadata.get("k")))

    def of(self, key: str) -> list[tuple]:
        return [e for e in self.seen if e[1] == key]


def tool(key: str, node: str) -> CallRecord:
    return CallRecord(trace_key=key, node=node, kind="tool", response="a tool result")


def recorder(**kwargs) -> tuple[Recorder, Heard]:
    heard = Heard()
    return Recorder("t", listeners=[heard], worker_torch_threads=None, **kwargs), heard


def test_a_direct_record_after_raw_events_of_its_trace_comes_after_them():
    rec, heard = recorder()
    with rec._lock:  # the worker takes nothing until both are queued
        rec.defer(lambda: (rec.start_trace("A", metadata={"k": "A"}), rec.record(tool("A", "raw"))))
        rec.record(tool("A", "direct"))
    assert rec.flush(30)
    assert heard.of("A") == [("start", "A"), ("step", "A", "raw"), ("step", "A", "direct")]
    (trace,) = rec.get_traces()
    assert [s.node for s in trace.steps] == ["raw", "direct"]


def test_a_direct_record_after_an_in_place_translation_while_the_queue_is_full_keeps_the_order():
    """The queue at its event bound (holding): a raw event translated in place (by a reader, or
    before a failing callback's error step) and a direct record of the same trace after it reach
    the listeners in the order they came."""
    rec, heard = recorder(max_pending_events=2)
    with rec._lock:
        rec.start_trace("A", metadata={"k": "A"})
        rec.record(tool("A", "a1"))  # the queue is full now
        rec.record(tool("A", "a2"))  # held with its trace
        rec.defer(lambda: (rec.start_trace("C", metadata={"k": "C"}), rec.record(tool("C", "c1"))))
        rec.drain_raw()  # in place, past the bound
        rec.record(tool("C", "c2"))
        rec.end_trace("C")
    assert rec.flush(30)
    assert heard.of("C") == [("start", "C"), ("step", "C", "c1"), ("step", "C", "c2"), ("end", "C")]
    assert heard.of("A") == [("start", "A"), ("step", "A", "a1"), ("step", "A", "a2")]


def test_an_interrupt_inside_an_in_place_translation_loses_nothing_queued():
    rec, heard = recorder()
    with rec._lock:
        rec.start_trace("A", metadata={"k": "A"})
        for i in range(5):
            rec.record(tool("A", f"a{i}"))

        def interrupted() -> None:
            raise KeyboardInterrupt

        rec.defer(interrupted)
        with pytest.raises(KeyboardInterrupt):  # Ctrl-C in a notebook during get_trace or idle
            rec.drain_raw()
        assert len(rec._backlog.items) == rec._backlog.queued_events == 6  # the start and five calls
    assert rec.flush(30)
    assert [e[2] for e in heard.of("A") if e[0] == "step"] == [f"a{i}" for i in range(5)]
    assert rec.idle()


def test_a_read_waits_for_a_translation_another_thread_is_running():
    """A reader (or a failing callback looking up its run) does not go on while another thread is
    half way through translating: it waits for the lock, and finds every raw event translated."""
    rec, _ = recorder()
    rec._worker.start = lambda nice: False  # no worker: only translations in place
    rec.start_trace("A")
    rec.record(tool("A", "n"))
    started, later = threading.Event(), threading.Event()

    def slow() -> None:
        started.set()
        time.sleep(0.3)

    rec.defer(slow)
    rec.defer(later.set)
    other = threading.Thread(target=rec.drain_raw)
    other.start()
    assert started.wait(10)
    rec.drain_raw()
    assert later.is_set()
    other.join(10)


def test_the_counts_match_the_queue_through_any_mix_of_raw_events_records_and_reads():
    """A seeded random mix of raw events, direct records, in-place translations, reads and flushes,
    on a queue small enough to hold events: after every operation the counts the bounds use are the
    queue's own, and everything recorded reaches its trace once, in order per trace."""
    rnd = random.Random(7)
    rec, heard = recorder(max_pending_events=6, max_pending_steps=3)
    backlog = rec._backlog
    keys = [f"k{i}" for i in range(4)]
    for k in keys:
        rec.start_trace(k, metadata={"k": k})
    expected: dict[str, list[str]] = {k: [] for k in keys}

    def check() -> None:
        with rec._lock:
            items = list(backlog.items)
            counted = [i for i in items if not isinstance(i, (Raw, FlushMarker, HeldMarker))]
            assert sum(isinstance(i, Raw) for i in items) == backlog.raw_waiting()
            assert sum(isinstance(i, FlushMarker) for i in items) == backlog.flushes
            assert sum(isinstance(i, HeldMarker) for i in items) == (1 if backlog.holding else 0)
            assert len(counted) == backlog.queued_events
            assert sum(i.size for i in counted if isinstance(i, Call)) == backlog.queued_bytes
            assert sum(1 for i in counted if isinstance(i, Call) and i.needs_model) == backlog.queued_steps
            assert not any(isinstance(i, Raw) for i in items[: backlog.front])

    for n in range(400):
        op, k = rnd.random(), rnd.choice(keys)
        if op < 0.4:
            expected[k].append(f"r{n}")
            rec.defer(lambda k=k, n=n: rec.record(tool(k, f"r{n}")))
        elif op < 0.6:
            expected[k].append(f"d{n}")
            rec.record(tool(k, f"d{n}"))
        elif op < 0.7:
            rec.drain_raw(limit=rnd.choice([1, 2, None]))
        elif op < 0.75:
            rec.backlog()
        elif op < 0.8:
            assert rec.flush(30)
        check()
    assert rec.flush(30)
    assert rec.idle()
    check()
    for k in keys:
        assert [e[2] for e in heard.of(k) if e[0] == "step"] == expected[k]


def test_a_call_translated_into_a_batch_being_taken_is_never_overload():
    """At exit the whole queue is taken at once: a raw event behind calls that fill the step bound
    records its call into that batch, where it waits for nothing (it is pending, not overload)."""
    backlog = Backlog(max_steps=1, max_bytes=1 << 20, max_events=100)
    heavy = CallRecord(trace_key="k", node="n", question="q?", response="r.")
    backlog.put(backlog.call(Call(heavy, 0, "a", True, 10)))  # the step bound is reached
    backlog.items.append(Raw(lambda: backlog.put(backlog.call(Call(heavy, 1, "b", True, 10))), ()))
    taken = backlog.take_all()
    assert [(c.step_id, c.needs_model, c.reason) for c in taken] == [("a", True, None), ("b", True, None)]
    assert backlog.stats["overload"] == 0 and OVERLOAD not in {c.reason for c in taken}
