"""Candidate (c) of the verifier: a few named signals per response sentence, for a model fitted on them.

Each response sentence (the evidence's sentences) is described by signals the scoring pass already
has, plus three read from the model's word-piece states:

- ``support``: share of the sentence's content words the context contains (the evidence's);
- ``similarity``: cosine of the sentence and its best context passage (the evidence's);
- ``aligned``: mean, over the sentence's content word pieces, of the best cosine to any context word
  piece (last hidden states of the packaged MiniLM: a soft overlap that rewording keeps);
- ``unaligned``: share of those word pieces whose best cosine is below :data:`ALIGN_LOW`;
- ``copied``: share of those word pieces whose id occurs in the context;
- ``failed_<kind>``: failed findings (contradicted or unsupported facts) inside the sentence, by
  kind: values (amounts, dates, durations ...), names, polarity, conditions, added claims;
- ``checked``: findings the context supports (derived values included) inside the sentence;
- ``length``: log of the sentence's content words;
- ``sgi``: SGI normalised (0 without a question) and ``asked``: 1 with a question.

``verifier_candidates.py`` fits a logistic regression and gradient-boosted trees on them, leaving one
whole file out; neither ranks better than the rules (docs/verifier.md), so nothing ships from here.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np

from groundlens_core.embedding.tokens import token_range
from groundlens_core.scoring.results import Evidence
from groundlens_core.verifier.units import StateSource, TextStates, _pieces_of

ALIGN_LOW = 0.6  # a word piece whose best cosine to the context is below this is "unaligned"

VALUE_KINDS = ("value", "name", "polarity", "condition", "claim")

NAMES = (
    "support",
    "similarity",
    "aligned",
    "unaligned",
    "copied",
    *(f"failed_{k}" for k in VALUE_KINDS),
    "checked",
    "length",
    "sgi",
    "asked",
)

_STOP = frozenset(
    """a an the of to in on at by for with from and or but is are was were be been being it its this that these
    those as which who whom whose what when where why how there their they them he she his her him we our us you
    your i me my not no do does did has have had will would can could should may might must shall than then so such
    also into about over under up down out if all any some each more most other one only very just s t""".split()
)


@lru_cache(maxsize=2)
def content_mask(model_dir: str) -> np.ndarray:
    """``mask[id]``: the word piece carries content (a letter or digit, not a stop word or a special token)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json"))
    mask = np.zeros(tok.get_vocab_size(), dtype=bool)
    for i in range(len(mask)):
        w = tok.id_to_token(i) or ""
        base = w[2:] if w.startswith("##") else w
        mask[i] = bool(re.search(r"[a-z0-9]", base)) and base not in _STOP and not w.startswith("[")
    return mask


def _normalised(states: np.ndarray) -> np.ndarray:
    s = states.astype(np.float32)
    return s / np.maximum(np.linalg.norm(s, axis=1, keepdims=True), 1e-9)


def _passes(source: StateSource, text: str) -> list[tuple[int, TextStates]]:
    plan = _pieces_of(source, text)
    return list(zip([o for _, o in plan], source.text_states([p for p, _ in plan])))


def alignment(
    source: StateSource, mask: np.ndarray, response: str, context: Sequence[str], spans: Sequence[tuple[int, int]]
) -> list[tuple[float, float, float]]:
    """``(aligned, unaligned, copied)`` of each character span of ``response`` (see the module
    docstring); ``(1, 0, 1)`` for a span without content word pieces."""
    ctx_ids: list[np.ndarray] = []
    ctx_states: list[np.ndarray] = []
    for text in context:
        for _, ts in _passes(source, text):
            ctx_ids.append(ts.ids[1:-1])
            ctx_states.append(_normalised(ts.states[1:-1]))
    cids = np.concatenate(ctx_ids) if ctx_ids else np.zeros(0, dtype=np.int64)
    cst = np.vstack(ctx_states) if ctx_states else np.zeros((0, 1), dtype=np.float32)
    known = set(cids.tolist())
    passes = _passes(source, response)
    out: list[tuple[float, float, float]] = []
    for a, b in spans:
        ids: list[np.ndarray] = []
        rows: list[np.ndarray] = []
        for offset, ts in passes:
            lo, hi = token_range(list(ts.offsets), max(0, a - offset), b - offset)
            if hi <= lo:
                continue
            keep = mask[ts.ids[lo:hi]]
            ids.append(ts.ids[lo:hi][keep])
            rows.append(ts.states[lo:hi][keep])
        sid = np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64)
        if len(sid) == 0 or len(cids) == 0:
            out.append((1.0, 0.0, 1.0) if len(sid) == 0 else (0.0, 1.0, 0.0))
            continue
        best = (_normalised(np.vstack(rows)) @ cst.T).max(axis=1)
        out.append(
            (float(best.mean()), float((best < ALIGN_LOW).mean()), float(np.mean([i in known for i in sid.tolist()])))
        )
    return out


def _kind(kind: str) -> str:
    return kind if kind in VALUE_KINDS else ("name" if kind == "name" else "value")


def sentence_features(ev: Evidence, aligned: Sequence[tuple[float, float, float]], sgi: float | None) -> np.ndarray:
    """The ``[sentences, len(NAMES)]`` signals of each of the evidence's sentences."""
    rows = []
    for i, s in enumerate(ev.sentences):
        failed = dict.fromkeys(VALUE_KINDS, 0)
        checked = 0
        for f in ev.facts:
            if f.sentence != i:
                continue
            if f.failed:
                failed[_kind(f.kind)] += 1
            elif f.status == "supported":
                checked += 1
        rows.append(
            [
                s.support,
                s.similarity,
                *aligned[i],
                *(min(3, failed[k]) for k in VALUE_KINDS),
                min(3, checked),
                math.log1p(s.content_tokens),
                sgi if sgi is not None else 0.0,
                1.0 if sgi is not None else 0.0,
            ]
        )
    return np.asarray(rows, dtype=np.float64).reshape(-1, len(NAMES))
