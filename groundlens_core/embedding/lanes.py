"""Encode lanes: one thread's forward passes shared with helper threads on spare cores.

Why: the recorder's worker scores an agent's steps on one core, and on a 2-core machine it can fall
behind even one agent. Torch's own intra-op threads do not help there: a GEMM split across
OpenMP threads waits at a barrier for the slowest one, so when the agent's thread takes the second
core the whole pass stalls (measured: 16 steps/s on one thread, 2 steps/s on two with a busy core).
Lanes split an encode at the *text* level instead: its forward passes (each over whole texts, see
``PackedMiniLMEmbedder.encode``) become jobs that the calling thread and ``n - 1`` helper threads
take in turn. When a core is free the encode runs up to n times faster; when the agent needs that
core back, the helpers (which inherit the caller's lower priority) simply take fewer jobs, and the
caller redoes any job a helper is still holding once nothing else is left, so a starved helper
never holds the encode up.

Scores stay bit-identical: a text's embedding does not depend on which forward pass it is in (the
packed backend's batch invariance), and a job done twice gives the same bits twice.

Opt-in per calling thread (``with encode_lanes(2): ...``); everything else encodes on its own thread,
as before. The recorder's worker turns it on (``Recorder(worker_lanes=)``).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

__all__ = ["encode_lanes", "current_lanes", "run_jobs", "usable_cpus"]

T = TypeVar("T")
log = logging.getLogger("groundlens.embedding")

_local = threading.local()
_UNSET: Any = object()


def usable_cpus() -> int:
    """CPUs this process may use: its affinity mask where the OS has one, capped by a container's
    CPU quota (cgroup v2 ``cpu.max`` or v1 ``cpu.cfs_quota_us``), so ``docker run --cpus=1`` gives 1."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    quota = _cgroup_cpu_quota()
    return max(1, min(n, quota)) if quota else n


def _cgroup_cpu_quota(root: str = "/sys/fs/cgroup") -> int | None:
    """Whole CPUs of this container's quota (rounded up), or None when there is none or no cgroup."""
    for quota_file, period_file in (
        (f"{root}/cpu.max", None),
        (f"{root}/cpu/cpu.cfs_quota_us", f"{root}/cpu/cpu.cfs_period_us"),
    ):
        try:
            with open(quota_file, encoding="ascii") as fh:
                fields = fh.read().split()
            if period_file is not None:
                with open(period_file, encoding="ascii") as fh:
                    fields = fields[:1] + fh.read().split()[:1]
            quota, period = fields[0], float(fields[1])
            if quota in ("max", "-1") or float(quota) <= 0 or period <= 0:
                return None
            return max(1, -int(-float(quota) // period))
        except (OSError, ValueError, IndexError):
            continue
    return None


def current_lanes() -> int:
    """The lanes set for this thread's encodes (1: no helpers)."""
    return getattr(_local, "lanes", 1)


@contextlib.contextmanager
def encode_lanes(n: int) -> Iterator[None]:
    """Within the block, this thread's encodes share their forward passes with ``n - 1`` helpers."""
    if n < 1:
        raise ValueError(f"encode lanes must be >= 1, got {n}")
    before = current_lanes()
    _local.lanes = n
    try:
        yield
    finally:
        _local.lanes = before


class _Jobs:
    """One encode's jobs: claimed in order, each result kept once (the first to finish).

    Closed by the caller when the encode is over (returned or raised): from then on it holds neither
    the jobs (which hold the encode's inputs) nor the results, so a helper still busy with a job the
    caller redid, or a copy still waiting in the helpers' inbox, keeps nothing big alive, and no
    helper starts another job of a failed encode.
    """

    def __init__(self, jobs: Sequence[Callable[[], Any]], nice: int | None):
        self.jobs: Sequence[Callable[[], Any]] | None = jobs
        self.nice = nice
        self.results: list[Any] | None = [_UNSET] * len(jobs)
        self.next = 0
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)

    def claim(self) -> tuple[int, Callable[[], Any]] | None:
        """The next job nobody has taken (its index and itself), or None when none is left."""
        with self.lock:
            if self.jobs is None or self.next >= len(self.jobs):
                return None
            self.next += 1
            return self.next - 1, self.jobs[self.next - 1]

    def done(self, i: int) -> bool:
        return self.results is not None and self.results[i] is not _UNSET

    def put(self, i: int, value: Any) -> None:
        with self.lock:
            if self.results is not None and self.results[i] is _UNSET:
                self.results[i] = value
                self.changed.notify_all()

    def wait(self, i: int, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for job ``i`` (held by a helper); whether it is done."""
        with self.lock:
            return self.changed.wait_for(lambda: self.results is None or self.results[i] is not _UNSET, timeout)

    def close(self) -> list[Any]:
        """The results so far; the jobs and results are dropped."""
        with self.lock:
            results, self.results, self.jobs = self.results or [], None, None
            self.changed.notify_all()
        return results


class _Helpers:
    """Daemon threads that take jobs from the encodes handed to them (started on first use)."""

    def __init__(self) -> None:
        self.inbox: queue.SimpleQueue[_Jobs] = queue.SimpleQueue()
        self.threads: list[threading.Thread] = []
        self.lock = threading.Lock()
        self.busy = 0  # helpers inside a job (see wait_idle)
        self.stopping = False  # set at interpreter exit: no new jobs
        self.idle = threading.Condition(threading.Lock())

    def ensure(self, n: int) -> None:
        with self.lock:
            while len(self.threads) < n:
                t = threading.Thread(target=self._run, name=f"groundlens-lane-{len(self.threads) + 1}", daemon=True)
                t.start()
                self.threads.append(t)

    def _run(self) -> None:
        torch = sys.modules.get("torch")
        if torch is not None:  # one intra-op thread per lane: the lanes are the parallelism
            with contextlib.suppress(Exception):
                torch.set_num_threads(1)
        nice = None
        while True:
            jobs = self.inbox.get()
            if jobs.nice is not None and jobs.nice != nice:  # as polite as the thread it helps
                with contextlib.suppress(OSError, AttributeError):
                    os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), jobs.nice)
                    nice = jobs.nice
            self._help(jobs)
            del jobs  # waiting for the next encode, hold nothing of this one

    def _help(self, jobs: _Jobs) -> None:
        """Take ``jobs``' jobs until none is left (a method of its own: its locals, which hold the
        last job and so the encode's inputs, are gone when it returns)."""
        while True:
            with self.idle:
                if self.stopping:
                    return
                self.busy += 1
            try:
                claimed = jobs.claim()
                if claimed is None:
                    return
                i, job = claimed
                try:
                    jobs.put(i, job())
                except BaseException as exc:  # the caller redoes the job and sees its own error
                    log.debug("groundlens: an encode lane failed a job (the caller redoes it): %s", exc)
            finally:
                with self.idle:
                    self.busy -= 1
                    self.idle.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Stop handing out jobs and wait up to ``timeout`` s for the helpers' current ones to end."""
        with self.idle:
            self.stopping = True
            return self.idle.wait_for(lambda: self.busy == 0, timeout)


_helpers = _Helpers()

#: how long the interpreter's exit waits for helpers still inside a job
EXIT_WAIT_SECONDS = 10.0


def _wait_for_helpers_at_exit() -> None:
    """A helper can still be inside a forward pass when the interpreter exits (a job the caller
    redid because the helper was starved, in the last batch before exit). A daemon thread that comes
    back from torch's GIL-free code while the interpreter finalizes aborts the whole process
    (``terminate called without an active exception``, exit status 134), so the exit waits for it.
    Registered at import, before the recorder's exit flush (atexit runs last-registered first), so
    it runs after that flush, when the worker has no more batches for the helpers."""
    with contextlib.suppress(Exception):
        _helpers.wait_idle(EXIT_WAIT_SECONDS)


atexit.register(_wait_for_helpers_at_exit)


def _after_fork_in_child() -> None:
    """A forked child has none of the parent's helper threads (and may have forked while one held
    the lock): it starts helpers of its own on first use, with a fresh inbox."""
    global _helpers
    _helpers = _Helpers()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _own_nice() -> int | None:
    try:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    except (OSError, AttributeError):
        return None


def run_jobs(jobs: Sequence[Callable[[], T]]) -> list[T]:
    """Each job's result, in order: on this thread alone, or shared with this thread's lanes."""
    lanes = min(current_lanes(), len(jobs))
    if lanes <= 1:
        return [job() for job in jobs]
    work = _Jobs(jobs, _own_nice())
    helpers = _helpers
    helpers.ensure(lanes - 1)
    for _ in range(lanes - 1):
        helpers.inbox.put(work)
    try:
        spent, ran = 0.0, 0
        while (claimed := work.claim()) is not None:
            i, job = claimed
            t0 = time.perf_counter()
            work.put(i, job())
            spent, ran = spent + time.perf_counter() - t0, ran + 1
        # Jobs a helper still holds: give it about one job's time (its core may be free and the job
        # nearly done), then do the job here rather than wait on a helper the agent has starved.
        patience = 2.0 * spent / ran if ran else 0.0
        for i in range(len(jobs)):
            if not work.done(i) and not work.wait(i, patience):
                work.put(i, jobs[i]())
    finally:  # returned or raised: the encode is over, helpers take none of its jobs from now on
        results = work.close()
    return results
