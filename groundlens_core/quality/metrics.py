"""AUROC and the simple baselines every quality figure is printed next to."""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np

_WORD = re.compile(r"\w+", re.UNICODE)


def auroc(scores: Sequence[float], labels: Sequence[int]) -> float:
    """Area under the ROC curve for "label 1 scores higher" (Mann-Whitney U, ties count half)."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=np.int64)
    pos, neg = s[y == 1], s[y == 0]
    if len(pos) == 0 or len(neg) == 0:
        return float("nan")
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s), dtype=np.float64)
    sorted_s = s[order]
    i = 0
    while i < len(s):  # average ranks over ties
        j = i
        while j + 1 < len(s) and sorted_s[j + 1] == sorted_s[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    u = ranks[y == 1].sum() - len(pos) * (len(pos) + 1) / 2.0
    return float(u / (len(pos) * len(neg)))


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def length_baseline(response: str) -> float:
    """Shorter response = more likely grounded (the known trait of HaluEval QA)."""
    return -float(len(response))


def overlap_baseline(response: str, context: str) -> float:
    """Share of the response's words that occur in the context."""
    r = words(response)
    if not r:
        return 0.0
    c = set(words(context))
    return sum(w in c for w in r) / len(r)
