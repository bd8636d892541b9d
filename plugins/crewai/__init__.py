"""CrewAI adapter: the crew listener, the grounding self-check tool (docs/integrations/crewai.md) and
the guardrail that sends a flagged answer back with its findings (docs/revise.md)."""

from __future__ import annotations

from groundlens_core.plugins.crewai.listener import GroundlensCrewListener
from groundlens_core.plugins.crewai.names import (
    SELF_CHECK_TOOL_NAME,
    ContextStore,
    agent_scope,
    node_name,
    task_label,
    task_question,
)
from groundlens_core.plugins.crewai.revise import GroundlensGuardrail
from groundlens_core.plugins.crewai.tool import SELF_CHECK_DESCRIPTION, self_check, tool_class
from groundlens_core.plugins.kit.revise import REVISION_KEY
from groundlens_core.plugins.kit.shell import lazy_classes

__getattr__ = lazy_classes(__name__, {"GroundlensTool": tool_class})

__all__ = [
    "SELF_CHECK_DESCRIPTION",
    "SELF_CHECK_TOOL_NAME",
    "REVISION_KEY",
    "ContextStore",
    "GroundlensCrewListener",
    "GroundlensGuardrail",
    "GroundlensTool",  # noqa: F822 - built on first access (lazy_classes)
    "agent_scope",
    "node_name",
    "self_check",
    "task_label",
    "task_question",
]
