"""The verifier's head: one transformer layer over a unit's word-piece states, in numpy.

The same arithmetic as the training module (:mod:`groundlens_core.verifier.train`), written out so
that scoring needs no torch and every backend gets the same bits from the same states: float64
throughout, a fixed order of operations, the tanh form of GELU.

Shape: the unit's states (the packaged model's last hidden states, reused, never copied), plus a
learned vector for the segment (question, sentence, context) and for whether the word piece occurs
on the other side, then a LayerNorm; a learned [CLS] row in front; one BERT layer (12 heads,
initialised from the packaged model's last layer); a linear read-out of the [CLS] row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import numpy as np

HEADS = 12
LN_EPS = 1e-12
#: the tensors a head is made of, with their shapes for a model of width d (FFN width f)
PARAMETERS = (
    "cls",  # [d]
    "segment",  # [4, d]
    "match",  # [3, d]
    "ln0.weight",
    "ln0.bias",  # [d]
    "attn.q.weight",
    "attn.q.bias",
    "attn.k.weight",
    "attn.k.bias",
    "attn.v.weight",
    "attn.v.bias",  # [d, d] (out, in), [d]
    "attn.out.weight",
    "attn.out.bias",
    "ln1.weight",
    "ln1.bias",
    "ffn.in.weight",
    "ffn.in.bias",  # [f, d], [f]
    "ffn.out.weight",
    "ffn.out.bias",  # [d, f], [d]
    "ln2.weight",
    "ln2.bias",
    "readout.weight",  # [d]
    "readout.bias",  # [1]
)


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + LN_EPS) * w + b


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


@dataclass(frozen=True)
class Head:
    """The head's weights (float64 copies of the shipped float16 tensors)."""

    p: Mapping[str, np.ndarray]

    @classmethod
    def from_tensors(cls, tensors: Mapping[str, np.ndarray]) -> Head:
        missing = [k for k in PARAMETERS if k not in tensors]
        if missing:
            raise ValueError(f"verifier weights lack {', '.join(missing)}")
        return cls({k: np.asarray(tensors[k], dtype=np.float64) for k in PARAMETERS})

    def logit(self, states: np.ndarray, segments: np.ndarray, matches: np.ndarray) -> float:
        """The head's logit for one unit (higher = the sentence is supported)."""
        p = self.p
        x = states.astype(np.float64) + p["segment"][segments] + p["match"][matches]
        x = np.concatenate([p["cls"][None, :], x])
        x = _layer_norm(x, p["ln0.weight"], p["ln0.bias"])
        n, d = x.shape
        hd = d // HEADS

        def proj(name: str) -> np.ndarray:
            return (x @ p[f"attn.{name}.weight"].T + p[f"attn.{name}.bias"]).reshape(n, HEADS, hd).transpose(1, 0, 2)

        q, k, v = proj("q"), proj("k"), proj("v")
        att = q @ k.transpose(0, 2, 1) / math.sqrt(hd)
        att = np.exp(att - att.max(axis=-1, keepdims=True))
        att = att / att.sum(axis=-1, keepdims=True)
        ctx = (att @ v).transpose(1, 0, 2).reshape(n, d)
        x = _layer_norm(x + ctx @ p["attn.out.weight"].T + p["attn.out.bias"], p["ln1.weight"], p["ln1.bias"])
        h = _gelu(x @ p["ffn.in.weight"].T + p["ffn.in.bias"])
        x = _layer_norm(x + h @ p["ffn.out.weight"].T + p["ffn.out.bias"], p["ln2.weight"], p["ln2.bias"])
        return float(x[0] @ p["readout.weight"] + p["readout.bias"][0])
