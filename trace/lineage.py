"""Cascade lineage: a later step whose context carries the output of an earlier flagged step, and the
trust it may not inherit.

In a multi-step agent an unsupported claim travels: a planner's invented fact becomes the next
step's context, and that step can look grounded against a context that already carries the error.
The rule: a step gets ``cascade_from = [origin step ids]`` when one of its context pieces contains
the whole response of an earlier *flagged* step of the same trace, or one of that response's
sentences (:func:`groundlens_core.evidence.sentences.split_sentences`), compared after collapsing whitespace
and case; sentences shorter than :data:`MIN_CHARS` characters are ignored (``Yes.`` proves nothing).
Reviewers see the later step right after its origin (:func:`cascade_order`).

Trust flows through the lineage: being grounded in a flagged output is not being grounded. A step
whose support comes from the output of a flagged step, or of a step that could not be scored
(``error``), is at most ``review``: its decision becomes ``grounded_in_flagged`` ("grounded in the
flagged output of #N", with the origin's failed facts and what the source says) or
``grounded_in_error``, and a trusted score moves down into the review third. Its support comes from
such an output when one of its sentences finds its best-supporting passage in that output (a
sentence of it), or when it has no sentence evidence to tell. So a step with both a real source
and a flagged output in its context keeps its own band only when every sentence leans on the real
source; a flagged step stays flagged. The capped step is an origin in its turn: a step
grounded in it is capped the same way, naming the first origin.

Cost: per trace, an index of the flagged responses' normalised sentences (built once per flagged
step); a new step costs one normalisation of each context piece and one substring search of it per
indexed sentence, and nothing at all while its trace has no flagged step (the common case).
``benchmarks/bench_lineage.py`` measures it against scoring.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Mapping, Sequence

from groundlens_core.evidence.sentences import split_sentences
from groundlens_core.scoring.decision import Decision, grounded_in_unverified, opening

__all__ = ["MIN_CHARS", "LineageIndex", "link_step", "annotate", "cascade_order", "claims", "folded"]

#: sentences (and whole responses) shorter than this, after normalising, never link two steps
MIN_CHARS = 24


def folded(text: str) -> str:
    """``text`` with its white space collapsed and its case folded: how lineage compares texts."""
    return " ".join(text.split()).casefold()


def claims(text: str) -> set[str]:
    """The normalised sentences of ``text`` long enough to count (and the whole text, if it is)."""
    out = {n for n in (folded(span.text) for span in split_sentences(text)) if len(n) >= MIN_CHARS}
    whole = folded(text)
    if len(whole) >= MIN_CHARS and not out:
        out.add(whole)
    return out


def _unverified(step: Any) -> tuple[int, str, tuple] | None:
    """``(origin index, origin band, findings)`` when ``step``'s output must not ground a later step:
    it is flagged or an error, or it is itself grounded in such an output (then its first origin)."""
    decision = getattr(step.score, "decision", None) if getattr(step, "score", None) is not None else None
    band = getattr(step, "triage", None)
    if band == "flagged":
        return step.index, "flagged", tuple(decision.findings) if decision is not None else ()
    if band == "error" or getattr(step, "method", None) == "error":
        return step.index, "error", ()
    if decision is not None and decision.origin is not None and decision.rule.startswith("grounded_in_"):
        return decision.origin, "error" if decision.rule == "grounded_in_error" else "flagged", decision.findings
    return None


class LineageIndex:
    """The sentences of the unverified responses of one trace (flagged, error, or grounded in one),
    and which step said each."""

    __slots__ = ("claims", "rank", "seen", "origin")

    def __init__(self) -> None:
        self.claims: dict[str, list[str]] = {}  # normalised sentence -> ids of the steps that said it
        self.rank: dict[str, int] = {}  # step id -> order indexed
        self.origin: dict[str, tuple[int, str, tuple]] = {}  # step id -> what :func:`_unverified` says
        self.seen = 0  # steps of the trace looked at so far

    def add(self, step: Any) -> None:
        """Index ``step`` if its output is unverified (see :func:`_unverified`) and readable text."""
        if not isinstance(getattr(step, "response", None), str):
            return
        origin = _unverified(step)
        if origin is None:
            return
        self.rank.setdefault(step.id, len(self.rank))
        self.origin[step.id] = origin
        for claim in claims(step.response):
            ids = self.claims.setdefault(claim, [])
            if step.id not in ids:
                ids.append(step.id)

    def carriers(self, pieces: Sequence[Any], own_id: str) -> dict[int, list[str]]:
        """For each piece (by position) that carries a sentence of an indexed step, those steps' ids."""
        out: dict[int, list[str]] = {}
        if not self.claims:
            return out
        for k, piece in enumerate(pieces):
            text = getattr(piece, "text", piece)
            if not isinstance(text, str):
                continue  # redacted or cut: nothing to compare
            hay = folded(text)
            if len(hay) < MIN_CHARS:
                continue
            for claim, ids in self.claims.items():
                if claim in hay:
                    found = out.setdefault(k, [])
                    found.extend(i for i in ids if i != own_id and i not in found)
        return {k: v for k, v in out.items() if v}

    def origins(self, pieces: Iterable[Any], own_id: str) -> list[str]:
        """Ids of the indexed steps some piece carries a sentence of, in the order they were indexed."""
        found = {i for ids in self.carriers(list(pieces), own_id).values() for i in ids}
        return sorted(found, key=self.rank.__getitem__)


def _leans_on(index: LineageIndex, step: Any, origins: Sequence[str]) -> list[str]:
    """The origins the step's support comes from: those one of whose sentences is the best-supporting
    passage of one of the step's sentences (or contains it, or is contained in it); all of them when
    the step has no sentence evidence to tell."""
    ev = getattr(step.score, "evidence", None)
    if ev is None or not ev.sentences or not all(isinstance(s.passage, str) for s in ev.sentences):
        return list(origins)
    said = {o: [c for c, ids in index.claims.items() if o in ids] for o in origins}
    out: list[str] = []
    for s in ev.sentences:
        passage = folded(s.passage)
        if len(passage) < MIN_CHARS:
            continue
        for o, mine in said.items():
            if o not in out and any(passage in c or c in passage for c in mine):
                out.append(o)
    return out


def _capped(step: Any, origin: tuple[int, str, tuple]) -> Any:
    """``step`` at most ``review``, its decision and explanation saying which output it is grounded in."""
    score = step.score
    old: Decision = score.decision
    new = grounded_in_unverified(old, *origin)
    if new is old:
        return step
    head = opening(old)
    rest = score.explanation[len(head) :] if score.explanation.startswith(head) else f" {score.explanation}"
    score = dataclasses.replace(
        score, triage=new.band, flagged=False, score=new.score, decision=new, explanation=opening(new) + rest
    )
    return dataclasses.replace(step, score=score, triage=new.band)


def _linked(index: LineageIndex, step: Any) -> Any:
    """``step`` with its ``cascade_from`` and, when its support comes from an unverified output, capped."""
    carried = index.carriers(step.context, step.id) if step.context else {}
    origins = sorted({i for ids in carried.values() for i in ids}, key=index.rank.__getitem__)
    if tuple(origins) != tuple(getattr(step, "cascade_from", ())):
        step = dataclasses.replace(step, cascade_from=tuple(origins))
    decision = getattr(step.score, "decision", None) if step.score is not None else None
    if not origins or decision is None or step.triage not in ("trusted", "review"):
        return step
    leaned = _leans_on(index, step, origins)
    if not leaned:
        return step
    first = min(leaned, key=index.rank.__getitem__)
    return _capped(step, index.origin[first])


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
    """``step`` with ``cascade_from`` set from the unverified steps already in ``trace``, and capped at
    ``review`` when its support comes from one (the same step when neither applies). Call it before
    appending the step; it indexes the trace's earlier steps."""
    return _linked(_index_of(trace), step)


def annotate(trace: Any) -> Any:
    """Set ``cascade_from`` on every step of a trace built or loaded whole (steps in trace order)."""
    index = LineageIndex()
    out = []
    for step in trace.steps:
        step = _linked(index, step)
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
        if _unverified(step) is not None:
            self[step.id] = span.get_span_context()
