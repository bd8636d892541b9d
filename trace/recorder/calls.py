"""A call as an adapter records it, and how it becomes a step: the same decision for every framework.

Scored (SGI with a question and a context, support with a context alone, DGI with neither), skipped
(tool results, empty responses) or an error step; scoring failures become error steps, never raise.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from groundlens_core.embedding import first_load
from groundlens_core.internal_errors import internal_error
from groundlens_core.scoring.results import GroundlensResult, ScoreError, as_score
from groundlens_core.text import is_blank
from groundlens_core.trace.model import (
    META_OTEL_PARENT,
    STEP_KINDS,
    ContextPiece,
    Step,
    Usage,
    to_iso,
)
from groundlens_core.trace.recorder.app_span import AbsentSpan, SpanRef, as_metadata
from groundlens_core.trace.recorder.inputs import context_from

log = logging.getLogger("groundlens.recorder")

#: (method, reason, score, scoring ms) of one call
Outcome = tuple[str, str | None, GroundlensResult | None, float | None]


@dataclass
class CallRecord:
    """What an adapter saw of one framework event: plain data, no framework objects, its question
    and context already read (an adapter that defers its work reads them in its translation, off
    the agent's thread: :meth:`~groundlens_core.trace.recorder.Recorder.defer`)."""

    trace_key: str  # the root run this call belongs to
    node: str  # graph node, agent role, function name
    kind: str = "llm"  # llm | tool_call | tool | retrieval | agent
    question: str | None = None
    context: Sequence[ContextPiece] = ()
    response: str | None = None
    model: str | None = None
    provider: str | None = None
    usage: Usage | None = None
    started_at: float | None = None  # time.time() of the framework call's start
    ended_at: float | None = None
    step_id: str | None = None  # a framework run id, if it has one
    parent_id: str | None = None
    error: str | None = None  # the framework call itself failed
    metadata: dict[str, Any] = field(default_factory=dict)
    # An adapter that had to score in line (e.g. to annotate a result it returns) passes the result
    # here so the recorder keeps it instead of scoring the same call a second time.
    result: GroundlensResult | dict[str, Any] | None = None  # the core's result (or its to_dict())
    scoring_latency_ms: float | None = None  # how long that in-line scoring took
    revision_of: str | None = None  # the earlier flagged step this call answers again (a revision loop)
    # The application's OpenTelemetry span of this call (an app_span.SpanRef): an adapter that knows
    # the instrumentor's LLM span passes it; else the recorder takes the span current when it is recorded.
    otel_parent: SpanRef | AbsentSpan | None = None  # ABSENT: looked for on the caller's thread, none


def context_pieces(items: Iterable[Any], default_source: str = "context") -> tuple[ContextPiece, ...]:
    """Strings, ``(text, source)`` pairs and pieces as ContextPieces, by the one context normaliser
    (:func:`~groundlens_core.trace.recorder.inputs.context_from`): blanks and repeats dropped, the
    first place a text was found naming it."""
    return tuple(context_from(list(items), source=default_source))


def method_of(call: CallRecord) -> tuple[str, str | None]:
    """(method, reason) for a call, the same for every framework: ``score`` or ``skipped``/``error``."""
    if call.kind not in STEP_KINDS:
        return "error", f"unknown step kind {call.kind!r}"
    if call.error:
        return "error", call.error
    if call.kind == "tool_call":
        return "skipped", "the model only called tools"
    if call.kind in ("tool", "retrieval"):
        return "skipped", "a tool or retriever result: context for later steps, not scored"
    if not isinstance(call.response, str) or is_blank(call.response):
        return "skipped", "no response text"
    if is_blank(call.question if isinstance(call.question, str) else None) and not any(
        isinstance(p.text, str) and not is_blank(p.text) for p in context_pieces(call.context)
    ):
        # with a context, no question is fine: the core scores the response against it alone (support)
        return "skipped", "no question and no context found for this call"
    return "score", None


def needs_model(call: CallRecord) -> bool:
    """Whether the worker will have to embed this call (not already scored, not skipped)."""
    if method_of(call)[0] != "score":
        return False
    return call.result is None  # else scored in line by the adapter already (kept, or an error step)


def text_bytes(call: CallRecord) -> int:
    """UTF-8 bytes of the texts a call puts in the scoring queue (what the byte bound counts)."""
    n = 0
    for text in (call.question, call.response, *(getattr(p, "text", p) for p in call.context)):
        if isinstance(text, str):
            n += len(text.encode("utf-8", "surrogatepass"))
    return n


def score_calls(
    calls: list[CallRecord],
    options: Callable[[], dict[str, Any]],
    placed: Sequence[tuple[Any, int, str] | None] | None = None,
) -> list[Outcome]:
    """The outcome of each call; the scorable ones in one batch, with the keywords ``options()`` gives.

    ``placed[i]`` is where call ``i``'s step goes, ``(trace, index, step id)`` (None: on no trace):
    each call is then decided with the unverified outputs of its trace that its context carries
    (``lineage.BatchLineage``), the batch's earlier calls' included. Those are known only once
    scored, so a call whose upstream changed by then is scored again, in a second ``evaluate_batch``
    of those calls only; a batch without one is scored once, as without lineage. A call an adapter
    scored in line, before its upstream could be known, is scored again here when it has one (what
    the agent saw in line stays as it was; its step is decided with its lineage)."""
    out: list[Outcome] = [(*method_of(c), None, None) for c in calls]
    todo = _keep_inline(calls, out)
    inline = [i for i, o in enumerate(out) if o[2] is not None] if placed is not None else []
    if not todo and not inline:
        return out
    lineage, where = None, {}
    try:
        pieces = {i: context_pieces(calls[i].context) for i in [*todo, *inline]}
        if placed is not None:
            # under the load lock while it is imported, as the scoring (a fork meanwhile waits)
            BatchLineage = first_load.import_module("groundlens_core.trace.lineage").BatchLineage  # noqa: N806
            where = {i: p for i, p in enumerate(placed) if p is not None and p[0] is not None}
            lineage = BatchLineage(
                [(where[i][0], where[i][2]) if i in where else None for i in range(len(calls))], pieces
            )
            # errors and in-line scores are known before any scoring
            known = [i for i in where if i not in todo and out[i][0] != "skipped"]
            lineage.settle({i: make_step(calls[i], where[i][1], where[i][2], *out[i]) for i in known})
            lineage.given.update(dict.fromkeys(inline, ()))  # decided in line, without an upstream
        batch = sorted([*todo, *(i for i in inline if lineage is not None and lineage.upstream(i))])
    except Exception as exc:  # every call of the batch becomes an error step
        internal_error(exc, "scoring", log, deferred=True)
        return [("error", f"{type(exc).__name__}: {exc}", None, None) if i in todo else o for i, o in enumerate(out)]
    for _ in range(len(todo) + len(inline)):  # each round settles at least the earliest call still changing
        if not batch:
            break
        t0 = time.perf_counter()
        try:
            # under the load lock while it is imported (a fork meanwhile waits: see first_load)
            evaluate_batch = first_load.import_module("groundlens_core.scoring").evaluate_batch
            kwargs = dict(options(), errors="record")
            items = [
                {
                    "question": calls[i].question,
                    "response": calls[i].response,
                    "context": [p.text if isinstance(p.text, str) else None for p in pieces[i]],
                    "upstream": lineage.inputs(i) if lineage is not None else (),
                }
                for i in batch
            ]
            results: list[Any] = list(evaluate_batch(items, **kwargs))
        except Exception as exc:  # every call of the batch becomes an error step
            internal_error(exc, "scoring", log, deferred=True)
            results = [exc] * len(batch)
        ms = (time.perf_counter() - t0) * 1000.0 / len(batch)
        for i, res in zip(batch, results):
            ms_i = ms + (out[i][3] or 0.0)  # a call scored again took both
            if isinstance(res, (Exception, ScoreError)) and out[i][2] is not None:
                continue  # a call decided again (or scored in line) keeps its last decision
            if isinstance(res, Exception):
                out[i] = ("error", f"{type(res).__name__}: {res}", None, ms_i)
            elif isinstance(res, ScoreError):
                out[i] = ("error", res.error, None, ms_i)
            else:
                out[i] = (res.method, None, res, ms_i)
        steps = {i: make_step(calls[i], where[i][1], where[i][2], *out[i]) for i in batch if i in where}
        batch = lineage.settle(steps) if lineage is not None else []  # the calls to decide again
    return out


def _keep_inline(calls: list[CallRecord], out: list[Outcome]) -> list[int]:
    """Put the results the adapters scored in line into ``out`` (an unusable one is an error); returns
    the calls still to score."""
    todo = []
    for i, (m, _, _, _) in enumerate(out):
        pre = calls[i].result
        if m == "score" and pre is not None:
            try:
                kept = as_score(pre)
            except ValueError as exc:
                out[i] = ("error", f"the adapter's score is unusable: {exc}", None, None)
                continue
            assert kept is not None
            out[i] = (kept.method, None, kept, calls[i].scoring_latency_ms)  # scored in line already
        elif m == "score":
            todo.append(i)
    return todo


def make_step(
    call: CallRecord,
    index: int,
    step_id: str,
    method: str,
    reason: str | None,
    result: GroundlensResult | None,
    scoring_ms: float | None,
) -> Step:
    """The trace step of a call with its outcome."""
    llm_ms = None
    if call.started_at is not None and call.ended_at is not None:
        llm_ms = max(0.0, (call.ended_at - call.started_at) * 1000.0)
    triage = result.triage if result is not None else ("error" if method == "error" else None)
    return Step(
        id=step_id,
        index=index,
        parent_id=call.parent_id,
        node=call.node,
        kind=call.kind,
        method=method,
        result=result,
        triage=triage,
        question=call.question,
        context=context_pieces(call.context),
        response=call.response,
        model=call.model,
        provider=call.provider,
        usage=call.usage,
        started_at=to_iso(call.started_at),
        ended_at=to_iso(call.ended_at),
        llm_latency_ms=llm_ms,
        scoring_latency_ms=scoring_ms,
        error=reason if method == "error" else None,
        skip_reason=reason if method == "skipped" else None,
        metadata=_metadata(call),
        revision_of=call.revision_of,
    )


def _metadata(call: CallRecord) -> dict[str, Any]:
    """The step's metadata: the adapter's, and the application span the call was made in."""
    meta = dict(call.metadata)
    parent = as_metadata(call.otel_parent)
    if parent is not None:
        meta[META_OTEL_PARENT] = parent
    return meta
