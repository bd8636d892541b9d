"""Sentence embedders: model resolution, the shared per-process instance and a bounded cache."""

from __future__ import annotations

import os

from groundlens_core import settings
from groundlens_core.embedding import first_load
from groundlens_core.embedding.base import Embedder
from groundlens_core.embedding.cache import CachedEmbedder
from groundlens_core.embedding.resolve import DEFAULT_MODEL_ID, resolve_model_path
from groundlens_core.errors import GroundlensInputError

__all__ = [
    "Embedder",
    "CachedEmbedder",
    "get_embedder",
    "default_backend",
    "resolve_backend",
    "DEFAULT_MODEL_ID",
    "BACKENDS",
    "resolve_model_path",
]

#: ``onnx-fp32``, the default: the model on ONNX Runtime, one text per run, fp32 (within ~2e-7 of
#: ``packed-torch``; no band changes on the dev sets), faster than the packed torch pass. ``packed-torch``:
#: our exact, batch-invariant fp32 forward (``sentence-transformers`` is the reference it is tested
#: against; the default where ONNX Runtime is missing). ``packed-bf16``: the same packed pass with bf16
#: dense layers, opt-in on CPUs with native bf16 (AVX-512 BF16 / AMX): faster there, deterministic,
#: but a few scores move enough to change band (docs: "Determinism"). ``onnx-int8``: ONNX Runtime's
#: dynamic int8 quantisation, faster still and further from fp32 (opt-in).
BACKENDS = ("packed-torch", "sentence-transformers", "packed-bf16", "onnx-fp32", "onnx-int8")


def default_backend() -> str:
    """``GROUNDLENS_BACKEND`` if set, else ``onnx-fp32`` where ONNX Runtime is installed (it is a
    dependency), else ``packed-torch``.

    Why the same default on every CPU: a row should land in the same band on the laptop, the CI
    runner and the server (ONNX Runtime's kernels follow the CPU's instruction set, so only the last
    bits may differ), and the measured figures in the docs should be the ones a user gets.
    ``onnx-fp32`` is the fastest pass that keeps fp32's bands on the dev sets on any CPU;
    ``packed-bf16`` is faster where the CPU has native bf16 but changes a few bands, so it
    is a choice to make, not a default. A job spread over machines (Ray) still resolves the backend
    once, on the driver, for all workers.
    """
    env = settings.choice("GROUNDLENS_BACKEND", BACKENDS, "embedding backend")
    if env:
        return env
    onnx_backend = first_load.import_module("groundlens_core.embedding.onnx_backend")
    return "onnx-fp32" if onnx_backend.onnx_available() else "packed-torch"


def resolve_backend(backend: str | None = None) -> str:
    """``backend``, or :func:`default_backend` when None; an unknown name is a one-line error."""
    backend = backend or default_backend()
    if backend not in BACKENDS:
        raise GroundlensInputError(f"unknown embedding backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    return backend


_shared: dict[tuple[str, str], CachedEmbedder] = {}


def get_embedder(model: str | os.PathLike[str] | None = None, backend: str | None = None) -> CachedEmbedder:
    """The process-wide embedder for ``model`` (see :func:`resolve_model_path`), loaded once.

    Thread-safe and fork-safe (a ``fork()`` waits for a load in progress: see
    :mod:`~groundlens_core.embedding.first_load`); the returned object wraps the backend in a bounded
    LRU cache, so a question or
    context repeated across an agent run or a batch is embedded once.
    """
    with first_load.loading():  # the model's package is imported here on first use too
        backend = resolve_backend(backend)
        path, model_id = resolve_model_path(model)
        key = (str(path), backend)
        if key not in _shared:
            with first_load.heap_paused():  # a first load: see first_load
                _shared[key] = CachedEmbedder(_load(backend, path, model_id))
        return _shared[key]


def _load(backend: str, path, model_id: str) -> Embedder:
    if backend in ("onnx-fp32", "onnx-int8"):
        from groundlens_core.embedding.onnx_backend import OnnxMiniLMEmbedder

        return OnnxMiniLMEmbedder(path, model_id, precision=backend.removeprefix("onnx-"))
    if backend in ("packed-torch", "packed-bf16"):
        from groundlens_core.embedding.packed import PackedMiniLMEmbedder

        return PackedMiniLMEmbedder(path, model_id, precision="bf16" if backend == "packed-bf16" else "fp32")
    from groundlens_core.embedding.st_backend import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder(path, model_id)
