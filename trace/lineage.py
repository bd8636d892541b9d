"""Cascade lineage: a later step whose context carries the output of an earlier flagged step.

In a multi-step agent an unsupported claim travels: a planner's invented fact becomes the next
step's context, and that step can look grounded against a context that already carries the error.
The rule: a step gets ``cascade_from = [origin step ids]`` when one of its context pieces contains
the whole response of an earlier *flagged* step of the same trace, or one of that response's
sentences (:func:`groundlens_core.sentences.split_sentences`), compared after collapsing whitespace
and case; sentences shorter than :data:`MIN_CHARS` characters are ignored (``Yes.`` proves nothing).
The later step's band is not changed: the mark is shown beside it, and reviewers see it right after
its origin (:func:`cascade_order`).

Cost: per trace, an index of the flagged responses' normalised sentences (built once per flagged
step); a new step costs one normalisation of each context piece and one substring search of it per
indexed sentence, and nothing at all while its trace has no flagged step (the common case).
``benchmarks/bench_lineage.py`` measures it against scoring.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Mapping, Sequence

from groundlens_core.sentences import split_sentences

__all__ = ["MIN_CHARS", "LineageIndex", "link_step", "annotate", "cascade_order", "claims"]

#: sentences (and whole responses) shorter than this, after normalising, never link two steps
MIN_CHARS = 24


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()


def claims(text: str) -> set[str]:
    """The normalised sentences of ``text`` long enough to count (and the whole text, if it is)."""
    out = {n for n in (_norm(span.text) for span in split_sentences(text)) if len(n) >= MIN_CHARS}
    whole = _norm(text)
    if len(whole) >= MIN_CHARS and not out:
        out.add(whole)
    return out


class LineageIndex:
    """The sentences of the flagged responses of one trace, and which step said each."""

    __slots__ = ("claims", "rank", "seen")

    def __init__(self) -> None:
        self.claims: dict[str, list[str]] = {}  # normalised sentence -> ids of the steps that said it
        self.rank: dict[str, int] = {}  # step id -> order indexed
        self.seen = 0  # steps of the trace looked at so far

    def add(self, step: Any) -> None:
        """Index ``step`` if it is flagged and its response is readable text."""
        if getattr(step, "triage", None) != "flagged" or not isinstance(step.response, str):
            return
        self.rank.setdefault(step.id, len(self.rank))
        for claim in claims(step.response):
            ids = self.claims.setdefault(claim, [])
            if step.id not in ids:
                ids.append(step.id)

    def origins(self, pieces: Iterable[Any], own_id: str) -> list[str]:
        """Ids of the indexed steps some piece carries a sentence of, in the order they were indexed."""
        if not self.claims:
            return []
        found: list[str] = []
        for piece in pieces:
            text = getattr(piece, "text", piece)
            if not isinstance(text, str):
                continue  # redacted or cut: nothing to compare
            hay = _norm(text)
            if len(hay) < MIN_CHARS:
                continue
            for claim, ids in self.claims.items():
                if claim in hay:
                    found.extend(i for i in ids if i != own_id and i not in found)
        return sorted(found, key=self.rank.__getitem__)


def _index_of(trace: Any) -> LineageIndex:
    """The trace's index, brought up to date with steps appended since it was last used."""
    index = getattr(trace, "_lineage", None)
    if not isinstance(index, LineageIndex):
        index = LineageIndex()
        trace._lineage = index
    steps = trace.steps
    for step in steps[index.seen :]:
        index.add(step)
    index.seen = len(steps)
    return index


def link_step(trace: Any, step: Any) -> Any:
    """``step`` with ``cascade_from`` set from the flagged steps already in ``trace`` (the same step
    when there is none). Call it before appending the step; it indexes the trace's earlier steps."""
    index = _index_of(trace)
    origins = index.origins(step.context, step.id) if step.context else []
    if origins and list(getattr(step, "cascade_from", ())) != origins:
        step = dataclasses.replace(step, cascade_from=tuple(origins))
    return step


def annotate(trace: Any) -> Any:
    """Set ``cascade_from`` on every step of a trace built or loaded whole (steps in trace order)."""
    index = LineageIndex()
    out = []
    for step in trace.steps:
        origins = index.origins(step.context, step.id) if step.context else []
        if tuple(origins) != tuple(getattr(step, "cascade_from", ())):
            step = dataclasses.replace(step, cascade_from=tuple(origins))
        out.append(step)
        index.add(step)
    trace.steps[:] = out
    index.seen = len(out)
    trace._lineage = index
    return trace


def cascade_order(ordered: Sequence[Any], key: Any = None, origins_of: Any = None) -> list[Any]:
    """``ordered`` (riskiest first) with each cascade step moved right after its origin (the origin
    ranked first, when it has several); cascade steps of one origin keep their relative order, and
    a chain (a cascade step that is flagged and an origin itself) nests. ``key(step)`` names a step
    (default its id; across traces a ``(trace, id)`` pair) and ``origins_of(step)`` the names of its
    origins (default its ``cascade_from``); a step whose origins are not in ``ordered`` stays put."""
    name = key or (lambda s: s.id)
    pos = {name(s): k for k, s in enumerate(ordered)}

    def origin_keys(s: Any) -> list[Any]:
        if origins_of is not None:
            return list(origins_of(s))
        return list(getattr(s, "cascade_from", ()) or ())

    children: dict[Any, list[Any]] = {}
    attached = set()
    for s in ordered:
        origins = [o for o in origin_keys(s) if o in pos and o != name(s)]
        if origins:
            first = min(origins, key=pos.__getitem__)
            children.setdefault(first, []).append(s)
            attached.add(name(s))
    out: list[Any] = []
    placed: set[Any] = set()

    def emit(s: Any) -> None:
        k = name(s)
        if k in placed:
            return
        placed.add(k)
        out.append(s)
        for c in children.get(k, ()):
            emit(c)

    for s in ordered:
        if name(s) not in attached:
            emit(s)
    for s in ordered:  # a cycle (hand-made data) leaves steps unplaced: keep them, in order
        emit(s)
    return out


def otel_links(step: Any, spans: Mapping[str, Any], link_cls: Any) -> tuple[list[Any], dict[str, Any]]:
    """The span links (to the origins' span contexts in ``spans``) and the ``groundlens.cascade_from``
    attribute of a step's span; both empty for a step without cascade."""
    cf = tuple(getattr(step, "cascade_from", ()) or ())
    if not cf:
        return [], {}
    links = [link_cls(spans[o], {"groundlens.link": "cascade_from"}) for o in cf if o in spans]
    return links, {"groundlens.cascade_from": list(cf)}


class SpanContexts(dict):
    """Span contexts of one trace's flagged steps by step id, for :func:`otel_links`."""

    def remember(self, step: Any, span: Any) -> None:
        if getattr(step, "triage", None) == "flagged":
            self[step.id] = span.get_span_context()
