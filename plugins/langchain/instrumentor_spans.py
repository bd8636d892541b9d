"""The span an OpenTelemetry instrumentor made for a LangChain LLM run, when one is instrumenting.

OpenInference's LangChain instrumentor keeps its spans by run id and never makes them current (a
callback system cannot promise to detach a context), so the span of the LLM call is looked up by
the run id the callbacks share. Other instrumentations that do make their span current are found
by its attributes (``app_span.is_llm_span``). Nothing is imported: an instrumentor that is not
loaded is not instrumenting.
"""

from __future__ import annotations

import sys
from typing import Any

from groundlens_core.trace.recorder.app_span import SpanRef, is_llm_span, span_ref

_OPENINFERENCE_LANGCHAIN = "openinference.instrumentation.langchain"


def llm_span(run_id: Any) -> SpanRef | None:
    """The instrumentor's span of LLM run ``run_id`` (a UUID), or None."""
    found = _openinference_span(run_id)
    if found is not None:
        return found
    otel_trace = sys.modules.get("opentelemetry.trace")
    if otel_trace is None:
        return None
    try:
        current = otel_trace.get_current_span()
    except Exception:
        return None
    return span_ref(current, llm=True) if is_llm_span(current) else None


def _openinference_span(run_id: Any) -> SpanRef | None:
    module = sys.modules.get(_OPENINFERENCE_LANGCHAIN)
    if module is None:
        return None
    try:
        instrumentor = module.LangChainInstrumentor()  # a singleton (OpenTelemetry's BaseInstrumentor)
        if not getattr(instrumentor, "is_instrumented_by_opentelemetry", False):
            return None
        span = instrumentor.get_span(run_id)
    except Exception:  # another version's internals: no LLM span, the active span still applies
        return None
    return span_ref(span, llm=True) if span is not None else None
