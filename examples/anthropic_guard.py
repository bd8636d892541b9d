"""Guard Anthropic calls with groundlens: a grounded and a flagged answer, a stream, an instrumented client.

Runs offline by default: it starts a tiny stand-in server on 127.0.0.1 that speaks the Messages API
(JSON replies and named SSE events) and answers from a script (examples/standin.py), and the real
``anthropic`` SDK talks to it. With ``ANTHROPIC_API_KEY`` set (and ``ANTHROPIC_BASE_URL`` /
``GROUNDLENS_ANTHROPIC_MODEL`` if you like) it calls that API instead; the answers are then the
model's own, and which of them is flagged is up to it.

    pip install "groundlens-core[anthropic]"
    python examples/anthropic_guard.py --out out/

Writes ``out/anthropic_traces.json`` and ``out/anthropic_report.html``. The scores are triage
signals that rank answers for human review, not verdicts of truth.
"""

from __future__ import annotations

import json
import os

import anthropic
import standin

from groundlens_core.providers.anthropic import AnthropicProvider, guard_of, instrument

TOOLS = [{"name": "check_stock", "description": "Stock of a product in a store.",
          "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]


def _text_of(content) -> str:
    if isinstance(content, str):
        return content
    return " ".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")


def standin_message(body: dict) -> dict:
    """A Messages API reply: a ``tool_use`` turn when tools are offered and no tool result came back
    yet, else the scripted answer to the question."""
    messages = body.get("messages", [])
    results = [b for m in messages if isinstance(m.get("content"), list) for b in m["content"]
               if isinstance(b, dict) and b.get("type") == "tool_result"]
    if body.get("tools") and not results:
        content = [{"type": "tool_use", "id": "toolu_standin", "name": "check_stock", "input": {"city": "Oslo"}}]
        stop = "tool_use"
    else:
        asked = next(_text_of(m["content"]) for m in reversed(messages)
                     if m.get("role") == "user" and _text_of(m["content"]).strip())
        content, stop = [{"type": "text", "text": standin.scripted(asked)}], "end_turn"
    return {"id": "msg_standin", "type": "message", "role": "assistant", "model": "standin-claude", "content": content,
            "stop_reason": stop, "stop_sequence": None, "usage": {"input_tokens": 60, "output_tokens": 20}}


def standin_events(message: dict) -> list[dict]:
    """The same reply as the SSE events a ``"stream": true`` request gets (each named by its type)."""
    start = {**message, "content": [], "stop_reason": None, "usage": {"input_tokens": 60, "output_tokens": 1}}
    events = [{"type": "message_start", "message": start}]
    for i, block in enumerate(message["content"]):
        if block["type"] == "text":
            events.append({"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}})
            events += [{"type": "content_block_delta", "index": i,
                        "delta": {"type": "text_delta", "text": block["text"][at:at + 16]}}
                       for at in range(0, len(block["text"]), 16)]
        else:
            events.append({"type": "content_block_start", "index": i, "content_block": {**block, "input": {}}})
            events.append({"type": "content_block_delta", "index": i, "delta": {
                "type": "input_json_delta", "partial_json": json.dumps(block["input"])}})
        events.append({"type": "content_block_stop", "index": i})
    events.append({"type": "message_delta", "usage": {"output_tokens": 20},
                   "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None}})
    events.append({"type": "message_stop"})
    return events


def standin_answer(path: str, body: dict) -> tuple[bytes, str]:
    message = standin_message(body)
    if body.get("stream"):
        events = standin_events(message)
        return standin.sse(events, [e["type"] for e in events]), "text/event-stream"
    return json.dumps(message).encode(), "application/json"


def main(argv: list[str] | None = None) -> int:
    args = standin.arguments("anthropic", __doc__, argv)
    with standin.standin_unless(bool(os.environ.get("ANTHROPIC_API_KEY")), standin_answer, "ANTHROPIC_API_KEY is not set") as url:
        client = anthropic.Anthropic() if url is None else anthropic.Anthropic(base_url=url, api_key="offline")
        model = standin.model(url, "GROUNDLENS_ANTHROPIC_MODEL", "claude-sonnet-4-5", "standin-claude", "Anthropic API")
        guard = standin.guard_demo(AnthropicProvider, model, client)

        # Instrument the client: the calls are unchanged; each becomes a step of the trace.
        instrument(client, recorder=guard.recorder)
        messages = [{"role": "user", "content": standin.STOCK_QUESTION}]
        with guard_of(client).trace("stock-check"):
            first = client.messages.create(model=model, max_tokens=300, messages=messages, tools=TOOLS)
            calls = [b for b in first.content if b.type == "tool_use"]
            if calls:  # the model asked for the tool: run it, send the result back, stream the answer
                messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
                             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": calls[0].id,
                                                           "content": standin.STOCK}]}]
                with client.messages.stream(model=model, max_tokens=300, messages=messages, tools=TOOLS) as final:
                    text = final.get_final_text()
            else:
                text = "".join(b.text for b in first.content if b.type == "text")
        print(f"Instrumented client: {text.strip()}")
        standin.write_report(guard, args.out, "anthropic", "groundlens: Anthropic guard")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
