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

They usually run on the recorder's worker while the agent's thread goes on working, and they must
not take the GIL from it for long. Two parts of a first import hold it for hundreds of milliseconds
at a time: the dynamic loader mapping torch's shared libraries (half a gigabyte of them, loaded
while the import holds the GIL), and the garbage collector's full passes over the hundred thousand
objects the import creates. So torch's libraries are loaded first by a ``dlopen`` called through
ctypes, which releases the GIL (the import then finds them loaded), and the collector is paused
during a first import or load and its objects are then moved to the collector's permanent
generation (``gc.freeze()``), where no later collection, on any thread, walks them again.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib
import importlib.machinery
import importlib.util
import logging
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
_PAUSED = [0]  # nesting depth of heap_paused() (under _LOCK)
log = logging.getLogger("groundlens.embedding")


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


@contextlib.contextmanager
def heap_paused() -> Iterator[None]:
    """Hold the load lock with the garbage collector paused, then freeze what the block created.

    For a first import or model load only (see the module docstring): ``gc.freeze()`` moves every
    object alive at the end of the block, the program's own included, to the permanent generation,
    so a cycle among them that becomes garbage later is not collected. The collector's state before
    the block (a program may run with it disabled) is restored after it."""
    with _LOCK:
        outer = _PAUSED[0] == 0
        enabled = gc.isenabled()
        _PAUSED[0] += 1
        if outer:
            gc.disable()
        try:
            yield
        finally:
            _PAUSED[0] -= 1
            if outer:
                gc.freeze()
                if enabled:
                    gc.enable()


#: the modules whose import imports torch (the ONNX Runtime backends never do)
_IMPORT_TORCH = frozenset(
    ("torch", "groundlens_core.embedding.packed", "groundlens_core.embedding.st_backend", "sentence_transformers")
)


def import_module(name: str) -> ModuleType:
    """``importlib.import_module(name)`` under the load lock (no lock once it is fully imported); a
    first import runs with the collector paused (:func:`heap_paused`)."""
    module = _ready(name)
    if module is not None:
        return module
    with heap_paused():
        if name in _IMPORT_TORCH:
            preload_torch_libraries()
        return importlib.import_module(name)


def import_torch() -> ModuleType:
    """``import torch`` under the load lock."""
    return import_module("torch")


def preload_torch_libraries() -> None:
    """Load torch's shared libraries (Linux) without holding the GIL, before torch is imported.

    Python's import holds the GIL while the dynamic loader maps, relocates and initialises an
    extension's libraries, which for torch is the longest single pause of its import. ``dlopen``
    called through ctypes runs with the GIL released; the libraries are opened with the flags torch
    and the import would use (its global-dependencies library first, globally), so the import that
    follows finds them loaded and only runs the module's initialisation. Anything unexpected (no
    torch, another layout, ``TORCH_USE_RTLD_GLOBAL``) leaves it all to the import."""
    if not sys.platform.startswith("linux") or "torch" in sys.modules or os.environ.get("TORCH_USE_RTLD_GLOBAL"):
        return
    try:
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.origin is None:
            return
        root = os.path.dirname(spec.origin)
        dlopen = ctypes.CDLL(None).dlopen
        dlopen.restype = ctypes.c_void_p
        dlopen.argtypes = [ctypes.c_char_p, ctypes.c_int]
        libraries = (
            (os.path.join(root, "lib", "libtorch_global_deps.so"), os.RTLD_NOW | os.RTLD_GLOBAL),
            *((os.path.join(root, "_C" + s), sys.getdlopenflags()) for s in importlib.machinery.EXTENSION_SUFFIXES[:1]),
        )
        for path, flags in libraries:
            if not os.path.isfile(path) or not dlopen(os.fsencode(path), flags):
                return  # the import loads the rest and reports any problem itself
    except (OSError, AttributeError, ValueError, ImportError) as exc:
        log.debug("groundlens: torch's libraries are left to its import: %s", exc)


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
