"""LangGraph: a callback that scores every LLM call of a graph run, in the background.

    from groundlens_core.plugins.langgraph import GroundlensLangGraphCallback

    cb = GroundlensLangGraphCallback()
    graph.invoke(inputs, config={"callbacks": [cb]})   # or ainvoke / stream / astream / with_config
    print(cb.get_trace().summary())                     # waits for the scores of that run

Each invocation (root run) is one trace; each LLM call one step, named after its graph node (with
the subgraph path: ``parent/child``). The question is the last human message the model got
(without the context a RAG template pasted around it); the context is what the graph fed it: tool
messages, retriever documents, the state keys ``context_keys`` (default ``context``, ``documents``,
``docs``) and an explicit ``config={"metadata": {"groundlens_context": ..., "groundlens_question": ...}}``;
when none of these gives any, the prompt's own source text (a substantive system message,
``prompt:system``; the human message's text beyond its question, ``prompt:human``). With context
the step gets an SGI score, without one a DGI score, and a node whose long prompt got no context is
named once in a warning that says how to set ``context_keys`` (docs/context.md). Scores are triage
signals that rank the outputs a human should review first, not verdicts of truth.

The callback never slows or breaks the graph: its methods only translate the event and queue it;
embedding happens on a worker thread; any failure inside it is logged (``groundlens.langgraph``) and
recorded as an ``error`` step. Needs ``pip install "groundlens-core[langgraph]"``.
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
