"""Sentence embedders: model resolution, the shared per-process instance and a bounded cache."""

from __future__ import annotations

import os
import threading

from groundlens_core.embedding.base import Embedder
from groundlens_core.embedding.cache import CachedEmbedder
from groundlens_core.embedding.resolve import DEFAULT_MODEL_ID, resolve_model_path

__all__ = ["Embedder", "CachedEmbedder", "get_embedder", "DEFAULT_MODEL_ID", "BACKENDS", "resolve_model_path"]

#: ``packed-torch`` is the default: exact, batch invariant and light to import. ``sentence-transformers``
#: is the reference it is tested against. ``packed-bf16`` is an opt-in for CPUs with native bf16
#: (AVX-512 BF16 / AMX): the packed pass with bf16 dense layers, ~2-3x faster on agent-sized steps,
#: deterministic, close to but not the same bits as fp32 (README: "Measured speed").
BACKENDS = ("packed-torch", "sentence-transformers", "packed-bf16")

_lock = threading.Lock()
_shared: dict[tuple[str, str], CachedEmbedder] = {}


def get_embedder(model: str | os.PathLike[str] | None = None, backend: str | None = None) -> CachedEmbedder:
    """The process-wide embedder for ``model`` (see :func:`resolve_model_path`), loaded once.

    Thread-safe; the returned object wraps the backend in a bounded LRU cache, so a question or
    context repeated across an agent run or a batch is embedded once.
    """
    backend = backend or os.environ.get("GROUNDLENS_BACKEND") or BACKENDS[0]
    if backend not in BACKENDS:
        raise ValueError(f"unknown embedding backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    path, model_id = resolve_model_path(model)
    key = (str(path), backend)
    with _lock:
        if key not in _shared:
            _shared[key] = CachedEmbedder(_load(backend, path, model_id))
        return _shared[key]


def _load(backend: str, path, model_id: str) -> Embedder:
    if backend in ("packed-torch", "packed-bf16"):
        from groundlens_core.embedding.packed import PackedMiniLMEmbedder

        return PackedMiniLMEmbedder(path, model_id, precision="bf16" if backend == "packed-bf16" else "fp32")
    from groundlens_core.embedding.st_backend import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder(path, model_id)
