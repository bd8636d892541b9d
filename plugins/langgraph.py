"""LangGraph: a callback that scores every LLM call of a graph run in the background, one trace per
invocation, and the revision loop that sends a flagged answer back with its findings. Usage:
docs/integrations/langgraph.md, docs/revise.md."""

from __future__ import annotations

from groundlens_core.plugins.kit.revise import ACCEPT, REVISE, REVISION_KEY
from groundlens_core.plugins.langchain.common import (
    CONTEXT_OVERRIDE_KEY,
    DEFAULT_CONTEXT_KEYS,
    QUESTION_OVERRIDE_KEY,
    GroundlensCallbackBase,
)
from groundlens_core.plugins.langchain.revise_graph import GroundlensReviser

__all__ = [
    "ACCEPT",
    "CONTEXT_OVERRIDE_KEY",
    "DEFAULT_CONTEXT_KEYS",
    "QUESTION_OVERRIDE_KEY",
    "REVISE",
    "REVISION_KEY",
    "GroundlensLangGraphCallback",
    "GroundlensReviser",
]


class GroundlensLangGraphCallback(GroundlensCallbackBase):
    """The LangChain callback handler for LangGraph graphs, subgraphs and ``Send`` fan-outs included."""

    framework = "langgraph"
    extra = "langgraph"
