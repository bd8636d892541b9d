"""The Anthropic Messages API on the wire, for the fake server in ``fake_llm_server``.

``POST /v1/messages`` answers a ``Message`` as JSON, or with ``"stream": true`` an SSE stream of
named events, in the order the API sends them::

    event: message_start        {"type": "message_start", "message": {... "content": [], "usage": {...}}}
    event: content_block_start  {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    event: ping                 {"type": "ping"}
    event: content_block_delta  {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "..."}}
    event: content_block_stop   {"type": "content_block_stop", "index": 0}
    (tool_use blocks: content_block_start with the name and "input": {}, then input_json_delta parts)
    event: message_delta        {"type": "message_delta", "delta": {"stop_reason": ...}, "usage": {"output_tokens": N}}
    event: message_stop         {"type": "message_stop"}

and ``event: error`` with ``{"type": "error", "error": {"type": ..., "message": ...}}`` (the SDK
raises it as an ``APIStatusError``). The SDK skips events without an ``event:`` name, so every event
carries one.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from typing import Any

from fake_llm_server import Reply, Request, sse_data

_ids = itertools.count(1)


def message(text: str | None = None, *, tool_uses: Sequence[tuple[str, dict]] = (), model: str = "claude-test",
            input_tokens: int = 21, output_tokens: int = 9, stop_reason: str | None = None) -> dict[str, Any]:
    """A ``Message`` body: optional text, then ``tool_use`` blocks ``(name, input)``."""
    content: list[dict[str, Any]] = []
    if text is not None:
        content.append({"type": "text", "text": text, "citations": None})
    for name, arguments in tool_uses:
        content.append({"type": "tool_use", "id": f"toolu_{next(_ids):04d}", "name": name, "input": arguments})
    return {
        "id": f"msg_{next(_ids):04d}", "type": "message", "role": "assistant", "model": model, "content": content,
        "stop_reason": stop_reason or ("tool_use" if tool_uses and text is None else "end_turn"),
        "stop_sequence": None, "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
    }


def _pieces(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


def message_events(body: dict[str, Any], *, piece: int = 7) -> list[str]:
    """The SSE events that stream ``body`` (a :func:`message`), text cut into ``piece``-char deltas."""
    start = {**body, "content": [], "stop_reason": None, "stop_sequence": None,
             "usage": {"input_tokens": body["usage"]["input_tokens"], "output_tokens": 1}}
    events = [sse_data({"type": "message_start", "message": start}, "message_start")]
    for index, block in enumerate(body["content"]):
        if block["type"] == "text":
            events.append(sse_data({"type": "content_block_start", "index": index,
                                    "content_block": {"type": "text", "text": "", "citations": None}}, "content_block_start"))
            if index == 0:
                events.append(sse_data({"type": "ping"}, "ping"))
            for part in _pieces(block["text"], piece):
                events.append(sse_data({"type": "content_block_delta", "index": index,
                                        "delta": {"type": "text_delta", "text": part}}, "content_block_delta"))
        else:
            events.append(sse_data({"type": "content_block_start", "index": index,
                                    "content_block": {**block, "input": {}}}, "content_block_start"))
            for part in _pieces(json.dumps(block["input"]), 5):
                events.append(sse_data({"type": "content_block_delta", "index": index,
                                        "delta": {"type": "input_json_delta", "partial_json": part}}, "content_block_delta"))
        events.append(sse_data({"type": "content_block_stop", "index": index}, "content_block_stop"))
    events.append(sse_data({"type": "message_delta", "delta": {"stop_reason": body["stop_reason"], "stop_sequence": None},
                            "usage": {"output_tokens": body["usage"]["output_tokens"]}}, "message_delta"))
    events.append(sse_data({"type": "message_stop"}, "message_stop"))
    return events


def error_body(kind: str = "api_error", message: str = "scripted failure") -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


def error_event(kind: str = "overloaded_error", message: str = "Overloaded") -> str:
    """An ``error`` event in the middle of a stream."""
    return sse_data(error_body(kind, message), "error")


def answer(body: dict[str, Any], request: Request) -> Reply:
    """``body`` as the request asked for it: SSE events when it set ``"stream": true``, else JSON."""
    if (request.json or {}).get("stream"):
        return Reply.sse(message_events(body))
    return Reply.json(body)


def model(script: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[[Request], Reply]:
    """A server ``default`` that answers each request with ``script(request body)``, JSON or SSE."""
    return lambda request: answer(script(request.json or {}), request)
