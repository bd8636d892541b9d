"""The verifier's cross-encoder on ONNX Runtime: the packaged model's embeddings and first layers.

The shipped weights hold only what training changed: the first :data:`LAYERS` encoder layers of the
packaged all-MiniLM-L6-v2, fine-tuned on (question + sentence, context) pairs, and a linear read-out of
the [CLS] row. The embeddings were frozen while training, so they are read from the packaged model,
never copied. The graph is written from these weights (:func:`groundlens_core.embedding.onnx_graph.build_model`)
when the verifier loads, in memory, and each unit runs alone on one intra-op thread: a probability is
a function of its unit alone, run after run and whatever the batch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np

LAYERS = 3
READOUT = ("readout.weight", "readout.bias")


def layer_names(layers: int = LAYERS) -> list[str]:
    """The model's own names of the tensors of its first ``layers`` encoder layers."""
    parts = (
        "attention.self.query",
        "attention.self.key",
        "attention.self.value",
        "attention.output.dense",
        "attention.output.LayerNorm",
        "intermediate.dense",
        "output.dense",
        "output.LayerNorm",
    )
    return [f"encoder.layer.{i}.{p}.{k}" for i in range(layers) for p in parts for k in ("weight", "bias")]


class OnnxCross:
    """The cross-encoder: ``logit(ids, type_ids)``, higher = the sentence is supported."""

    def __init__(self, tensors: Mapping[str, np.ndarray], model_dir: Path, layers: int = LAYERS):
        import onnxruntime as ort

        from groundlens_core.embedding.onnx_backend import one_thread_session
        from groundlens_core.embedding.onnx_graph import build_model

        missing = [k for k in [*layer_names(layers), *READOUT] if k not in tensors]
        if missing:
            raise ValueError(f"verifier weights lack {missing[0]} (and {len(missing) - 1} more)")
        replace = {k: np.asarray(tensors[k], dtype=np.float32) for k in layer_names(layers)}
        readout = (np.asarray(tensors[READOUT[0]], np.float32), np.asarray(tensors[READOUT[1]], np.float32))
        model = build_model(model_dir, layers=layers, replace=replace, readout=readout)
        self._session = one_thread_session(ort, model.SerializeToString())

    def logit(self, ids: np.ndarray, type_ids: np.ndarray) -> float:
        out = self._session.run(
            None, {"input_ids": np.asarray(ids, dtype=np.int64), "token_type_ids": np.asarray(type_ids, dtype=np.int64)}
        )[0]
        return float(out[0])
