"""The Gemini API on the wire (what ``google-genai`` speaks), for the fake server in ``fake_llm_server``.

``POST /{version}/models/{model}:generateContent`` answers a ``GenerateContentResponse`` as JSON
(REST field names in camelCase); ``POST .../{model}:streamGenerateContent?alt=sse`` answers an SSE
stream of unnamed ``data:`` events, each a partial ``GenerateContentResponse``: text arrives in
pieces, ``finishReason`` and the full ``usageMetadata`` in the last chunk. Errors are
``{"error": {"code": N, "message": ..., "status": ...}}`` (the SDK raises ``ClientError`` for 4xx,
``ServerError`` for 5xx, and retries 408/429/5xx only when the client has ``retry_options``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from fake_llm_server import Reply, Request, sse_data

_STATUS = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}


def response(text: str | None = None, *, function_calls: Sequence[tuple[str, dict]] = (), model: str = "gemini-test",
             prompt_tokens: int = 17, output_tokens: int = 8, finish_reason: str = "STOP") -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    if text is not None:
        parts.append({"text": text})
    for name, args in function_calls:
        parts.append({"functionCall": {"name": name, "args": args}})
    return {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": finish_reason, "index": 0}],
        "usageMetadata": {"promptTokenCount": prompt_tokens, "candidatesTokenCount": output_tokens,
                          "totalTokenCount": prompt_tokens + output_tokens},
        "modelVersion": model, "responseId": "resp-" + str(abs(hash(json.dumps(parts))) % 10**8),
    }


def stream_chunks(body: dict[str, Any], *, piece: int = 7) -> list[str]:
    """``body`` as the SSE chunks a stream sends: text in ``piece``-char parts, function calls whole,
    finish reason and usage in the last chunk."""
    parts = body["candidates"][0]["content"]["parts"]
    chunks: list[dict[str, Any]] = []
    for part in parts:
        if "text" in part:
            text = part["text"]
            for i in range(0, max(len(text), 1), piece):
                chunks.append({"text": text[i:i + piece]})
        else:
            chunks.append(part)
    chunks = chunks or [{"text": ""}]
    events = []
    for i, part in enumerate(chunks):
        last = i == len(chunks) - 1
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": [part]}, "index": 0}
        chunk: dict[str, Any] = {"candidates": [candidate], "modelVersion": body["modelVersion"],
                                 "responseId": body["responseId"]}
        if last:
            candidate["finishReason"] = body["candidates"][0]["finishReason"]
            chunk["usageMetadata"] = body["usageMetadata"]
        else:
            chunk["usageMetadata"] = {"promptTokenCount": body["usageMetadata"]["promptTokenCount"]}
        events.append(sse_data(chunk))
    return events


def error(code: int, message: str = "scripted failure", headers: dict[str, str] | None = None) -> Reply:
    return Reply.error(code, headers=headers,
                       body={"error": {"code": code, "message": message, "status": _STATUS.get(code, "UNKNOWN")}})


def answer(body: dict[str, Any], request: Request) -> Reply:
    if ":streamGenerateContent" in request.path:
        return Reply.sse(stream_chunks(body))
    return Reply.json(body)


def model(script: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[[Request], Reply]:
    """A server ``default`` that answers each request with ``script(request body)``, JSON or SSE."""
    return lambda request: answer(script(request.json or {}), request)
