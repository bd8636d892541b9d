"""The recorder: the one API every framework plugin writes through.

An adapter translates a framework event into a :class:`CallRecord` and hands it to
:meth:`Recorder.record`, which only appends to a queue and returns. A background worker scores
queued calls in small batches (SGI with a question and a context, support with a context alone,
DGI without one), turns each into a :class:`Step` and notifies listeners (the live OpenTelemetry
exporter). Nothing raised by scoring or by a listener ever reaches the agent: failures become
``error`` steps and log warnings.

Overload policy. Everything queued for the worker is bounded: the calls waiting for the model in
steps (``max_pending_steps``), every queued event (trace start and end, tool, retriever and LLM
steps) in number (``max_pending_events``), and the text of every queued call in UTF-8 bytes
(``max_pending_bytes``). A call that needs the model and arrives while a bound is reached is not
scored: it is recorded as a ``skipped`` step with ``skip_reason="overload"`` (its texts kept, so a
human can still review it), counted in the trace (``Trace.unscored()``, the summary, the HTML report,
the OTel attribute ``groundlens.count.overload``). An event that finds the queue full is held with
its trace instead (``_held``: one list per trace, dropped with the trace when ``max_traces`` evicts
it, so it is bounded by the traces kept) and delivered, in order, when the worker reaches the place
in the queue where holding began; a trace's end is never lost. So the agent is never blocked,
memory stays flat, and no step goes missing. Warnings are rate-limited: one when the bounds are
first reached, then at most one per ``OVERLOAD_WARN_SECONDS`` with the counts since the last.
``get_trace(timeout=...)`` returns what is scored so far, the rest marked ``skip_reason="pending"``.
"""

from __future__ import annotations

import atexit
import collections
import concurrent.futures.thread  # noqa: F401  (see below: imported now, not by torch at exit)
import dataclasses
import logging
import os
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Iterable, Protocol, Sequence

from groundlens_core import settings
from groundlens_core.embedding import first_load
from groundlens_core.embedding.lanes import encode_lanes, usable_cpus
from groundlens_core.results import GroundlensScore, ScoreError, as_score
from groundlens_core.text import is_blank
from groundlens_core.trace.ledger import ledger_listeners
from groundlens_core.trace.model import STEP_KINDS, ContextPiece, Step, Trace, Usage, new_id, to_iso, utc_now

# Why concurrent.futures.thread above: the worker imports torch on its first batch. In a short
# program that batch can still be loading when the interpreter starts to exit; from then on
# threading refuses new exit hooks, and torch's import of concurrent.futures.thread (which adds
# one) failed, so every step of the run became "scoring failed: can't register atexit after
# shutdown". Imported here, with the recorder, that hook is in place long before.

log = logging.getLogger("groundlens.recorder")


#: events of any kind queued that end the wait for a quiet spell: an agent that keeps sending events
#: which need no model (tool steps) faster than ``QUIET_SECONDS`` held every step back, unbounded
_EVENTS_MAX = 64
_BATCH_MAX = 16  # calls to score per batch (events that need no model ride along, so this bounds their wait;
# per-step cost is within ~10 % from 4 calls a batch up, measured on realistic steps)
#: the scoring backlog's bounds (see the module docstring); override per recorder or by environment.
#: 256 steps is a few seconds of work for the worker at realistic step sizes; 8 MiB holds that many
#: steps with contexts of ~30 KB each.
MAX_PENDING_STEPS = settings.whole_number("GROUNDLENS_MAX_PENDING_STEPS", 256)
MAX_PENDING_BYTES = settings.whole_number("GROUNDLENS_MAX_PENDING_BYTES", 8 * 1024 * 1024)
#: every queued event of any kind: 4096 is a few hundred agent calls' worth, a few MiB at most
MAX_PENDING_EVENTS = settings.whole_number("GROUNDLENS_MAX_PENDING_EVENTS", 4096)
#: at most one overload warning per this many seconds (each with the counts since the last)
OVERLOAD_WARN_SECONDS = 10.0
#: skip reasons of steps recorded without a score because of the scoring load (not the step itself)
OVERLOAD = "overload"  # the backlog was full when the call arrived
PENDING = "pending"  # not scored yet when get_trace(timeout=...) returned (only in that copy)
#: the worker starts scoring once no new event has come for this long (or on flush / a full batch):
#: an agent's bursts of callbacks then run without a scoring thread competing for the CPU and the
#: GIL, and the calls of a burst are embedded together.
QUIET_SECONDS = 0.02
#: torch intra-op threads for the worker's own forward passes (a per-thread setting: the agent's
#: threads keep theirs). One thread leaves the other cores to the agent; the embeddings are the
#: same bits whatever the thread count (tests/test_packed_embedder.py).
WORKER_TORCH_THREADS = 1
#: encode lanes of the worker (groundlens_core/embedding/lanes.py): its forward passes are shared with
#: helper threads, one per spare core, up to this many lanes in all. A lane takes a core only while
#: the agent leaves it idle (the helpers run at the worker's lower priority and the worker redoes
#: what a starved helper holds), and the scores are the same bits whatever the lane count.
WORKER_LANES = settings.whole_number("GROUNDLENS_WORKER_LANES", 2)
#: the worker thread's OS nice value (Linux: a per-thread setting; None leaves it alone). The worker
#: computes without the GIL, on a core of its own when one is free; when the cores are busy the
#: agent's thread should win them, so a flat-out agent is not preempted by its own tracer's scoring.
WORKER_NICE: int | None = 10
#: how long the exit waits for the worker to score what is queued (``GROUNDLENS_EXIT_FLUSH_SECONDS``);
#: what it has not reached by then is recorded unscored (``skip_reason="pending"``), never dropped
_EXIT_FLUSH_SECONDS = settings.seconds("GROUNDLENS_EXIT_FLUSH_SECONDS", 10.0)
#: when the exit flush runs out: how long the exit then waits for a worker to end the batch in hand
_EXIT_STOP_SECONDS = 60.0
_EXITING = threading.Event()  # set at exit once the flush ran out: workers stop between batches
_LIVE: weakref.WeakSet[Recorder] = weakref.WeakSet()  # recorders whose worker has started
# weakref.finalize registers its exit hook on first use; torch's import creates finalizers, and if
# that import ends during the exit flush (see the imports), the hook came too late and torch's
# finalizers ran at module teardown ("Exception ignored ... _del_library"). One now puts it in place.
weakref.finalize(_EXITING, lambda: None)


def _flush_at_exit() -> None:
    """Let the workers finish what is queued before the interpreter tears down: a daemon thread
    stopped in the middle of a torch call can abort the whole process (``terminate called ...``,
    exit status 134). When the backlog outlasts ``_EXIT_FLUSH_SECONDS``, the rest is not scored:
    each busy worker ends the batch in hand (bounded: ``_BATCH_MAX`` steps), puts what is still
    queued on its traces unscored (``skip_reason="pending"``, trace ends delivered, so listeners and
    exporters still get every step) and stops; the exit waits for that, so no worker is inside torch
    when the interpreter finalizes."""
    deadline = time.monotonic() + _EXIT_FLUSH_SECONDS
    late = []
    for recorder in list(_LIVE):
        try:
            # late also when calls came in after the flush's marker (a daemon thread still recording):
            # the worker must not be left scoring them while the interpreter finalizes
            if not recorder.flush(max(0.0, deadline - time.monotonic())) or not recorder.idle():
                late.append(recorder)
        except Exception:  # pragma: no cover - never block or fail the exit
            pass
    if not late:
        return
    _EXITING.set()
    end = time.monotonic() + _EXIT_STOP_SECONDS
    for recorder in late:  # bounded: until it parks, goes idle (nothing left) or the time is up
        while not (recorder._parked.wait(0.05) or recorder._pending <= 0) and time.monotonic() < end:
            pass


atexit.register(_flush_at_exit)

_ALL: weakref.WeakSet[Recorder] = weakref.WeakSet()  # every recorder (for the fork hooks below)
_ALL_LOCK = threading.Lock()
_HELD: list[Recorder] = []  # the recorders whose lock the forking thread holds


def _before_fork() -> None:
    """Hold every recorder's lock across ``fork()``: a lock the worker held at that moment would stay
    held for good in the child (there is no worker there to release it), so the child's first
    ``record`` would hang; and the state it guards is whole when nobody holds it. The worker only
    ever holds it briefly (never while it embeds), so the fork waits at most that long.

    First, the fork waits for a model load in progress (``first_load``), before it holds any
    recorder's lock: the agent's threads go on recording meanwhile."""
    first_load.before_fork()
    _ALL_LOCK.acquire()
    _HELD[:] = list(_ALL)
    for recorder in _HELD:
        recorder._lock.acquire()


def _after_fork_in_parent() -> None:
    for recorder in _HELD:
        recorder._lock.release()
    _HELD.clear()
    _ALL_LOCK.release()
    first_load.after_fork()


def _after_fork_in_child() -> None:
    """A forked child has no worker: each recorder gets fresh locks and events, and what the parent's
    worker had in hand goes back to the queue (see ``Recorder._reset_after_fork``)."""
    global _ALL_LOCK
    _ALL_LOCK = threading.Lock()
    for recorder in _HELD:
        recorder._reset_after_fork()
    _HELD.clear()
    first_load.after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child)


@dataclass
class CallRecord:
    """What an adapter saw of one framework event: plain data, no framework objects."""

    trace_key: str  # the root run this call belongs to
    node: str  # graph node, agent role, function name
    kind: str = "llm"  # llm | tool_call | tool | retrieval | agent
    question: str | None = None
    context: Sequence[ContextPiece] = ()
    response: str | None = None
    model: str | None = None
    provider: str | None = None
    usage: Usage | None = None
    started_at: float | None = None  # time.time() of the framework call's start
    ended_at: float | None = None
    step_id: str | None = None  # a framework run id, if it has one
    parent_id: str | None = None
    error: str | None = None  # the framework call itself failed
    metadata: dict[str, Any] = field(default_factory=dict)
    # An adapter that had to score in line (e.g. to annotate a result it returns) passes the score
    # here so the recorder keeps it instead of scoring the same call a second time.
    score: GroundlensScore | dict[str, Any] | None = None  # the core's score (or its to_dict())
    scoring_latency_ms: float | None = None  # how long that in-line scoring took


class TraceListener(Protocol):
    """Exporters that follow a trace live. Called on the recorder's worker thread."""

    def on_trace_start(self, trace: Trace) -> None: ...

    def on_step(self, trace: Trace, step: Step) -> None: ...

    def on_trace_end(self, trace: Trace) -> None: ...


def context_pieces(items: Iterable[Any], default_source: str = "context") -> tuple[ContextPiece, ...]:
    """Normalise strings, ``(text, source)`` pairs and pieces into ContextPieces, dropping blanks and repeats."""
    out: list[ContextPiece] = []
    seen: set[tuple[str, str]] = set()
    for item in items:
        if isinstance(item, ContextPiece):
            piece = item
        elif isinstance(item, tuple) and len(item) == 2:
            piece = ContextPiece(text=str(item[0]), source=str(item[1]))
        else:
            piece = ContextPiece(text=str(item), source=default_source)
        if not isinstance(piece.text, str) or not piece.text.strip():
            continue
        key = (piece.text, piece.source)
        if key not in seen:
            seen.add(key)
            out.append(piece)
    return tuple(out)


class Recorder:
    """Collects traces for one plugin instance and scores their LLM calls off the caller's thread.

    Thread-safe: ``record`` may be called from any thread or asyncio task at once.
    """

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
    ):
        self.framework = framework
        self.name = name or framework
        self._embedder = embedder
        self._calibration = calibration
        self._long_context = long_context
        self._listeners = [*listeners, *ledger_listeners(ledger)]  # ledger: signed records (GROUNDLENS_LEDGER)
        self._max_traces = max_traces
        self._quiet = quiet_seconds
        self._worker_torch_threads = worker_torch_threads
        #: the worker's encode lanes: never more than the CPUs this process may use
        self.worker_lanes = max(1, min(WORKER_LANES if worker_lanes is None else worker_lanes, usable_cpus()))
        self._lock = threading.RLock()
        self._traces: dict[str, Trace] = {}
        self._order: list[str] = []  # trace keys, oldest first
        self._next_index: dict[str, int] = {}
        self._items: collections.deque[tuple] = collections.deque()
        self._wake = threading.Event()
        self._parked = threading.Event()  # the worker stopped for good (interpreter exit)
        self._worker_idle = True
        self._pending = 0
        self._worker: threading.Thread | None = None
        #: bounds of the scoring backlog (public: a plugin's ``cb.recorder.max_pending_steps = ...``)
        self.max_pending_steps = max(1, int(MAX_PENDING_STEPS if max_pending_steps is None else max_pending_steps))
        self.max_pending_bytes = max(1, int(MAX_PENDING_BYTES if max_pending_bytes is None else max_pending_bytes))
        self.max_pending_events = max(1, int(MAX_PENDING_EVENTS if max_pending_events is None else max_pending_events))
        self._queued_steps = 0  # calls in the queue that need the model
        self._queued_bytes = 0  # the text of every call in the queue, UTF-8 bytes
        self._queued_events = 0  # start, call and end events in the queue (not flush or held markers)
        self._flushes = 0  # flush markers in the queue
        #: events that found the queue full, by trace key, in order; delivered when the worker reaches
        #: the ("held",) marker queued when holding began (see the module docstring)
        self._held: dict[str, list[tuple]] = {}
        self._held_events = 0
        self._holding = False  # the held marker is in the queue: new events join the held ones
        self._inflight: list[tuple] = []  # the batch the worker is on
        #: calls not scored because of the load, and steps of traces dropped (max_traces) before they
        #: reached them, since the recorder started
        self.stats = {"overload": 0, "evicted": 0}
        self._clock = time.monotonic  # for the warnings' interval
        self._warned_at: float | None = None
        self._unwarned = {"overload": 0, "held": 0, "evicted": 0}  # counts since the last warning
        with _ALL_LOCK:
            _ALL.add(self)

    def _reset_after_fork(self) -> None:
        """In a forked child: new locks and events, no worker (the next record or flush starts one).
        The batch the parent's worker had in hand goes back to the front of the queue, less what it
        had already put on its traces: it is still counted as pending, and nothing in the child
        would ever score it (the child's ``flush`` waited out its whole timeout, its steps missing)."""
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._parked = threading.Event()
        self._worker = None
        self._worker_idle = True
        # flush markers: the parent's flush callers do not exist here, and their events' locks may
        # have been held at the fork; the child's worker sets fresh ones
        self._items = collections.deque(("flush", threading.Event()) if it[0] == "flush" else it for it in self._items)
        self._inflight = [("flush", threading.Event()) if it[0] == "flush" else it for it in self._inflight]
        for it in reversed(self._inflight):
            trace = self._traces.get(it[1].trace_key if it[0] == "call" else it[1]) if it[0] != "flush" else None
            if (it[0] == "call" and trace is not None and any(s.id == it[3] for s in trace.steps)) or (
                it[0] == "end" and trace is not None and trace.ended_at is not None
            ):
                self._pending -= 1  # done by the parent's worker before the fork
                continue
            self._items.appendleft(it)
            if it[0] == "flush":
                self._flushes += 1
                continue
            self._queued_events += 1
            if it[0] == "call":
                self._queued_bytes += it[5]
                self._queued_steps += 1 if it[4] else 0
        self._inflight = []

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

    def start_trace(self, key: str, *, name: str | None = None, metadata: dict[str, Any] | None = None) -> bool:
        """Open a trace for root run ``key`` (done implicitly by the first ``record``).

        Returns True when it opened a new trace. A key that is already open is left as it is (its
        name and metadata are not touched, so a late or repeated start cannot rewrite a trace);
        :meth:`annotate_trace` adds metadata to an open trace on purpose.
        """
        with self._lock:
            if key in self._traces:
                return False
            trace = Trace(
                id=new_id(),
                name=name or self.name,
                framework=self.framework,
                started_at=utc_now(),
                metadata=dict(metadata or {}),
            )
            self._traces[key] = trace
            self._order.append(key)
            self._next_index[key] = 0
            while len(self._order) > self._max_traces:
                old = self._order.pop(0)
                self._traces.pop(old, None)
                self._next_index.pop(old, None)
                held = self._held.pop(old, None)
                if held:  # never reached by the worker: gone with their trace
                    self._pending -= len(held)
                    self._held_events -= len(held)
                    dropped = sum(1 for it in held if it[0] == "call")
                    self.stats["evicted"] += dropped
                    self._unwarned["evicted"] += dropped
            self._submit(("start", key))  # under the lock: before any call of the trace another thread queues
        self._warn_if_due()
        return True

    def annotate_trace(self, key: str, metadata: dict[str, Any]) -> None:
        """Merge ``metadata`` into the open trace ``key`` (e.g. ``interrupted``); unknown keys are ignored."""
        with self._lock:
            trace = self._traces.get(key)
            if trace is not None:
                trace.metadata.update(metadata)

    def record(self, call: CallRecord) -> str:
        """Queue one call; returns its step id at once. Never raises into the caller."""
        try:
            self.start_trace(call.trace_key)
            heavy = self._needs_model(call)
            size = _text_bytes(call)
            step_id = call.step_id or new_id()
            # the index and the place in the queue under one lock: else two threads recording into one
            # trace (parallel branches) could queue their steps in the other order than their indexes
            with self._lock:
                index = self._next_index.get(call.trace_key, 0)
                self._next_index[call.trace_key] = index + 1
                reason = None
                if (
                    heavy
                    and self._queued_steps
                    and (
                        self._queued_steps >= self.max_pending_steps
                        or self._queued_bytes + size > self.max_pending_bytes
                    )
                ):
                    heavy, reason = False, OVERLOAD
                    self.stats["overload"] += 1
                    self._unwarned["overload"] += 1
                self._submit(("call", call, index, step_id, heavy, size, reason))
            self._warn_if_due()
            return step_id
        except Exception:  # pragma: no cover - defensive: the agent must not see our bugs
            log.exception("groundlens: could not record a call")
            return ""

    def end_trace(self, key: str, *, error: str | None = None) -> None:
        """Mark root run ``key`` finished (``error``: the agent raised; the steps so far are kept)."""
        with self._lock:
            if key not in self._traces:
                return
            self._submit(("end", key, error, utc_now()))
        self._warn_if_due()

    def _needs_model(self, call: CallRecord) -> bool:
        """Whether the worker will have to embed this call (not already scored, not skipped)."""
        if self.decide(call)[0] != "score":
            return False
        return call.score is None  # else scored in line by the adapter already (kept, or an error step)

    def _admits(self, size: int) -> bool:
        """Whether one more event with ``size`` bytes of text fits in the queue now (lock held). Once
        events are held, the next ones join them until the worker takes them: a trace's events are
        then delivered in the order they came. A call is queued when no other call's text is, however
        large (so one call bigger than the byte bound is still scored)."""
        if self._holding or self._queued_events >= self.max_pending_events:
            return False
        return self._queued_bytes == 0 or self._queued_bytes + size <= self.max_pending_bytes

    def _submit(self, item: tuple) -> None:
        """Queue for the worker, within the bounds, or hold with its trace (see the module docstring).
        Only the first item after an idle spell wakes the worker: waking a thread on every event
        hands it the GIL in the middle of the agent's own work."""
        with self._lock:
            self._pending += 1
            kind = item[0]
            if kind == "flush":  # never held: a flush waits for everything before it, held events too
                self._flushes += 1
                self._items.append(item)
            elif not self._admits(item[5] if kind == "call" else 0):
                if kind == "call" and item[4]:  # no room to wait for the model: recorded unscored
                    item = (*item[:4], False, item[5], OVERLOAD)
                    self.stats["overload"] += 1
                    self._unwarned["overload"] += 1
                self._held.setdefault(item[1].trace_key if kind == "call" else item[1], []).append(item)
                self._held_events += 1
                self._unwarned["held"] += 1
                marker = not self._holding  # one marker, where holding began
                self._holding = True
                if marker:
                    self._items.append(("held",))
            else:
                self._queued_events += 1
                if kind == "call":
                    self._queued_bytes += item[5]
                    self._queued_steps += 1 if item[4] else 0
                self._items.append(item)
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._run, name=f"groundlens-{self.framework}", daemon=True)
                self._worker.start()
                _LIVE.add(self)
            if self._worker_idle or item[0] == "flush":
                self._worker_idle = False
                self._wake.set()  # under the lock, so the worker's clear in _take cannot come before it

    def _warn_if_due(self) -> None:
        """One warning when the bounds are first reached, then at most one per
        ``OVERLOAD_WARN_SECONDS`` with the counts since the last (logged outside the lock)."""
        if not any(self._unwarned.values()):  # the common case, without the lock
            return
        with self._lock:
            now = self._clock()
            if self._warned_at is not None and now - self._warned_at < OVERLOAD_WARN_SECONDS:
                return
            first, since = self._warned_at is None, now - (self._warned_at or now)
            counts = dict(self._unwarned)
            self._unwarned = dict.fromkeys(counts, 0)
            self._warned_at = now
        if not any(counts.values()):
            return
        parts = [
            f"{counts['overload']:,} step(s) recorded unscored (skip_reason='overload')" if counts["overload"] else "",
            f"{counts['held']:,} event(s) held with their traces" if counts["held"] else "",
            f"{counts['evicted']:,} step(s) dropped with traces past max_traces={self._max_traces}"
            if counts["evicted"]
            else "",
        ]
        log.warning(
            "groundlens: the %s recorder's queue %s: %s (bounds: %s steps, %s events, %s bytes of text; "
            "GROUNDLENS_MAX_PENDING_STEPS, _EVENTS, _BYTES)%s",
            self.framework,
            "is full" if first else f"was full in the last {since:.0f} s",
            "; ".join(p for p in parts if p),
            f"{self.max_pending_steps:,}",
            f"{self.max_pending_events:,}",
            f"{self.max_pending_bytes:,}",
            f"; counts follow at most every {OVERLOAD_WARN_SECONDS:g} s while it lasts" if first else "",
        )

    # ------------------------------------------------------------ reading

    def flush(self, timeout: float | None = 120.0) -> bool:
        """Wait until every call queued before this flush is scored. Returns False on timeout.

        It waits for its own marker in the queue, not for an idle recorder: while other threads
        keep recording (other agents on a server), the recorder is never idle, and a flush that
        waited for that returned only at its timeout (and every ``get_trace()`` with it)."""
        with self._lock:
            busy = self._pending > 0
        if not busy:
            return True
        if threading.current_thread() is self._worker:
            # a listener (they run on the worker's thread) asking for a trace: the worker cannot wait
            # for itself; the caller gets what is there now (get_trace lists the rest as pending)
            return False
        done = threading.Event()
        self._submit(("flush", done))  # score what is queued now, without waiting for quiet
        return done.wait(timeout)

    def get_trace(self, key: str | None = None, *, wait: bool = True, timeout: float | None = 120.0) -> Trace | None:
        """The trace of root run ``key`` (default: the latest), after pending scores are done.

        ``wait`` for at most ``timeout`` seconds (None: no limit); a step still waiting for its score
        then is in the returned copy as a ``skipped`` step with ``skip_reason="pending"`` (as is a
        step that another thread recorded while the flush ran)."""
        if wait:
            self.flush(timeout)
        with self._lock:
            if key is None:
                if not self._order:
                    return None
                key = self._order[-1]
            trace = self._traces.get(key)
            if trace is None:
                return None
            return self._copy(key, trace, self._pending_steps() if self._pending > 0 else None)

    def get_traces(self, *, wait: bool = True, timeout: float | None = 120.0) -> list[Trace]:
        """Every kept trace, oldest first; ``wait``/``timeout`` as in :meth:`get_trace`."""
        if wait:
            self.flush(timeout)
        with self._lock:
            pending = self._pending_steps() if self._pending > 0 else None
            return [self._copy(k, self._traces[k], pending) for k in self._order]

    def idle(self) -> bool:
        """True when nothing is waiting for the worker."""
        with self._lock:
            return self._pending <= 0

    def backlog(self) -> dict[str, int]:
        """What waits for the worker now: calls to score (queued, and in the batch being scored),
        the queued calls' text bytes, all queued events, and the events held with their traces."""
        with self._lock:
            scoring = sum(1 for it in self._inflight if it[0] == "call" and it[4])
            return {
                "steps": self._queued_steps,
                "bytes": self._queued_bytes,
                "events": len(self._items),
                "in_flight": scoring,
                "held": self._held_events,
            }

    def _pending_steps(self) -> dict[str, list[Step]]:
        """Steps recorded but not yet on their trace, as ``pending`` steps, by trace key (lock held)."""
        out: dict[str, list[Step]] = {}
        held = [it for items in self._held.values() for it in items]
        for it in list(self._inflight) + list(self._items) + held:
            if it[0] == "call":
                call, index, step_id = it[1], it[2], it[3]
                method, reason = ("skipped", it[6] or PENDING) if it[4] or it[6] else self.decide(call)
                if method == "score":  # scored in line by the adapter: only listing is left
                    method, reason = "skipped", PENDING
                out.setdefault(call.trace_key, []).append(
                    self._make_step(call, index, step_id, method, reason, None, None)
                )
        return out

    def _copy(self, key: str, trace: Trace, pending: dict[str, list[Step]] | None) -> Trace:
        steps = list(trace.steps)
        if pending and pending.get(key):
            have = {s.id for s in steps}
            steps += [s for s in pending[key] if s.id not in have]
            steps.sort(key=lambda s: s.index)
        return dataclasses.replace(trace, steps=steps, metadata=dict(trace.metadata))

    def trace_keys(self) -> list[str]:
        with self._lock:
            return list(self._order)

    # ------------------------------------------------------------ worker

    def _limit_torch_threads(self) -> None:
        """Give this worker thread ``worker_torch_threads`` torch threads (None: leave torch alone)."""
        if not self._worker_torch_threads:
            return
        try:
            # the worker's first import of torch: under the load lock, so a fork() meanwhile waits for it
            first_load.import_torch().set_num_threads(self._worker_torch_threads)  # this thread's setting only
        except Exception as exc:  # torch missing or odd: scoring still works with its defaults
            log.debug("groundlens: could not set the worker's torch threads: %s", exc)

    def _take(self) -> list[tuple]:
        """Wait for work, then for a quiet spell (no new item for ``quiet_seconds``), a flush or a
        full batch, and take the items in order up to (not past) a batch of calls to score."""
        while True:
            with self._lock:
                if self._items:
                    # the wake-up that brought us here is not a flush: clear it, or the quiet wait below
                    # returns at once and scores the first item of a burst without waiting for the rest
                    self._wake.clear()
                    break
                self._worker_idle = True  # the next _submit wakes us
                self._wake.clear()
            self._wake.wait()
        batch = min(_BATCH_MAX, self.max_pending_steps)
        while True:
            with self._lock:
                seen = len(self._items)
                if (
                    self._queued_steps >= batch
                    or self._flushes
                    or self._queued_bytes * 2 >= self.max_pending_bytes
                    or seen >= _EVENTS_MAX  # events that need no model keep coming: no quiet spell is near
                ):
                    break
            self._wake.wait(self._quiet)  # a flush sets it; new events do not
            self._wake.clear()
            with self._lock:
                if len(self._items) == seen:
                    break
        with self._lock:
            taken: list[tuple] = []
            heavy = 0
            while self._items:
                it = self._items[0]
                if it[0] == "call" and it[4]:
                    if heavy >= _BATCH_MAX:
                        break
                    heavy += 1
                    self._queued_steps -= 1
                self._items.popleft()
                if it[0] == "held":  # where holding began: the held events, in order, none needing the model
                    taken += self._take_held()
                    continue
                taken.append(it)
                if it[0] == "flush":
                    self._flushes -= 1
                    break
                self._queued_events -= 1
                if it[0] == "call":
                    self._queued_bytes -= it[5]
            self._inflight = taken
        return taken

    def _take_held(self) -> list[tuple]:
        """The held events, trace by trace (each trace's in order); new events go to the queue again."""
        held = [it for items in self._held.values() for it in items]
        self._held, self._held_events, self._holding = {}, 0, False
        return held

    def _lower_priority(self) -> None:
        if WORKER_NICE is None or not hasattr(os, "setpriority"):
            return
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), WORKER_NICE)  # this thread only
        except (OSError, AttributeError) as exc:
            log.debug("groundlens: could not lower the worker's priority: %s", exc)

    def _run(self) -> None:
        self._lower_priority()
        self._limit_torch_threads()
        while True:
            if _EXITING.is_set():  # the interpreter is exiting and the flush ran out: stop between batches
                self._drain_unscored()
                self._parked.set()
                threading.Event().wait()  # for good (a daemon thread waiting here is harmless at exit)
            items = self._take()
            try:
                with encode_lanes(self.worker_lanes):  # read per batch: a changed setting applies next batch
                    self._process(items)
            except Exception:  # pragma: no cover - last line of defence
                log.exception("groundlens: worker failed on a batch")
            finally:
                self._finish(items)

    def _finish(self, items: list[tuple]) -> None:
        """The worker is done with ``items``: they leave the pending count, and each flush among them
        wakes its caller (everything queued before it is on its traces now)."""
        with self._lock:
            self._inflight = []
            self._pending = max(0, self._pending - len(items))
        for it in items:
            if it[0] == "flush":
                it[1].set()

    def _drain_unscored(self) -> None:
        """At exit, once the flush ran out: every queued item goes on its trace now, the calls that
        wait for the model as unscored ``pending`` steps (no model is touched), so nothing recorded
        is lost from the traces and their listeners. One warning says how many and what to raise."""
        items: list[tuple] = []
        try:
            with self._lock:
                items = []
                for it in self._items:
                    items += self._take_held() if it[0] == "held" else [it]
                self._items.clear()
                self._inflight = items
                self._queued_steps = self._queued_bytes = self._queued_events = self._flushes = 0
            items = [(*it[:4], False, 0, it[6] or PENDING) if it[0] == "call" and it[4] else it for it in items]
            late = sum(1 for it in items if it[0] == "call" and it[6] == PENDING)
            if late:
                log.warning(
                    "groundlens: the program exited before %d step(s) of %s were scored; they are recorded "
                    "with skip_reason='pending' (GROUNDLENS_EXIT_FLUSH_SECONDS=%g sets how long the exit waits)",
                    late,
                    self.framework,
                    _EXIT_FLUSH_SECONDS,
                )
            self._process(items)
        except Exception:  # pragma: no cover - never block or fail the exit
            log.debug("groundlens: could not record the unscored steps at exit", exc_info=True)
        finally:
            self._finish(items)

    def _process(self, items: list[tuple]) -> None:
        with self._lock:  # a call of a trace already dropped (max_traces) is not worth the model
            calls = [it for it in items if it[0] == "call" and it[1].trace_key in self._traces]
            self.stats["evicted"] += sum(1 for it in items if it[0] == "call" and it[4]) - sum(
                1 for it in calls if it[4]
            )
        fresh = [it for it in calls if it[6] is None]
        scored = self._score_calls([it[1] for it in fresh])
        by_id = {id(it): res for it, res in zip(fresh, scored)}
        for it in calls:
            if it[6] is not None:
                by_id[id(it)] = ("skipped", it[6], None, None)
        for it in items:
            if it[0] == "start":
                self._notify("on_trace_start", self._traces.get(it[1]))
            elif it[0] == "call":
                if id(it) not in by_id:
                    continue
                call, index, step_id = it[1], it[2], it[3]
                step = self._make_step(call, index, step_id, *by_id[id(it)])
                with self._lock:
                    trace = self._traces.get(call.trace_key)
                    if trace is None:
                        continue
                    step = trace.add_step(step)  # with cascade_from (lineage.py)
                    if step.score is not None and trace.fingerprint is None:
                        trace.fingerprint = step.score.fingerprint
                self._notify("on_step", trace, step)
            elif it[0] == "end":
                _, key, error, ended = it
                with self._lock:
                    trace = self._traces.get(key)
                    if trace is None:
                        continue
                    trace.ended_at = ended
                    if error:
                        trace.status, trace.error = "error", error
                self._notify("on_trace_end", trace)
        self._notify("on_batch_end")  # listeners that buffer (the ledger) write once per batch

    def _notify(self, method: str, *args: Any) -> None:
        if args and args[0] is None:
            return
        for listener in list(self._listeners):
            fn = getattr(listener, method, None)
            if fn is None:
                continue
            try:
                fn(*args)
            except Exception as exc:
                log.warning("groundlens: listener %s.%s failed: %s", type(listener).__name__, method, exc)

    @staticmethod
    def decide(call: CallRecord) -> tuple[str, str | None]:
        """(method, reason) for a call, the same for every framework: ``score`` or ``skipped``/``error``."""
        if call.kind not in STEP_KINDS:
            return "error", f"unknown step kind {call.kind!r}"
        if call.error:
            return "error", call.error
        if call.kind == "tool_call":
            return "skipped", "the model only called tools"
        if call.kind in ("tool", "retrieval"):
            return "skipped", "a tool or retriever result: context for later steps, not scored"
        if not isinstance(call.response, str) or not call.response.strip():
            return "skipped", "no response text"
        if is_blank(call.question if isinstance(call.question, str) else None) and not any(
            isinstance(p.text, str) and not is_blank(p.text) for p in context_pieces(call.context)
        ):
            # with a context, no question is fine: the core scores the response against it alone (support)
            return "skipped", "no question and no context found for this call"
        return "score", None

    def _score_calls(
        self, calls: list[CallRecord]
    ) -> list[tuple[str, str | None, GroundlensScore | None, float | None]]:
        """(method, reason, score dict, scoring ms) per call; the scorable ones in one batch."""
        decisions = [self.decide(c) for c in calls]
        out: list[tuple[str, str | None, GroundlensScore | None, float | None]] = [
            (m, r, None, None) for m, r in decisions
        ]
        todo = []
        for i, (m, _) in enumerate(decisions):
            pre = calls[i].score
            if m == "score" and pre is not None:
                try:
                    kept = as_score(pre)
                except ValueError as exc:
                    out[i] = ("error", f"the adapter's score is unusable: {exc}", None, None)
                    continue
                assert kept is not None
                out[i] = (kept.method, None, kept, calls[i].scoring_latency_ms)  # scored in line already
            elif m == "score":
                todo.append(i)
        if not todo:
            return out
        t0 = time.perf_counter()
        try:
            # under the load lock while it is imported (a fork meanwhile waits: see first_load)
            evaluate_batch = first_load.import_module("groundlens_core.scoring").evaluate_batch
            kwargs = dict(self.scoring_options(), errors="record")
            items = [
                {
                    "question": calls[i].question,
                    "response": calls[i].response,
                    "context": [p.text for p in context_pieces(calls[i].context) if isinstance(p.text, str)],
                }
                for i in todo
            ]
            results: list[Any] = list(evaluate_batch(items, **kwargs))
        except Exception as exc:
            log.warning("groundlens: scoring failed: %s", exc)
            results = [exc] * len(todo)
        ms = (time.perf_counter() - t0) * 1000.0 / len(todo)
        for i, res in zip(todo, results):
            if isinstance(res, Exception):
                out[i] = ("error", f"{type(res).__name__}: {res}", None, ms)
            elif isinstance(res, ScoreError):
                out[i] = ("error", res.error, None, ms)
            else:
                out[i] = (res.method, None, res, ms)
        return out

    @staticmethod
    def _make_step(
        call: CallRecord,
        index: int,
        step_id: str,
        method: str,
        reason: str | None,
        score: GroundlensScore | None,
        scoring_ms: float | None,
    ) -> Step:
        llm_ms = None
        if call.started_at is not None and call.ended_at is not None:
            llm_ms = max(0.0, (call.ended_at - call.started_at) * 1000.0)
        triage = score.triage if score is not None else ("error" if method == "error" else None)
        return Step(
            id=step_id,
            index=index,
            parent_id=call.parent_id,
            node=call.node,
            kind=call.kind,
            method=method,
            score=score,
            triage=triage,
            question=call.question,
            context=context_pieces(call.context),
            response=call.response,
            model=call.model,
            provider=call.provider,
            usage=call.usage,
            started_at=to_iso(call.started_at),
            ended_at=to_iso(call.ended_at),
            llm_latency_ms=llm_ms,
            scoring_latency_ms=scoring_ms,
            error=reason if method == "error" else None,
            skip_reason=reason if method == "skipped" else None,
            metadata=dict(call.metadata),
        )


def _text_bytes(call: CallRecord) -> int:
    """UTF-8 bytes of the texts a call puts in the scoring queue (what the byte bound counts)."""
    n = 0
    for text in (call.question, call.response, *(getattr(p, "text", p) for p in call.context)):
        if isinstance(text, str):
            n += len(text.encode("utf-8", "surrogatepass"))
    return n
