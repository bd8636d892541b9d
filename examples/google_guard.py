"""Guard Gemini calls (google-genai) with groundlens: a grounded and a flagged answer, a stream, an instrumented client.

Runs offline by default: it starts a tiny stand-in server on 127.0.0.1 that speaks the Gemini API
(``:generateContent`` JSON and ``:streamGenerateContent?alt=sse`` chunks) and answers from a
script, and the real ``google-genai`` SDK talks to it (``http_options=HttpOptions(base_url=...)``).
With ``GEMINI_API_KEY`` or ``GOOGLE_API_KEY`` set (and ``GROUNDLENS_GEMINI_MODEL`` if you like) it
calls the Gemini API instead; the answers are then the model's own, and which of them is flagged is
up to it.

    pip install "groundlens-core[google]"
    python examples/google_guard.py --out out/

Writes ``out/google_traces.json`` and ``out/google_report.html``. The scores are triage signals
that rank answers for human review, not verdicts of truth.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from google import genai
from google.genai import types

from groundlens_core.providers.google import GoogleProvider, GroundlensFlaggedError, guard_of, instrument

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
CHECK_STOCK = types.Tool(function_declarations=[types.FunctionDeclaration(
    name="check_stock", description="Stock of a product in a store.",
    parameters_json_schema={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})])


# ---------------------------------------------------------------- the stand-in server


def standin_parts(body: dict) -> list[dict]:
    """The parts of the stand-in's answer: a function call when tools are offered and no function
    response came back yet, else the scripted answer to the question."""
    contents = body.get("contents", [])
    parts = [p for c in contents for p in c.get("parts", [])]
    if body.get("tools") and not any("functionResponse" in p for p in parts):
        return [{"functionCall": {"name": "check_stock", "args": {"city": "Oslo"}}}]
    asked = next(" ".join(p["text"] for p in c["parts"] if "text" in p) for c in reversed(contents)
                 if c.get("role", "user") == "user" and any("text" in p for p in c.get("parts", [])))
    return [{"text": next((answer for question, answer in SCRIPT.items() if question in asked), "I do not know.")}]


def _chunk(parts: list[dict], finish: str | None) -> dict:
    candidate: dict = {"content": {"role": "model", "parts": parts}, "index": 0}
    chunk: dict = {"candidates": [candidate], "modelVersion": "standin-gemini"}
    if finish:
        candidate["finishReason"] = finish
        chunk["usageMetadata"] = {"promptTokenCount": 60, "candidatesTokenCount": 20, "totalTokenCount": 80}
    return chunk


class _StandIn(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
        parts = standin_parts(body)
        if ":streamGenerateContent" in self.path:  # SSE: the text in pieces, usage in the last chunk
            pieces = [[{"text": parts[0]["text"][i:i + 16]}] for i in range(0, len(parts[0]["text"]), 16)] \
                if "text" in parts[0] else [parts]
            chunks = [_chunk(p, "STOP" if i == len(pieces) - 1 else None) for i, p in enumerate(pieces)]
            self._send("".join(f"data: {json.dumps(c)}\n\n" for c in chunks).encode(), "text/event-stream")
        else:
            self._send(json.dumps(_chunk(parts, "STOP")).encode(), "application/json")

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
    parser.add_argument("--out", default="out", help="folder for google_traces.json and google_report.html")
    args = parser.parse_args(argv)

    server = None
    if os.environ.get("GEMINI_API_KEY") or os.environ.get("GOOGLE_API_KEY"):
        client = genai.Client()
        model = os.environ.get("GROUNDLENS_GEMINI_MODEL", "gemini-2.5-flash")
        print(f"Calling the Gemini API (model {model}).\n")
    else:
        server = start_standin()
        client = genai.Client(api_key="offline", http_options=types.HttpOptions(
            base_url=f"http://127.0.0.1:{server.server_address[1]}"))
        model = "standin-gemini"
        print("GEMINI_API_KEY / GOOGLE_API_KEY are not set: using a local stand-in server that answers from a script.\n")

    try:
        # 1. The guard call: ask, score, return both.
        guard = GoogleProvider(model=model, client=client, name="aurora-support")
        show("Grounded question", guard.complete("How long does the Aurora-7 take to charge?", context=PRODUCT_SHEET))
        answer = guard.complete("What warranty does the Aurora-7 have?", context=PRODUCT_SHEET)
        show("Second question", answer)
        if answer.flagged:
            print("  -> flagged: this answer goes to the front of the human review queue.\n")

        # 2. The same call in raise mode: a flagged answer raises instead of returning.
        strict = GoogleProvider(model=model, client=client, mode="raise", recorder=guard.recorder)
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
        config = types.GenerateContentConfig(tools=[CHECK_STOCK],
                                             automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True))
        contents: list = [types.Content(role="user", parts=[types.Part.from_text(text="Is the Aurora-7 in stock in Oslo?")])]
        with guard_of(client).trace("stock-check"):
            first = client.models.generate_content(model=model, contents=contents, config=config)
            if first.function_calls:  # the model asked for the tool: run it, send the result back, stream the answer
                call = first.function_calls[0]
                contents += [first.candidates[0].content,
                             types.Content(role="user", parts=[types.Part.from_function_response(
                                 name=call.name, response={"output": STOCK})])]
                text = "".join(c.text or "" for c in client.models.generate_content_stream(
                    model=model, contents=contents, config=config))
            else:
                text = first.text or ""
        print(f"Instrumented client: {text.strip()}")
        traces = guard.get_traces()
        print(f"  trace: {traces[-1].summary()}\n")

        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        from groundlens_core.trace.html import write_html

        (out / "google_traces.json").write_text(json.dumps([t.to_dict() for t in traces], indent=2), encoding="utf-8")
        write_html(traces, out / "google_report.html", title="groundlens: Gemini guard")
        print("Review first (riskiest first):")
        for step in sorted((s for t in traces for s in t.steps), key=lambda s: s.risk_key())[:4]:
            print(f"  {step.node:<36} {step.label:<22} {str(step.question)[:60]}")
        print(f"\nwrote {out / 'google_traces.json'} and {out / 'google_report.html'}")
        print("(groundlens scores are triage signals for ranking human review, not verdicts of truth)")
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
