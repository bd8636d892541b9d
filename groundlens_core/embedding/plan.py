"""The embedding plan shared by scoring and calibration: phi of texts of any length.

A text that fits the model window is embedded as it is; a longer one is split into pieces that fit
and phi is the normalised mean of the pieces (never a silent truncation). Its own module so that
``scoring`` and ``calibration`` both use it without importing each other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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


Span = tuple[int, int]


def embed_with_spans(
    emb: Any, requests: Mapping[str, Sequence[Span]]
) -> tuple[dict[str, np.ndarray], dict[tuple[str, int, int], np.ndarray]]:
    """phi of each text and of each character span of it (float64 rows), in one encode.

    A text that fits the model window is run once and its spans (sentences) are pooled from that
    pass (``encode_spans``): aligning sentences costs no model work beyond the texts. A longer text
    is phi of its pieces (:func:`embed_many`), and its spans are embedded as texts of their own.
    """
    fits = {t: list(sp) for t, sp in requests.items() if emb.count_tokens(t) <= emb.max_tokens}
    long = {t: list(sp) for t, sp in requests.items() if t not in fits}
    vecs: dict[str, np.ndarray] = {}
    span_vecs: dict[tuple[str, int, int], np.ndarray] = {}
    if fits:
        texts = list(fits)
        if hasattr(emb, "encode_spans"):
            rows, parts = emb.encode_spans(texts, [fits[t] for t in texts])
        else:  # an embedder without it: each span's characters as a text of its own
            rows = emb.encode(texts)
            parts = [emb.encode([t[a:b] for a, b in fits[t]]) if fits[t] else np.zeros((0, emb.dim)) for t in texts]
        for t, row, part in zip(texts, np.asarray(rows, dtype=np.float64), parts):
            vecs[t] = row
            span_vecs.update(((t, a, b), r) for (a, b), r in zip(fits[t], np.asarray(part, dtype=np.float64)))
    if long:
        texts = list(long)
        subs = [(t, a, b) for t in texts for a, b in long[t]]
        rows = embed_many(emb, texts + [t[a:b] for t, a, b in subs])
        vecs.update(zip(texts, rows[: len(texts)]))
        span_vecs.update(zip(subs, rows[len(texts) :]))
    return vecs, span_vecs
