"""CrewAI: the listener that records one trace per crew kickoff, every agent LLM call a step. It
rides crewai's hooks (synchronous, on the agent's thread), not the event bus: docs/integrations/crewai.md."""

from __future__ import annotations

import threading
import time
import weakref
from typing import TYPE_CHECKING, Any

from groundlens_core.errors import describe_exception
from groundlens_core.plugins.crewai.names import (
    _ACTIVE,
    _ACTIVE_LOCK,
    _CURRENT_CALL,
    EXTRA,
    FRAMEWORK,
    SELF_CHECK_TOOL_NAME,
    ContextStore,
    _ident,
    _task_context_pieces,
    agent_scope,
    node_name,
    task_label,
    task_question,
)
from groundlens_core.plugins.crewai.revise import RevisionLinks
from groundlens_core.plugins.crewai.tool import tool_class
from groundlens_core.plugins.kit.revise import REVISION_KEY
from groundlens_core.plugins.kit.shell import (
    AdapterShell,
    ShellOptionsBesideName,
    handle_internal_errors,
    names_shell_options,
    require,
)
from groundlens_core.trace.model import META_SINGLE_AGENT, META_TOOL, ContextPiece, new_id
from groundlens_core.trace.recorder import CallRecord
from groundlens_core.trace.recorder.inputs import AI_ROLES, as_json, first_user_question, message_role

if TYPE_CHECKING:
    from typing import Unpack  # Python 3.11; annotations only

#: what crewai puts in a tool result when the tool raised (ReAct and native paths)
_TOOL_ERROR_MARKERS = ("I encountered an error while trying to use the tool", "Error executing tool:")


def _is_tool_error(text: str, raw: Any) -> bool:
    failed = isinstance(raw, BaseException) or type(raw).__name__ == "ToolFailure"
    return failed or any(marker in text for marker in _TOOL_ERROR_MARKERS)


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


def _hook_target(self: GroundlensCrewListener, ctx: Any = None, *args: Any, **kwargs: Any) -> tuple[str | None, str]:
    """(trace key, node) of a hook call that failed: the kickoff it belongs to, if one is known."""
    agent, task, crew = getattr(ctx, "agent", None), getattr(ctx, "task", None), getattr(ctx, "crew", None)
    with self._lock:
        key = self._kickoff_of(task, crew, agent) or self._standalone.get(id(agent))
    return key, node_name(agent, task)


#: every crewai hook: nothing it raises reaches the agent; it is logged and recorded as an error step
_hook = handle_internal_errors(trace_key=_hook_target)


def _agents(crew: Any) -> list[Any]:
    """The crew's agents and, in a hierarchical crew, its manager."""
    manager = getattr(crew, "manager_agent", None)
    return [*(getattr(crew, "agents", None) or []), *([manager] if manager is not None else [])]


class GroundlensCrewListener(AdapterShell):
    """Scores every agent LLM call of the crews kicked off while it is open; one trace per kickoff.
    Use it as a context manager (or call :meth:`close`) so its hooks are removed afterwards."""

    framework = FRAMEWORK
    extra = EXTRA

    @names_shell_options
    def __init__(
        self,
        *,
        include_expected_output: bool = False,
        name: str | None = None,
        **options: Unpack[ShellOptionsBesideName],
    ):
        require("crewai", EXTRA, "CrewAI")
        from crewai.hooks.dispatch import InterceptionPoint, register

        super().__init__(name=name or "crew", **options)
        self._given_name: str | None = name or None  # names every trace when given
        self.include_expected_output = include_expected_output
        self.context_store = ContextStore()
        #: final answers and the revisions a ``GroundlensGuardrail`` asked for (docs/revise.md)
        self.revisions = RevisionLinks()
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
        #: the executor attributes that hold crewai's LLM hooks, each with our hook for it
        self._executor_hooks = (
            ("before_llm_call_hooks", self._on_before_llm),
            ("after_llm_call_hooks", self._on_after_llm),
        )
        for point, hook in self._hooks.items():
            register(point, hook)
        with _ACTIVE_LOCK:
            _ACTIVE.append(self)

    def self_check_tool(self, **kwargs: Any) -> Any:
        """A ``GroundlensTool`` bound to this listener's context store and scoring settings."""
        return tool_class()(listener=self, **kwargs)

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
            from crewai.hooks.dispatch import unregister

            for point, hook in self._hooks.items():
                while unregister(point, hook):
                    pass
            with self._lock:
                executors = [ref() for ref in self._executors.values()]
                self._executors.clear()
            for executor in executors:
                for attr, ours in self._executor_hooks:
                    hooks = getattr(executor, attr, None)
                    if isinstance(hooks, list):
                        hooks[:] = [h for h in hooks if h != ours]
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

    def _trace_key(self, crew: Any, agent: Any, task: Any = None) -> str:
        """The running kickoff a call belongs to, by its task, crew, then agent (a reused executor can
        carry a stale ``crew``); calls outside any kickoff get one trace per agent."""
        with self._lock:
            running = self._kickoff_of(task, crew, agent)
        if running is not None:
            return running
        if crew is not None:  # a kickoff that started before this listener existed
            key = f"crew:{_ident(crew)}:{new_id()[:8]}"
            with self._lock:
                key = self._kickoffs.setdefault(id(crew), key)
            self.recorder.start_trace(
                key, name=self._trace_name(getattr(crew, "name", None), "crew"), metadata={"crew_id": _ident(crew)}
            )
            return key
        with self._lock:
            standalone = self._standalone.get(id(agent))
        return standalone if standalone is not None else self._new_standalone_run(agent)

    def _trace_name(self, own: Any, default: str) -> str:
        """The listener's ``name=`` when it was given, else the crew's name (a standalone agent's
        role), else ``default``."""
        return str(self._given_name or own or default)

    def _kickoff_of(self, *objs: Any) -> str | None:
        """The trace key of the running kickoff of the first of ``objs`` that has one (caller holds the lock)."""
        return next((self._kickoffs[id(o)] for o in objs if o is not None and id(o) in self._kickoffs), None)

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
            name=self._trace_name(getattr(agent, "role", None), "agent"),
            metadata={"agent_role": getattr(agent, "role", None), META_SINGLE_AGENT: True},
        )
        return key

    @staticmethod
    def _members(crew: Any) -> list[Any]:
        """The crew and its tasks and agents: every object a hook context can point at."""
        return [crew, *(getattr(crew, "tasks", None) or []), *_agents(crew)]

    def _adopt_executors(self, crew: Any) -> None:
        """Add our LLM hooks to executors created before this listener (they copy the global hooks
        once, when they are created, and crewai keeps an agent's executor across kickoffs)."""
        for agent in _agents(crew):
            executor = getattr(agent, "agent_executor", None)
            for attr, ours in self._executor_hooks:
                hooks = getattr(executor, attr, None)
                if isinstance(hooks, list) and ours not in hooks:
                    hooks.append(ours)
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
        self.recorder.start_trace(
            key,
            name=self._trace_name(getattr(crew, "name", None), "crew"),
            metadata={
                "crew_id": _ident(crew),
                "crew_name": getattr(crew, "name", None),
                "agents": [str(getattr(a, "role", "")) for a in getattr(crew, "agents", None) or []],
                "tasks": [task_label(t) for t in getattr(crew, "tasks", None) or []],
                "process": str(getattr(getattr(crew, "process", None), "value", getattr(crew, "process", ""))),
                "inputs": {str(k): str(v) for k, v in dict(getattr(ctx, "inputs", None) or {}).items()},
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
        self.recorder.end_trace(key, error=(describe_exception(error) if error else "failed") if failed else None)
        for task in getattr(crew, "tasks", None) or []:
            self.context_store.clear(task=task)

    def _record(self, ctx: Any, kind: str, **fields: Any) -> str:
        """Record a step of the hook context's agent in its task; returns its step id ("" when not
        recorded). A model turn (``llm``, ``tool_call``) started with the agent's LLM call; a
        ``tool_call`` turn is the parent of the tool steps it asks for."""
        agent, task = getattr(ctx, "agent", None), getattr(ctx, "task", None)
        fields.setdefault("node", node_name(agent, task))
        fields.setdefault("parent_id", agent_scope(agent, task))
        if kind != "tool":
            fields["started_at"] = self.context_store.swap(agent, task, llm_started=None).llm_started
        revising = self.revisions.take(agent, task) if kind == "llm" else None
        if revising is not None:  # a guardrail sent the last answer back: this one answers again
            fields["revision_of"] = revising[0]
            fields["metadata"] = {**fields.get("metadata", {}), REVISION_KEY: revising[1]}
        key = self._trace_key(getattr(ctx, "crew", None), agent, task)
        step_id = self.recorder.record(CallRecord(trace_key=key, kind=kind, ended_at=time.time(), **fields))
        if kind == "tool_call":
            self.context_store.swap(agent, task, call_step=step_id)
        elif kind == "llm":
            self.revisions.answered(agent, task, fields.get("response"), step_id)
        return step_id

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
        self.context_store.swap(agent, task, llm_started=time.time())
        return None  # never block the call

    @_hook
    def _on_after_llm(self, ctx: Any) -> None:
        if self._closed:
            return None
        agent, task = getattr(ctx, "agent", None), getattr(ctx, "task", None)
        text = getattr(ctx, "response", None)
        if not isinstance(text, str) or agent is None:  # only agents' calls (not planning, summaries)
            return None
        self._track_executor(getattr(ctx, "executor", None))
        state = getattr(getattr(ctx, "executor", None), "state", None)
        native = bool(getattr(state, "use_native_tools", False))
        kind, response, action = _classify_response(text, native)
        # no task: the kickoff's prompt, not crewai's later reminders
        question = self.question_for(task) or first_user_question(getattr(ctx, "messages", None) or [])
        llm = getattr(ctx, "llm", None)
        metadata: dict[str, Any] = {
            "agent_role": getattr(agent, "role", None),
            "task": task_label(task) if task else None,
            "iteration": getattr(ctx, "iterations", None),
            "mode": "native" if native else "react",
        }
        if action:
            metadata["action"] = action
        self.context_store.swap(agent, task, pending_action=kind == "tool_call")
        plain = llm is not None and not isinstance(llm, str)
        self._record(
            ctx,
            kind,
            question=question,
            context=self.context_for(agent, task),
            response=response,
            model=getattr(llm, "model", None) if plain else llm,
            provider=getattr(llm, "provider", None) if plain else None,
            metadata=metadata,
        )
        return None  # never rewrite the agent's response

    @_hook
    def _on_before_tool(self, ctx: Any) -> None:
        agent, task = getattr(ctx, "agent", None), getattr(ctx, "task", None)
        _CURRENT_CALL.set((agent, task))
        if self._closed:
            return None
        if self.context_store.swap(agent, task, pending_action=False).pending_action:
            return None  # the ReAct Action turn that asked for this call is already a step
        # native function calling: the model turn that requested tools never reaches the
        # after-LLM hooks (crewai skips them for tool-call payloads), so it becomes a step here
        name = str(getattr(ctx, "tool_name", "") or "tool")
        args = getattr(ctx, "tool_input", None)
        self._record(
            ctx,
            "tool_call",
            question=self.question_for(task),
            response=f"{name}({as_json(args)})",
            metadata={"agent_role": getattr(agent, "role", None), "action": name, "mode": "native"},
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
        step_id = ""
        try:
            step_id = self._record(
                ctx,
                "tool",
                node=f"{node_name(agent, task)} / {name}",
                question=as_json(getattr(ctx, "tool_input", None)),
                response=text,
                error=error,
                parent_id=self.context_store.swap(agent, task).call_step or agent_scope(agent, task),
                metadata=metadata,
            )
        finally:  # recorded first, so the piece names its tool step; context for later calls either way
            if name != SELF_CHECK_TOOL_NAME and error is None:
                self.context_store.add(agent, task, text, f"tool:{name}", producer=step_id or None)
        return None  # never rewrite the tool result
