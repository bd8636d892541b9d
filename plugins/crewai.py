"""CrewAI adapter: score every agent LLM call of a crew, and give agents a grounding self-check tool.

* :class:`GroundlensCrewListener` (``_crewai_listener``) records one trace per crew kickoff; every
  agent LLM call is a step named ``"<agent role> / <task>"``, scored against the tool outputs the
  agent received in that task and the task's context.
* ``GroundlensTool`` (``_crewai_tool``) is a real ``crewai.tools.BaseTool`` an agent calls before
  committing to a final answer.

How calls are read and scored, and why hooks rather than the event bus: docs/integrations/crewai.md.
Scores are triage signals for ranking outputs for human review, never verdicts of truth.
"""

from __future__ import annotations

from groundlens_core.plugins._crewai_listener import GroundlensCrewListener
from groundlens_core.plugins._crewai_names import (
    SELF_CHECK_TOOL_NAME,
    ContextStore,
    agent_scope,
    node_name,
    task_label,
    task_question,
)
from groundlens_core.plugins._crewai_tool import SELF_CHECK_DESCRIPTION, _build_tool, self_check
from groundlens_core.plugins._shell import lazy_classes

_built: dict[str, type] = {}
__getattr__ = lazy_classes(__name__, {"GroundlensTool": _build_tool})

__all__ = [
    "SELF_CHECK_DESCRIPTION",
    "SELF_CHECK_TOOL_NAME",
    "ContextStore",
    "GroundlensCrewListener",
    "GroundlensTool",  # noqa: F822 - built on first access (lazy_classes)
    "agent_scope",
    "node_name",
    "self_check",
    "task_label",
    "task_question",
]
