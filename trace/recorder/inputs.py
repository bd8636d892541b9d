"""Small helpers the framework adapters share (the adapter kit): plain text of framework values, the
one context normaliser, the one trace scope and chat-message readers. Imports no framework."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Callable, Iterator, Mapping, Sequence  # (the ABCs: isinstance on typing aliases is slower)
from contextvars import ContextVar
from typing import Any, TypeVar

from groundlens_core.errors import describe_exception
from groundlens_core.text import is_blank
from groundlens_core.trace.model import ContextPiece, new_id

T = TypeVar("T")

#: argument / state names that usually hold the user's question, in order of preference
QUESTION_NAMES: tuple[str, ...] = ("question", "query", "input", "user_input", "ask", "request", "prompt")
#: argument / state names that usually hold retrieved or supplied context
CONTEXT_NAMES: tuple[str, ...] = ("context", "documents", "docs", "sources", "search_results", "retrieved")

_TEXT_ATTRS = ("text", "page_content", "content")


def as_text(value: Any) -> str | None:
    """Best-effort readable text of a framework value (text parts joined, binary parts dropped), or
    None when it holds no text."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return None
    if isinstance(value, Mapping):
        for key in _TEXT_ATTRS:
            if isinstance(value.get(key), str):
                return value[key]
        return None
    if isinstance(value, (list, tuple)):
        parts = [p for p in (as_text(v) for v in value) if p and p.strip()]
        return "\n\n".join(parts) if parts else None
    for attr in _TEXT_ATTRS:
        inner = getattr(value, attr, None)
        if isinstance(inner, str):
            return inner
    return None


def first_text(mapping: Mapping[str, Any] | None, names: Sequence[str]) -> tuple[str, str] | None:
    """``(name, text)`` of the first of ``names`` in ``mapping`` whose value has non-blank text."""
    if not mapping:
        return None
    for name in names:
        try:
            value = mapping.get(name) if hasattr(mapping, "get") else None
        except Exception:  # odd mappings (lazy proxies) must not break an adapter
            value = None
        text = as_text(value)
        if text and text.strip():
            return name, text
    return None


def _piece(item: Any, source: str) -> ContextPiece | None:
    """One context item as a piece: a piece (its producer kept), a ``(value, source)`` pair (the
    value's text: a tool's number, a retriever's document), or a value's text."""
    if item is None or isinstance(item, (bytes, bytearray)):
        return None
    if isinstance(item, ContextPiece):
        return item
    if isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], str):
        value = item[0]
        text = value if isinstance(value, str) else as_text(value)
        if text is None and value is not None and not isinstance(value, (bytes, bytearray, list, tuple, Mapping)):
            text = str(value)  # a number, a date: its text
        return None if text is None else ContextPiece(text=text, source=item[1])
    text = as_text(item)
    return ContextPiece(text=str(item) if text is None else text, source=source)


def context_from(*groups: Any, source: str = "context") -> list[ContextPiece]:
    """The one context normaliser: context pieces from any number of values, in order; pieces made
    here take ``source``. Dedupe rule: a blank piece (the core's notion of blank:
    :func:`groundlens_core.text.is_blank`), or one whose stripped text equals an earlier piece's, is
    dropped, so the first place a text was found names it. A piece's ``producer`` is kept; a kept
    piece without one takes that of a dropped repeat, since the same text is the same step's result
    (a state key holding what a tool message also carries)."""
    seen: dict[str, int] = {}
    out: list[ContextPiece] = []
    for group in groups:
        items = group if isinstance(group, (list, tuple)) else [group]
        for piece in filter(None, (_piece(item, source) for item in items)):
            key = piece.text.strip() if isinstance(piece.text, str) and not is_blank(piece.text) else ""
            if not key:
                continue
            at = seen.get(key)
            if at is None:
                seen[key] = len(out)
                out.append(piece)
            elif piece.producer is not None and out[at].producer is None:
                out[at] = dataclasses.replace(out[at], producer=piece.producer)
    return out


@contextlib.contextmanager
def trace_scope(
    recorder: Any,
    var: ContextVar[T | None],
    value: Callable[[str], T],
    *,
    name: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> Iterator[str]:
    """Group the calls made inside the block into one trace of ``recorder``; yields its key. ``var``
    holds ``value(key)`` inside the block; the block's exception is the trace's error."""
    key = new_id()
    recorder.start_trace(key, name=name, metadata=metadata)
    token = var.set(value(key))
    error: str | None = None
    try:
        yield key
    except BaseException as exc:
        error = describe_exception(exc)
        raise
    finally:
        var.reset(token)
        recorder.end_trace(key, error=error)


def as_json(value: Any) -> str:
    """``value`` as sorted JSON (unknown objects by their ``str``), or its ``str`` when that fails."""
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    except Exception:
        return str(value)


def short(value: Any, limit: int = 300) -> str:
    """A short printable form of a value for step metadata (arguments, tool inputs)."""
    try:
        text = value if isinstance(value, str) else repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


# OpenAI-style dicts, ``(role, text)`` tuples), read by duck typing

USER_ROLES = frozenset({"human", "user"})
AI_ROLES = frozenset({"ai", "assistant"})


def message_role(message: Any) -> str:
    """``human``/``user``/``ai``/``assistant``/``system``/``tool``... of a message object, dict or tuple."""
    if isinstance(message, Mapping):
        return str(message.get("role") or message.get("type") or "").lower()
    if isinstance(message, tuple) and len(message) == 2:
        return str(message[0]).lower()
    role = getattr(message, "type", None)
    if role == "chat":  # LangChain's ChatMessage keeps its role separately
        role = getattr(message, "role", role)
    return str(role or getattr(message, "role", "") or "").lower()


def message_text(message: Any) -> str:
    """The text of a message object, dict, ``(role, text)`` tuple or plain string ("" when none)."""
    if isinstance(message, str):
        return message
    if isinstance(message, Mapping):
        content = message.get("content")
    elif isinstance(message, tuple) and len(message) == 2:
        content = message[1]
    else:
        content = getattr(message, "content", None)
    return as_text(content) or ""


def last_user_index(messages: Sequence[Any]) -> int | None:
    """Index of the last user (human) message, or None."""
    for i in range(len(messages) - 1, -1, -1):
        if message_role(messages[i]) in USER_ROLES:
            return i
    return None


def last_user_question(messages: Sequence[Any]) -> str | None:
    """The text of the last user message: the question a model call answers, without the system
    prompt or context the framework put around it."""
    i = last_user_index(messages)
    text = None if i is None else message_text(messages[i]).strip()
    return text or None


def last_ai_text(messages: Sequence[Any]) -> str | None:
    """The text of the last model message that has text."""
    for message in reversed(list(messages)):
        if message_role(message) in AI_ROLES:
            text = message_text(message).strip()
            if text:
                return text
    return None


def first_user_question(messages: Sequence[Any]) -> str | None:
    """The text of the first user message: the task prompt of an agent loop that later appends its
    own reminders and tool observations as user messages."""
    for message in messages:
        if message_role(message) in USER_ROLES:
            text = message_text(message).strip()
            if text:
                return text
    return None


def _tool_name_for(messages: Sequence[Any], index: int) -> str:
    """The tool that produced ``messages[index]``: its ``name``, else the matching earlier tool call."""
    msg = messages[index]
    name = msg.get("name") if isinstance(msg, Mapping) else getattr(msg, "name", None)
    if isinstance(name, str) and name:
        return name
    call_id = tool_call_id(msg)
    if call_id:
        for prev in reversed(messages[:index]):
            for call in getattr(prev, "tool_calls", None) or []:
                if isinstance(call, Mapping) and str(call.get("id")) == call_id and call.get("name"):
                    return str(call["name"])
    return "tool"


def tool_call_id(message: Any) -> str | None:
    """The ``tool_call_id`` of a tool message (object or dict), or None."""
    call_id = message.get("tool_call_id") if isinstance(message, Mapping) else getattr(message, "tool_call_id", None)
    return str(call_id) if call_id else None


def tool_message_pieces(
    messages: Sequence[Any], producers: Callable[[str], str | None] | None = None
) -> list[ContextPiece]:
    """Tool outputs the model saw for its current question: tool messages after the last user message,
    each named after the tool that produced it (a live call's messages and a stored span's alike).

    ``producers`` maps a message's ``tool_call_id`` to the id of the tool step that ran the call,
    for an adapter that knows it (the id a framework gives a tool call is rarely the id its tool
    run is recorded under, so none is guessed here): the piece's ``producer``."""
    start = last_user_index(messages)
    out = []
    for i in range(0 if start is None else start + 1, len(messages)):
        if message_role(messages[i]) in ("tool", "function"):
            text = message_text(messages[i]).strip()
            if text:
                call_id = tool_call_id(messages[i]) if producers is not None else None
                producer = producers(call_id) if producers is not None and call_id else None
                out.append(ContextPiece(text=text, source=f"tool:{_tool_name_for(messages, i)}", producer=producer))
    return out
