"""The embedding plan shared by scoring and calibration: phi of texts of any length.

A text that fits the model window is embedded as it is; a longer one is split into pieces that fit
and phi is the normalised mean of the pieces (never a silent truncation). Its own module so that
``scoring`` and ``calibration`` both use it without importing each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def get_default_embedder() -> Any:
    """The process-wide bundled embedder (loaded on first use)."""
    from groundlens_core.embedding import get_embedder

    return get_embedder()


def text_pieces(emb: Any, text: str) -> list[str]:
    """``[text]`` when it fits the model window, else the pieces it splits into."""
    if emb.count_tokens(text) <= emb.max_tokens:
        return [text]
    return emb.split(text) or [text]


def unit(v: np.ndarray) -> np.ndarray:
    n = float(np.linalg.norm(v))
    return v / n if n > 0 else v


def embed_many(emb: Any, texts: Sequence[str]) -> np.ndarray:
    """phi for each text (float64 rows): long texts are the normalised mean of their pieces."""
    plans = [text_pieces(emb, t) for t in texts]
    flat = [p for plan in plans for p in plan]
    vecs = emb.encode(flat).astype(np.float64) if flat else np.zeros((0, emb.dim))
    out = np.zeros((len(texts), emb.dim), dtype=np.float64)
    k = 0
    for i, plan in enumerate(plans):
        block = vecs[k : k + len(plan)]
        out[i] = block[0] if len(plan) == 1 else unit(block.mean(axis=0))
        k += len(plan)
    return out
