"""How many threads batch scoring uses (``--threads``, ``GROUNDLENS_THREADS``), and why the default is one.

A scoring thread is an encode lane (:mod:`groundlens_core.embedding.lanes`) running torch with one
thread, not one of torch's own intra-op threads. Why: torch's threads (one per core by default)
split every kernel and wait for each other at a barrier, spinning; on a machine where other
processes want the same cores the run collapses: on this project's 2-core machine at a load average
of about 5, ``evaluate_batch`` on 100 rows took 71 s of wall time with torch's two threads against
5 s with one. Lanes split a chunk's forward passes by whole texts and the scoring thread redoes
what a starved lane holds, so more threads never make a run much slower than one, and the scores
are the same bits. One thread is the default (scale out with processes: ``--engine ray`` runs one
model per worker); raise it on a machine whose cores are yours.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from groundlens_core import settings
from groundlens_core.embedding.first_load import import_torch
from groundlens_core.errors import GroundlensInputError

DEFAULT_THREADS = 1


def default_threads() -> int:
    """``GROUNDLENS_THREADS``, else one (a bad value: one warning, then one thread; the scores are the
    same bits whatever the thread count, so running on is safe)."""
    return settings.whole_number("GROUNDLENS_THREADS", DEFAULT_THREADS)


def use_threads(threads: int | None = None) -> int:
    """The number of scoring threads (``None``: :func:`default_threads`), checked; torch runs with one
    intra-op thread on this thread. Score inside ``encode_lanes(n)`` to use them."""
    n = default_threads() if threads is None else int(threads)
    if n < 1:
        raise GroundlensInputError(f"threads must be at least 1, got {n}")
    torch = import_torch()
    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)
    return n


@contextlib.contextmanager
def scoring_threads(threads: int | None) -> Iterator[None]:
    """Score inside the block with ``threads`` scoring threads (``None``: 1): encode lanes, and with
    more than one, torch on one intra-op thread on this thread for the block (restored after).

    Why here and not only in :func:`use_threads`: a Python caller of ``run_evaluate`` (or a Ray
    worker calling from another thread than ``__init__``'s) has torch's default of one thread per
    core on its thread; lanes on top of that would oversubscribe the cores they are meant to share.
    """
    from groundlens_core.embedding.lanes import encode_lanes, usable_cpus

    # never more lanes than CPUs this process may use (a container's quota included): each lane is
    # a thread that computes, so extra ones only contend (--threads 64 on 2 cores: 2 lanes)
    n = 1 if threads is None else max(1, min(int(threads), usable_cpus()))
    before = None
    if n > 1:
        torch = import_torch()
        before = torch.get_num_threads()
        if before != 1:
            torch.set_num_threads(1)
    try:
        with encode_lanes(n):
            yield
    finally:
        if before is not None and before != 1:
            import_torch().set_num_threads(before)
