"""The recorder's worker: a thread that takes queued events in batches, scores the calls among them
and puts the steps on their traces, telling the listeners (exporters, the ledger) as it goes.

It starts scoring after a quiet spell (an agent's burst of callbacks runs without it), runs at a lower
OS priority with its own torch threads, and never lets a scoring or listener failure reach the agent.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import os
import sys
import threading
from typing import Any, Callable, NoReturn, Protocol

from groundlens_core import settings
from groundlens_core.embedding import first_load
from groundlens_core.embedding.lanes import encode_lanes
from groundlens_core.internal_errors import internal_error
from groundlens_core.trace.model import Step, Trace
from groundlens_core.trace.recorder import lifecycle
from groundlens_core.trace.recorder.backlog import Backlog
from groundlens_core.trace.recorder.calls import make_step, score_calls
from groundlens_core.trace.recorder.events import PENDING, Call, Event, FlushMarker, TraceEnd, TraceStart
from groundlens_core.trace.recorder.store import TraceStore

log = logging.getLogger("groundlens.recorder")

#: calls to score per batch (events that need no model ride along, so this bounds their wait;
#: per-step cost is within ~10 % from 4 calls a batch up, on realistic steps)
BATCH_MAX = 16
#: events of any kind queued that end the wait for a quiet spell: an agent that keeps sending events
#: which need no model (tool steps) faster than the quiet spell would otherwise hold every step back
EVENTS_MAX = 64
#: adapters' raw events waiting that end the wait for a quiet spell (a LangGraph step is about ten)
RAW_EVENTS_MAX = 256


class TraceListener(Protocol):
    """Exporters that follow a trace live. Called on the recorder's worker thread."""

    def on_trace_start(self, trace: Trace) -> None: ...

    def on_step(self, trace: Trace, step: Step) -> None: ...

    def on_trace_end(self, trace: Trace) -> None: ...


def _torch_backend_expected() -> bool:
    """Whether the scoring will load a torch backend, decided without importing anything: this runs
    in the first load's window, where an exit does not wait, and an interpreter that finalizes
    while a thread is inside ONNX Runtime's native import can crash."""
    chosen = settings.raw("GROUNDLENS_BACKEND")
    if chosen is not None:
        return not chosen.startswith("onnx-")  # an unknown name is reported by the scoring itself
    return importlib.util.find_spec("onnxruntime") is None  # the default without it: packed-torch


class Worker:
    """One recorder's worker thread (started on demand, see :meth:`start`).

    ``lock`` is the recorder's: the worker holds it briefly around the backlog and the store, never
    while it scores or calls a listener."""

    def __init__(
        self,
        framework: str,
        lock: Any,
        backlog: Backlog,
        store: TraceStore,
        listeners: list[Any],
        options: Callable[[], dict[str, Any]],
        *,
        quiet: float,
        torch_threads: int | None,
        lanes: int,
    ):
        self.framework = framework
        self.lock = lock
        self.backlog = backlog
        self.store = store
        self.listeners = listeners  # the recorder's list: listeners added later are told too
        self.options = options  # the scoring keywords (read per batch)
        self.quiet = quiet
        self.torch_threads = torch_threads
        self.lanes = lanes  # read per batch: a changed setting applies to the next one
        self.thread: threading.Thread | None = None
        self.wake = threading.Event()
        self.idle = True  # waiting for work: the next event wakes it
        self.parked = threading.Event()  # stopped for good (interpreter exit)
        self.logged: set[tuple[str, str, str]] = set()  # failures logged with a traceback already
        self.loading = False  # importing torch before its first batch (holding no events)
        self.abandoned = False  # the exit recorded the queue itself while it was loading

    # ------------------------------------------------------------ the agent's side (lock held)

    def start(self, nice: int | None) -> bool:
        """Start the thread unless it runs (``nice``: its OS nice value); True when it started it."""
        if self.thread is not None and self.thread.is_alive():
            return False
        self.thread = threading.Thread(target=self._run, args=(nice,), name=f"groundlens-{self.framework}", daemon=True)
        self.thread.start()
        return True

    def wake_up(self, urgent: bool) -> None:
        """Wake the worker if it waits for work (``urgent``, a flush: also from a quiet wait). Only the
        first event after an idle spell wakes it: waking a thread on every event hands it the GIL in
        the middle of the agent's own work."""
        if self.idle or urgent:
            self.idle = False
            self.wake.set()  # under the lock, so the clear in _take cannot come before it

    def reset_after_fork(self, lock: Any) -> None:
        """In a forked child: the recorder's new lock, fresh events, no thread (the next event starts one)."""
        self.lock = lock
        self.wake = threading.Event()
        self.parked = threading.Event()
        self.thread = None
        self.idle = True
        self.loading = self.abandoned = False

    # ------------------------------------------------------------ the thread

    def _lower_priority(self, nice: int | None) -> None:
        if nice is None or not hasattr(os, "setpriority"):
            return
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)  # this thread only
        except (OSError, AttributeError) as exc:
            log.debug("groundlens: could not lower the worker's priority: %s", exc)

    def _limit_torch_threads(self) -> None:
        """Give this thread ``torch_threads`` torch threads (None: leave torch alone), when torch is
        in use: imported already, or the backend the scoring will load is a torch one. The ONNX
        Runtime backends run one intra-op thread per encode lane and never import torch."""
        if not self.torch_threads:
            return
        if "torch" not in sys.modules and not _torch_backend_expected():
            return
        try:
            # the worker's first import of torch: under the load lock, so a fork() meanwhile waits for it
            first_load.import_torch().set_num_threads(self.torch_threads)  # this thread's setting only
        except Exception as exc:  # torch missing or odd: scoring still works with its defaults
            log.debug("groundlens: could not set the worker's torch threads: %s", exc)

    def _run(self, nice: int | None) -> None:
        # the priority is lowered once the first batch (torch's import, the model's load) is done: a
        # thread of lower priority that the OS preempts while it holds the GIL keeps the agent's
        # thread waiting for as long as it stays preempted, and the first load holds the GIL most of
        # the time (first_load: the parts of it that can run without the GIL do)
        lowered = False
        while True:
            if lifecycle.EXITING.is_set():  # the interpreter is exiting and the flush ran out: stop between batches
                self._park()
            self._wait_for_batch()
            if not lowered and not self._first_load():
                continue  # the exit came first: back to the top, which parks
            items: list[Event] = []
            try:
                with self.lock:
                    items = self.backlog.take(BATCH_MAX)
                with encode_lanes(self.lanes):
                    self.process(items)
            except Exception as exc:  # the last line of defence: the batch is finished below all the same
                internal_error(exc, "the recorder's worker, on a batch", log, deferred=True)
            finally:
                self._finish(items or self.backlog.inflight)
            if not lowered:
                lowered = True
                self._lower_priority(nice)

    def _park(self) -> NoReturn:
        """Put what is queued on its traces unscored (unless the exit did it) and stop for good."""
        if not self.abandoned:
            self._drain_unscored()
        self.parked.set()
        while True:
            threading.Event().wait()  # for good (a daemon thread waiting here is harmless at exit)

    def _first_load(self) -> bool:
        """Import torch before the first batch is taken, holding nothing: an exit meanwhile does not
        wait for the import (seconds), it puts the queue on the traces itself (:meth:`stop_at_exit`).
        False when the exit came first or took over meanwhile."""
        with self.lock:
            if lifecycle.EXITING.is_set():
                return False
            self.loading = True
        try:
            self._limit_torch_threads()
        finally:
            with self.lock:
                self.loading = False
                abandoned = self.abandoned
        if abandoned:  # the exit drained the queue and went on without us
            self.parked.set()
            while True:
                threading.Event().wait()
        return not lifecycle.EXITING.is_set()

    def stop_at_exit(self, timeout: float) -> bool:
        """At exit, once the flush ran out (``lifecycle.EXITING`` is set): whether this worker is out
        of the way, waiting up to ``timeout`` for it to park. A worker still importing torch holds
        no batch and runs no native code that the interpreter's teardown could break, so the exit
        does not wait for it: it records the queue unscored on this thread and goes on."""
        with self.lock:
            take_over = self.loading and not self.abandoned
            if take_over:
                self.abandoned = True
        if take_over:
            self._drain_unscored()
            return True
        return self.abandoned or self.parked.wait(timeout)

    def _wait_for_batch(self) -> None:
        """Wait for work, then for a quiet spell (no new event, raw or not, for ``quiet`` seconds), a
        flush or a full batch. The events are taken after it, in order, up to a batch of calls to
        score; the adapters' raw events among them are translated as they are taken (after the
        burst, not in the middle of it: the translation would take the GIL from the agent's thread)."""
        backlog = self.backlog
        while True:
            with self.lock:
                # idle first, then look: an agent's thread that appends a raw event without the lock
                # and then finds us awake has appended it before we look
                self.idle = True
                self.wake.clear()
                if backlog.items:
                    self.idle = False
                    break
            self.wake.wait()
        batch = min(BATCH_MAX, backlog.max_steps)
        while True:
            with self.lock:
                seen, raw = len(backlog.items), backlog.raw_waiting()
                if backlog.ready(batch) or seen - raw >= EVENTS_MAX or raw >= RAW_EVENTS_MAX:  # no quiet spell is near
                    break
            self.wake.wait(self.quiet)  # a flush sets it; new events do not
            self.wake.clear()
            with self.lock:
                if len(backlog.items) == seen:
                    break

    def _finish(self, items: list[Event]) -> None:
        """The worker is done with ``items``: they leave the pending count, and each flush among them
        wakes its caller (everything queued before it is on its traces now)."""
        with self.lock:
            self.backlog.done(len(items))
        for it in items:
            if isinstance(it, FlushMarker):
                it.done.set()

    def _drain_unscored(self) -> None:
        """At exit, once the flush ran out: every queued event goes on its trace now, the calls that
        wait for the model as unscored ``pending`` steps (no model is touched), so nothing recorded
        is lost from the traces and their listeners. One warning says how many and what to raise."""
        items: list[Event] = []
        try:
            with self.lock:  # raw events an adapter queued are translated and go on their traces too
                items = self.backlog.take_all()
            items = [
                dataclasses.replace(it, needs_model=False, size=0, reason=it.reason or PENDING)
                if isinstance(it, Call) and it.needs_model
                else it
                for it in items
            ]
            late = sum(1 for it in items if isinstance(it, Call) and it.reason == PENDING)
            if late:
                log.warning(
                    "groundlens: the program exited before %d step(s) of %s were scored; they are recorded "
                    "with skip_reason='pending' (GROUNDLENS_EXIT_FLUSH_SECONDS=%g sets how long the exit waits)",
                    late,
                    self.framework,
                    lifecycle.EXIT_FLUSH_SECONDS,
                )
            self.process(items)
        except Exception as exc:  # pragma: no cover - never block or fail the exit
            internal_error(exc, "recording the unscored steps at exit", None, deferred=True)
            log.debug("groundlens: could not record the unscored steps at exit", exc_info=True)
        finally:
            self._finish(items)

    # ------------------------------------------------------------ one batch

    def process(self, items: list[Event]) -> None:
        """Score the batch's calls and apply its events to their traces in order, telling the listeners."""
        with self.lock:  # a call of a trace already dropped (max_traces) is not worth the model
            calls = [it for it in items if isinstance(it, Call) and it.key in self.store]
            self.backlog.stats["evicted"] += sum(1 for it in items if isinstance(it, Call) and it.needs_model) - sum(
                1 for it in calls if it.needs_model
            )
        fresh = [it for it in calls if it.reason is None]
        with self.lock:  # where each step goes: its trace's unverified outputs are inputs of its decision
            placed = [(self.store.get(it.key), it.index, it.step_id) for it in fresh]
        scored = score_calls([it.call for it in fresh], self.options, placed)
        outcomes = {id(it): res for it, res in zip(fresh, scored)}
        for call in calls:
            if call.reason is not None:
                outcomes[id(call)] = ("skipped", call.reason, None, None)
        for it in items:
            if isinstance(it, TraceStart):
                self._notify("on_trace_start", self.store.get(it.key))
            elif isinstance(it, Call):
                if id(it) not in outcomes:
                    continue
                step = make_step(it.call, it.index, it.step_id, *outcomes[id(it)])
                with self.lock:
                    added = self.store.add_step(it.key, step)
                if added is not None:
                    self._notify("on_step", *added)
            elif isinstance(it, TraceEnd):
                with self.lock:
                    trace = self.store.end(it)
                if trace is not None:
                    self._notify("on_trace_end", trace)
        self._notify("on_batch_end")  # listeners that buffer (the ledger) write once per batch

    def _notify(self, method: str, *args: Any) -> None:
        if args and args[0] is None:
            return
        for listener in list(self.listeners):
            fn = getattr(listener, method, None)
            if fn is None:
                continue
            try:
                fn(*args)
            except Exception as exc:  # the other listeners and the trace go on
                where = f"listener {type(listener).__name__}.{method}"
                internal_error(exc, where, log, deferred=True, once=self.logged)
