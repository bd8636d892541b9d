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
from groundlens_core.scoring.results import GroundlensScore, ScoreError, as_score
from groundlens_core.text import is_blank
from groundlens_core.trace.model import (
    META_INTERNAL_ERROR,
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
Outcome = tuple[str, str | None, GroundlensScore | None, float | None]


@dataclass
class CallRecord:
    """What an adapter saw of one framework event: plain data, no framework objects."""

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
    # An adapter that had to score in line (e.g. to annotate a result it returns) passes the score
    # here so the recorder keeps it instead of scoring the same call a second time.
    score: GroundlensScore | dict[str, Any] | None = None  # the core's score (or its to_dict())
    scoring_latency_ms: float | None = None  # how long that in-line scoring took
    revision_of: str | None = None  # the earlier flagged step this call answers again (a revision loop)
    # The application's OpenTelemetry span of this call (an app_span.SpanRef): an adapter that knows
    # the instrumentor's LLM span passes it; else the recorder takes the span current when it is recorded.
    otel_parent: SpanRef | AbsentSpan | None = None  # ABSENT: looked for on the caller's thread, none
    # The question and context, when the adapter leaves reading them to the worker: a callable giving
    # (question, context), run once before the call is decided (see :func:`read_now`). Splitting a
    # prompt into its question and the context it carries costs several times the append the agent's
    # thread may pay, and nothing on that thread needs the result. ``read_size`` is its texts' size
    # estimate for the byte bound meanwhile.
    read: Callable[[], tuple[str | None, Sequence[ContextPiece]]] | None = None
    read_size: int = 0


def read_now(call: CallRecord) -> None:
    """Fill the question and context of a call whose adapter left them to be read (``call.read``).

    Idempotent (``read`` is cleared only once its result is in place, so a call is never decided
    half-read); a reading that fails makes the call an error step (the failure is an internal error:
    raised under the test suite's setting), so it is never lost."""
    read = call.read
    if read is None:
        return
    try:
        question, context = read()
    except Exception as exc:
        internal_error(exc, "reading the prompt", log, deferred=True)
        call.error = call.error or f"groundlens could not read the prompt: {type(exc).__name__}: {exc}"
        call.metadata[META_INTERNAL_ERROR] = True
    else:
        call.question, call.context = question, tuple(context)
    call.read = None


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
    if call.read is not None:  # its question and context are read on the worker, before it is decided again
        return "score", None
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
    return call.score is None  # else scored in line by the adapter already (kept, or an error step)


def text_bytes(call: CallRecord) -> int:
    """UTF-8 bytes of the texts a call puts in the scoring queue (what the byte bound counts)."""
    n = call.read_size if call.read is not None else 0
    for text in (call.question, call.response, *(getattr(p, "text", p) for p in call.context)):
        if isinstance(text, str):
            n += len(text.encode("utf-8", "surrogatepass"))
    return n


def score_calls(calls: list[CallRecord], options: Callable[[], dict[str, Any]]) -> list[Outcome]:
    """The outcome of each call; the scorable ones in one batch, with the keywords ``options()`` gives."""
    decisions = [method_of(c) for c in calls]
    out: list[Outcome] = [(m, r, None, None) for m, r in decisions]
    todo = []
    for i, (m, _) in enumerate(decisions):
        pre = calls[i].score
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
    if not todo:
        return out
    t0 = time.perf_counter()
    try:
        # under the load lock while it is imported (a fork meanwhile waits: see first_load)
        evaluate_batch = first_load.import_module("groundlens_core.scoring").evaluate_batch
        kwargs = dict(options(), errors="record")
        items = [
            {
                "question": calls[i].question,
                "response": calls[i].response,
                "context": [p.text for p in context_pieces(calls[i].context) if isinstance(p.text, str)],
            }
            for i in todo
        ]
        results: list[Any] = list(evaluate_batch(items, **kwargs))
    except Exception as exc:  # every call of the batch becomes an error step
        internal_error(exc, "scoring", log, deferred=True)
        results = [exc] * len(todo)
    ms = (time.perf_counter() - t0) * 1000.0 / len(todo)
    for i, res in zip(todo, results):
        if isinstance(res, Exception):
            out[i] = ("error", f"{type(res).__name__}: {res}", None, ms)
        elif isinstance(res, ScoreError):
            out[i] = ("error", res.error, None, ms)
        else:
            out[i] = (res.method, None, res, ms)
    return out


def make_step(
    call: CallRecord,
    index: int,
    step_id: str,
    method: str,
    reason: str | None,
    score: GroundlensScore | None,
    scoring_ms: float | None,
) -> Step:
    """The trace step of a call with its outcome."""
    llm_ms = None
    if call.started_at is not None and call.ended_at is not None:
        llm_ms = max(0.0, (call.ended_at - call.started_at) * 1000.0)
    triage = score.triage if score is not None else ("error" if method == "error" else None)
    return Step(
        id=step_id,
        index=index,
        parent_id=call.parent_id,
        node=call.node,
        kind=call.kind,
        method=method,
        score=score,
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
