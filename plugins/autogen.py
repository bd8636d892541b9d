"""AutoGen AgentChat 0.7: score agents' answers, live through their model clients or after a run.

Three ways in, all writing :class:`~groundlens_core.trace.Trace` steps through a :class:`Recorder`:

* :class:`GroundlensChatCompletionClient` wraps any ``ChatCompletionClient``. Every ``create`` /
  ``create_stream`` result is returned unchanged and at once; it is scored in the background.
  AutoGen does not tell a model client which agent is calling, so wrap **one client per agent** and
  name it (``agent_name=``); share one ``recorder`` between the wrappers of a team::

      recorder = Recorder("autogen")
      researcher = AssistantAgent("researcher", tools=[...],
          model_client=GroundlensChatCompletionClient(client, agent_name="researcher", recorder=recorder))

  Steps go to the trace ``trace_key`` (default ``"autogen"``), or to the trace opened by
  ``with groundlens_trace(recorder, "run 1"):`` around ``await team.run(...)``.

* :class:`GroundlensChecker` reads a finished run: ``checker.check(task_result)``,
  ``checker.check_messages(messages)``, or ``async for m in checker.check_stream(team.run_stream(...))``
  (yields every item through; ``await checker.check_stream(...)`` consumes it and returns the trace).

* :class:`GroundlensFlaggedTermination` is a real ``TerminationCondition``: it scores each answer as
  the team produces it and stops the team on a flagged one.

The question of an answer is the task: the last message from one of ``question_sources`` (default
``("user",)``, AutoGen's source for a task given as text), else the last user message of any source.
Its context is every tool result since then (``FunctionExecutionResult``, ``ToolCallExecutionEvent``,
``ToolCallSummaryMessage``, memory and code-execution results) and, with
``agent_messages_as_context=True`` (default), the answers other agents gave since then: what a later
agent builds on. With no context the answer gets DGI, otherwise SGI.

Messages with no text (tool calls only, images) become ``skipped`` steps. Scores are triage signals
for ranking answers for human review, not verdicts of truth. Nothing raised inside groundlens reaches
the agents or the team: failures are logged and recorded as ``error`` steps.

The framework is imported lazily: importing this module works without AutoGen; the two classes that
subclass AutoGen types are built on first access and then raise the install hint if it is missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Iterable, Iterator, Sequence

from groundlens_core.plugins._common import as_text, context_from, short
from groundlens_core.plugins._shell import AdapterShell, handle_internal_errors, lazy_classes, parse_usage, require
from groundlens_core.trace.model import ContextPiece, Trace, new_id
from groundlens_core.trace.recorder import CallRecord, Recorder

log = logging.getLogger("groundlens.autogen")

FRAMEWORK = "autogen"
EXTRA = "autogen"
DEFAULT_TRACE_KEY = "autogen"
DEFAULT_QUESTION_SOURCES: tuple[str, ...] = ("user",)

_TRACE_KEY: contextvars.ContextVar[str | None] = contextvars.ContextVar("groundlens_autogen_trace", default=None)


def _agentchat() -> Any:
    return require("autogen_agentchat.messages", EXTRA, "AutoGen AgentChat")


def _core_models() -> Any:
    return require("autogen_core.models", EXTRA, "AutoGen")


@contextlib.contextmanager
def groundlens_trace(
    recorder: Recorder, name: str | None = None, *, metadata: dict[str, Any] | None = None
) -> Iterator[str]:
    """Send the steps of every wrapped client that uses ``recorder`` to a new trace while inside.

    Wrap the ``await team.run(...)`` (or ``run_stream``) of one run; yields the trace key.
    """
    key = new_id()
    recorder.start_trace(key, name=name, metadata=metadata)
    token = _TRACE_KEY.set(key)
    error: str | None = None
    try:
        yield key
    except BaseException as exc:
        error = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        _TRACE_KEY.reset(token)
        recorder.end_trace(key, error=error)


def _content_text(content: Any) -> str | None:
    """Text of a message content: a string, or the string parts of a multimodal list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [c for c in content if isinstance(c, str) and c.strip()]
        return "\n\n".join(parts) if parts else None
    return None


# ---------------------------------------------------------------- model-client requests


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


# ---------------------------------------------------------------- conversations (chat messages)


@dataclass
class _Piece:
    piece: ContextPiece
    agent: str | None  # set for another agent's answer: not context for that agent itself


class _Conversation:
    """Walks AgentChat messages in order, keeping the task and the context so far; emits CallRecords
    (without a trace key) for the steps they stand for."""

    def __init__(self, question_sources: Sequence[str] | None, agent_messages_as_context: bool):
        self.question_sources = set(question_sources or ())
        self.agent_messages_as_context = agent_messages_as_context
        self.question: str | None = None
        self.pieces: list[_Piece] = []
        self._seen_chat = False

    def context_for(self, source: str | None) -> list[ContextPiece]:
        return context_from([p.piece for p in self.pieces if p.agent is None or p.agent != source])

    def _add(self, text: Any, source: str, agent: str | None = None) -> None:
        if isinstance(text, str) and text.strip():
            self.pieces.append(_Piece(ContextPiece(text=text, source=source), agent))

    def feed(self, msg: Any) -> list[CallRecord]:
        m = _agentchat()
        src = str(getattr(msg, "source", "") or "agent")
        kind_name = type(msg).__name__
        meta: dict[str, Any] = {"message_type": kind_name}
        usage = parse_usage(getattr(msg, "models_usage", None))

        def rec(**kw: Any) -> CallRecord:
            base: dict[str, Any] = dict(
                trace_key="",
                node=src,
                question=self.question,
                usage=usage,
                metadata=meta,
                step_id=str(getattr(msg, "id", "") or "") or None,
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
                self._add(r.content, f"tool:{r.name or 'tool'}")
                out.append(
                    rec(
                        kind="tool",
                        node=r.name or src,
                        response=r.content,
                        step_id=f"{msg.id}:{i}" if getattr(msg, "id", None) else None,
                        metadata=dict(meta, agent=src, is_error=bool(r.is_error)),
                    )
                )
            return out
        if isinstance(msg, m.ToolCallSummaryMessage):
            results = getattr(msg, "results", None) or []
            for r in results:
                self._add(r.content, f"tool:{r.name or 'tool'}")
            if not results:
                self._add(msg.content, f"tool:{src}")
            return [rec(kind="tool", response=msg.content)]
        if isinstance(msg, m.MemoryQueryEvent):
            for item in msg.content:
                self._add(as_text(getattr(item, "content", None)), "memory")
            return [rec(kind="retrieval", response=as_text([getattr(i, "content", None) for i in msg.content]))]
        if isinstance(msg, m.CodeExecutionEvent):
            output = getattr(getattr(msg, "result", None), "output", None)
            self._add(output, "tool:code_execution")
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
            if task_text and task_text.strip():
                self.question = task_text
                self.pieces = []
            return []
        record = rec(kind="llm", response=text, context=self.context_for(src))
        if text is None:
            meta["skip_note"] = f"{type(msg).__name__} has no scorable text"
        elif self.agent_messages_as_context:
            self._add(text, f"agent:{src}", agent=src)
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

    def __init__(
        self,
        *,
        question_sources: Sequence[str] | None = DEFAULT_QUESTION_SOURCES,
        agent_messages_as_context: bool = True,
        **shell: Any,
    ):
        self.question_sources = None if question_sources is None else tuple(question_sources)
        self.agent_messages_as_context = agent_messages_as_context
        super().__init__(**shell)

    def _conversation(self) -> _Conversation:
        return _Conversation(self.question_sources, self.agent_messages_as_context)


class GroundlensChecker(_AutoGenShell):
    """Scores the answers in a finished (or streaming) AgentChat run; one trace per check.

    The constructor is the shell's (:class:`~groundlens_core.plugins._shell.AdapterShell`), plus
    ``question_sources`` and ``agent_messages_as_context``.
    """

    def __init__(self, **kwargs: Any):
        _agentchat()
        super().__init__(**kwargs)

    def _observe(self, conv: _Conversation, key: str, msg: Any) -> None:
        records: list[CallRecord] = []
        with handle_internal_errors(
            self, f"reading a {type(msg).__name__}", trace_key=key, node=str(getattr(msg, "source", "agent"))
        ):
            records = conv.feed(msg)
        for r in records:
            self.recorder.record(dataclasses.replace(r, trace_key=key))

    def check_messages(
        self, messages: Iterable[Any], *, name: str | None = None, stop_reason: str | None = None
    ) -> Trace:
        """Record and score a run's messages; returns the trace once scored."""
        key = new_id()
        meta = {"stop_reason": stop_reason} if stop_reason is not None else None
        self.recorder.start_trace(key, name=name or self.name, metadata=meta)
        conv = self._conversation()
        for msg in messages:
            self._observe(conv, key, msg)
        self.recorder.end_trace(key)
        return self.recorder.get_trace(key)  # type: ignore[return-value]

    def check(self, task_result: Any, *, name: str | None = None) -> Trace:
        """Record and score a ``TaskResult`` (from ``team.run`` / ``agent.run``)."""
        return self.check_messages(
            _messages_of(task_result), name=name, stop_reason=getattr(task_result, "stop_reason", None)
        )

    def check_stream(self, stream: Any, *, name: str | None = None) -> CheckedStream:
        """Follow a ``run_stream``: ``async for`` yields every item through, ``await`` returns the trace."""
        return CheckedStream(self, stream, name)


class CheckedStream:
    """A ``run_stream`` passed through a checker. Iterate it once, or await it."""

    def __init__(self, checker: GroundlensChecker, stream: Any, name: str | None):
        self._checker = checker
        self._stream = stream
        self._name = name
        self.key: str | None = None
        self.task_result: Any = None

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Any]:
        checker, recorder = self._checker, self._checker.recorder
        self.key = key = new_id()
        recorder.start_trace(key, name=self._name or checker.name)
        conv = checker._conversation()
        error: str | None = None
        try:
            async for item in self._stream:
                with handle_internal_errors(checker, "observing a stream item", trace_key=key):
                    if hasattr(item, "stop_reason") and hasattr(item, "messages"):  # the final TaskResult
                        self.task_result = item
                        recorder.annotate_trace(key, {"stop_reason": item.stop_reason})
                    elif hasattr(item, "chat_message") and hasattr(item, "inner_messages"):  # an agent's Response
                        checker._observe(conv, key, item.chat_message)
                    else:
                        checker._observe(conv, key, item)
                yield item
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            recorder.end_trace(key, error=error)

    async def _consume(self) -> Trace | None:
        async for _ in self:
            pass
        return await asyncio.to_thread(self._checker.recorder.get_trace, self.key)

    def __await__(self):
        return self._consume().__await__()

    @property
    def trace(self) -> Trace | None:
        """The trace so far (after pending scores are done)."""
        return None if self.key is None else self._checker.recorder.get_trace(self.key)


# ---------------------------------------------------------------- the model-client wrapper


class _ClientTranslation(_AutoGenShell):
    """What :class:`GroundlensChatCompletionClient` does; the AutoGen base classes are added on
    first access (see :func:`_build_client`)."""

    def __init__(
        self, client: Any, *, agent_name: str | None = None, trace_key: str = DEFAULT_TRACE_KEY, **kwargs: Any
    ):
        self._client = client
        self.agent_name = agent_name
        self.trace_key = trace_key
        super().__init__(**kwargs)

    @property
    def wrapped(self) -> Any:
        return self._client

    # -------------------------------------------------- the two calls we watch

    async def create(self, messages: Sequence[Any], **kwargs: Any) -> Any:
        started = time.time()
        try:
            result = await self._client.create(messages, **kwargs)
        except Exception as exc:
            self._record(messages, None, started, error=f"the model call raised {type(exc).__name__}: {exc}")
            raise
        self._record(messages, result, started)
        return result

    async def create_stream(self, messages: Sequence[Any], **kwargs: Any) -> AsyncIterator[Any]:
        models = _core_models()
        started = time.time()
        final = None
        error: str | None = None
        try:
            async for chunk in self._client.create_stream(messages, **kwargs):
                if isinstance(chunk, models.CreateResult):
                    final = chunk
                yield chunk
        except Exception as exc:
            error = f"the model call raised {type(exc).__name__}: {exc}"
            raise
        finally:
            self._record(messages, final, started, error=error, streaming=True)

    def _record(
        self, messages: Sequence[Any], result: Any, started: float, *, error: str | None = None, streaming: bool = False
    ) -> None:
        """Cheap: read the request and result, queue a CallRecord. Never raises."""
        ended = time.time()
        key = _TRACE_KEY.get() or self.trace_key
        with handle_internal_errors(self, "record a model call", trace_key=key, node=self.agent_name or "assistant"):
            node = self.agent_name or _agent_from_request(messages) or "assistant"
            question, pieces = request_question_and_context(
                messages, self.question_sources, self.agent_messages_as_context
            )
            meta: dict[str, Any] = {"client": type(self._client).__name__}
            if streaming:
                meta["streaming"] = True
            kind, response = "llm", None
            if result is not None:
                content = result.content
                if isinstance(content, str):
                    response = content
                else:
                    kind = "tool_call"
                    meta["calls"] = [getattr(c, "name", "?") for c in content or []]
                if getattr(result, "finish_reason", None):
                    meta["finish_reason"] = result.finish_reason
            elif error is None:
                meta["skip_note"] = "the stream ended without a result"
            self.recorder.record(
                CallRecord(
                    trace_key=key,
                    node=node,
                    kind=kind,
                    question=question,
                    context=pieces,
                    response=response,
                    model=self._model_name(),
                    provider=type(self._client).__name__,
                    usage=parse_usage(getattr(result, "usage", None)),
                    started_at=started,
                    ended_at=ended,
                    error=error,
                    metadata=meta,
                )
            )

    def _model_name(self) -> str | None:
        for attr in ("model", "_model", "model_name"):
            value = getattr(self._client, attr, None)
            if isinstance(value, str):
                return value
        args = getattr(self._client, "_create_args", None)
        if isinstance(args, dict) and isinstance(args.get("model"), str):
            return args["model"]
        try:
            family = self._client.model_info.get("family")
        except Exception:
            family = None
        return str(family) if family else None

    def get_trace(self, key: str | None = None, *, timeout: float | None = None) -> Trace | None:
        """The trace ``key`` (default: this wrapper's ``trace_key``), once scored."""
        if isinstance(key, (int, float)) and not isinstance(key, bool):
            key, timeout = None, float(key)
        return super().get_trace(key or self.trace_key, timeout=timeout)

    # -------------------------------------------------- delegated unchanged

    async def close(self) -> None:
        await self._client.close()

    def actual_usage(self) -> Any:
        return self._client.actual_usage()

    def total_usage(self) -> Any:
        return self._client.total_usage()

    def count_tokens(self, messages: Sequence[Any], **kwargs: Any) -> int:
        return self._client.count_tokens(messages, **kwargs)

    def remaining_tokens(self, messages: Sequence[Any], **kwargs: Any) -> int:
        return self._client.remaining_tokens(messages, **kwargs)

    @property
    def capabilities(self) -> Any:  # deprecated in AutoGen, kept for old callers
        return self._client.capabilities

    @property
    def model_info(self) -> Any:
        return self._client.model_info

    def __getattr__(self, name: str) -> Any:
        # only reached for attributes this class lacks: e.g. ReplayChatCompletionClient.reset
        client = self.__dict__.get("_client")
        if client is None:
            raise AttributeError(name)
        return getattr(client, name)

    def _to_config(self) -> Any:
        return self.component_config_schema(  # type: ignore[attr-defined]
            client=self._client.dump_component(),
            agent_name=self.agent_name,
            trace_key=self.trace_key,
            question_sources=None if self.question_sources is None else list(self.question_sources),
            agent_messages_as_context=self.agent_messages_as_context,
        )

    @classmethod
    def _from_config(cls, config: Any) -> Any:
        return cls(
            _core_models().ChatCompletionClient.load_component(config.client),
            agent_name=config.agent_name,
            trace_key=config.trace_key,
            question_sources=config.question_sources,
            agent_messages_as_context=config.agent_messages_as_context,
        )


# ---------------------------------------------------------------- the termination condition


class _TerminationTranslation(_AutoGenShell):
    """What :class:`GroundlensFlaggedTermination` does; the AutoGen base classes are added on first
    access (see :func:`_build_termination`)."""

    def __init__(
        self,
        *,
        stop_on: Sequence[str] = ("flagged",),
        sources: Sequence[str] | None = None,
        name: str | None = None,
        **kwargs: Any,
    ):
        bad = set(stop_on) - {"flagged", "review", "trusted"}
        if bad:
            raise ValueError(f"stop_on takes triage bands (flagged, review, trusted), got {sorted(bad)}")
        self.stop_on = tuple(stop_on)
        self.sources = None if sources is None else tuple(sources)
        super().__init__(name=name or "flagged-termination", **kwargs)
        self._conv = self._conversation()
        self._terminated = False
        self._key: str | None = None
        self.last_trigger: dict[str, Any] | None = None  # the step that stopped the team

    @property
    def terminated(self) -> bool:
        return self._terminated

    async def __call__(self, messages_in: Sequence[Any]) -> Any:
        if self._terminated:
            raise require("autogen_agentchat.base", EXTRA, "AutoGen AgentChat").TerminatedException(
                "Termination condition has already been reached"
            )
        stop = None
        for msg in messages_in:
            async with handle_internal_errors(self, "termination check", trace_key=self._key):  # never break the team
                stop = await self._check(msg) or stop
        if stop is not None:
            self._terminated = True
        return stop

    async def _check(self, msg: Any) -> Any:
        if self._key is None:
            self._key = new_id()
            self.recorder.start_trace(self._key)
        stop = None
        for record in self._conv.feed(msg):
            record = dataclasses.replace(record, trace_key=self._key)
            inline = None
            if record.kind == "llm":
                inline = await self.ascore_inline(
                    question=record.question, response=record.response, context=record.context
                )
                record = dataclasses.replace(record, **inline.record_fields())
            step_id = self.recorder.record(record)
            score = None if inline is None else inline.score
            if (
                score is not None
                and stop is None
                and score.triage in self.stop_on
                and (self.sources is None or record.node in self.sources)
            ):
                self.last_trigger = {
                    "step_id": step_id,
                    "node": record.node,
                    "score": score.to_dict(),
                    "response": record.response,
                }
                stop = _agentchat().StopMessage(
                    content=(
                        f"groundlens {score.triage} the answer of {record.node} "
                        f"({score.method.upper()}={score.value:.2f}): {score.explanation}"
                    ),
                    source="GroundlensFlaggedTermination",
                )
        return stop

    async def reset(self) -> None:
        self._terminated = False
        self._conv = self._conversation()  # a new run, a new task
        if self._key is not None:
            self.recorder.end_trace(self._key)
            self._key = None

    def _to_config(self) -> Any:
        return self.component_config_schema(  # type: ignore[attr-defined]
            stop_on=list(self.stop_on),
            sources=None if self.sources is None else list(self.sources),
            question_sources=None if self.question_sources is None else list(self.question_sources),
            agent_messages_as_context=self.agent_messages_as_context,
        )

    @classmethod
    def _from_config(cls, config: Any) -> Any:
        return cls(
            stop_on=config.stop_on,
            sources=config.sources,
            question_sources=config.question_sources,
            agent_messages_as_context=config.agent_messages_as_context,
        )


# ---------------------------------------------------------------- the AutoGen subclasses, built on first access


def _build_client() -> type:
    models, core = _core_models(), require("autogen_core", EXTRA, "AutoGen")
    from pydantic import BaseModel

    class GroundlensClientConfig(BaseModel):
        client: core.ComponentModel  # type: ignore[name-defined]
        agent_name: str | None = None
        trace_key: str = DEFAULT_TRACE_KEY
        question_sources: list[str] | None = list(DEFAULT_QUESTION_SOURCES)
        agent_messages_as_context: bool = True

    class GroundlensChatCompletionClient(
        _ClientTranslation,
        models.ChatCompletionClient,  # type: ignore[name-defined]
        core.Component[GroundlensClientConfig],  # type: ignore[name-defined]
    ):  # type: ignore[name-defined]
        """Wraps a ``ChatCompletionClient``: results come back unchanged and at once, scored off the hot path.

        One wrapper per agent (``agent_name`` names its steps); share ``recorder`` across a team.
        Everything not about scoring is delegated to the wrapped client. Constructor:
        ``(client, *, agent_name=None, trace_key="autogen", question_sources=("user",),
        agent_messages_as_context=True)`` plus the shell's keywords.
        """

        component_type = "model"
        component_config_schema = GroundlensClientConfig
        component_provider_override = "groundlens_core.plugins.autogen.GroundlensChatCompletionClient"

    return GroundlensChatCompletionClient


def _build_termination() -> type:
    base, core = (
        require("autogen_agentchat.base", EXTRA, "AutoGen AgentChat"),
        require("autogen_core", EXTRA, "AutoGen"),
    )
    _agentchat()
    from pydantic import BaseModel

    class GroundlensFlaggedTerminationConfig(BaseModel):
        stop_on: list[str] = ["flagged"]
        sources: list[str] | None = None
        question_sources: list[str] | None = list(DEFAULT_QUESTION_SOURCES)
        agent_messages_as_context: bool = True

    class GroundlensFlaggedTermination(
        _TerminationTranslation,
        base.TerminationCondition,  # type: ignore[name-defined]
        core.Component[GroundlensFlaggedTerminationConfig],  # type: ignore[name-defined]
    ):  # type: ignore[name-defined]
        """Stops a team as soon as an answer is flagged (or lands in another band of ``stop_on``).

        Scores each new answer while the team waits (in a worker thread, off the event loop); the steps
        are recorded in ``recorder``, one trace per run. ``sources``: only these agents' answers can stop
        the team. Combine with other conditions: ``MaxMessageTermination(10) | GroundlensFlaggedTermination()``.
        """

        component_config_schema = GroundlensFlaggedTerminationConfig
        component_provider_override = "groundlens_core.plugins.autogen.GroundlensFlaggedTermination"

    return GroundlensFlaggedTermination


_built: dict[str, type] = {}
__getattr__ = lazy_classes(
    __name__,
    {
        "GroundlensChatCompletionClient": _build_client,
        "GroundlensFlaggedTermination": _build_termination,
    },
)

__all__ = [
    "CheckedStream",
    "GroundlensChatCompletionClient",  # noqa: F822 - built on first access (lazy_classes)
    "GroundlensChecker",
    "GroundlensFlaggedTermination",  # noqa: F822 - built on first access (lazy_classes)
    "groundlens_trace",
    "request_question_and_context",
]
