"""What the CrewAI listener and self-check tool share: step names, ids, and the context store of
the tool outputs each agent received in each task. Imports no crewai."""

from __future__ import annotations

import threading
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from groundlens_core.trace.model import ContextPiece

if TYPE_CHECKING:  # pragma: no cover
    from groundlens_core.plugins.crewai.listener import GroundlensCrewListener

FRAMEWORK = "crewai"
EXTRA = "crewai"
SELF_CHECK_TOOL_NAME = "groundlens_self_check"
_LABEL_WORDS = 6
_LABEL_CHARS = 48

#: (agent, task) of the tool call running on this thread / task; set by the listener's before-tool hook
_CURRENT_CALL: ContextVar[tuple[Any, Any] | None] = ContextVar("groundlens_crewai_current_call", default=None)
_ACTIVE: list[GroundlensCrewListener] = []
_ACTIVE_LOCK = threading.Lock()


def _ident(obj: Any) -> str:
    """A stable key for a crewai object: its ``id`` (UUID) when it has one, else ``id()``."""
    if obj is None:
        return "-"
    value = getattr(obj, "id", None)
    return str(value) if value is not None else f"obj{id(obj)}"


def task_label(task: Any) -> str:
    """The task's name, or the first words of its description."""
    if task is None:
        return "no task"
    name = getattr(task, "name", None)
    if isinstance(name, str) and name.strip():
        return name.strip()
    words = str(getattr(task, "description", "") or "").split()
    label = " ".join(words[:_LABEL_WORDS])
    if len(label) > _LABEL_CHARS:
        label = label[: _LABEL_CHARS - 3].rstrip() + "..."
    elif len(words) > _LABEL_WORDS:
        label += "..."
    return label or "task"


def node_name(agent: Any, task: Any) -> str:
    """``"<agent role> / <task label>"``: the node of every step an agent makes in a task."""
    role = str(getattr(agent, "role", None) or "agent").strip()
    return f"{role} / {task_label(task)}"


def task_question(task: Any, *, include_expected_output: bool = False) -> str | None:
    """The question an agent's answer in ``task`` is scored against: the task description."""
    if task is None:
        return None
    text = str(getattr(task, "description", "") or "").strip()
    if include_expected_output:
        expected = str(getattr(task, "expected_output", "") or "").strip()
        if expected:
            text = f"{text}\nExpected output: {expected}" if text else expected
    return text or None


def agent_scope(agent: Any, task: Any) -> str:
    """The parent id of an agent's steps in a task: ``task:<task id>/agent:<agent id>`` (crewai's
    own ids), or ``agent:<agent id>`` outside a task (a standalone ``Agent.kickoff``)."""
    agent_part = f"agent:{_ident(agent)}"
    return agent_part if task is None else f"task:{_ident(task)}/{agent_part}"


@dataclass
class _Scope:
    pieces: list[ContextPiece] = field(default_factory=list)
    pending_action: bool = False  # a ReAct Action was recorded; its tool call is not a new tool_call step
    llm_started: float | None = None
    call_step: str | None = None  # the step of the latest model turn that asked for a tool


class ContextStore:
    """Thread-safe per-(agent, task) store of the tool outputs an agent received in a task."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._scopes: dict[tuple[str, str], _Scope] = {}

    @staticmethod
    def key(agent: Any, task: Any) -> tuple[str, str]:
        return (_ident(agent), _ident(task))

    def _scope(self, agent: Any, task: Any) -> _Scope:
        return self._scopes.setdefault(self.key(agent, task), _Scope())

    def add(self, agent: Any, task: Any, text: str, source: str, producer: str | None = None) -> None:
        """Keep a tool output ``text`` the agent received in ``task``; ``producer`` is the id of the
        tool step that returned it."""
        if not isinstance(text, str) or not text.strip():
            return
        with self._lock:
            self._scope(agent, task).pieces.append(ContextPiece(text=text, source=source, producer=producer))

    def pieces(self, agent: Any, task: Any) -> tuple[ContextPiece, ...]:
        with self._lock:
            scope = self._scopes.get(self.key(agent, task))
            return tuple(scope.pieces) if scope else ()

    def clear(self, agent: Any = None, task: Any = None) -> None:
        """Forget one (agent, task), every agent of ``task`` (agent None), or everything."""
        with self._lock:
            if agent is None and task is None:
                self._scopes.clear()
                return
            task_key = _ident(task)
            for k in [k for k in self._scopes if k[1] == task_key and (agent is None or k[0] == _ident(agent))]:
                del self._scopes[k]

    def swap(self, agent: Any, task: Any, **values: Any) -> _Scope:
        """The listener's bookkeeping (ReAct vs native tool turns, LLM timing): set ``values``
        (``pending_action``, ``llm_started``, ``call_step``) in the (agent, task) scope; returns
        a copy of the scope as it was before."""
        with self._lock:
            scope = self._scope(agent, task)
            before = replace(scope)
            for name, value in values.items():
                setattr(scope, name, value)
            return before


def _task_context_pieces(task: Any) -> list[ContextPiece]:
    """Outputs of earlier tasks the crew handed to ``task`` (its ``context``)."""
    text = getattr(task, "prompt_context", None) if task is not None else None
    if isinstance(text, str) and text.strip():
        return [ContextPiece(text=text.strip(), source="task:context")]
    return []
