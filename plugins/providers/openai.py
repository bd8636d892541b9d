"""OpenAI: guard calls and instrumented clients through the ``openai`` SDK; this module holds the
OpenAI readers. What each call records: ``docs/providers.md``."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, ClassVar

from groundlens_core.plugins.kit.shell import get_field, parse_usage
from groundlens_core.plugins.providers import *  # noqa: F403 - the shared public names, re-exported
from groundlens_core.plugins.providers import (
    PUBLIC,
    Completion,
    ProviderGuard,
    RequestView,
    StreamReader,
    Target,
    listed,
)
from groundlens_core.plugins.providers.values import read_usage
from groundlens_core.trace.model import ContextPiece, Usage
from groundlens_core.trace.recorder.inputs import as_text, context_from, last_user_question, message_role

__all__ = [*PUBLIC, "OpenAIProvider", "instrument"]

CHAT = "chat"
RESPONSES = "responses"


class OpenAIProvider(ProviderGuard):
    """The OpenAI guard: guard calls through Chat Completions; instruments Chat Completions and Responses."""

    framework: ClassVar[str] = "openai"
    sdk_name: ClassVar[str] = "The OpenAI SDK"
    stainless: ClassVar[bool] = True
    guard_operation: ClassVar[str] = CHAT

    client_class: ClassVar[str] = "OpenAI"
    async_client_class: ClassVar[str] = "AsyncOpenAI"

    def _build_request(self, request: dict[str, Any], *, user_text: str, system: str | None, stream: bool) -> None:
        messages: list[dict[str, Any]] = []
        if system:
            messages.append({"role": "system", "content": system})
        messages.append({"role": "user", "content": user_text})
        request["messages"] = messages
        if stream:
            request["stream"] = True
            request.setdefault("stream_options", {"include_usage": True})

    def _send(self, client: Any, request: dict[str, Any], stream: bool) -> Any:
        return client.chat.completions.create(**request)

    def _read_response(self, raw: Any, operation: str) -> Completion:
        if operation == RESPONSES:
            return _responses_completion(raw)
        choices = get_field(raw, "choices") or []
        first = choices[0] if choices else None
        message = get_field(first, "message")
        tool_calls = tuple(_tool_call_name(tc) for tc in (get_field(message, "tool_calls") or ()))
        if not tool_calls and get_field(message, "function_call") is not None:  # the legacy functions API
            tool_calls = (str(get_field(get_field(message, "function_call"), "name") or "function"),)
        return Completion(
            text=as_text(get_field(message, "content")),
            model=get_field(raw, "model"),
            usage=_usage(get_field(raw, "usage"), "prompt"),
            finish_reason=get_field(first, "finish_reason"),
            tool_calls=tool_calls,
        )

    def _stream_reader(self, operation: str) -> StreamReader:
        return _ResponsesStreamReader() if operation == RESPONSES else _ChatStreamReader()

    def _targets(self, client: Any) -> list[Target]:
        targets = [Target(client.chat.completions, "create", CHAT)]
        responses = getattr(client, "responses", None)  # every 2.x client has it; be kind to odd builds
        if responses is not None and hasattr(responses, "create"):
            targets.append(Target(responses, "create", RESPONSES))
        return targets

    def _read_request(self, operation: str, kwargs: dict[str, Any]) -> RequestView:
        stream = kwargs.get("stream") is True
        model = kwargs.get("model")
        model = str(model) if model else None
        if operation == RESPONSES:
            question, context = _responses_input(kwargs.get("input"))
            return RequestView(question=question, context=context, model=model, stream=stream)
        if "messages" in kwargs:  # a generator of messages is read once, into the list the SDK then sends
            kwargs["messages"] = listed(kwargs["messages"], ("content", "tool_calls"))
        messages = list(kwargs.get("messages") or ())
        return RequestView(
            question=last_user_question(messages), context=_tool_messages(messages), model=model, stream=stream
        )


def instrument(client: Any, **kwargs: Any) -> Any:
    """Record every Chat Completions and Responses call of ``client``; returns the same client."""
    return OpenAIProvider(client=client, **kwargs).instrument(client)


def _usage(usage: Any, naming: str) -> Usage | None:
    """Chat Completions' ``prompt_tokens``/``completion_tokens`` or Responses'
    ``input_tokens``/``output_tokens``; the generic ``parse_usage`` for odd objects."""
    keys = ("prompt_tokens", "completion_tokens") if naming == "prompt" else ("input_tokens", "output_tokens")
    return read_usage(usage, (*keys, "total_tokens")) or parse_usage(usage)


def _tool_call_name(tool_call: Any) -> str:
    function = get_field(tool_call, "function")
    return str(get_field(function, "name") or get_field(tool_call, "type") or "tool")


def _tool_messages(messages: Sequence[Any]) -> tuple[ContextPiece, ...]:
    """Every ``role="tool"`` (and legacy ``role="function"``) message as context, named by the
    function the assistant called with that ``tool_call_id``."""
    names: dict[str, str] = {}
    out: list[ContextPiece] = []
    for message in messages:
        role = message_role(message)
        if role == "assistant":
            for tc in get_field(message, "tool_calls") or ():
                call_id = get_field(tc, "id")
                if call_id:
                    names[str(call_id)] = _tool_call_name(tc)
        elif role in ("tool", "function"):
            name = names.get(str(get_field(message, "tool_call_id")), None) or get_field(message, "name") or "tool"
            out.extend(context_from(get_field(message, "content"), source=f"tool:{name}"))
    return tuple(out)


class _ChatStreamReader(StreamReader):
    """``ChatCompletionChunk`` s: text deltas of choice 0, tool-call names, the usage chunk."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.model: str | None = None
        self.usage: Any = None
        self.finish_reason: str | None = None
        self.tool_calls: dict[int, str] = {}

    def add(self, event: Any) -> str | None:
        self.model = self.model or get_field(event, "model")
        usage = get_field(event, "usage")
        if usage is not None:
            self.usage = usage
        text = None
        for choice in get_field(event, "choices") or ():
            if (get_field(choice, "index") or 0) != 0:
                continue
            delta = get_field(choice, "delta")
            content = get_field(delta, "content")
            if isinstance(content, str) and content:
                self.parts.append(content)
                text = content
            for tc in get_field(delta, "tool_calls") or ():
                name = get_field(get_field(tc, "function"), "name")
                index = get_field(tc, "index") or 0
                if name or index not in self.tool_calls:
                    self.tool_calls[index] = str(name or "tool")
            if get_field(choice, "finish_reason"):
                self.finish_reason = get_field(choice, "finish_reason")
        return text

    def completion(self) -> Completion:
        text = "".join(self.parts)
        return Completion(
            text=text or None,
            model=self.model,
            usage=_usage(self.usage, "prompt"),
            finish_reason=self.finish_reason,
            tool_calls=tuple(self.tool_calls[i] for i in sorted(self.tool_calls)),
        )


def _responses_input(value: Any) -> tuple[str | None, tuple[ContextPiece, ...]]:
    """(question, tool-result context) of a Responses ``input``: a text, or a list of items."""
    if isinstance(value, str):
        return (value if value.strip() else None), ()
    if not isinstance(value, (list, tuple)):
        return None, ()
    names: dict[str, str] = {}
    context: list[ContextPiece] = []
    messages: list[Any] = []
    for item in value:
        kind = get_field(item, "type")
        if kind == "function_call":
            names[str(get_field(item, "call_id"))] = str(get_field(item, "name") or "function")
        elif kind == "function_call_output":
            name = names.get(str(get_field(item, "call_id")), "function")
            context.extend(context_from(get_field(item, "output"), source=f"tool:{name}"))
        elif get_field(item, "role") is not None:
            messages.append({"role": get_field(item, "role"), "content": get_field(item, "content")})
    return last_user_question(messages), tuple(context)


def _responses_completion(response: Any) -> Completion:
    texts: list[str] = []
    tools: list[str] = []
    for item in get_field(response, "output") or ():
        kind = get_field(item, "type")
        if kind == "message":
            for part in get_field(item, "content") or ():
                if get_field(part, "type") == "output_text" and isinstance(get_field(part, "text"), str):
                    texts.append(get_field(part, "text"))
        elif kind == "function_call":
            tools.append(str(get_field(item, "name") or "function"))
    status = get_field(response, "status")
    reason = get_field(get_field(response, "incomplete_details"), "reason")
    finish = f"{status}:{reason}" if status == "incomplete" and reason else status
    return Completion(
        text="".join(texts) or None,
        model=get_field(response, "model"),
        usage=_usage(get_field(response, "usage"), "input"),
        finish_reason=finish,
        tool_calls=tuple(tools),
    )


class _ResponsesStreamReader(StreamReader):
    """Typed Responses events: text deltas, and the final response of ``response.completed``
    (``incomplete``/``failed``), which carries the model, usage and every output item."""

    _FINAL = ("response.completed", "response.incomplete", "response.failed")

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.final: Any = None
        self.model: str | None = None
        self.tools: list[str] = []

    def add(self, event: Any) -> str | None:
        kind = get_field(event, "type")
        if kind == "response.output_text.delta":
            delta = get_field(event, "delta")
            if isinstance(delta, str) and delta:
                self.parts.append(delta)
                return delta
        elif kind in self._FINAL:
            self.final = get_field(event, "response")
        elif kind == "response.created":
            self.model = get_field(get_field(event, "response"), "model")
        elif kind == "response.output_item.done" and get_field(get_field(event, "item"), "type") == "function_call":
            self.tools.append(str(get_field(get_field(event, "item"), "name") or "function"))
        return None

    def completion(self) -> Completion:
        text = "".join(self.parts) or None
        if self.final is None:
            return Completion(text=text, model=self.model, tool_calls=tuple(self.tools))
        done = _responses_completion(self.final)  # what it lacks, the events said
        tools = done.tool_calls or tuple(self.tools)
        return dataclasses.replace(done, text=done.text or text, model=done.model or self.model, tool_calls=tools)
