"""Anthropic: guard calls and instrumented clients through the ``anthropic`` SDK; this module holds
the Anthropic readers. What each call records: ``docs/providers.md``."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

from groundlens_core.plugins.kit.shell import get_field
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
from groundlens_core.plugins.providers.core import Tap
from groundlens_core.plugins.providers.instrument import PENDING_TAP
from groundlens_core.plugins.providers.values import read_usage, sending, whole_number
from groundlens_core.trace.model import ContextPiece, Usage

__all__ = [*PUBLIC, "DEFAULT_MAX_TOKENS", "AnthropicProvider", "instrument"]

MESSAGES = "messages"
MESSAGES_STREAM = "messages.stream"
#: ``max_tokens`` of a guard request that does not set its own (the Messages API requires one)
DEFAULT_MAX_TOKENS = 1024
_TOOL_USE = ("tool_use", "server_tool_use", "mcp_tool_use")
_MANAGERS = (
    "MessageStreamManager",
    "AsyncMessageStreamManager",
    "BetaMessageStreamManager",
    "BetaAsyncMessageStreamManager",
)


class AnthropicProvider(ProviderGuard):
    """The Anthropic guard: guard calls through the Messages API, and ``instrument(client)``."""

    framework: ClassVar[str] = "anthropic"
    sdk_name: ClassVar[str] = "The Anthropic SDK"
    stainless: ClassVar[bool] = True
    guard_operation: ClassVar[str] = MESSAGES

    client_class: ClassVar[str] = "Anthropic"
    async_client_class: ClassVar[str] = "AsyncAnthropic"

    def _build_request(self, request: dict[str, Any], *, user_text: str, system: str | None, stream: bool) -> None:
        request.setdefault("max_tokens", DEFAULT_MAX_TOKENS)
        request["messages"] = [{"role": "user", "content": user_text}]
        if system:
            request["system"] = system
        if stream:
            request["stream"] = True

    def _send(self, client: Any, request: dict[str, Any], stream: bool) -> Any:
        return client.messages.create(**request)

    def _read_response(self, raw: Any, operation: str) -> Completion:
        return read_message(raw)

    def _stream_reader(self, operation: str) -> StreamReader:
        return MessageEventReader()

    def _targets(self, client: Any) -> list[Target]:
        targets = [
            Target(client.messages, "create", MESSAGES),
            Target(client.messages, "stream", MESSAGES_STREAM),
            Target(client.messages, "parse", "messages.parse"),
        ]
        beta = getattr(getattr(client, "beta", None), "messages", None)
        if beta is not None:  # the beta namespace: same Messages API, Beta* types
            targets += [
                Target(beta, attr, f"beta.messages{suffix}")
                for attr, suffix in (("create", ""), ("stream", ".stream"), ("parse", ".parse"))
                if hasattr(beta, attr)
            ]
        return targets

    def _read_request(self, operation: str, kwargs: dict[str, Any]) -> RequestView:
        if "messages" in kwargs:  # a generator of messages is read once, into the list the SDK then sends
            kwargs["messages"] = listed(kwargs["messages"], ("content",))
        messages = list(kwargs.get("messages") or ())
        model = kwargs.get("model")
        stream = operation.endswith(".stream") or kwargs.get("stream") is True
        return RequestView(
            question=request_question(messages),
            context=tuple(request_context(messages)),
            model=str(model) if model else None,
            stream=stream,
        )

    def _tap_stream(self, result: Any, tap: Tap) -> Any:
        """A ``MessageStreamManager`` sends its request only when entered: entering it hands the tap
        to that request, and a request that fails there is recorded as a failed stream."""
        streaming = self.sdk.lib.streaming
        managers = tuple(getattr(streaming, name) for name in _MANAGERS if hasattr(streaming, name))
        if isinstance(result, managers):
            result.__class__ = _entered_with_tap(type(result))  # type: ignore[arg-type]
            result._groundlens_tap = tap
            return result
        return super()._tap_stream(result, tap)


@functools.cache
def _entered_with_tap(manager: type) -> type:
    """``manager`` entered with its tap pending: the request it sends then makes a tapped stream,
    and a request that fails ends the tap."""
    if hasattr(manager, "__aenter__"):

        class AsyncTappedManager(manager):  # type: ignore[misc, valid-type]
            async def __aenter__(self) -> Any:
                with sending(PENDING_TAP, self._groundlens_tap, self._groundlens_tap.end):
                    return await super().__aenter__()

        return AsyncTappedManager

    class TappedManager(manager):  # type: ignore[misc, valid-type]
        def __enter__(self) -> Any:
            with sending(PENDING_TAP, self._groundlens_tap, self._groundlens_tap.end):
                return super().__enter__()

    return TappedManager


def instrument(client: Any, **kwargs: Any) -> Any:
    """Record every Messages call of ``client``; returns the same client."""
    return AnthropicProvider(client=client, **kwargs).instrument(client)


def _blocks(content: Any) -> list[Any]:
    """A message's content as a list of blocks (a plain string is one text block)."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, Mapping):
        return [content]
    try:
        return list(content)
    except TypeError:
        return []


def _text_of(blocks: Iterable[Any]) -> str:
    parts = []
    for block in blocks:
        if isinstance(block, str):
            parts.append(block)
        elif get_field(block, "type") == "text" and isinstance(get_field(block, "text"), str):
            parts.append(get_field(block, "text"))
    return "\n\n".join(p for p in parts if p.strip())


def message_text(message: Any) -> str:
    """The text blocks of one message, joined ("" when it has none)."""
    return _text_of(_blocks(get_field(message, "content"))).strip()


def question_index(messages: Sequence[Any]) -> int | None:
    """Index of the last user message with text of its own (not only tool results)."""
    for i in range(len(messages) - 1, -1, -1):
        if get_field(messages[i], "role") == "user" and message_text(messages[i]):
            return i
    return None


def request_question(messages: Sequence[Any]) -> str | None:
    """The question of a Messages request: the last user message with text of its own (docs/providers.md)."""
    i = question_index(messages)
    return None if i is None else message_text(messages[i]) or None


def _document_text(block: Any) -> str | None:
    source = get_field(block, "source")
    kind = get_field(source, "type")
    if kind == "text" and isinstance(get_field(source, "data"), str):
        return str(get_field(source, "data"))
    if kind == "content":
        return _text_of(_blocks(get_field(source, "content"))) or None
    return None  # base64 PDFs, URLs and file ids hold no text we can read here


def _tool_result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for block in _blocks(content):
        kind = get_field(block, "type")
        if kind == "text" and isinstance(get_field(block, "text"), str):
            parts.append(get_field(block, "text"))
        elif kind == "search_result":
            parts.append(_text_of(_blocks(get_field(block, "content"))))
        elif kind == "document":
            parts.append(_document_text(block) or "")
    return "\n\n".join(p for p in parts if p.strip())


def request_context(messages: Sequence[Any]) -> list[ContextPiece]:
    """Tool results, text documents and search results the model is shown, from the question on
    (the whole conversation when no question is found)."""
    names: dict[str, str] = {}
    for message in messages:
        if get_field(message, "role") == "assistant":
            for block in _blocks(get_field(message, "content")):
                if get_field(block, "type") in _TOOL_USE and get_field(block, "id"):
                    names[str(get_field(block, "id"))] = str(get_field(block, "name") or "tool")
    pieces: list[ContextPiece] = []
    for message in messages[(question_index(messages) or 0) :]:
        if get_field(message, "role") != "user":
            continue
        for block in _blocks(get_field(message, "content")):
            kind = get_field(block, "type")
            text, source = None, None
            if kind == "tool_result":
                text = _tool_result_text(get_field(block, "content"))
                source = f"tool:{names.get(str(get_field(block, 'tool_use_id')), 'tool')}"
            elif kind == "document":
                text = _document_text(block)
                title = get_field(block, "title")
                source = f"document:{title}" if title else "document"
            elif kind == "search_result":
                text = _text_of(_blocks(get_field(block, "content")))
                origin = get_field(block, "source")
                source = f"search_result:{origin}" if origin else "search_result"
            if text and text.strip() and source:
                pieces.append(ContextPiece(text=text, source=source))
    return pieces


def read_message(message: Any) -> Completion:
    """A ``Message`` (SDK object or dict): text blocks joined, tool names, model, usage, stop reason."""
    texts: list[str] = []
    tools: list[str] = []
    for block in _blocks(get_field(message, "content")):
        kind = get_field(block, "type")
        if kind == "text" and isinstance(get_field(block, "text"), str):
            texts.append(get_field(block, "text"))
        elif kind in _TOOL_USE:
            tools.append(str(get_field(block, "name") or "tool"))
    text = "".join(texts)
    return Completion(
        text=text if text.strip() else None,
        model=get_field(message, "model"),
        usage=_usage(get_field(message, "usage")),
        finish_reason=get_field(message, "stop_reason"),
        tool_calls=tuple(tools),
    )


def _usage(usage: Any) -> Usage | None:
    return read_usage(usage, ("input_tokens", "output_tokens", None))


class MessageEventReader(StreamReader):
    """The raw events of a Messages stream, keeping only what scoring needs (no message snapshot is
    built on the caller's thread)."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.tools: dict[Any, str] = {}
        self.model: str | None = None
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        self.finish_reason: str | None = None

    def add(self, event: Any) -> str | None:
        kind = get_field(event, "type")
        if kind == "content_block_delta":
            delta = get_field(event, "delta")
            if get_field(delta, "type") == "text_delta":
                text = get_field(delta, "text")
                if isinstance(text, str) and text:
                    self.parts.append(text)
                    return text
        elif kind == "content_block_start":
            block = get_field(event, "content_block")
            bkind = get_field(block, "type")
            if bkind == "text" and get_field(block, "text"):
                self.parts.append(get_field(block, "text"))
                return str(get_field(block, "text"))
            if bkind in _TOOL_USE:
                self.tools[get_field(event, "index")] = str(get_field(block, "name") or "tool")
        elif kind == "message_start":
            message = get_field(event, "message")
            self.model = get_field(message, "model")
            usage = get_field(message, "usage")
            self.input_tokens = whole_number(get_field(usage, "input_tokens"))
            self.output_tokens = whole_number(get_field(usage, "output_tokens"))
        elif kind == "message_delta":
            self.finish_reason = get_field(get_field(event, "delta"), "stop_reason") or self.finish_reason
            usage = get_field(event, "usage")  # cumulative counts: they replace, never add
            if whole_number(get_field(usage, "output_tokens")) is not None:
                self.output_tokens = whole_number(get_field(usage, "output_tokens"))
            if whole_number(get_field(usage, "input_tokens")) is not None:
                self.input_tokens = whole_number(get_field(usage, "input_tokens"))
        return None

    def completion(self) -> Completion:
        text = "".join(self.parts)
        usage = _usage({"input_tokens": self.input_tokens, "output_tokens": self.output_tokens})
        return Completion(
            text=text if text.strip() else None,
            model=self.model,
            usage=usage,
            finish_reason=self.finish_reason,
            tool_calls=tuple(self.tools.values()),
        )
