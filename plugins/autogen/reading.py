"""AutoGen AgentChat: model requests and conversations read into call records, shared by the three
adapters (docs/integrations/autogen.md). Imports AutoGen only when called."""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from groundlens_core.plugins.kit.shell import AdapterShell, ShellOptions, names_shell_options, parse_usage, require
from groundlens_core.trace.model import ContextPiece
from groundlens_core.trace.recorder import CallRecord, Recorder
from groundlens_core.trace.recorder.inputs import as_text, context_from, short, trace_scope

if TYPE_CHECKING:
    from typing import Unpack  # Python 3.11; annotations only

FRAMEWORK = "autogen"
EXTRA = "autogen"
DEFAULT_TRACE_KEY = "autogen"
DEFAULT_QUESTION_SOURCES: tuple[str, ...] = ("user",)

_TRACE_KEY: contextvars.ContextVar[str | None] = contextvars.ContextVar("groundlens_autogen_trace", default=None)


def _agentchat() -> Any:
    return require("autogen_agentchat.messages", EXTRA, "AutoGen AgentChat")


def _core_models() -> Any:
    return require("autogen_core.models", EXTRA, "AutoGen")


def groundlens_trace(
    recorder: Recorder, name: str | None = None, *, metadata: dict[str, Any] | None = None
) -> contextlib.AbstractContextManager[str]:
    """Send the steps of every wrapped client using ``recorder`` to a new trace while inside (wrap
    one ``team.run``); yields the trace key."""
    return trace_scope(recorder, _TRACE_KEY, lambda key: key, name=name, metadata=metadata)


def turn_id(first_step: str) -> str:
    """The parent of every step of one agent turn: ``turn:`` and the id of the turn's first message
    (or first model call)."""
    return f"turn:{first_step}"


def _content_text(content: Any) -> str | None:
    """Text of a message content: a string, or the string parts of a multimodal list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [c for c in content if isinstance(c, str) and c.strip()]
        return "\n\n".join(parts) if parts else None
    return None


def request_question_and_context(
    messages: Sequence[Any],
    question_sources: Sequence[str] | None = DEFAULT_QUESTION_SOURCES,
    agent_messages_as_context: bool = True,
) -> tuple[str | None, list[ContextPiece]]:
    """(question, context) of one model request (a list of ``LLMMessage``)."""
    models = _core_models()
    users = [i for i, m in enumerate(messages) if isinstance(m, models.UserMessage)]
    chosen = None
    if question_sources is not None:
        wanted = set(question_sources)
        chosen = next((i for i in reversed(users) if getattr(messages[i], "source", None) in wanted), None)
    if chosen is None and users:
        chosen = users[-1]
    if chosen is None:
        return None, []
    question = _content_text(messages[chosen].content)
    pieces: list[ContextPiece] = []
    for m in messages[chosen + 1 :]:
        if isinstance(m, models.FunctionExecutionResultMessage):
            for r in m.content:
                if isinstance(r.content, str) and r.content.strip():
                    pieces.append(ContextPiece(text=r.content, source=f"tool:{r.name or 'tool'}"))
        elif agent_messages_as_context and isinstance(m, models.UserMessage):
            text = _content_text(m.content)
            if text and text.strip():
                pieces.append(ContextPiece(text=text, source=f"agent:{m.source}"))
    return question, context_from(pieces)


def _agent_from_request(messages: Sequence[Any]) -> str | None:
    models = _core_models()
    for m in reversed(list(messages)):
        if isinstance(m, models.AssistantMessage) and getattr(m, "source", None):
            return str(m.source)
    return None


@dataclass
class _Piece:
    piece: ContextPiece
    agent: str | None  # set for another agent's answer: not context for that agent itself


class _Conversation:
    """Walks AgentChat messages in order, keeping the task and the context so far; emits CallRecords
    for the steps they stand for."""

    def __init__(self, question_sources: Sequence[str] | None, agent_messages_as_context: bool):
        self.question_sources = set(question_sources or ())
        self.agent_messages_as_context = agent_messages_as_context
        self.question: str | None = None
        self.pieces: list[_Piece] = []
        self._seen_chat = False
        self._turn_source: str | None = None  # the agent whose turn it is
        self._turn: str | None = None
        self._turns = 0

    def _turn_of(self, msg: Any, src: str) -> str:
        """The turn a message belongs to: a new one when another agent speaks (or after the task)."""
        if self._turn is None or src != self._turn_source:
            self._turns += 1
            self._turn_source = src
            self._turn = turn_id(str(getattr(msg, "id", "") or "") or str(self._turns))
        return self._turn

    def context_for(self, source: str | None) -> list[ContextPiece]:
        return context_from([p.piece for p in self.pieces if p.agent is None or p.agent != source])

    def _add(self, text: Any, source: str, agent: str | None = None, producer: str | None = None) -> None:
        """Keep ``text`` as context for later steps; ``producer`` is the id of the step it is the
        result or answer of (the id given to that step's record)."""
        if isinstance(text, str) and text.strip():
            self.pieces.append(_Piece(ContextPiece(text=text, source=source, producer=producer), agent))

    def feed(self, msg: Any, trace_key: str) -> list[CallRecord]:
        m = _agentchat()
        src = str(getattr(msg, "source", "") or "agent")
        meta: dict[str, Any] = {"message_type": type(msg).__name__}
        usage = parse_usage(getattr(msg, "models_usage", None))
        own_id = str(getattr(msg, "id", "") or "") or None  # the id of the step the message becomes

        def rec(**kw: Any) -> CallRecord:
            base: dict[str, Any] = dict(
                trace_key=trace_key,
                node=src,
                question=self.question,
                usage=usage,
                metadata=meta,
                step_id=own_id,
                parent_id=self._turn_of(msg, src),
            )
            base.update(kw)
            return CallRecord(**base)

        if isinstance(msg, m.StopMessage):
            return []
        if isinstance(msg, m.ToolCallRequestEvent):
            meta["calls"] = [getattr(c, "name", "?") for c in msg.content]
            meta["arguments"] = [short(getattr(c, "arguments", "")) for c in msg.content]
            return [rec(kind="tool_call")]
        if isinstance(msg, m.ToolCallExecutionEvent):
            out = []
            for i, r in enumerate(msg.content):
                tool_step = f"{own_id}:{i}" if own_id else None
                self._add(r.content, f"tool:{r.name or 'tool'}", producer=tool_step)
                out.append(
                    rec(
                        kind="tool",
                        node=r.name or src,
                        response=r.content,
                        step_id=tool_step,
                        metadata=dict(meta, agent=src, is_error=bool(r.is_error)),
                    )
                )
            return out
        if isinstance(msg, m.ToolCallSummaryMessage):
            results = getattr(msg, "results", None) or []
            for r in results:
                self._add(r.content, f"tool:{r.name or 'tool'}", producer=own_id)
            if not results:
                self._add(msg.content, f"tool:{src}", producer=own_id)
            return [rec(kind="tool", response=msg.content)]
        if isinstance(msg, m.MemoryQueryEvent):
            for item in msg.content:
                self._add(as_text(getattr(item, "content", None)), "memory", producer=own_id)
            return [rec(kind="retrieval", response=as_text([getattr(i, "content", None) for i in msg.content]))]
        if isinstance(msg, m.CodeExecutionEvent):
            output = getattr(getattr(msg, "result", None), "output", None)
            self._add(output, "tool:code_execution", producer=own_id)
            return [rec(kind="tool", response=output if isinstance(output, str) else None)]
        if isinstance(msg, m.HandoffMessage):
            meta["target"] = msg.target
            return [rec(kind="agent", response=None)]
        if isinstance(msg, m.BaseChatMessage):
            return self._chat(msg, m, src, meta, rec)
        return []  # thoughts, streaming chunks, speaker selection: nothing to score

    def _chat(self, msg: Any, m: Any, src: str, meta: dict[str, Any], rec: Any) -> list[CallRecord]:
        # the task: a message from a question source; with no sources given, the first chat message
        is_task = src in self.question_sources if self.question_sources else not self._seen_chat
        self._seen_chat = True
        if isinstance(msg, m.MultiModalMessage):
            text = None  # images are not scored; the text beside them is not the whole answer
            task_text = _content_text(msg.content)
        elif isinstance(msg, m.BaseTextChatMessage):
            text = task_text = msg.content
        else:  # StructuredMessage and custom chat messages
            try:
                text = task_text = msg.to_model_text()
            except Exception:
                text = task_text = None
        if is_task:
            self._turn_source = None  # the next answer opens a new turn
            if task_text and task_text.strip():
                self.question = task_text
                self.pieces = []
            return []
        record = rec(kind="llm", response=text, context=self.context_for(src))
        if text is None:
            meta["skip_note"] = f"{type(msg).__name__} has no scorable text"
        elif self.agent_messages_as_context:
            self._add(text, f"agent:{src}", agent=src, producer=record.step_id)
        return [record]


def _messages_of(obj: Any) -> list[Any]:
    messages = getattr(obj, "messages", None)
    if messages is not None and not isinstance(obj, (list, tuple)):
        return list(messages)
    return list(obj)


class _AutoGenShell(AdapterShell):
    """The shell with AutoGen's two reading options (``question_sources``, ``agent_messages_as_context``)."""

    framework = FRAMEWORK
    extra = EXTRA

    @names_shell_options
    def __init__(
        self,
        *,
        question_sources: Sequence[str] | None = DEFAULT_QUESTION_SOURCES,
        agent_messages_as_context: bool = True,
        **options: Unpack[ShellOptions],
    ):
        self.question_sources = None if question_sources is None else tuple(question_sources)
        self.agent_messages_as_context = agent_messages_as_context
        super().__init__(**options)

    def _conversation(self) -> _Conversation:
        return _Conversation(self.question_sources, self.agent_messages_as_context)

    def _to_config(self, **given: Any) -> Any:
        """The component config (for the adapters that are AutoGen components): each field of its
        schema not ``given`` is the attribute of the same name."""
        schema = self.component_config_schema  # type: ignore[attr-defined]
        return schema(**{name: getattr(self, name) for name in schema.model_fields if name not in given}, **given)

    @classmethod
    def _from_config(cls, config: Any) -> Any:
        return cls(**dict(config))
