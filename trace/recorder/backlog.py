"""The recorder's one queue: everything the agent's threads hand the worker, in the order it came.

Bounded in events, in calls waiting for the model and in their text's bytes. An event that finds the
queue full is held with its trace and delivered in order where holding began, so the agent is never
blocked, memory stays flat and nothing is lost (docs/recorder.md). An adapter that defers its work
appends its raw events (:class:`~groundlens_core.trace.recorder.events.Raw`) here without a lock; they
are translated where the queue is taken (:meth:`Backlog.take`, on the worker), or in place when a
reader or an overflowing queue needs them sooner (:meth:`Backlog.translate_in_place`), and what they
record takes their place: a call crosses from its adapter into this queue once, with its prompt read.
Plain data without a lock of its own: every method but the raw append runs under the recorder's lock.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import threading
import time
from typing import Callable

from groundlens_core import internal_errors
from groundlens_core.trace.recorder.events import OVERLOAD, Call, Event, FlushMarker, HeldMarker, Raw, TraceEvent

#: at most one overload warning per this many seconds (each with the counts since the last)
OVERLOAD_WARN_SECONDS = 10.0

log = logging.getLogger("groundlens.recorder")


class Backlog:
    def __init__(self, max_steps: int, max_bytes: int, max_events: int):
        self.max_steps, self.max_bytes, self.max_events = max_steps, max_bytes, max_events
        self.items: collections.deque[Event] = collections.deque()
        self.pending = 0  # events put and not yet done by the worker (queued, held or in flight)
        self.queued_steps = 0  # calls in the queue that need the model
        self.queued_bytes = 0  # the text of every call in the queue, UTF-8 bytes
        self.queued_events = 0  # start, call and end events in the queue (not flush or held markers)
        self.flushes = 0  # flush markers in the queue
        #: events that found the queue full, by trace key, in order; delivered at the HeldMarker
        self.held: dict[str, list[TraceEvent]] = {}
        self.holding = False  # the held marker is in the queue: new events join the held ones
        self.inflight: list[Event] = []  # the batch the worker is on
        #: set whenever the worker takes events (room may have opened): what a caller that waits for
        #: room (``Recorder.record(..., block=True)``) waits on; ``takes`` counts those takes
        self.room = threading.Event()
        self.takes = 0
        #: ``takes`` when a wait for room last gave up (the worker took nothing for that long): later
        #: waits do not block again until the worker takes something
        self.stalled_at: int | None = None
        #: calls not scored because of the load, and steps of traces dropped (max_traces) before they
        #: reached them, since the recorder started
        self.stats = {"overload": 0, "evicted": 0}
        #: while a raw event is translated: where what it records goes (instead of the queue's end),
        #: and whether it counts as queued there (in place) or is taken already (by the worker)
        self.sink: list[Event] | None = None
        self.sink_queued = False
        #: how many events at the queue's front are known to be translated (none of them raw): where
        #: an in-place translation starts looking for raw events (a lower bound, never past one)
        self.front = 0
        self.clock: Callable[[], float] = time.monotonic  # for the warnings' interval
        self.warned_at: float | None = None
        self.unwarned = {"overload": 0, "held": 0, "evicted": 0}  # counts since the last warning

    # ------------------------------------------------------------ the agent's side

    def call(self, event: Call) -> Call:
        """``event``, recorded unscored (``OVERLOAD``) when it needs the model and the calls waiting
        for it are at a bound already; never a call a translation records into a batch being taken
        (by the worker, or at exit): it waits for nothing."""
        if self.sink is not None and not self.sink_queued:
            return event
        if (
            event.needs_model
            and self.queued_steps
            and (self.queued_steps >= self.max_steps or self.queued_bytes + event.size > self.max_bytes)
        ):
            return self._overloaded(event)
        return event

    def has_room(self, size: int) -> bool:
        """Whether a call that needs the model, with ``size`` bytes of text, would be queued for it now
        (rather than recorded unscored: :meth:`call`, :meth:`put`)."""
        if self.queued_steps and (self.queued_steps >= self.max_steps or self.queued_bytes + size > self.max_bytes):
            return False
        return self._admits(size)

    def stalled(self) -> bool:
        """A wait for room gave up and the worker has taken nothing since."""
        return self.stalled_at == self.takes

    def _overloaded(self, event: Call) -> Call:
        self.stats["overload"] += 1
        self.unwarned["overload"] += 1
        return dataclasses.replace(event, needs_model=False, reason=OVERLOAD)

    def _admits(self, size: int) -> bool:
        """Whether one more event with ``size`` bytes of text fits in the queue now. Once events are
        held, the next ones join them until the worker takes them: a trace's events are then delivered
        in the order they came. A call is queued when no other call's text is, however large (so one
        call bigger than the byte bound is still scored)."""
        if self.holding or self.queued_events >= self.max_events:
            return False
        return self.queued_bytes == 0 or self.queued_bytes + size <= self.max_bytes

    def put(self, event: Event) -> None:
        """Queue ``event`` within the bounds, or hold it with its trace; while a raw event is
        translated, put it in the translation's place instead."""
        self.pending += 1
        if self.sink is not None and not self.sink_queued:  # the worker's batch takes it as it is
            self.sink.append(event)
            return
        place = self.items if self.sink is None else self.sink  # the queue's end, or the raw event's place
        if isinstance(event, FlushMarker):  # never held: a flush waits for everything before it, held events too
            self.flushes += 1
            place.append(event)
            return
        assert not isinstance(event, (HeldMarker, Raw))  # raw events are appended by the recorder itself
        if not self._admits(event.size if isinstance(event, Call) else 0):
            if isinstance(event, Call) and event.needs_model:  # no room to wait for the model: recorded unscored
                event = self._overloaded(event)
            self.held.setdefault(event.key, []).append(event)
            self.unwarned["held"] += 1
            if not self.holding:  # one marker, where holding began
                self.holding = True
                place.append(HeldMarker())
            return
        self._count_queued(event)
        place.append(event)

    def _count_queued(self, event: Event) -> None:
        """``event`` joins the queue: it counts against the event bound, a call also by its bytes and,
        when it needs the model, as a step (``take`` uncounts it)."""
        if isinstance(event, FlushMarker):
            self.flushes += 1
            return
        self.queued_events += 1
        if isinstance(event, Call):
            self.queued_bytes += event.size
            self.queued_steps += 1 if event.needs_model else 0

    def drop_held(self, key: str) -> None:
        """Trace ``key`` was evicted: its held events, never reached by the worker, go with it."""
        held = self.held.pop(key, None)
        if held:
            self.pending -= len(held)
            dropped = sum(1 for it in held if isinstance(it, Call))
            self.stats["evicted"] += dropped
            self.unwarned["evicted"] += dropped

    def raw_waiting(self) -> int:
        """Raw events in the queue, not translated yet (read without the lock too: then an estimate)."""
        counted = self.queued_events + self.flushes + (1 if self.holding else 0)
        return max(0, len(self.items) - counted)

    def busy(self) -> bool:
        """Whether anything waits for the worker: raw events, queued, held or in-flight events."""
        return self.pending > 0 or bool(self.items)

    def translate(self, raw: Raw, into: list[Event], *, queued: bool) -> None:
        """Run ``raw``'s translation; what it records goes to ``into``, in order (``queued``: as
        queued events, in the raw event's place; else taken by the worker already). A failing
        translation is reported (raised on the caller's side under the test suite's setting) and
        the queue goes on."""
        outer = self.sink, self.sink_queued
        self.sink, self.sink_queued = into, queued
        try:
            with internal_errors.deferring():
                try:
                    raw.translate(*raw.args)
                except Exception as exc:  # an adapter's own guard failed: the rest go on
                    name = getattr(raw.translate, "__name__", raw.translate)
                    internal_errors.internal_error(exc, f"translating {name}", log)
        finally:
            self.sink, self.sink_queued = outer

    def translate_in_place(self, limit: int | None = None) -> None:
        """Translate the queued raw events (the first ``limit``) where they are, for a reader that
        needs the traces now or an agent's thread whose queue overflows; what each records takes its
        place (past the bounds: held with its trace, as any event). Agent threads may append at the
        queue's end meanwhile: an event is only ever removed or inserted at a place before it, and
        every removed raw event's results are put in, whatever a translation raises."""
        items = self.items
        if self.sink is not None:
            return  # a translation runs: it recorded from inside its own
        i, done = self.front, 0
        while i < len(items) and (limit is None or done < limit):
            raw = items[i]
            if not isinstance(raw, Raw):
                i += 1
                continue
            del items[i]
            made: list[Event] = []
            try:
                self.translate(raw, made, queued=True)
            finally:
                for k, event in enumerate(made):
                    items.insert(i + k, event)
                i += len(made)
                done += 1
                self.front = i  # nothing before ``i`` is raw

    # ------------------------------------------------------------ the worker's side

    def ready(self, batch: int) -> bool:
        """Whether the worker should take a batch now without waiting for a quiet spell."""
        return bool(self.queued_steps >= batch or self.flushes or self.queued_bytes * 2 >= self.max_bytes)

    def take(self, batch_max: int) -> list[Event]:
        """The queued events in order, up to (not past) ``batch_max`` calls to score or a flush marker;
        raw events are translated here, and what they record is taken in their place."""
        taken: list[Event] = []
        self.inflight = taken  # what a translation raises leaves what was taken to be finished
        heavy = 0
        try:
            while self.items:
                it = self.items[0]
                if isinstance(it, Raw):
                    if heavy >= batch_max:
                        break
                    self.items.popleft()
                    made: list[Event] = []
                    try:
                        self.translate(it, made, queued=False)
                    finally:
                        taken += made
                    heavy += sum(1 for e in made if isinstance(e, Call) and e.needs_model)
                    continue
                if isinstance(it, Call) and it.needs_model:
                    if heavy >= batch_max:
                        break
                    heavy += 1
                    self.queued_steps -= 1
                self.items.popleft()
                self.front = max(0, self.front - 1)
                if isinstance(it, HeldMarker):  # the held events, in order, none needing the model
                    taken += self._take_held()
                    continue
                taken.append(it)
                if isinstance(it, FlushMarker):
                    self.flushes -= 1
                    break
                self.queued_events -= 1
                if isinstance(it, Call):
                    self.queued_bytes -= it.size
        finally:
            self._took()
        return taken

    def _took(self) -> None:
        """The worker took events out of the queue: callers waiting for room look again."""
        self.takes += 1
        self.room.set()

    def _take_held(self) -> list[Event]:
        """The held events, trace by trace (each trace's in order); new events go to the queue again."""
        held: list[Event] = [it for items in self.held.values() for it in items]
        self.held, self.holding = {}, False
        return held

    def take_all(self) -> list[Event]:
        """Everything queued and held, in order, as one batch (the exit's last)."""
        items: list[Event] = []
        for _ in range(len(self.items)):  # what is queued now (an agent's thread may still append)
            it = self.items.popleft()
            if isinstance(it, Raw):
                self.translate(it, items, queued=False)
            else:
                items += self._take_held() if isinstance(it, HeldMarker) else [it]
        self.inflight = items
        self.front = 0
        self.queued_steps = self.queued_bytes = self.queued_events = self.flushes = 0
        self._took()
        return items

    def done(self, n: int) -> None:
        """The worker finished its batch of ``n`` events."""
        self.inflight = []
        self.pending = max(0, self.pending - n)

    def requeue_after_fork(self, applied: Callable[[Event], bool]) -> None:
        """In a forked child: the batch the parent's worker had in hand goes back to the front of the
        queue, less what it had ``applied`` to its traces already. Flush markers get fresh events: the
        parent's callers do not exist here, and their events' locks may have been held at the fork."""
        self.items = collections.deque(
            FlushMarker(threading.Event()) if isinstance(it, FlushMarker) else it for it in self.items
        )
        inflight = [FlushMarker(threading.Event()) if isinstance(it, FlushMarker) else it for it in self.inflight]
        for it in reversed(inflight):
            if applied(it):
                self.pending -= 1  # done by the parent's worker before the fork
                continue
            self.items.appendleft(it)
            self._count_queued(it)
        self.inflight = []
        self.room = threading.Event()  # the parent's waiters do not exist here

    # ------------------------------------------------------------ reading

    def waiting_calls(self) -> list[Call]:
        """The calls recorded and not yet on their traces: in flight, queued, held."""
        held = [it for items in self.held.values() for it in items]
        return [it for it in [*self.inflight, *self.items, *held] if isinstance(it, Call)]

    def counts(self) -> dict[str, int]:
        """What waits for the worker now (see ``Recorder.backlog``)."""
        return {
            "steps": self.queued_steps,
            "bytes": self.queued_bytes,
            "events": len(self.items) - self.raw_waiting(),
            "in_flight": sum(1 for it in self.inflight if isinstance(it, Call) and it.needs_model),
            "held": sum(map(len, self.held.values())),
        }

    def overload_warning(self, framework: str, max_traces: int) -> str | None:
        """The warning due now, if any: one when the bounds are first reached, then at most one per
        ``OVERLOAD_WARN_SECONDS`` with the counts since the last."""
        now = self.clock()
        if self.warned_at is not None and now - self.warned_at < OVERLOAD_WARN_SECONDS:
            return None
        first, since = self.warned_at is None, now - (self.warned_at or now)
        counts = dict(self.unwarned)
        self.unwarned = dict.fromkeys(counts, 0)
        self.warned_at = now
        if not any(counts.values()):
            return None
        parts = [
            f"{counts['overload']:,} step(s) recorded unscored (skip_reason='overload')" if counts["overload"] else "",
            f"{counts['held']:,} event(s) held with their traces" if counts["held"] else "",
            f"{counts['evicted']:,} step(s) dropped with traces past max_traces={max_traces}"
            if counts["evicted"]
            else "",
        ]
        state = "is full" if first else f"was full in the last {since:.0f} s"
        bounds = f"{self.max_steps:,} steps, {self.max_events:,} events, {self.max_bytes:,} bytes of text"
        more = f"; counts follow at most every {OVERLOAD_WARN_SECONDS:g} s while it lasts" if first else ""
        return (
            f"groundlens: the {framework} recorder's queue {state}: {'; '.join(p for p in parts if p)} "
            f"(bounds: {bounds}; GROUNDLENS_MAX_PENDING_STEPS, _EVENTS, _BYTES){more}"
        )
