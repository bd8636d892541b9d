"""How many torch threads scoring uses, and why the default is one.

torch's default (one thread per core) spins its worker threads at every parallel region. On a
machine where other processes want the same cores, the spinning threads fight them and the run
collapses: on this project's 2-core machine at a load average of about 5, ``evaluate_batch`` on 100
rows took 71 s of wall time with torch's default two threads against 5 s with one. One thread per
process is the default; scale out with processes (``--engine ray`` runs one model per worker), or
raise ``--threads`` / ``GROUNDLENS_THREADS`` on a machine you have to yourself.
"""

from __future__ import annotations

import os

from groundlens_core.errors import GroundlensInputError

DEFAULT_THREADS = 1


def default_threads() -> int:
    value = os.environ.get("GROUNDLENS_THREADS", "").strip()
    if not value:
        return DEFAULT_THREADS
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise GroundlensInputError(f"GROUNDLENS_THREADS must be a whole number of at least 1, got {value!r}")
    return n


def use_threads(threads: int | None = None) -> int:
    """Set torch's intra-op threads for this thread (``None``: :func:`default_threads`); returns the number."""
    n = default_threads() if threads is None else int(threads)
    if n < 1:
        raise GroundlensInputError(f"threads must be at least 1, got {n}")
    import torch

    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n
