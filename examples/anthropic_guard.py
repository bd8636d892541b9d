"""Guard Anthropic calls with groundlens: a grounded and a flagged answer, a stream, an instrumented client.

Runs offline by default: it starts a tiny stand-in server on 127.0.0.1 that speaks the Messages API
(JSON replies and named SSE events) and answers from a script, and the real ``anthropic`` SDK talks
to it. With ``ANTHROPIC_API_KEY`` set (and ``ANTHROPIC_BASE_URL`` / ``GROUNDLENS_ANTHROPIC_MODEL``
if you like) it calls that API instead; the answers are then the model's own, and which of them is
flagged is up to it.

    pip install "groundlens-core[anthropic]"
    python examples/anthropic_guard.py --out out/

Writes ``out/anthropic_traces.json`` and ``out/anthropic_report.html``. The scores are triage
signals that rank answers for human review, not verdicts of truth.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import anthropic

from groundlens_core.providers.anthropic import AnthropicProvider, GroundlensFlaggedError, guard_of, instrument

PRODUCT_SHEET = ("The Aurora-7 battery pack stores 12 kWh and charges fully in 4 hours from a 240 V outlet. "
                 "It carries a 10-year warranty.")
STOCK = "Oslo store: Aurora-7 in stock, 3 units, ready for pickup today."

# What the stand-in model answers, by the question it is asked. The second answer invents a
# warranty the product sheet does not give: the kind of answer groundlens should put first in line.
SCRIPT = {
    "How long does the Aurora-7 take to charge?":
        "It charges fully in 4 hours from a 240 V outlet; the 12 kWh pack has a 10-year warranty.",
    "What warranty does the Aurora-7 have?":
        "The Aurora-7 comes with a lifetime warranty and free yearly servicing by our technicians.",
    "Is the Aurora-7 in stock in Oslo?":
        "Yes: the Oslo store has 3 Aurora-7 packs in stock, ready for pickup today.",
}
TOOLS = [{"name": "check_stock", "description": "Stock of a product in a store.",
          "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]


# ---------------------------------------------------------------- the stand-in server


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
        text = next((answer for question, answer in SCRIPT.items() if question in asked), "I do not know.")
        content, stop = [{"type": "text", "text": text}], "end_turn"
    return {"id": "msg_standin", "type": "message", "role": "assistant", "model": "standin-claude", "content": content,
            "stop_reason": stop, "stop_sequence": None, "usage": {"input_tokens": 60, "output_tokens": 20}}


def standin_events(message: dict) -> list[tuple[str, dict]]:
    """The same reply as the named SSE events a ``"stream": true`` request gets."""
    start = {**message, "content": [], "stop_reason": None, "usage": {"input_tokens": 60, "output_tokens": 1}}
    events = [("message_start", {"type": "message_start", "message": start})]
    for i, block in enumerate(message["content"]):
        if block["type"] == "text":
            events.append(("content_block_start", {"type": "content_block_start", "index": i,
                                                   "content_block": {"type": "text", "text": ""}}))
            for at in range(0, len(block["text"]), 16):
                events.append(("content_block_delta", {"type": "content_block_delta", "index": i,
                                                       "delta": {"type": "text_delta", "text": block["text"][at:at + 16]}}))
        else:
            events.append(("content_block_start", {"type": "content_block_start", "index": i,
                                                   "content_block": {**block, "input": {}}}))
            events.append(("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {
                "type": "input_json_delta", "partial_json": json.dumps(block["input"])}}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events.append(("message_delta", {"type": "message_delta", "usage": {"output_tokens": 20},
                                     "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


class _StandIn(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
        message = standin_message(body)
        if body.get("stream"):
            data = "".join(f"event: {name}\ndata: {json.dumps(event)}\n\n" for name, event in standin_events(message))
            self._send(data.encode(), "text/event-stream")
        else:
            self._send(json.dumps(message).encode(), "application/json")

    def _send(self, data: bytes, content_type: str) -> None:
        self.send_response(200)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


def start_standin() -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _StandIn)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


# ---------------------------------------------------------------- the example


def show(label: str, answer) -> None:
    score = answer.groundlens_score
    verdict = "no score: " + str(answer.scoring_error) if score is None else f"{score.method.upper()}={score.value:.2f} {score.triage}"
    print(f"{label}\n  answer: {answer.text.strip()}\n  groundlens: {verdict}\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out", help="folder for anthropic_traces.json and anthropic_report.html")
    args = parser.parse_args(argv)

    server = None
    if os.environ.get("ANTHROPIC_API_KEY"):
        client = anthropic.Anthropic()
        model = os.environ.get("GROUNDLENS_ANTHROPIC_MODEL", "claude-sonnet-4-5")
        print(f"Calling the Anthropic API ({client.base_url}, model {model}).\n")
    else:
        server = start_standin()
        client = anthropic.Anthropic(base_url=f"http://127.0.0.1:{server.server_address[1]}", api_key="offline")
        model = "standin-claude"
        print("ANTHROPIC_API_KEY is not set: using a local stand-in server that answers from a script.\n")

    try:
        # 1. The guard call: ask, score, return both.
        guard = AnthropicProvider(model=model, client=client, name="aurora-support")
        show("Grounded question", guard.complete("How long does the Aurora-7 take to charge?", context=PRODUCT_SHEET))
        answer = guard.complete("What warranty does the Aurora-7 have?", context=PRODUCT_SHEET)
        show("Second question", answer)
        if answer.flagged:
            print("  -> flagged: this answer goes to the front of the human review queue.\n")

        # 2. The same call in raise mode: a flagged answer raises instead of returning.
        strict = AnthropicProvider(model=model, client=client, mode="raise", recorder=guard.recorder)
        try:
            strict.complete("What warranty does the Aurora-7 have?", context=PRODUCT_SHEET)
            print("mode='raise': the answer passed.\n")
        except GroundlensFlaggedError as exc:
            print(f"mode='raise': GroundlensFlaggedError: {exc}\n")

        # 3. A guard stream: text as it arrives, the score once it ends.
        stream = guard.stream("How long does the Aurora-7 take to charge?", context=PRODUCT_SHEET)
        print("Streamed: ", end="")
        for text in stream:
            print(text, end="", flush=True)
        print(f"\n  groundlens: {stream.groundlens_score.method.upper()}={stream.groundlens_score.value:.2f} "
              f"{stream.response.triage}\n")

        # 4. Instrument the client: the calls are unchanged; each becomes a step of the trace.
        instrument(client, recorder=guard.recorder)
        messages = [{"role": "user", "content": "Is the Aurora-7 in stock in Oslo?"}]
        with guard_of(client).trace("stock-check"):
            first = client.messages.create(model=model, max_tokens=300, messages=messages, tools=TOOLS)
            calls = [b for b in first.content if b.type == "tool_use"]
            if calls:  # the model asked for the tool: run it, send the result back, stream the answer
                messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
                             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": calls[0].id,
                                                           "content": STOCK}]}]
                with client.messages.stream(model=model, max_tokens=300, messages=messages, tools=TOOLS) as final:
                    text = final.get_final_text()
            else:
                text = "".join(b.text for b in first.content if b.type == "text")
        print(f"Instrumented client: {text.strip()}")
        traces = guard.get_traces()
        print(f"  trace: {traces[-1].summary()}\n")

        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        from groundlens_core.trace.html import write_html

        (out / "anthropic_traces.json").write_text(json.dumps([t.to_dict() for t in traces], indent=2), encoding="utf-8")
        write_html(traces, out / "anthropic_report.html", title="groundlens: Anthropic guard")
        print("Review first (riskiest first):")
        for step in sorted((s for t in traces for s in t.steps), key=lambda s: s.risk_key())[:4]:
            print(f"  {step.node:<26} {step.label:<22} {str(step.question)[:60]}")
        print(f"\nwrote {out / 'anthropic_traces.json'} and {out / 'anthropic_report.html'}")
        print("(groundlens scores are triage signals for ranking human review, not verdicts of truth)")
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
