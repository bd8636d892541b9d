"""The items of a list that share the most weighted words with a query, found without comparing the
query with every item.

A response fact is judged by the context facts whose anchors share the most words with its own, and
a response clause by the context clause sharing the most stems. Comparing each response fact with
each context fact is quadratic: a long response against a long context ("Item i costs N dollars",
2,000 times) took minutes. Here each word lists the items that hold it (with their weight), once
per context. A word most items hold ("costs", "item") would still make every query touch every
item, so the words held by more than ``common`` items are scored together: the scores of a set of
common words are worked out once and reused by every query that holds that set, and only the rarer
words are added per query.

A score is the sum, over the shared words, of the query's weight times the item's. Sums are added in
another order than a plain loop would; with weights that are powers of two (anchors' nearness
weights: 1, 1/2, 1/4 ...) or whole numbers, every such sum is exact, so ties are the same.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Iterator, Mapping, Sequence

__all__ = ["WordIndex", "Top"]

#: a word held by more items than this is scored once per set of such words, not per query
COMMON = 32


@dataclass
class _Levels:
    """The scores of every item for one set of common words: ``score`` (items scoring above zero),
    the items of each score in ascending order, the scores from the highest."""

    score: dict[int, float]
    by_level: dict[float, list[int]]
    order: list[float]
    memo: dict[float, object] = field(default_factory=dict)  # what a caller derives from one level


@dataclass(frozen=True)
class Top:
    """The items of the best score for a query, in ascending order: ``touched`` (items a rare word of
    the query reached that score ``best``) merged with ``rest`` (items scoring ``best`` on the common
    words alone, less the touched ones). ``key`` names ``rest`` for a caller's cache."""

    best: float
    touched: tuple[int, ...]
    rest: Sequence[int]
    skip: frozenset[int]  # every item a rare word reached (not part of ``rest``)
    size: int
    key: tuple

    def __iter__(self) -> Iterator[int]:
        return heapq.merge(self.touched, (i for i in self.rest if i not in self.skip))

    def __len__(self) -> int:
        return self.size

    def first(self) -> int:
        return next(iter(self))


class WordIndex:
    """Items (weighted words each) indexed by word; :meth:`top` finds the best-scoring items for a query."""

    def __init__(self, items: Sequence[Mapping[str, float]], common: int = COMMON):
        self.n = len(items)
        self.common = common
        postings: dict[str, list[tuple[int, float]]] = {}
        for i, item in enumerate(items):
            for k, w in item.items():
                postings.setdefault(k, []).append((i, w))
        self._postings = postings
        self._levels: dict[tuple, _Levels] = {}

    def _levels_of(self, key: tuple[tuple[str, float], ...]) -> _Levels:
        levels = self._levels.get(key)
        if levels is None:
            score: dict[int, float] = {}
            for k, w in key:
                for i, v in self._postings[k]:
                    score[i] = score.get(i, 0.0) + w * v
            by_level: dict[float, list[int]] = {}
            for i in sorted(score):
                by_level.setdefault(score[i], []).append(i)
            if len(score) < self.n:
                by_level[0.0] = [i for i in range(self.n) if i not in score]
            levels = _Levels(score, by_level, sorted(by_level, reverse=True))
            self._levels[key] = levels
        return levels

    def levels_memo(self, top: Top) -> dict[float, object]:
        """A cache, kept with the index, for what a caller works out from ``top.rest`` (by ``top.key``)."""
        return self._levels[top.key[0]].memo

    def top(self, query: Mapping[str, float]) -> Top:
        """The items scoring highest against ``query`` (all of them when none shares a word). Needs items."""
        common = tuple((k, w) for k, w in query.items() if len(self._postings.get(k, ())) > self.common)
        levels = self._levels_of(common)
        extra: dict[int, float] = {}
        for k, w in query.items():
            posting = self._postings.get(k)
            if posting is None or len(posting) > self.common:
                continue
            for i, v in posting:
                extra[i] = extra.get(i, 0.0) + w * v
        totals = {i: levels.score.get(i, 0.0) + x for i, x in extra.items()}
        best_rest = None
        for level in levels.order:  # the best common-words score of an item no rare word reached
            members = levels.by_level[level]
            if len(members) > len(extra) or any(i not in extra for i in members):
                best_rest = level
                break
        best = max([*totals.values(), *([best_rest] if best_rest is not None else [])])
        touched = tuple(sorted(i for i, t in totals.items() if t == best))
        rest: Sequence[int] = levels.by_level[best] if best_rest == best else ()
        skipped = sum(1 for i in extra if levels.score.get(i, 0.0) == best) if rest else 0
        return Top(best, touched, rest, frozenset(extra), len(touched) + len(rest) - skipped, (common, best))
