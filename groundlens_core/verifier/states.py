"""Word-piece states for the verifier, from the packaged model on ONNX Runtime (fp32).

The verifier reads the last hidden states of the packaged MiniLM. They come from the ONNX fp32
graph whatever embedding backend scores SGI, so a verifier probability has the same bits under every
backend. With the default backend (``onnx-fp32``), once the verifier is on, the embedding pass keeps
the states of the last texts it ran (:meth:`OnnxMiniLMEmbedder.recent_states`) and the verifier
reads them from there: a single call's texts are not run twice. A text no longer among them (a large
batch, a context the embedding cache answered) is run again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from groundlens_core.embedding import first_load
from groundlens_core.embedding.lanes import run_jobs
from groundlens_core.verifier.units import TextStates


class _Shared:
    """The process-wide ONNX fp32 embedder of the packaged model; its lock is renewed in a forked child."""

    def __init__(self) -> None:
        self._lock = first_load.own_lock(self)
        self.onnx: Any = None


_shared = _Shared()


def _onnx_fp32(embedder: Any) -> Any:
    """The ONNX fp32 embedder behind ``embedder`` when it runs the packaged model, else a
    process-wide one loaded from the packaged model. It keeps the states of the texts it runs from
    now on, for the verifier to read (:meth:`OnnxMiniLMEmbedder.recent_states`)."""
    from groundlens_core.embedding.resolve import resolve_model_path

    inner = getattr(embedder, "inner", embedder)
    packaged = Path(resolve_model_path(None)[0])
    if (
        getattr(inner, "backend", None) == "onnx-fp32"
        and hasattr(inner, "token_states")
        and Path(getattr(inner, "_path", "")) == packaged
    ):
        inner.keep_states = True
        return inner
    with _shared._lock:
        if _shared.onnx is None:
            from groundlens_core.embedding import get_embedder

            _shared.onnx = get_embedder(backend="onnx-fp32").inner
        _shared.onnx.keep_states = True
        return _shared.onnx


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
