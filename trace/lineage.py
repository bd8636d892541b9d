"""Cascade lineage: which earlier outputs of a trace a step's context carries, for the core's
decision and for the reader.

In a multi-step agent an unsupported claim travels: a planner's invented fact becomes the next
step's context, and that step can look grounded against a context that already carries the error.
A step's context *carries* an earlier step's output when one of its pieces contains that whole
response, or one of its sentences (:func:`groundlens_core.evidence.sentences.split_sentences`),
compared after collapsing whitespace and case (:func:`folded`); sentences shorter than
:data:`MIN_CHARS` characters are ignored (``Yes.`` proves nothing), and redacted or cut texts never
link. Only *unverified* outputs count: a flagged step's, an ``error`` step's, and the output of a
step that was itself grounded in one (it names the first origin).

Lineage gives two things, at two times:

- **Before a step is decided**, :func:`upstream_of` gives the unverified outputs its context carries
  as :class:`~groundlens_core.scoring.decision.Upstream` inputs, and the core decides the band once
  with them (``evaluate(..., upstream=...)``): a step whose support comes from such an output is at
  most ``review`` (``grounded_in_flagged`` / ``grounded_in_error``; the rule is in
  :mod:`groundlens_core.scoring.decision`). The recorder's worker and the spans job score a batch
  of calls before its steps are on their trace, so :class:`BatchLineage` adds the batch's earlier
  calls once they are decided.
- **When a step is appended**, :func:`link_step` (``Trace.add_step``) sets ``cascade_from = [origin
  step ids]``, for the report's mark, the ranking (:func:`cascade_order`: a step right after its
  origin) and OpenTelemetry links (:func:`otel_links`). It never decides again: a trace built or
  loaded whole (:func:`annotate`) keeps the decisions its steps were saved with.

Cost: per trace, an index of the unverified responses' normalised sentences (built once per such
step); a new step costs, when it is decided and again when it is appended, one normalisation of
each context piece and one substring search of it per indexed sentence, and nothing at all while
its trace has no unverified step (the common case). A call of a batch that carries the output of an
earlier call of the batch which turned out unverified is scored a second time (see
:class:`BatchLineage`). ``benchmarks/bench_lineage.py`` measures the append against scoring.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Mapping, Sequence

from groundlens_core.scoring.decision import MIN_CHARS, Upstream, folded, output_sentences

__all__ = [
    "MIN_CHARS",
    "BatchLineage",
    "LineageIndex",
    "upstream_of",
    "link_step",
    "annotate",
    "cascade_order",
    "folded",
]


def _unverified(step: Any) -> tuple[int, str, tuple] | None:
    """``(origin index, origin band, findings)`` when ``step``'s output must not ground a later step:
    it is flagged or an error, or it is itself grounded in such an output (then its first origin)."""
    decision = getattr(step.result, "decision", None) if getattr(step, "result", None) is not None else None
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
    which step said each, and each such step as the core's upstream input."""

    __slots__ = ("claims", "rank", "seen", "origin")

    def __init__(self) -> None:
        self.claims: dict[str, list[str]] = {}  # normalised sentence -> ids of the steps that said it
        self.rank: dict[str, int] = {}  # step id -> order indexed
        self.origin: dict[str, Upstream] = {}  # step id -> its output as an upstream input
        self.seen = 0  # steps of the trace looked at so far

    def add(self, step: Any) -> None:
        """Index ``step`` if its output is unverified (see :func:`_unverified`) and readable text."""
        if not isinstance(getattr(step, "response", None), str):
            return
        origin = _unverified(step)
        if origin is None:
            return
        said = output_sentences(step.response)
        self.rank.setdefault(step.id, len(self.rank))
        index, band, findings = origin
        self.origin[step.id] = Upstream(index, "error" if band == "error" else "flagged", tuple(findings), said)
        for claim in said:
            ids = self.claims.setdefault(claim, [])
            if step.id not in ids:
                ids.append(step.id)

    def carriers(self, pieces: Sequence[Any], own_id: str) -> dict[int, list[str]]:
        """For each piece (by position) that carries a sentence of an indexed step, those steps' ids."""
        out: dict[int, list[str]] = {}
        if not self.claims:
            return out
        for k, piece in enumerate(pieces):
            hay = _hay(piece)
            if hay is None:
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

    def upstream(self, pieces: Sequence[Any], own_id: str) -> tuple[Upstream, ...]:
        """The upstream inputs of a step with context ``pieces``: the indexed outputs they carry, first
        origin first (the one a capped decision names when it leans on several)."""
        if not self.claims or not pieces:
            return ()
        return tuple(self.origin[i] for i in self.origins(pieces, own_id))


def _hay(piece: Any) -> str | None:
    """A context piece's text as lineage compares it; None when it is not readable text (redacted or
    cut) or too short to carry a sentence."""
    text = getattr(piece, "text", piece)
    if not isinstance(text, str):
        return None
    hay = folded(text)
    return hay if len(hay) >= MIN_CHARS else None


def _index_of(trace: Any) -> LineageIndex:
    """The trace's index, brought up to date with steps appended since it was last used."""
    index = getattr(trace, "_lineage", None)
    if not isinstance(index, LineageIndex):
        index = LineageIndex()
        trace._lineage = index
    new = trace.steps[index.seen :]  # a step another thread appends meanwhile is indexed next time
    for step in new:
        index.add(step)
    index.seen += len(new)
    return index


def upstream_of(trace: Any, pieces: Sequence[Any], own_id: str) -> tuple[Upstream, ...]:
    """The unverified outputs of ``trace``'s steps that context ``pieces`` carry, as the core's
    upstream inputs for the step ``own_id`` about to be decided (``evaluate(..., upstream=...)``)."""
    return _index_of(trace).upstream(pieces, own_id)


def _linked(index: LineageIndex, step: Any) -> Any:
    """``step`` with its ``cascade_from``: the indexed steps its context carries a sentence of."""
    origins = tuple(index.origins(step.context, step.id)) if step.context else ()
    if origins != tuple(getattr(step, "cascade_from", ())):
        step = dataclasses.replace(step, cascade_from=origins)
    return step


def link_step(trace: Any, step: Any) -> Any:
    """``step`` with ``cascade_from`` set from the unverified steps already in ``trace`` (the same
    step when it has none). Its decision is left as it is: the core made it, with the upstream
    :func:`upstream_of` gave. Call it before appending the step; it indexes the trace's earlier steps."""
    return _linked(_index_of(trace), step)


def annotate(trace: Any) -> Any:
    """Set ``cascade_from`` on every step of a trace built or loaded whole (steps in trace order);
    the steps keep the decisions they were saved with."""
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


class BatchLineage:
    """The upstream inputs of a batch of calls decided before their steps are on their traces (the
    recorder's worker, the spans job): each call's context is compared with its trace's steps and
    with the batch's earlier calls on the same trace that are decided (:meth:`settle`).

    An earlier call of the batch is an origin only once its band is known, so the caller decides the
    batch in rounds: first every call, with what is known (:meth:`inputs`); then again only the calls
    whose upstream changed meanwhile (:meth:`settle` names them), which happens
    only when a call of the batch carries the output of an earlier one that turned out flagged or an
    error. Usually there is one round, and the batch costs what it cost without lineage: a chain of
    steps each carrying the last one's output is not held back for bands that are almost always fine.

    ``placed[i]`` is ``(trace, step id)`` of call ``i`` (None: on no trace, no lineage);
    ``contexts[i]`` its context pieces (only the calls to decide need one)."""

    def __init__(self, placed: Sequence[tuple[Any, str] | None], contexts: Mapping[int, Sequence[Any]]):
        self.placed = placed
        self.contexts = contexts
        self.decided_steps: dict[int, Any] = {}  # call -> its step, decided, when its output is unverified
        self.given: dict[int, tuple[Upstream, ...]] = {}  # call -> the upstream it was last decided with

    def settle(self, steps: Mapping[int, Any]) -> list[int]:
        """Take the calls' steps as decided now (a decision made again replaces the last); returns the
        calls to decide again, in batch order: those whose upstream is no longer the one they were
        decided with (:meth:`inputs`)."""
        for i, step in steps.items():
            if self.placed[i] is None:
                continue
            if _unverified(step) is not None:
                self.decided_steps[i] = step
            else:
                self.decided_steps.pop(i, None)
        return [i for i in sorted(self.given) if self.upstream(i) != self.given[i]]

    def inputs(self, i: int) -> tuple[Upstream, ...]:
        """Call ``i``'s upstream, remembered as the one it is decided with."""
        self.given[i] = self.upstream(i)
        return self.given[i]

    def upstream(self, i: int) -> tuple[Upstream, ...]:
        """Call ``i``'s upstream inputs: its trace's steps' first, then the batch's earlier calls'."""
        p = self.placed[i]
        pieces = self.contexts.get(i, ())
        if p is None or not pieces:
            return ()
        trace, own = p
        out = upstream_of(trace, pieces, own)
        earlier = [j for j in sorted(self.decided_steps) if j < i and self.placed[j][0] is trace]  # type: ignore[index]
        if earlier:
            index = LineageIndex()
            for j in earlier:
                index.add(self.decided_steps[j])
            out += index.upstream(pieces, own)
        return out


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
