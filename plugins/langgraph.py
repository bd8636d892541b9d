"""LangGraph: a callback that scores every LLM call of a graph run, in the background.

``graph.invoke(inputs, config={"callbacks": [GroundlensLangGraphCallback()]})``: one trace per
invocation, one step per LLM call named after its node (``parent/child`` in a subgraph). Where
the question and context come from: docs/integrations/langgraph.md and docs/integrations/langchain.md.
Needs ``pip install "groundlens-core[langgraph]"``.
"""

from __future__ import annotations

from groundlens_core.plugins._langchain_common import (
    CONTEXT_OVERRIDE_KEY,
    DEFAULT_CONTEXT_KEYS,
    QUESTION_OVERRIDE_KEY,
    GroundlensCallbackBase,
)

__all__ = ["CONTEXT_OVERRIDE_KEY", "DEFAULT_CONTEXT_KEYS", "QUESTION_OVERRIDE_KEY", "GroundlensLangGraphCallback"]


class GroundlensLangGraphCallback(GroundlensCallbackBase):
    """A LangChain callback handler for LangGraph graphs (``StateGraph``, ``create_agent``, subgraphs,
    ``Send`` fan-outs). Constructor: ``name=None, *, calibration=None (path or CalibrationResult),
    context_keys=("context", "documents", "docs"), embedder=None, listeners=(), tracer_provider=None``
    (an OpenTelemetry tracer provider: spans are exported live, needs ``groundlens-core[otel]``)."""

    framework = "langgraph"
    extra = "langgraph"
