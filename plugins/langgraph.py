"""LangGraph: a callback that scores every LLM call of a graph run in the background, one trace per
invocation. Usage: docs/integrations/langgraph.md."""

from __future__ import annotations

from groundlens_core.plugins._langchain_common import (
    CONTEXT_OVERRIDE_KEY,
    DEFAULT_CONTEXT_KEYS,
    QUESTION_OVERRIDE_KEY,
    GroundlensCallbackBase,
)

__all__ = ["CONTEXT_OVERRIDE_KEY", "DEFAULT_CONTEXT_KEYS", "QUESTION_OVERRIDE_KEY", "GroundlensLangGraphCallback"]


class GroundlensLangGraphCallback(GroundlensCallbackBase):
    """The LangChain callback handler for LangGraph graphs, subgraphs and ``Send`` fan-outs included."""

    framework = "langgraph"
    extra = "langgraph"
