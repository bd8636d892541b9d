"""The recorder: the one API every framework plugin writes through.

``record`` only queues a call and returns (``defer`` queues an adapter's raw event, translated off
the agent's thread); a worker thread takes the one queue in order, scores its calls in batches, puts the
steps on their traces and tells the listeners. Everything queued is bounded; a call that finds the
backlog full is recorded unscored (``skip_reason="overload"``), never dropped, and the agent is never
blocked. Nothing raised by scoring or by a listener reaches the agent. How it works and what to tune:
docs/recorder.md. The parts: events.py, calls.py, store.py, backlog.py, worker.py, lifecycle.py.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Sequence

from groundlens_core import internal_errors, settings
from groundlens_core.embedding.lanes import usable_cpus
from groundlens_core.trace.model import META_ORIGINAL_STEP_ID, META_UNSAMPLED, Step, Trace, new_id, to_iso, utc_now
from groundlens_core.trace.recorder import app_span, lifecycle
from groundlens_core.trace.recorder.backlog import OVERLOAD_WARN_SECONDS, Backlog
from groundlens_core.trace.recorder.calls import (
    CallRecord,
    context_pieces,
    make_step,
    method_of,
    needs_model,
    text_bytes,
)
from groundlens_core.trace.recorder.events import (
    OVERLOAD,
    PENDING,
    Call,
    Event,
    FlushMarker,
    Raw,
    TraceEnd,
    TraceStart,
)
from groundlens_core.trace.recorder.ledger import ledger_listeners
from groundlens_core.trace.recorder.sampling import Sampling
from groundlens_core.trace.recorder.store import TraceStore
from groundlens_core.trace.recorder.worker import TraceListener, Worker

__all__ = [
    "MAX_PENDING_BYTES",
    "MAX_PENDING_EVENTS",
    "MAX_PENDING_STEPS",
    "OVERLOAD",
    "OVERLOAD_WARN_SECONDS",
    "PENDING",
    "QUIET_SECONDS",
    "ROOM_STALL_SECONDS",
    "WORKER_LANES",
    "WORKER_NICE",
    "WORKER_TORCH_THREADS",
    "CallRecord",
    "Recorder",
    "TraceListener",
    "context_pieces",
]

log = logging.getLogger("groundlens.recorder")


#: the scoring backlog's bounds (docs/recorder.md); override per recorder or by environment. 256 steps
#: is a few seconds of work for the worker at realistic step sizes; 8 MiB holds that many steps with
#: contexts of ~30 KB each; 4096 events of any kind is a few hundred agent calls' worth.
MAX_PENDING_STEPS = settings.whole_number("GROUNDLENS_MAX_PENDING_STEPS", 256)
MAX_PENDING_BYTES = settings.whole_number("GROUNDLENS_MAX_PENDING_BYTES", 8 * 1024 * 1024)
MAX_PENDING_EVENTS = settings.whole_number("GROUNDLENS_MAX_PENDING_EVENTS", 4096)
#: the worker starts scoring once no new event has come for this long (or on flush / a full batch):
#: an agent's bursts of callbacks then run without a scoring thread competing for the CPU and the
#: GIL, and the calls of a burst are embedded together.
QUIET_SECONDS = 0.02
#: torch intra-op threads for the worker's own forward passes (a per-thread setting: the agent's
#: threads keep theirs); the embeddings are the same bits whatever the thread count.
WORKER_TORCH_THREADS = 1
#: adapters' raw events waiting for their translation at most (:meth:`Recorder.defer`): past this
#: the agent's thread translates the oldest itself, a few at a time (the worker is busy scoring),
#: so the queue, and what its events hold on to, stays bounded
MAX_RAW_EVENTS = 4096
OVERFLOW_DRAIN = 64
#: a call recorded with ``block=True`` (an offline check) waits for room in the scoring queue as long
#: as the worker takes work at least this often; past it the worker is taken for stalled
ROOM_STALL_SECONDS = 120.0
#: encode lanes of the worker (groundlens_core/embedding/lanes.py): its forward passes are shared with
#: helper threads, one per spare core, up to this many lanes in all; the scores are the same bits.
WORKER_LANES = settings.whole_number("GROUNDLENS_WORKER_LANES", 2)
#: the worker thread's OS nice value (Linux: a per-thread setting; None leaves it alone), read when a
#: worker starts: when the cores are busy the agent's thread wins them over its own tracer's scoring.
WORKER_NICE: int | None = 10


def _part_setting(part: str, attribute: str, doc: str) -> Any:
    """A recorder setting kept by one of its parts (the backlog's bounds, the worker's lanes), read
    and set through the recorder: a plugin tunes ``cb.recorder.<setting>`` without knowing the parts,
    and the part reads its own attribute on every use, so a change applies at once."""
    return property(
        lambda self: getattr(getattr(self, part), attribute),
        lambda self, value: setattr(getattr(self, part), attribute, value),
        doc=doc,
    )


class Recorder:
    """Collects traces for one plugin instance and scores their LLM calls off the caller's thread.

    Thread-safe: ``record`` may be called from any thread or asyncio task at once.
    """

    method_of = staticmethod(method_of)

    def __init__(
        self,
        framework: str,
        *,
        name: str | None = None,
        embedder: Any = None,
        calibration: Any = None,
        long_context: str | None = None,
        listeners: Sequence[TraceListener] = (),
        max_traces: int = 100,
        quiet_seconds: float = QUIET_SECONDS,
        worker_torch_threads: int | None = WORKER_TORCH_THREADS,
        worker_lanes: int | None = None,
        max_pending_steps: int | None = None,
        max_pending_bytes: int | None = None,
        max_pending_events: int | None = None,
        ledger: Any = None,
        sampling: Sampling | None = None,
    ):
        self.framework = framework
        #: which calls are recorded (``groundlens_core.trace.recorder.sampling``); None: every call. The
        #: calls left out are counted on their trace (``Trace.unsampled``)
        self.sampling = sampling
        self.name = name or framework
        self._embedder = embedder
        self._calibration = calibration
        self._long_context = long_context
        self._listeners = [*listeners, *ledger_listeners(ledger)]  # ledger: signed records (GROUNDLENS_LEDGER)
        self._lock = threading.RLock()  # guards the store and the backlog (and is held across fork())
        self._store = TraceStore(max_traces)
        self._backlog = Backlog(
            max(1, int(MAX_PENDING_STEPS if max_pending_steps is None else max_pending_steps)),
            max(1, int(MAX_PENDING_BYTES if max_pending_bytes is None else max_pending_bytes)),
            max(1, int(MAX_PENDING_EVENTS if max_pending_events is None else max_pending_events)),
        )
        self._worker = Worker(
            framework,
            self._lock,
            self._backlog,
            self._store,
            self._listeners,
            self.scoring_options,
            quiet=quiet_seconds,
            torch_threads=worker_torch_threads,
            # never more lanes than the CPUs this process may use
            lanes=max(1, min(WORKER_LANES if worker_lanes is None else worker_lanes, usable_cpus())),
        )
        #: calls not scored because of the load, and steps of traces dropped (max_traces) before they
        #: reached them, since the recorder started
        self.stats = self._backlog.stats
        lifecycle.register(self)

    # ------------------------------------------------------------ settings (public, may be changed)

    worker_lanes: int = _part_setting("_worker", "lanes", "The worker's encode lanes (read per batch).")
    max_pending_steps: int = _part_setting("_backlog", "max_steps", "Calls waiting for the model at most.")
    max_pending_bytes: int = _part_setting("_backlog", "max_bytes", "UTF-8 bytes of the queued calls' texts at most.")
    max_pending_events: int = _part_setting("_backlog", "max_events", "Queued events of any kind at most.")

    # ------------------------------------------------------------ caller side (cheap)

    def add_listener(self, listener: TraceListener) -> None:
        with self._lock:
            self._listeners.append(listener)

    def scoring_options(self) -> dict[str, Any]:
        """The keywords this recorder passes to the core's ``evaluate`` / ``evaluate_batch``: adapters
        that score in line use them too, so a call scores the same either way."""
        kwargs: dict[str, Any] = {"embedder": self._embedder, "calibration": self._calibration}
        if self._long_context:
            kwargs["long_context"] = self._long_context
        return kwargs

    def start_trace(
        self, key: str, *, name: str | None = None, metadata: dict[str, Any] | None = None, at: float | None = None
    ) -> bool:
        """Open a trace for root run ``key`` (done implicitly by the first ``record``); ``at``: when
        it started (a Unix time; default now).

        Returns True when it opened a new trace. A key that is already open is left as it is (its
        name and metadata are not touched, so a late or repeated start cannot rewrite a trace);
        :meth:`annotate_trace` adds metadata to an open trace on purpose.
        """
        with self._lock:
            self._translate_first()
            if key in self._store:
                return False
            self._open_trace(key, name, metadata, at)
        self._warn_if_due()
        return True

    def _open_trace(self, key: str, name: str | None, metadata: dict[str, Any] | None, at: float | None = None) -> None:
        """Open trace ``key`` (the caller holds the lock and found it not open)."""
        trace = Trace(
            id=new_id(),
            name=name or self.name,
            framework=self.framework,
            started_at=utc_now() if at is None else (to_iso(at) or utc_now()),
            metadata=dict(metadata or {}),
        )
        _capture_app_span(trace.metadata)
        for old in self._store.open(key, trace):
            self._backlog.drop_held(old)  # never reached by the worker: gone with their trace
        self._submit(TraceStart(key))  # under the lock: before any call of the trace another thread queues

    def annotate_trace(self, key: str, metadata: dict[str, Any]) -> None:
        """Merge ``metadata`` into the open trace ``key`` (e.g. ``interrupted``); unknown keys are ignored."""
        with self._lock:
            trace = self._store.get(key)
            if trace is not None:
                trace.metadata.update(metadata)

    def record(self, call: CallRecord, *, block: bool = False) -> str:
        """Queue one call; returns its step id. Never raises into the caller.

        By default it returns at once, and a call that finds the scoring queue full is recorded
        unscored (``skip_reason="overload"``): the live path, which never blocks the agent. With
        ``block`` (an offline check of a finished run, where nobody waits but the checker) it waits
        for room in the queue instead, as long as the worker keeps taking work: after
        ``ROOM_STALL_SECONDS`` in which it took nothing, the call is recorded as overload after all,
        and later calls do not wait until the worker takes something again."""
        try:
            sampling = self.sampling
            if sampling is not None and not sampling.keeps(call):  # counted on its trace, nothing queued
                self._count_unsampled(call.trace_key)
                return ""
            if call.otel_parent is None:
                call.otel_parent = app_span.capture()  # on the caller's thread: the worker has none
            elif call.otel_parent is app_span.ABSENT:  # the adapter looked on the caller's thread: none
                call.otel_parent = None
            heavy = needs_model(call)
            size = text_bytes(call)
            wait = block and heavy and self._may_wait()
            while True:
                if wait:
                    self._wait_for_room(size)
                # the index and the place in the queue under one lock: else two threads recording into one
                # trace (parallel branches) could queue their steps in the other order than their indexes
                with self._lock:
                    if wait and self._should_wait(size):  # another thread took the room: wait again
                        continue  # bounded: each turn waits for the worker's next take, or gives up
                    self._translate_first()
                    if call.trace_key not in self._store:  # the first record opens its trace
                        self._open_trace(call.trace_key, None, None)
                    index = self._store.take_index(call.trace_key)
                    step_id = self._store.unique_step_id(call.trace_key, call.step_id or new_id())
                    if call.step_id and step_id != call.step_id:  # a duplicate: re-keyed, the adapter's id kept
                        call.metadata = {**call.metadata, META_ORIGINAL_STEP_ID: call.step_id}
                    self._submit(self._backlog.call(Call(call, index, step_id, heavy, size)))
                    break
            self._warn_if_due()
            return step_id
        except Exception as exc:  # the agent must not see our bugs (raised in our tests: internal_errors)
            internal_errors.internal_error(exc, "Recorder.record", log)
            return ""

    def _may_wait(self) -> bool:
        """Whether this thread may wait for the worker: not the worker itself (a listener), not while
        it holds the recorder's lock (a raw event's translation), not once the program exits."""
        if threading.current_thread() is self._worker.thread or lifecycle.EXITING.is_set():
            return False
        owned = getattr(self._lock, "_is_owned", None)
        return not (owned is not None and owned())

    def _should_wait(self, size: int) -> bool:
        """Whether a blocking call of ``size`` bytes should wait for room now (the lock held): the queue
        is full for it, and the worker is neither stalled nor stopped, nor the program exiting."""
        backlog = self._backlog
        if backlog.has_room(size) or backlog.stalled():
            return False
        return not (self._worker.parked.is_set() or lifecycle.EXITING.is_set())

    def _wait_for_room(self, size: int) -> None:
        """Wait until a call of ``size`` bytes would be queued for the model, while the worker keeps
        taking work; give up (and mark the worker stalled) after ``ROOM_STALL_SECONDS`` without a take."""
        backlog = self._backlog
        seen, deadline = -1, 0.0
        while True:
            with self._lock:
                if not self._should_wait(size):
                    return
                now = time.monotonic()
                if backlog.takes != seen:  # the worker took work since we last looked: a new grace period
                    seen, deadline = backlog.takes, now + ROOM_STALL_SECONDS
                elif now >= deadline:
                    backlog.stalled_at = seen
                    break
                room = backlog.room
                room.clear()  # under the lock: a take after this sets it
                self._start_or_wake(urgent=True)  # score what is queued without waiting for a quiet spell
            room.wait(min(0.5, max(0.0, deadline - now)))
        log.warning(
            "groundlens: the %s recorder's worker took no work for %g s; calls that wait for room in its "
            "queue are recorded unscored (skip_reason='overload') until it does",
            self.framework,
            ROOM_STALL_SECONDS,
        )

    def _count_unsampled(self, key: str) -> None:
        """One more call of trace ``key`` left out by the sampling (the trace opens if it is new)."""
        with self._lock:
            if key not in self._store:
                self._open_trace(key, None, None)
            trace = self._store.get(key)
            if trace is not None:
                trace.metadata[META_UNSAMPLED] = int(trace.metadata.get(META_UNSAMPLED, 0)) + 1

    def end_trace(self, key: str, *, error: str | None = None, at: float | None = None) -> None:
        """Mark root run ``key`` finished (``error``: the agent raised; the steps so far are kept;
        ``at``: when, a Unix time, default now)."""
        with self._lock:
            self._translate_first()
            if key not in self._store:
                return
            self._submit(TraceEnd(key, error, utc_now() if at is None else (to_iso(at) or utc_now())))
        self._warn_if_due()

    def _translate_first(self) -> None:
        """Before a direct start, record or end (the lock held): the raw events queued before it are
        translated in place first, so its index and its place in the queue come after theirs. Nothing
        to do for an adapter that records directly only (its queue never holds a raw event), nor for
        one that defers everything (it records only inside its translations)."""
        backlog = self._backlog
        if backlog.sink is None and backlog.raw_waiting():
            backlog.translate_in_place()

    def _submit(self, event: Event) -> None:
        """Queue for the worker, within the bounds, or hold with its trace; start or wake the worker."""
        with self._lock:
            self._backlog.put(event)
            self._start_or_wake(urgent=isinstance(event, FlushMarker))

    def _start_or_wake(self, urgent: bool) -> None:
        """Start the worker unless it runs, or wake it when it waits (the caller holds the lock)."""
        if self._worker.start(WORKER_NICE):
            lifecycle.started(self)
        self._worker.wake_up(urgent=urgent)

    def defer(self, translate: Callable[..., Any], *args: Any) -> None:
        """Queue an adapter's raw event in the one queue: ``translate(*args)`` runs where the queue is
        taken, in the order the events came, under the lock: on the worker once a quiet spell has
        passed, or in place in whatever reads a trace first (``flush`` waits for the worker;
        ``get_trace(s, wait=False)``, ``idle``, ``backlog``, ``trace_keys`` translate). What the
        translation records (trace starts, calls with their prompt read, trace ends) takes the raw
        event's place in the queue. The agent's thread pays for an append without a lock, not for
        the translation; ``translate`` catches its own failures (an adapter's error guard). Past
        ``MAX_RAW_EVENTS`` raw events (the worker is behind) the agent's thread translates the
        oldest itself, a few at a time, so the queue, and what its events hold on to, stays
        bounded. Wakes the worker without a lock when it is awake already (the worker looks at the
        queue again after it says it is idle, so an event queued just before is not left waiting)."""
        backlog = self._backlog
        items = backlog.items
        items.append(Raw(translate, args))  # deque.append is atomic: no lock on the agent's thread
        # the worker is behind: the oldest are translated here (the length alone first: it is cheaper)
        if len(items) > MAX_RAW_EVENTS and backlog.raw_waiting() > MAX_RAW_EVENTS:
            self.drain_raw(limit=OVERFLOW_DRAIN)
        elif self._worker.idle:
            with self._lock:
                self._start_or_wake(urgent=False)

    def raw_pending(self) -> int:
        """How many raw events wait for their translation (read without a lock; nothing is translated)."""
        return self._backlog.raw_waiting()

    def drain_raw(self, limit: int | None = None) -> None:
        """Translate the queued raw events (the first ``limit``) in place, in order, under the lock (so a
        fork never finds a translation half done); nothing while a translation runs (one that fails
        reports through here). A failure inside is kept for the caller's side (``internal_errors``)."""
        if not self._backlog.items:  # not raw_waiting(): while another thread translates it can read 0
            return
        with self._lock:
            self._backlog.translate_in_place(limit)

    def _warn_if_due(self) -> None:
        """The rate-limited overload warning, when one is due (logged outside the lock)."""
        if not any(self._backlog.unwarned.values()):  # the common case, without the lock
            return
        with self._lock:
            message = self._backlog.overload_warning(self.framework, self._store.max_traces)
        if message:
            log.warning("%s", message)

    # ------------------------------------------------------------ reading

    def flush(self, timeout: float | None = 120.0) -> bool:
        """Wait until every call queued before this flush is scored. Returns False on timeout.

        It waits for its own marker in the queue, not for an idle recorder: while other threads
        keep recording (other agents on a server), the recorder is never idle."""
        with self._lock:  # raw events queued before this flush are translated by the worker, in order
            busy = self._backlog.busy()
        if threading.current_thread() is self._worker.thread:
            # a listener (they run on the worker's thread) asking for a trace: the worker cannot wait
            # for itself; the caller gets what is there now (get_trace lists the rest as pending)
            return not busy
        done = threading.Event()
        if busy:
            self._submit(FlushMarker(done))  # score what is queued now, without waiting for quiet
        finished = done.wait(timeout) if busy else True
        internal_errors.raise_seen()  # under GROUNDLENS_RAISE_INTERNAL_ERRORS: the worker's failures, here
        return finished

    def get_trace(self, key: str | None = None, *, wait: bool = True, timeout: float | None = 120.0) -> Trace | None:
        """The trace of root run ``key`` (default: the latest), after pending scores are done.

        ``wait`` for at most ``timeout`` seconds (None: no limit); a step still waiting for its score
        then is in the returned copy as a ``skipped`` step with ``skip_reason="pending"`` (as is a
        step that another thread recorded while the flush ran)."""
        if wait:
            self.flush(timeout)
        self.drain_raw()  # what the flush left (a listener's read, a timeout) is listed, as pending
        with self._lock:
            if key is None:
                key = self._store.latest()
                if key is None:
                    return None
            if self._store.get(key) is None:
                return None
            waiting = self._waiting_steps()
            return self._store.copy(key, waiting.get(key))

    def get_traces(self, *, wait: bool = True, timeout: float | None = 120.0) -> list[Trace]:
        """Every kept trace, oldest first; ``wait``/``timeout`` as in :meth:`get_trace`."""
        if wait:
            self.flush(timeout)
        self.drain_raw()  # what the flush left (a listener's read, a timeout) is listed, as pending
        with self._lock:
            waiting = self._waiting_steps()
            return [self._store.copy(k, waiting.get(k)) for k in self._store.order]

    def trace_keys(self) -> list[str]:
        self.drain_raw()
        with self._lock:
            return list(self._store.order)

    def idle(self) -> bool:
        """True when nothing is waiting for the worker."""
        self.drain_raw()
        with self._lock:
            return not self._backlog.busy()

    def backlog(self) -> dict[str, int]:
        """What waits for the worker now: calls to score (queued, and in the batch being scored),
        the queued calls' text bytes, all queued events, and the events held with their traces."""
        self.drain_raw()
        with self._lock:
            return self._backlog.counts()

    def _waiting_steps(self) -> dict[str, list[Step]]:
        """Steps recorded but not yet on their trace, as ``pending`` steps, by trace key (lock held)."""
        out: dict[str, list[Step]] = {}
        if self._backlog.pending > 0:
            for event in self._backlog.waiting_calls():
                out.setdefault(event.key, []).append(_waiting_step(event))
        return out

    # ------------------------------------------------------------ process lifecycle (lifecycle.py)

    def _stopped(self, timeout: float) -> bool:
        """At exit: whether the worker is out of the way (waiting up to ``timeout``: see
        ``Worker.stop_at_exit``) or nothing is pending."""
        return self._worker.stop_at_exit(timeout) or not self._backlog.busy()

    def _reset_after_fork(self) -> None:
        """In a forked child: a new lock, no worker (the next event starts one), and the batch the
        parent's worker had in hand back at the front of the queue, less what it had already put on
        its traces (nothing in the child would ever finish it, and its flush would wait in vain)."""
        self._lock = threading.RLock()
        self._worker.reset_after_fork(self._lock)
        self._backlog.requeue_after_fork(self._store.applied)


def _capture_app_span(metadata: dict[str, Any]) -> None:
    """The application span a new trace starts in (on the caller's thread), unless the adapter set one."""
    if metadata.get(app_span.META_OTEL_PARENT) is app_span.ABSENT:  # the adapter looked on the caller's thread
        del metadata[app_span.META_OTEL_PARENT]
    elif app_span.META_OTEL_PARENT not in metadata:
        parent = app_span.active_span()
        if parent is not None:
            metadata[app_span.META_OTEL_PARENT] = parent


def _waiting_step(event: Call) -> Step:
    """The step of a call not on its trace yet, as a copy of the trace lists it: ``pending``, or
    skipped/error as it will be recorded when it needs no model."""
    reason: str | None
    if event.needs_model or event.reason:
        method, reason = "skipped", event.reason or PENDING
    else:
        method, reason = method_of(event.call)
        if method == "score":  # scored in line by the adapter: only listing is left
            method, reason = "skipped", PENDING
    return make_step(event.call, event.index, event.step_id, method, reason, None, None)
