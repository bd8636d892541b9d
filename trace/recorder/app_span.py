"""The application's OpenTelemetry span a call was made in, captured on the caller's thread.

The recorder reads it when a trace starts and when a call is recorded (on the agent's thread: the
worker, later, has no current span), and keeps it as plain ids in the metadata (:data:`META_OTEL_PARENT`
of the trace and of each step), so that the exporter can put the evaluation into the application's
own trace, live or post-hoc from a saved trace, and the score sinks can find the span to annotate.

Cheap by design: when the process never imported OpenTelemetry no span can be active, and this module
imports nothing (it looks in ``sys.modules``); otherwise it is one context read, and the ids are
written out as hex later, on the worker (:meth:`SpanRef.to_dict`). An adapter that knows the span an
instrumentor made for the LLM call itself (OpenInference's span of a LangChain run) passes it with
:func:`span_ref` and ``llm=True``; the exporter then parents the step's span, and the evaluation
event, to that span.
"""

from __future__ import annotations

import sys
from typing import Any, Mapping, NamedTuple

from groundlens_core.trace.model import META_OTEL_PARENT

__all__ = [
    "ABSENT",
    "META_OTEL_PARENT",
    "AbsentSpan",
    "SpanRef",
    "active_span",
    "capture",
    "is_llm_span",
    "parent_of",
    "span_ref",
]

#: ``gen_ai.operation.name`` values of a model call (OpenTelemetry GenAI conventions)
_GENAI_MODEL_OPERATIONS = frozenset({"chat", "text_completion", "generate_content", "completion"})


class AbsentSpan:
    """See :data:`ABSENT`."""

    def __repr__(self) -> str:
        return "ABSENT"


#: what an adapter that translates its events later passes (as a call's ``otel_parent``, or as the
#: trace metadata's :data:`META_OTEL_PARENT`) when the caller's thread had no span: the recorder then
#: looks for none on the thread that translates, whose span is another request's or none
ABSENT = AbsentSpan()


class SpanRef(NamedTuple):
    """A span as the caller's thread saw it: its OpenTelemetry ``SpanContext``, and whether it is the
    span of the LLM call itself (made by an instrumentor), not only a span around it. ``llm`` None:
    decided from the span's attributes when the ids are written out (on the worker, not the caller).

    Immutable, and a named tuple rather than a frozen dataclass: one is built on the caller's thread
    for every call recorded inside a span, and a tuple is several times cheaper to build."""

    context: Any
    llm: bool | None = False
    span: Any = None

    def to_dict(self) -> dict[str, Any]:
        """What the metadata keeps (:data:`META_OTEL_PARENT`): ``{"trace_id": <32 hex>, "span_id": <16
        hex>, "sampled": bool, "llm": bool}``, plain JSON that a saved trace carries."""
        ctx = self.context
        return {
            "trace_id": format(ctx.trace_id, "032x"),
            "span_id": format(ctx.span_id, "016x"),
            "sampled": bool(int(ctx.trace_flags) & 1),
            "llm": is_llm_span(self.span) if self.llm is None else self.llm,
        }


def span_ref(span: Any, *, llm: bool | None = None) -> SpanRef | None:
    """An OpenTelemetry span (or span context) as a :class:`SpanRef`, or None when it has no valid ids.

    ``llm`` says whether it is the span of the LLM call itself; None decides from its attributes:
    ``openinference.span.kind`` ``LLM`` or a GenAI ``gen_ai.operation.name`` of a model call."""
    try:
        ctx = span.get_span_context() if hasattr(span, "get_span_context") else span
        if ctx is None or not ctx.is_valid:
            return None
        return SpanRef(ctx, is_llm_span(span) if llm is None else bool(llm))
    except Exception:  # an odd span object: no parent, never a failure of the call
        return None


def _current(otel_trace: Any) -> SpanRef | None:
    """The current span, its attributes read later (:class:`SpanRef`)."""
    try:
        span = otel_trace.get_current_span()
        ctx = span.get_span_context()
        return SpanRef(ctx, None, span) if ctx.is_valid else None
    except Exception:  # an odd span object: no parent, never a failure of the call
        return None


def is_llm_span(span: Any) -> bool:
    """Whether a recording span says it is a model call (OpenInference or OTel GenAI attributes)."""
    get = getattr(getattr(span, "attributes", None), "get", None)
    if get is None:
        return False
    return get("openinference.span.kind") == "LLM" or get("gen_ai.operation.name") in _GENAI_MODEL_OPERATIONS


def capture() -> SpanRef | None:
    """The span current on this thread or task, or None (no span, or no OpenTelemetry): the cheap
    read the recorder makes on the caller's thread for every call."""
    otel_trace = sys.modules.get("opentelemetry.trace")
    if otel_trace is None:  # never imported: nothing can have started a span
        return None
    return _current(otel_trace)


def active_span() -> dict[str, Any] | None:
    """:func:`capture` as the metadata keeps it (a trace's, once per trace)."""
    ref = capture()
    return None if ref is None else ref.to_dict()


def as_metadata(ref: Any) -> dict[str, Any] | None:
    """A :class:`SpanRef` (or the dict of one) as the metadata keeps it."""
    if isinstance(ref, SpanRef):
        return ref.to_dict()
    return dict(ref) if isinstance(ref, Mapping) else None


def parent_of(metadata: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The captured span in a trace's or step's metadata, when it is well formed."""
    if not isinstance(metadata, Mapping):
        return None
    ref = metadata.get(META_OTEL_PARENT)
    if not isinstance(ref, Mapping):
        return None
    trace_id, span_id = ref.get("trace_id"), ref.get("span_id")
    if not (_is_hex(trace_id, 32) and _is_hex(span_id, 16)):
        return None
    return dict(ref)


def _is_hex(value: Any, length: int) -> bool:
    if not isinstance(value, str) or len(value) != length:
        return False
    try:
        return int(value, 16) != 0
    except ValueError:
        return False
