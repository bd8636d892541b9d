"""The first import of torch and the first model load, made safe across ``os.fork()``.

Pre-fork servers (gunicorn, uWSGI, Celery's prefork pool) fork soon after start-up, often while a
tracer's background thread is still importing torch or loading the model. A child forked then
inherits the half-done state for good: ``torch`` sits in ``sys.modules`` partly initialised (every
step fails with "partially initialized module 'torch' has no attribute 'Tensor'"), or a lock the
loading thread held is held forever (the child's first load hangs). Neither can be repaired in the
child: torch's C extension cannot be imported a second time.

So these steps run under one lock that ``fork()`` itself takes first (``os.register_at_fork``): a
fork waits for an import or load in progress to finish (seconds, once per process), and the child
starts with either none of it or all of it.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import threading
import weakref
from collections.abc import Iterator
from types import ModuleType
from typing import Any

#: held while torch is imported and while a model loads (re-entrant: a load imports torch)
_LOCK = threading.RLock()
_OWNERS: weakref.WeakSet[Any] = weakref.WeakSet()  # objects whose ``_lock`` a forked child renews (own_lock)


@contextlib.contextmanager
def loading() -> Iterator[None]:
    """Hold the load lock for the block: a ``fork()`` meanwhile waits until the block is done."""
    with _LOCK:
        yield


def _ready(name: str) -> ModuleType | None:
    """``sys.modules[name]`` when it is fully imported, else None."""
    module = sys.modules.get(name)
    if module is None or getattr(getattr(module, "__spec__", None), "_initializing", False):
        return None
    return module


def import_module(name: str) -> ModuleType:
    """``importlib.import_module(name)`` under the load lock (no lock once it is fully imported)."""
    module = _ready(name)
    if module is not None:
        return module
    with _LOCK:
        return importlib.import_module(name)


def import_torch() -> ModuleType:
    """``import torch`` under the load lock."""
    return import_module("torch")


def own_lock(owner: Any) -> threading.Lock:
    """A lock for ``owner._lock`` that a forked child replaces with a fresh one.

    For the embedders' locks, held while they encode: a fork then (from any thread, at any moment)
    left the lock held for good in the child, whose first encode hung. What they guard is whole
    again in the child (the weights are read-only; a cache update cut short only leaves the cache
    one entry over its size), so a fresh lock is all the child needs."""
    _OWNERS.add(owner)
    return threading.Lock()


def before_fork() -> None:
    """Wait for a load in progress and hold the lock across ``fork()`` (a fork hook; other modules'
    hooks that hold their own locks across a fork call it first, so they do not hold those while
    waiting here). Each call is paired with one :func:`after_fork`."""
    _LOCK.acquire()


def after_fork() -> None:
    """Let go of the lock taken by :func:`before_fork`; the thread that forked holds it, in the child
    as in the parent."""
    _LOCK.release()


def _renew_locks_in_child() -> None:
    for owner in list(_OWNERS):
        owner._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=before_fork, after_in_parent=after_fork, after_in_child=after_fork)
    os.register_at_fork(after_in_child=_renew_locks_in_child)
