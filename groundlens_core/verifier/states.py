"""Word-piece states for the verifier, from the packaged model on ONNX Runtime (fp32).

The verifier reads the last hidden states of the packaged MiniLM. They come from the ONNX fp32
graph whatever embedding backend scores SGI, so a verifier probability has the same bits under every
backend. With the default backend (``onnx-fp32``) the embedding pass keeps the states it has just
computed (:meth:`OnnxMiniLMEmbedder.recent_states`) and the verifier reads them from there: the
texts are not run twice.
"""

from __future__ import annotations

import threading
from typing import Any, Sequence

import numpy as np

from groundlens_core.embedding.lanes import run_jobs
from groundlens_core.verifier.units import TextStates

_shared: Any = None
_lock = threading.Lock()


def _onnx_fp32(embedder: Any) -> Any:
    """The ONNX fp32 embedder behind ``embedder`` (its own when it is one), else a process-wide one
    loaded from the packaged model."""
    inner = getattr(embedder, "inner", embedder)
    if getattr(inner, "backend", None) == "onnx-fp32" and hasattr(inner, "token_states"):
        return inner
    global _shared
    with _lock:
        if _shared is None:
            from groundlens_core.embedding import get_embedder

            _shared = get_embedder(backend="onnx-fp32").inner
        return _shared


class ModelStates:
    """A :class:`~groundlens_core.verifier.units.StateSource` over the packaged model."""

    def __init__(self, embedder: Any = None):
        self._onnx = _onnx_fp32(embedder)
        self.max_tokens = int(self._onnx.max_tokens)

    def split(self, text: str, max_tokens: int | None = None) -> list[str]:
        return self._onnx.split(text, max_tokens)

    def text_states(self, texts: Sequence[str]) -> list[TextStates]:
        texts = list(texts)
        if not texts:
            return []
        onnx = self._onnx
        encs = onnx._ids(texts)
        kept = onnx.recent_states(texts) if hasattr(onnx, "recent_states") else [None] * len(texts)

        def job(i: int):
            def run() -> np.ndarray:
                got = kept[i]
                return got if got is not None else onnx.token_states(encs[i].ids)

            return run

        states = run_jobs([job(i) for i in range(len(texts))])
        return [
            TextStates(ids=np.asarray(e.ids, dtype=np.int64), offsets=tuple(e.offsets), states=s)
            for e, s in zip(encs, states)
        ]
