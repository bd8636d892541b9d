"""Recorders across the process's exit and ``fork()``: the exit drain and the fork hooks.

At exit, the workers score what is queued for a while, then record the rest unscored and stop
between batches (a daemon thread inside torch while the interpreter finalizes aborts the process).
Across ``fork()``, every recorder's lock is held, so a child never inherits one held for good.
"""

from __future__ import annotations

import atexit
import concurrent.futures.thread  # noqa: F401  (imported now, not by torch during the exit: see below)
import os
import threading
import time
import weakref
from typing import Any, Protocol

from groundlens_core import settings
from groundlens_core.embedding import first_load, lanes  # noqa: F401  (lanes: its exit hook runs after ours)

# The worker imports torch on its first batch, which can still run while the interpreter exits; by
# then threading takes no new exit hooks, and torch's import of concurrent.futures.thread adds one
# ("can't register atexit after shutdown"). Imported above, that hook is in place long before.

#: how long the exit waits for the workers to score what is queued (``GROUNDLENS_EXIT_FLUSH_SECONDS``);
#: what they have not reached by then is recorded unscored (``skip_reason="pending"``), never dropped
EXIT_FLUSH_SECONDS = settings.seconds("GROUNDLENS_EXIT_FLUSH_SECONDS", 10.0)
#: when the exit flush runs out: how long the exit then waits, at most, for a worker to end the batch
#: in hand (``GROUNDLENS_EXIT_STOP_SECONDS``); a worker still importing torch is not waited for
EXIT_STOP_SECONDS = settings.seconds("GROUNDLENS_EXIT_STOP_SECONDS", 60.0)
EXITING = threading.Event()  # set at exit once the flush ran out: workers stop between batches
# weakref.finalize registers its exit hook on first use; torch's import creates finalizers, and one
# created during the exit flush would come too late (its finalizers then run at module teardown).
weakref.finalize(EXITING, lambda: None)


class Hooked(Protocol):
    """What the exit and fork hooks need of a recorder."""

    _lock: Any  # the lock that guards all its state, held across fork()

    def flush(self, timeout: float | None = ...) -> bool: ...

    def idle(self) -> bool: ...

    def _stopped(self, timeout: float) -> bool: ...  # its worker parked, or nothing pending (no lock)

    def _reset_after_fork(self) -> None: ...


_LIVE: weakref.WeakSet[Hooked] = weakref.WeakSet()  # recorders whose worker has started
_ALL: weakref.WeakSet[Hooked] = weakref.WeakSet()  # every recorder (for the fork hooks)
_ALL_LOCK = threading.Lock()
_HELD: list[Hooked] = []  # the recorders whose lock the forking thread holds


def register(recorder: Hooked) -> None:
    """A new recorder: its lock is held across every fork from now on."""
    with _ALL_LOCK:
        _ALL.add(recorder)


def started(recorder: Hooked) -> None:
    """``recorder``'s worker started: the exit waits for it."""
    _LIVE.add(recorder)


_AFTER_EXIT_FLUSH: list[Any] = []  # called once the workers are done at exit (the score sinks' flush)


def after_exit_flush(fn: Any) -> None:
    """Call ``fn()`` at exit after the workers finished (or stopped): listeners that send what the
    last batches handed them (the score sinks) run once nothing more can come."""
    _AFTER_EXIT_FLUSH.append(fn)


def _flush_at_exit() -> None:
    """Let the workers finish what is queued before the interpreter tears down, then the hooks of
    :func:`after_exit_flush`."""
    try:
        _flush_workers()
    finally:
        for fn in list(_AFTER_EXIT_FLUSH):
            try:
                fn()
            except Exception:  # pragma: no cover - never fail the exit
                pass


def _flush_workers() -> None:
    """When the backlog outlasts ``EXIT_FLUSH_SECONDS``, each busy worker ends the batch in hand, puts
    what is still queued on its traces unscored and stops; the exit waits for that (at most
    ``EXIT_STOP_SECONDS``). A worker still importing torch holds no batch: the exit puts its queue on
    the traces itself and does not wait for the import (``Worker.stop_at_exit``)."""
    deadline = time.monotonic() + EXIT_FLUSH_SECONDS
    late = []
    for recorder in list(_LIVE):
        try:
            # late also when calls came in after the flush's marker (a daemon thread still recording):
            # the worker must not be left scoring them while the interpreter finalizes
            done = recorder.flush(max(0.0, deadline - time.monotonic())) and recorder.idle()
        except Exception:  # never fail the exit (a flush raises the worker's failures in our tests)
            done = False
        if not done:
            late.append(recorder)
    if not late:
        return
    EXITING.set()
    end = time.monotonic() + EXIT_STOP_SECONDS
    for recorder in late:  # bounded: until it parks, goes idle (nothing left) or the time is up
        while not recorder._stopped(0.05) and time.monotonic() < end:
            pass


def _before_fork() -> None:
    """Hold every recorder's lock across ``fork()`` (the worker only holds it briefly, never while it
    embeds). First wait for a model load in progress (``first_load``), before holding any recorder's
    lock: the agent's threads go on recording meanwhile."""
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
    worker had in hand goes back to the queue."""
    global _ALL_LOCK
    _ALL_LOCK = threading.Lock()
    for recorder in _HELD:
        recorder._reset_after_fork()
    _HELD.clear()
    first_load.after_fork()


atexit.register(_flush_at_exit)  # after the encode lanes' hook (imported above): atexit runs it first
if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child)
