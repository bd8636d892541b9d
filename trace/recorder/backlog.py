"""The worker's queue: bounded in events, in calls waiting for the model and in their text's bytes.

An event that finds the queue full is held with its trace and delivered in order where holding began,
so the agent is never blocked, memory stays flat and nothing is lost (docs/recorder.md). Plain data
without a lock of its own: every method runs under the recorder's lock.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from typing import Callable

from groundlens_core.trace.recorder.events import OVERLOAD, Call, Event, FlushMarker, HeldMarker, TraceEvent

#: at most one overload warning per this many seconds (each with the counts since the last)
OVERLOAD_WARN_SECONDS = 10.0


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
        self.clock: Callable[[], float] = time.monotonic  # for the warnings' interval
        self.warned_at: float | None = None
        self.unwarned = {"overload": 0, "held": 0, "evicted": 0}  # counts since the last warning

    # ------------------------------------------------------------ the agent's side

    def call(self, event: Call) -> Call:
        """``event``, recorded unscored (``OVERLOAD``) when it needs the model and the calls waiting
        for it are at a bound already."""
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
        """Queue ``event`` within the bounds, or hold it with its trace."""
        self.pending += 1
        if isinstance(event, FlushMarker):  # never held: a flush waits for everything before it, held events too
            self.flushes += 1
            self.items.append(event)
            return
        assert not isinstance(event, HeldMarker)
        if not self._admits(event.size if isinstance(event, Call) else 0):
            if isinstance(event, Call) and event.needs_model:  # no room to wait for the model: recorded unscored
                event = self._overloaded(event)
            self.held.setdefault(event.key, []).append(event)
            self.unwarned["held"] += 1
            if not self.holding:  # one marker, where holding began
                self.holding = True
                self.items.append(HeldMarker())
            return
        self._count_queued(event)
        self.items.append(event)

    def _count_queued(self, event: Event) -> None:
        """``event`` joins the queue: it counts against the event bound, a call also by its bytes and,
        when it needs the model, as a step (``take`` uncounts it)."""
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

    # ------------------------------------------------------------ the worker's side

    def ready(self, batch: int) -> bool:
        """Whether the worker should take a batch now without waiting for a quiet spell."""
        return bool(self.queued_steps >= batch or self.flushes or self.queued_bytes * 2 >= self.max_bytes)

    def take(self, batch_max: int) -> list[Event]:
        """The queued events in order, up to (not past) ``batch_max`` calls to score or a flush marker."""
        taken: list[Event] = []
        heavy = 0
        while self.items:
            it = self.items[0]
            if isinstance(it, Call) and it.needs_model:
                if heavy >= batch_max:
                    break
                heavy += 1
                self.queued_steps -= 1
            self.items.popleft()
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
        self.inflight = taken
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
        for it in self.items:
            items += self._take_held() if isinstance(it, HeldMarker) else [it]
        self.items.clear()
        self.inflight = items
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
            if isinstance(it, FlushMarker):
                self.flushes += 1
                continue
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
            "events": len(self.items),
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
