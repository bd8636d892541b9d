"""OpenAI's wire format, for the fake server: Chat Completions JSON and SSE chunks
(``data: {...}`` ... ``data: [DONE]``), Responses JSON and its typed SSE events.

Shapes follow the ``openai`` SDK's own types (``openai.types.chat.ChatCompletion``,
``ChatCompletionChunk``, ``openai.types.responses.Response`` and ``ResponseStreamEvent``).
"""

from __future__ import annotations

import json
from typing import Any

from fake_llm_server import Reply, Request, sse_data

MODEL = "gpt-4o-mini-2024-07-18"


def chat_completion(text: str | None, *, model: str = MODEL, tool_calls: list[tuple[str, dict]] | None = None,
                    usage: tuple[int, int] = (21, 9), finish_reason: str | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
    if tool_calls:
        message["tool_calls"] = [
            {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            for i, (name, args) in enumerate(tool_calls)
        ]
    return {
        "id": "chatcmpl-fake", "object": "chat.completion", "created": 1764547200, "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": finish_reason or ("tool_calls" if tool_calls else "stop")}],
        "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)},
        "system_fingerprint": "fp_fake",
    }


def chat_chunks(parts: list[str], *, model: str = MODEL, usage: tuple[int, int] | None = (21, 9),
                tool_call: tuple[str, dict] | None = None, done: bool = True) -> list[str]:
    """SSE events of a streamed chat completion: a role chunk, one chunk per text part (or a tool
    call in two pieces), a finish chunk, a usage chunk (``include_usage``), ``[DONE]``."""
    base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1764547200, "model": model,
            "system_fingerprint": "fp_fake"}

    def chunk(delta: dict, finish: str | None = None) -> str:
        return sse_data({**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]})

    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": p}) for p in parts]
    if tool_call:
        name, args = tool_call
        events.append(chunk({"tool_calls": [{"index": 0, "id": "call_0", "type": "function",
                                             "function": {"name": name, "arguments": ""}}]}))
        events.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": json.dumps(args)}}]}))
    events.append(chunk({}, "tool_calls" if tool_call else "stop"))
    if usage:
        events.append(sse_data({**base, "choices": [], "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1],
                                                                 "total_tokens": sum(usage)}}))
    if done:
        events.append(sse_data("[DONE]"))
    return events


def response_json(text: str | None, *, model: str = MODEL, function_call: tuple[str, dict] | None = None,
                  usage: tuple[int, int] = (30, 12), status: str = "completed") -> dict[str, Any]:
    output: list[dict[str, Any]] = []
    if text is not None:
        output.append({"id": "msg_fake", "type": "message", "role": "assistant", "status": "completed",
                       "content": [{"type": "output_text", "text": text, "annotations": []}]})
    if function_call:
        output.append({"id": "fc_fake", "type": "function_call", "call_id": "call_9", "name": function_call[0],
                       "arguments": json.dumps(function_call[1]), "status": "completed"})
    return {
        "id": "resp_fake", "object": "response", "created_at": 1764547200, "model": model, "status": status,
        "output": output, "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "error": None,
        "incomplete_details": None, "instructions": None, "metadata": {},
        "usage": {"input_tokens": usage[0], "output_tokens": usage[1], "total_tokens": sum(usage),
                  "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}},
    }


def response_events(parts: list[str], *, model: str = MODEL, usage: tuple[int, int] = (30, 12)) -> list[str]:
    """Typed SSE events of a streamed Responses call (``event: <type>`` + ``data: {...}``)."""
    final = response_json("".join(parts), model=model, usage=usage)
    created = {**final, "status": "in_progress", "output": [], "usage": None}
    seq = iter(range(1000))

    def ev(kind: str, **data: Any) -> str:
        return sse_data({"type": kind, "sequence_number": next(seq), **data}, event=kind)

    events = [ev("response.created", response=created), ev("response.in_progress", response=created)]
    events.append(ev("response.output_item.added", output_index=0,
                     item={"id": "msg_fake", "type": "message", "role": "assistant", "status": "in_progress", "content": []}))
    for p in parts:
        events.append(ev("response.output_text.delta", item_id="msg_fake", output_index=0, content_index=0, delta=p,
                         logprobs=[]))
    events.append(ev("response.output_text.done", item_id="msg_fake", output_index=0, content_index=0,
                     text="".join(parts), logprobs=[]))
    events.append(ev("response.completed", response=final))
    return events


def chat_reply(text: str, **kw: Any) -> Reply:
    return Reply.json(chat_completion(text, **kw))


def echo_chat(answer: str):
    """A default handler: every chat request gets ``answer`` (streamed when the request streams)."""

    def handle(request: Request) -> Reply:
        body = request.json
        if request.path.endswith("/responses"):
            return Reply.sse(response_events([answer])) if body.get("stream") else Reply.json(response_json(answer))
        return Reply.sse(chat_chunks([answer])) if body.get("stream") else chat_reply(answer)

    return handle
