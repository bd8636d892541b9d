"""AutoGen AgentChat: score agents' answers live through their model clients
(:class:`GroundlensChatCompletionClient`), after a run (:class:`GroundlensChecker`), or stop a team
on a flagged one (:class:`GroundlensFlaggedTermination`). See docs/integrations/autogen.md."""

from __future__ import annotations

from groundlens_core.plugins.autogen.checker import CheckedStream, GroundlensChecker
from groundlens_core.plugins.autogen.client import _build_client
from groundlens_core.plugins.autogen.reading import (
    DEFAULT_QUESTION_SOURCES,
    DEFAULT_TRACE_KEY,
    EXTRA,
    FRAMEWORK,
    groundlens_trace,
    request_question_and_context,
)
from groundlens_core.plugins.autogen.termination import _build_termination
from groundlens_core.plugins.kit.shell import lazy_classes

__getattr__ = lazy_classes(
    __name__, {"GroundlensChatCompletionClient": _build_client, "GroundlensFlaggedTermination": _build_termination}
)

__all__ = [
    "DEFAULT_QUESTION_SOURCES",
    "DEFAULT_TRACE_KEY",
    "EXTRA",
    "FRAMEWORK",
    "CheckedStream",
    "GroundlensChatCompletionClient",  # noqa: F822 - built on first access (lazy_classes)
    "GroundlensChecker",
    "GroundlensFlaggedTermination",  # noqa: F822 - built on first access (lazy_classes)
    "groundlens_trace",
    "request_question_and_context",
]
