"""CrewAI adapter: score every agent LLM call of a crew, and give agents a grounding self-check tool.

Two pieces, usable together or apart:

* :class:`GroundlensCrewListener` records one trace per crew kickoff. Every agent LLM call becomes a
  step (node ``"<agent role> / <task name or first words of its description>"``); tool results the
  agent received in that task are kind ``tool`` steps and the context of its later calls.
* ``GroundlensTool`` is a real ``crewai.tools.BaseTool`` an agent can call before committing to a
  final answer. Without an explicit ``context`` it uses the tool outputs that agent received earlier
  in the same task (collected by an active listener); without a ``question`` it uses the task.

How a call is scored (the same rules as every other plugin, see ``Recorder.decide``):

* question = the task description (the task's ``expected_output`` is added when the listener is
  built with ``include_expected_output=True``), never the whole ReAct prompt. Calls outside a task
  (a standalone ``Agent.kickoff``) use the last user message.
* context = the outputs of the tools the agent called in this task, plus the task's ``context``
  (outputs of earlier tasks handed to it by the crew). With context the call gets SGI, without DGI.
* a ReAct turn that only chooses an ``Action`` (or a native function-calling turn that only
  requests tools) is a ``tool_call`` step, skipped; only ``Final Answer`` text or plain text
  answers are scored. The self-check tool's own output is recorded but never used as context.

Why hooks rather than the event bus (crewai 1.15): crewai's ``after_llm_call`` / ``*_tool_call`` /
``execution_*`` hooks run synchronously on the agent's thread, in order, and the LLM hooks are
dispatched by the agent executor itself, so they fire for any ``BaseLLM`` (custom or provider)
whether or not it emits ``LLMCall*Event``. The event bus runs synchronous handlers on a 10-thread
pool, so a tool result can reach a handler after the next LLM call (or the self-check tool) has
already run, and a custom LLM that does not emit the events is invisible to it. One catch: each
agent executor copies the global LLM hooks when it is created and crewai keeps executors across
kickoffs, so the listener also adds its LLM hooks to the executors of a crew when a kickoff starts
and removes them again on :meth:`GroundlensCrewListener.close`.

Scores are triage signals for ranking outputs for human review, never verdicts of truth.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import weakref
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Sequence

from groundlens_core.plugins._common import AI_ROLES, first_user_question, message_role
from groundlens_core.plugins._shell import AdapterShell, InlineScore, handle_internal_errors, lazy_classes, require
from groundlens_core.results import quote_sentence
from groundlens_core.trace.model import META_SINGLE_AGENT, META_TOOL, ContextPiece, new_id
from groundlens_core.trace.recorder import CallRecord

log = logging.getLogger("groundlens.crewai")

FRAMEWORK = "crewai"
EXTRA = "crewai"
SELF_CHECK_TOOL_NAME = "groundlens_self_check"
SELF_CHECK_DESCRIPTION = (
    "Grounding self-check. Call it BEFORE you commit to a final answer: pass your draft answer as "
    "`answer`, and optionally the `question` you are answering and the source text it is based on as "
    "`context`. If you leave out the context, the tool uses the results of the tools you called in this "
    "task; if you leave out the question, it uses your task. It replies with a grounding score and one "
    "instruction: revise when it says FLAGGED or REVIEW, answer when it says OK to answer."
)
#: what crewai puts in a tool result when the tool raised (ReAct and native paths)
_TOOL_ERROR_MARKERS = ("I encountered an error while trying to use the tool", "Error executing tool:")
_LABEL_WORDS = 6
_LABEL_CHARS = 48

#: (agent, task) of the tool call running on this thread / task; set by the listener's before-tool hook
_CURRENT_CALL: ContextVar[tuple[Any, Any] | None] = ContextVar("groundlens_crewai_current_call", default=None)
_ACTIVE: list[GroundlensCrewListener] = []
_ACTIVE_LOCK = threading.Lock()


# ---------------------------------------------------------------- naming


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


# ---------------------------------------------------------------- context store


@dataclass
class _Scope:
    pieces: list[ContextPiece] = field(default_factory=list)
    pending_action: bool = False  # a ReAct Action was recorded; its tool call is not a new tool_call step
    llm_started: float | None = None


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

    def add(self, agent: Any, task: Any, text: str, source: str) -> None:
        if not isinstance(text, str) or not text.strip():
            return
        with self._lock:
            self._scope(agent, task).pieces.append(ContextPiece(text=text, source=source))

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

    # the listener's bookkeeping for ReAct vs native tool turns and LLM timing
    def set_pending_action(self, agent: Any, task: Any, value: bool) -> bool:
        """Set the flag and return its previous value."""
        with self._lock:
            scope = self._scope(agent, task)
            old, scope.pending_action = scope.pending_action, value
            return old

    def mark_llm_start(self, agent: Any, task: Any) -> None:
        with self._lock:
            self._scope(agent, task).llm_started = time.time()

    def take_llm_start(self, agent: Any, task: Any) -> float | None:
        with self._lock:
            scope = self._scopes.get(self.key(agent, task))
            if scope is None:
                return None
            started, scope.llm_started = scope.llm_started, None
            return started


def _task_context_pieces(task: Any) -> list[ContextPiece]:
    """Outputs of earlier tasks the crew handed to ``task`` (its ``context``)."""
    text = getattr(task, "prompt_context", None) if task is not None else None
    if isinstance(text, str) and text.strip():
        return [ContextPiece(text=text.strip(), source="task:context")]
    return []


def _is_tool_error(text: str, raw: Any) -> bool:
    if isinstance(raw, BaseException):
        return True
    if type(raw).__name__ == "ToolFailure":
        return True
    return any(marker in text for marker in _TOOL_ERROR_MARKERS)


def _classify_response(text: str, native: bool) -> tuple[str, str, str | None]:
    """(kind, response, action) of one LLM response, parsed the way crewai's executor parses it."""
    if native:
        return "llm", text.strip(), None
    try:
        from crewai.agents.parser import AgentAction, AgentFinish, parse

        parsed = parse(text)
    except Exception:  # not ReAct-formatted: crewai takes the whole text as the answer
        return "llm", text.strip(), None
    if isinstance(parsed, AgentAction):
        return "tool_call", text.strip(), str(parsed.tool)
    if isinstance(parsed, AgentFinish):
        return "llm", str(parsed.output).strip(), None
    return "llm", text.strip(), None


# ---------------------------------------------------------------- the listener


def _hook_target(self: GroundlensCrewListener, ctx: Any = None, *args: Any, **kwargs: Any) -> tuple[str | None, str]:
    """(trace key, node) of a hook call that failed: the kickoff it belongs to, if one is known."""
    agent, task, crew = getattr(ctx, "agent", None), getattr(ctx, "task", None), getattr(ctx, "crew", None)
    with self._lock:
        key = next(
            (self._kickoffs[id(o)] for o in (task, crew, agent) if o is not None and id(o) in self._kickoffs),
            self._standalone.get(id(agent)),
        )
    return key, node_name(agent, task)


#: every crewai hook: nothing it raises reaches the agent; it is logged and recorded as an error step
_hook = handle_internal_errors(trace_key=_hook_target)


class GroundlensCrewListener(AdapterShell):
    """Scores every agent LLM call of the crews kicked off while it is open; one trace per kickoff.

    Use it as a context manager (or call :meth:`close`) so its hooks are removed afterwards::

        with GroundlensCrewListener() as gl:
            crew.kickoff()
        print(gl.get_trace().summary())

    The constructor is the shell's (:class:`~groundlens_core.plugins._shell.AdapterShell`; ``name``
    defaults to ``"crew"``), plus ``include_expected_output``.
    """

    framework = FRAMEWORK
    extra = EXTRA

    def __init__(
        self,
        *,
        include_expected_output: bool = False,
        **shell: Any,
    ):
        require("crewai", EXTRA, "CrewAI")
        from crewai.hooks.dispatch import InterceptionPoint, register

        super().__init__(**{**shell, "name": shell.get("name") or "crew"})
        self.include_expected_output = include_expected_output
        self.context_store = ContextStore()
        self._lock = threading.Lock()
        self._kickoffs: dict[int, str] = {}  # id(crew) -> trace key of its running kickoff
        self._standalone: dict[int, str] = {}  # id(agent) -> trace key of its task-less Agent.kickoff()
        self._executors: dict[int, weakref.ref] = {}  # executors we added our LLM hooks to
        self._closed = False
        self._hooks = {
            InterceptionPoint.EXECUTION_START: self._on_execution_start,
            InterceptionPoint.EXECUTION_END: self._on_execution_end,
            InterceptionPoint.PRE_MODEL_CALL: self._on_before_llm,
            InterceptionPoint.POST_MODEL_CALL: self._on_after_llm,
            InterceptionPoint.PRE_TOOL_CALL: self._on_before_tool,
            InterceptionPoint.POST_TOOL_CALL: self._on_after_tool,
        }
        for point, hook in self._hooks.items():
            register(point, hook)
        with _ACTIVE_LOCK:
            _ACTIVE.append(self)

    # ------------------------------------------------------------ public API

    def self_check_tool(self, **kwargs: Any) -> Any:
        """A ``GroundlensTool`` bound to this listener's context store and scoring settings."""
        return _tool_class()(listener=self, **kwargs)

    def context_for(self, agent: Any, task: Any) -> tuple[ContextPiece, ...]:
        """What ``agent`` has seen in ``task``: its tool outputs, then the task's context."""
        return tuple(self.context_store.pieces(agent, task)) + tuple(_task_context_pieces(task))

    def question_for(self, task: Any) -> str | None:
        return task_question(task, include_expected_output=self.include_expected_output)

    def close(self) -> None:
        """Remove every hook this listener installed (globally and in agent executors)."""
        if self._closed:
            return
        self._closed = True
        try:
            from crewai.hooks.dispatch import InterceptionPoint, unregister

            for point, hook in self._hooks.items():
                while unregister(point, hook):
                    pass
            llm_points = (InterceptionPoint.PRE_MODEL_CALL, InterceptionPoint.POST_MODEL_CALL)
            with self._lock:
                executors = [ref() for ref in self._executors.values()]
                self._executors.clear()
            for executor in executors:
                if executor is None:
                    continue
                for attr, point in zip(("before_llm_call_hooks", "after_llm_call_hooks"), llm_points):
                    hooks = getattr(executor, attr, None)
                    if isinstance(hooks, list):
                        hooks[:] = [h for h in hooks if h != self._hooks[point]]
        except Exception as exc:  # pragma: no cover - defensive
            self.record_internal_error("close", exc)
        finally:
            with self._lock:
                standalone = list(self._standalone.values())
                self._standalone.clear()
            for key in standalone:
                self.recorder.end_trace(key)
            with _ACTIVE_LOCK:
                if self in _ACTIVE:
                    _ACTIVE.remove(self)
        self.recorder.flush()

    def __enter__(self) -> GroundlensCrewListener:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------ hooks (agent thread; never raise)

    def _trace_key(self, crew: Any, agent: Any, task: Any = None) -> str:
        """The running kickoff a call belongs to, found by its task, then its crew, then its agent
        (an executor reused across crews can carry a stale ``crew``; its ``task`` is always current).
        Calls outside any kickoff get one trace per agent."""
        with self._lock:
            for obj in (task, crew, agent):
                if obj is not None and id(obj) in self._kickoffs:
                    return self._kickoffs[id(obj)]
        if crew is not None:  # a kickoff that started before this listener existed
            key = f"crew:{_ident(crew)}:{new_id()[:8]}"
            with self._lock:
                key = self._kickoffs.setdefault(id(crew), key)
            self.recorder.start_trace(
                key, name=str(getattr(crew, "name", None) or "crew"), metadata={"crew_id": _ident(crew)}
            )
            return key
        with self._lock:
            standalone = self._standalone.get(id(agent))
        return standalone if standalone is not None else self._new_standalone_run(agent)

    def _new_standalone_run(self, agent: Any) -> str:
        """A task-less ``Agent.kickoff()`` began: a trace of its own, and no context from the last one."""
        key = f"agent:{_ident(agent)}:{new_id()[:8]}"
        with self._lock:
            old = self._standalone.get(id(agent))
            self._standalone[id(agent)] = key
        if old is not None:
            self.recorder.end_trace(old)
        self.context_store.clear(agent=agent, task=None)
        self.recorder.start_trace(
            key,
            name=str(getattr(agent, "role", None) or "agent"),
            metadata={"agent_role": getattr(agent, "role", None), META_SINGLE_AGENT: True},
        )
        return key

    @staticmethod
    def _members(crew: Any) -> list[Any]:
        """The crew and its tasks and agents: every object a hook context can point at."""
        members = [crew, *(getattr(crew, "tasks", None) or []), *(getattr(crew, "agents", None) or [])]
        manager = getattr(crew, "manager_agent", None)
        return members + ([manager] if manager is not None else [])

    def _adopt_executors(self, crew: Any) -> None:
        """Add our LLM hooks to executors created before this listener (they copy the global hooks
        once, when they are created, and crewai keeps an agent's executor across kickoffs)."""
        from crewai.hooks.dispatch import InterceptionPoint

        agents = list(getattr(crew, "agents", None) or [])
        manager = getattr(crew, "manager_agent", None)
        if manager is not None:
            agents.append(manager)
        for agent in agents:
            executor = getattr(agent, "agent_executor", None)
            if executor is None:
                continue
            added = False
            for attr, point in (
                ("before_llm_call_hooks", InterceptionPoint.PRE_MODEL_CALL),
                ("after_llm_call_hooks", InterceptionPoint.POST_MODEL_CALL),
            ):
                hooks = getattr(executor, attr, None)
                if isinstance(hooks, list) and self._hooks[point] not in hooks:
                    hooks.append(self._hooks[point])
                    added = True
            if added:
                self._track_executor(executor)

    def _track_executor(self, executor: Any) -> None:
        """Remember an executor holding our LLM hooks, so :meth:`close` can take them out again."""
        if executor is None or id(executor) in self._executors:
            return
        try:
            ref = weakref.ref(executor)
        except TypeError:
            return
        with self._lock:
            self._executors[id(executor)] = ref

    @_hook
    def _on_execution_start(self, ctx: Any) -> None:
        crew = getattr(ctx, "crew", None)
        if crew is None:  # a flow, not a crew
            return
        key = f"crew:{_ident(crew)}:{new_id()[:8]}"
        with self._lock:
            for member in self._members(crew):
                self._kickoffs[id(member)] = key
        for task in getattr(crew, "tasks", None) or []:
            self.context_store.clear(task=task)
        agents = [str(getattr(a, "role", "")) for a in getattr(crew, "agents", None) or []]
        inputs = getattr(ctx, "inputs", None) or {}
        self.recorder.start_trace(
            key,
            name=str(getattr(crew, "name", None) or "crew"),
            metadata={
                "crew_id": _ident(crew),
                "crew_name": getattr(crew, "name", None),
                "agents": agents,
                "tasks": [task_label(t) for t in getattr(crew, "tasks", None) or []],
                "process": str(getattr(getattr(crew, "process", None), "value", getattr(crew, "process", ""))),
                "inputs": {str(k): str(v) for k, v in dict(inputs).items()},
            },
        )
        self._adopt_executors(crew)

    @_hook
    def _on_execution_end(self, ctx: Any) -> None:
        crew = getattr(ctx, "crew", None)
        if crew is None:
            return
        with self._lock:
            key = self._kickoffs.get(id(crew))
            for member in self._members(crew):
                if self._kickoffs.get(id(member)) == key:
                    self._kickoffs.pop(id(member), None)
        if key is None:
            return
        error = getattr(ctx, "error", None)
        failed = getattr(ctx, "status", "completed") == "failed"
        self.recorder.end_trace(
            key, error=(f"{type(error).__name__}: {error}" if error else "failed") if failed else None
        )
        for task in getattr(crew, "tasks", None) or []:
            self.context_store.clear(task=task)

    @_hook
    def _on_before_llm(self, ctx: Any) -> None:
        if self._closed:
            return None
        self._track_executor(getattr(ctx, "executor", None))
        agent, task = getattr(ctx, "agent", None), getattr(ctx, "task", None)
        if (
            agent is not None
            and task is None
            and getattr(ctx, "crew", None) is None
            and not any(message_role(m) in AI_ROLES for m in getattr(ctx, "messages", None) or [])
        ):
            self._new_standalone_run(agent)  # the first call of a new Agent.kickoff()
        self.context_store.mark_llm_start(agent, task)
        return None  # never block the call

    @_hook
    def _on_after_llm(self, ctx: Any) -> None:
        if self._closed:
            return None
        agent, task, crew = getattr(ctx, "agent", None), getattr(ctx, "task", None), getattr(ctx, "crew", None)
        text = getattr(ctx, "response", None)
        if not isinstance(text, str) or agent is None:  # only agents' calls (not planning, summaries)
            return None
        self._track_executor(getattr(ctx, "executor", None))
        state = getattr(getattr(ctx, "executor", None), "state", None)
        native = bool(getattr(state, "use_native_tools", False))
        kind, response, action = _classify_response(text, native)
        question = self.question_for(task)
        if question is None:  # no task: the kickoff's prompt, not crewai's later reminders
            question = first_user_question(getattr(ctx, "messages", None) or [])
        llm = getattr(ctx, "llm", None)
        metadata: dict[str, Any] = {
            "agent_role": getattr(agent, "role", None),
            "task": task_label(task) if task else None,
            "iteration": getattr(ctx, "iterations", None),
            "mode": "native" if native else "react",
        }
        if action:
            metadata["action"] = action
        self.context_store.set_pending_action(agent, task, kind == "tool_call")
        self.recorder.record(
            CallRecord(
                trace_key=self._trace_key(crew, agent, task),
                node=node_name(agent, task),
                kind=kind,
                question=question,
                context=self.context_for(agent, task),
                response=response,
                model=getattr(llm, "model", None) if llm is not None and not isinstance(llm, str) else llm,
                provider=getattr(llm, "provider", None) if llm is not None and not isinstance(llm, str) else None,
                started_at=self.context_store.take_llm_start(agent, task),
                ended_at=time.time(),
                metadata=metadata,
            )
        )
        return None  # never rewrite the agent's response

    @_hook
    def _on_before_tool(self, ctx: Any) -> None:
        agent, task = getattr(ctx, "agent", None), getattr(ctx, "task", None)
        _CURRENT_CALL.set((agent, task))
        if self._closed:
            return None
        if self.context_store.set_pending_action(agent, task, False):
            return None  # the ReAct Action turn that asked for this call is already a step
        # native function calling: the model turn that requested tools never reaches the
        # after-LLM hooks (crewai skips them for tool-call payloads), so it becomes a step here
        name = str(getattr(ctx, "tool_name", "") or "tool")
        args = getattr(ctx, "tool_input", None)
        self.recorder.record(
            CallRecord(
                trace_key=self._trace_key(getattr(ctx, "crew", None), agent, task),
                node=node_name(agent, task),
                kind="tool_call",
                question=self.question_for(task),
                response=f"{name}({_dump(args)})",
                started_at=self.context_store.take_llm_start(agent, task),
                ended_at=time.time(),
                metadata={"agent_role": getattr(agent, "role", None), "action": name, "mode": "native"},
            )
        )
        return None  # never block the tool

    @_hook
    def _on_after_tool(self, ctx: Any) -> None:
        if self._closed:
            return None
        agent, task = getattr(ctx, "agent", None), getattr(ctx, "task", None)
        name = str(getattr(ctx, "tool_name", "") or "tool")
        result = getattr(ctx, "tool_result", None)
        raw = getattr(ctx, "raw_tool_result", None)
        # the raw result: crewai appends format reminders to the text the agent reads
        text = str(raw) if isinstance(raw, (str, int, float)) else ("" if result is None else str(result))
        metadata: dict[str, Any] = {"agent_role": getattr(agent, "role", None), META_TOOL: name}
        error = None
        if name == SELF_CHECK_TOOL_NAME:
            metadata["self_check"] = True  # our own verdict is never context for the agent
        elif _is_tool_error(text, raw):
            error = f"tool {name} failed: {text.strip()[:500]}"
        else:
            self.context_store.add(agent, task, text, f"tool:{name}")
        self.recorder.record(
            CallRecord(
                trace_key=self._trace_key(getattr(ctx, "crew", None), agent, task),
                node=f"{node_name(agent, task)} / {name}",
                kind="tool",
                question=_dump(getattr(ctx, "tool_input", None)),
                response=text,
                error=error,
                ended_at=time.time(),
                metadata=metadata,
            )
        )
        return None  # never rewrite the tool result


def _dump(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    except Exception:
        return str(value)


# ---------------------------------------------------------------- the self-check tool


def _never_cache(_args: Any = None, _result: Any = None) -> bool:
    """crewai's tool cache must never serve a stale self-check: the same answer can score
    differently once the agent has read more sources."""
    return False


_NEED_ANSWER = (
    "groundlens self-check: nothing to check. Call this tool again with `answer` set to your draft "
    "final answer as plain text (optional: `question`, and `context` = the source text it is based on)."
)
_NEED_QUESTION = (
    "groundlens self-check: no question known. Call this tool again with `question` set to the "
    "question your answer responds to (and `answer` = your draft answer)."
)
_INSTRUCTIONS = {
    ("sgi", "flagged"): "FLAGGED: re-read the retrieved source and revise your answer so it is supported by it.",
    (
        "sgi",
        "review",
    ): "REVIEW: check each claim against the source; fix or drop what it does not support, then answer.",
    ("sgi", "trusted"): "OK to answer.",
    (
        "support",
        "flagged",
    ): "FLAGGED: your answer states things the source does not; revise it so every claim comes from the source.",
    ("support", "review"): "REVIEW: check the words the source does not contain; fix or drop them, then answer.",
    ("support", "trusted"): "OK to answer.",
    (
        "dgi",
        "flagged",
    ): "FLAGGED: your answer does not look grounded; look up a source with your tools and revise your answer from it.",
    (
        "dgi",
        "review",
    ): "REVIEW: no source text was available; if you can, look one up and check your answer against it.",
    ("dgi", "trusted"): "OK to answer.",
}


def _answer_text(answer: Any) -> str | None:
    if isinstance(answer, bool) or answer is None:
        return None
    if isinstance(answer, (int, float)):
        return str(answer)
    if isinstance(answer, str) and answer.strip():
        return answer.strip()
    return None


def _context_texts(context: Any) -> list[str]:
    if isinstance(context, str):
        return [context] if context.strip() else []
    if isinstance(context, (list, tuple)):
        return [c for c in context if isinstance(c, str) and c.strip()]
    return []


def self_check(
    answer: Any,
    question: Any = None,
    context: Any = None,
    *,
    listener: GroundlensCrewListener | None = None,
    embedder: Any = None,
    calibration: Any = None,
) -> str:
    """The self-check tool's reply: method, score, triage and one instruction. Never raises."""
    try:
        text = _answer_text(answer)
        if text is None:
            return _NEED_ANSWER
        agent, task = _CURRENT_CALL.get() or (None, None)
        listeners = [listener] if listener is not None else list(_ACTIVE)
        q = question.strip() if isinstance(question, str) and question.strip() else None
        if q is None and task is not None:
            q = listeners[0].question_for(task) if listeners else task_question(task)
        sources: list[ContextPiece] = [ContextPiece(t, "argument:context") for t in _context_texts(context)]
        if not sources and task is not None:
            for lst in listeners:
                sources.extend(p for p in lst.context_for(agent, task) if p not in sources)
            if not listeners:
                sources.extend(_task_context_pieces(task))
        if q is None and not sources:  # with sources, no question is fine: the answer is checked against them
            return _NEED_QUESTION
        scorer: AdapterShell = (
            listener
            if listener is not None and embedder is None and calibration is None
            else _SelfChecker(embedder=embedder, calibration=calibration)
        )
        inline = scorer.score_inline(question=q, response=text, context=sources)
    except Exception as exc:
        inline = InlineScore(None, error=f"{type(exc).__name__}: {exc}")
        log.warning("groundlens: self-check failed: %s", inline.error)
    if inline.score is None:
        return (
            f"groundlens self-check could not score this answer ({inline.error or inline.skipped}). "
            "Check your answer against your sources yourself before answering."
        )
    return _format(inline.score, sources)


class _SelfChecker(AdapterShell):
    """Scores a self-check in line when no listener (or other scoring settings) is given."""

    framework = FRAMEWORK
    extra = EXTRA


def _format(result: Any, sources: Sequence[ContextPiece]) -> str:
    method, triage = result.method, result.triage
    if method in ("sgi", "support"):
        names = sorted({p.source for p in sources})
        basis = f"against {len(sources)} source{'s' if len(sources) != 1 else ''} ({', '.join(names)})"
    else:
        basis = "without source text (no tool results or context to compare with)"
    head = (
        f"groundlens self-check: {triage.upper()} ({method.upper()}={result.value:.2f}, "
        f"normalized {result.normalized:.2f}, scored {basis})."
    )
    lines = [head, _INSTRUCTIONS[(method, triage)]]
    weakest = getattr(getattr(result, "evidence", None), "weakest_sentence", None)
    if weakest is not None:  # name what to fix: the sentence stating most that the source lacks
        missing = ", ".join(dict.fromkeys(u.text for u in weakest.unsupported))
        lines.append(f'Weakest sentence: "{quote_sentence(weakest.text)}" (not in the source: {missing}).')
    lines.append("(A triage signal, not a verdict of truth.)")
    return "\n".join(lines)


def _build_tool() -> type:
    """``GroundlensTool``, built on first access so that importing this module needs no crewai."""
    tools = require("crewai.tools", EXTRA, "CrewAI")
    from pydantic import BaseModel, ConfigDict, Field

    def _require_answer(schema: dict[str, Any]) -> None:
        required = schema.setdefault("required", [])
        if "answer" not in required:
            required.insert(0, "answer")

    class GroundlensSelfCheckArgs(BaseModel):
        """``answer`` is required in the schema the model sees; validation is lenient so that a
        missing, blank or non-text answer gets a plain instruction instead of a validation error."""

        model_config = ConfigDict(json_schema_extra=_require_answer)

        answer: Any = Field(default=None, description="Your draft final answer, as plain text.")
        question: str | None = Field(default=None, description="The question you are answering (default: your task).")
        context: str | None = Field(
            default=None,
            description=(
                "The source text your answer is based on (default: the results of the tools you called in this task)."
            ),
        )

    class GroundlensTool(tools.BaseTool):  # type: ignore[name-defined]
        """Lets an agent check that its draft answer is supported by its sources before answering."""

        name: str = SELF_CHECK_TOOL_NAME
        description: str = SELF_CHECK_DESCRIPTION
        args_schema: type[BaseModel] = GroundlensSelfCheckArgs
        cache_function: Any = _never_cache
        listener: Any = Field(default=None, exclude=True)
        embedder: Any = Field(default=None, exclude=True)
        calibration: Any = Field(default=None, exclude=True)

        def _run(self, answer: Any = None, question: Any = None, context: Any = None, **_: Any) -> str:
            return self_check(
                answer, question, context, listener=self.listener, embedder=self.embedder, calibration=self.calibration
            )

    return GroundlensTool


_built: dict[str, type] = {}
__getattr__ = lazy_classes(__name__, {"GroundlensTool": _build_tool})


def _tool_class() -> Any:
    return __getattr__("GroundlensTool")


__all__ = [
    "ContextStore",
    "GroundlensCrewListener",
    "GroundlensTool",  # noqa: F822 - built on first access (lazy_classes)
    "SELF_CHECK_TOOL_NAME",
    "node_name",
    "self_check",
    "task_label",
    "task_question",
]
