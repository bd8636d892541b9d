"""Guard OpenAI calls with groundlens: a grounded and a flagged answer, a stream, an instrumented client.

Runs offline by default: it starts a tiny stand-in server on 127.0.0.1 that speaks the Chat
Completions API and answers from a script, and the real ``openai`` SDK talks to it. With
``OPENAI_API_KEY`` set (and ``OPENAI_BASE_URL`` / ``GROUNDLENS_OPENAI_MODEL`` if you like) it calls
that API instead; the answers are then the model's own, and which of them is flagged is up to it.

    pip install "groundlens-core[openai]"
    python examples/openai_guard.py --out out/

Writes ``out/openai_traces.json`` and ``out/openai_report.html``. The scores are triage signals
that rank answers for human review, not verdicts of truth.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import openai

from groundlens_core.providers.openai import GroundlensFlaggedError, OpenAIProvider, guard_of, instrument

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
TOOLS = [{"type": "function", "function": {
    "name": "check_stock", "description": "Stock of a product in a store.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


# ---------------------------------------------------------------- the stand-in server


def _completion(message: dict, finish: str) -> dict:
    return {"id": "chatcmpl-standin", "object": "chat.completion", "created": 0, "model": "standin-model",
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": {"prompt_tokens": 60, "completion_tokens": 20, "total_tokens": 80}}


def standin_answer(body: dict) -> dict:
    """A Chat Completions response for one request: a tool call when tools are offered and no tool
    result is in the conversation yet, else the scripted answer to the question."""
    messages = body.get("messages", [])
    if body.get("tools") and not any(m.get("role") == "tool" for m in messages):
        call = {"id": "call_1", "type": "function", "function": {"name": "check_stock", "arguments": '{"city": "Oslo"}'}}
        return _completion({"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls")
    asked = next(m["content"] for m in reversed(messages) if m.get("role") == "user")
    text = next((answer for question, answer in SCRIPT.items() if question in asked), "I do not know.")
    return _completion({"role": "assistant", "content": text}, "stop")


def as_sse(completion: dict) -> str:
    """A completion as Chat Completions stream chunks (``data: {...}`` lines, ``data: [DONE]``)."""
    head = {k: completion[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    text = completion["choices"][0]["message"]["content"] or ""
    words = [w + " " for w in text.split(" ")]
    words[-1] = words[-1].rstrip()
    chunks = [{**head, "choices": [{"index": 0, "delta": {"content": w}, "finish_reason": None}]} for w in words]
    chunks.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    chunks.append({**head, "choices": [], "usage": completion["usage"]})
    return "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"


class _StandIn(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are separate writes: send each at once

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
        completion = standin_answer(body)
        if body.get("stream"):  # server-sent events: one chunk per word, then the usage, then [DONE]
            data, kind = as_sse(completion).encode(), "text/event-stream"
        else:
            data, kind = json.dumps(completion).encode(), "application/json"
        self.send_response(200)
        self.send_header("content-type", kind)
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
    print(f"{label}\n  answer: {answer.text}\n  groundlens: {verdict}\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out", help="folder for openai_traces.json and openai_report.html")
    args = parser.parse_args(argv)

    server = None
    if os.environ.get("OPENAI_API_KEY"):
        client = openai.OpenAI()
        model = os.environ.get("GROUNDLENS_OPENAI_MODEL", "gpt-4o-mini")
        print(f"Calling the OpenAI API ({client.base_url}, model {model}).\n")
    else:
        server = start_standin()
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{server.server_address[1]}/v1", api_key="offline")
        model = "standin-model"
        print("OPENAI_API_KEY is not set: using a local stand-in server that answers from a script.\n")

    try:
        # 1. The guard call: ask, score, return both.
        guard = OpenAIProvider(model=model, client=client, name="aurora-support")
        show("Grounded question", guard.complete("How long does the Aurora-7 take to charge?", context=PRODUCT_SHEET))
        answer = guard.complete("What warranty does the Aurora-7 have?", context=PRODUCT_SHEET)
        show("Second question", answer)
        if answer.flagged:
            print("  -> flagged: this answer goes to the front of the human review queue.\n")

        # 2. The same call in raise mode: a flagged answer raises instead of returning.
        strict = OpenAIProvider(model=model, client=client, mode="raise", recorder=guard.recorder)
        try:
            strict.complete("What warranty does the Aurora-7 have?", context=PRODUCT_SHEET)
            print("mode='raise': the answer passed.\n")
        except GroundlensFlaggedError as exc:
            print(f"mode='raise': GroundlensFlaggedError: {exc}\n")

        # 3. A guard stream: the text as it arrives, the score once it ended.
        stream = guard.stream("How long does the Aurora-7 take to charge?", context=PRODUCT_SHEET)
        print("Streamed: ", end="")
        for text in stream:
            print(text, end="", flush=True)
        score = stream.groundlens_score
        print(f"\n  groundlens: {'no score' if score is None else f'{score.method.upper()}={score.value:.2f} {score.triage}'}\n")

        # 4. Instrument the client: the calls are unchanged; each becomes a step of the trace.
        instrument(client, recorder=guard.recorder)
        messages = [{"role": "user", "content": "Is the Aurora-7 in stock in Oslo?"}]
        with guard_of(client).trace("stock-check"):
            first = client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
            call = first.choices[0].message.tool_calls[0] if first.choices[0].message.tool_calls else None
            if call is not None:  # the model asked for the tool: run it, send the result back
                messages += [first.choices[0].message.model_dump(exclude_none=True),
                             {"role": "tool", "tool_call_id": call.id, "content": STOCK}]
                final = client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
            else:
                final = first
        print(f"Instrumented client: {final.choices[0].message.content}")
        traces = guard.get_traces()
        print(f"  trace: {traces[-1].summary()}\n")

        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        from groundlens_core.trace.html import write_html

        (out / "openai_traces.json").write_text(json.dumps([t.to_dict() for t in traces], indent=2), encoding="utf-8")
        write_html(traces, out / "openai_report.html", title="groundlens: OpenAI guard")
        print("Review first (riskiest first):")
        for step in sorted((s for t in traces for s in t.steps), key=lambda s: s.risk_key())[:4]:
            print(f"  {step.node:<16} {step.label:<22} {str(step.question)[:60]}")
        print(f"\nwrote {out / 'openai_traces.json'} and {out / 'openai_report.html'}")
        print("(groundlens scores are triage signals for ranking human review, not verdicts of truth)")
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
