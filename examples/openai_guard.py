"""Guard OpenAI calls with groundlens: a grounded and a flagged answer, a stream, an instrumented client.

Runs offline by default: it starts a tiny stand-in server on 127.0.0.1 that speaks the Chat
Completions API and answers from a script (examples/standin.py), and the real ``openai`` SDK talks to
it. With ``OPENAI_API_KEY`` set (and ``OPENAI_BASE_URL`` / ``GROUNDLENS_OPENAI_MODEL`` if you like)
it calls that API instead; the answers are then the model's own, and which of them is flagged is up to it.

    pip install "groundlens-core[openai]"
    python examples/openai_guard.py --out out/

Writes ``out/openai_traces.json`` and ``out/openai_report.html``. The scores are triage signals
that rank answers for human review, not verdicts of truth.
"""

from __future__ import annotations

import json
import os

import openai
import standin

from groundlens_core.providers.openai import OpenAIProvider, guard_of, instrument

TOOLS = [{"type": "function", "function": {
    "name": "check_stock", "description": "Stock of a product in a store.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def _completion(message: dict, finish: str) -> dict:
    return {"id": "chatcmpl-standin", "object": "chat.completion", "created": 0, "model": "standin-model",
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": {"prompt_tokens": 60, "completion_tokens": 20, "total_tokens": 80}}


def standin_answer(path: str, body: dict) -> tuple[bytes, str]:
    """A Chat Completions reply: a tool call when tools are offered and no tool result is in the
    conversation yet, else the scripted answer; streamed one word a chunk when asked."""
    messages = body.get("messages", [])
    if body.get("tools") and not any(m.get("role") == "tool" for m in messages):
        call = {"id": "call_1", "type": "function", "function": {"name": "check_stock", "arguments": '{"city": "Oslo"}'}}
        completion = _completion({"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls")
    else:
        asked = next(m["content"] for m in reversed(messages) if m.get("role") == "user")
        completion = _completion({"role": "assistant", "content": standin.scripted(asked)}, "stop")
    if not body.get("stream"):
        return json.dumps(completion).encode(), "application/json"
    head = {k: completion[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    words = (completion["choices"][0]["message"]["content"] or "").split(" ")
    chunks = [{**head, "choices": [{"index": 0, "delta": {"content": w + (" " if i < len(words) - 1 else "")},
                                    "finish_reason": None}]} for i, w in enumerate(words)]
    chunks += [{**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
               {**head, "choices": [], "usage": completion["usage"]}, "[DONE]"]
    return standin.sse(chunks), "text/event-stream"


def main(argv: list[str] | None = None) -> int:
    args = standin.arguments("openai", __doc__, argv)
    with standin.standin_unless(bool(os.environ.get("OPENAI_API_KEY")), standin_answer, "OPENAI_API_KEY is not set") as url:
        client = openai.OpenAI() if url is None else openai.OpenAI(base_url=url + "/v1", api_key="offline")
        model = standin.model(url, "GROUNDLENS_OPENAI_MODEL", "gpt-4o-mini", "standin-model", "OpenAI API")
        guard = standin.guard_demo(OpenAIProvider, model, client)

        # Instrument the client: the calls are unchanged; each becomes a step of the trace.
        instrument(client, recorder=guard.recorder)
        messages = [{"role": "user", "content": standin.STOCK_QUESTION}]
        with guard_of(client).trace("stock-check"):
            first = client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
            call = first.choices[0].message.tool_calls[0] if first.choices[0].message.tool_calls else None
            if call is not None:  # the model asked for the tool: run it, send the result back
                messages += [first.choices[0].message.model_dump(exclude_none=True),
                             {"role": "tool", "tool_call_id": call.id, "content": standin.STOCK}]
                final = client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
            else:
                final = first
        print(f"Instrumented client: {final.choices[0].message.content}")
        standin.write_report(guard, args.out, "openai", "groundlens: OpenAI guard")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
