"""Guard Gemini calls (google-genai) with groundlens: a grounded and a flagged answer, a stream, an instrumented client.

Runs offline by default: it starts a tiny stand-in server on 127.0.0.1 that speaks the Gemini API
(``:generateContent`` JSON and ``:streamGenerateContent?alt=sse`` chunks) and answers from a
script (examples/standin.py), and the real ``google-genai`` SDK talks to it
(``http_options=HttpOptions(base_url=...)``). With ``GEMINI_API_KEY`` or ``GOOGLE_API_KEY`` set (and
``GROUNDLENS_GEMINI_MODEL`` if you like) it calls the Gemini API instead; the answers are then the
model's own, and which of them is flagged is up to it.

    pip install "groundlens-core[google]"
    python examples/google_guard.py --out out/

Writes ``out/google_traces.json`` and ``out/google_report.html``. The scores are triage signals
that rank answers for human review, not verdicts of truth.
"""

from __future__ import annotations

import json
import os

import standin
from google import genai
from google.genai import types

from groundlens_core.providers.google import GoogleProvider, guard_of, instrument

CHECK_STOCK = types.Tool(function_declarations=[types.FunctionDeclaration(
    name="check_stock", description="Stock of a product in a store.",
    parameters_json_schema={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})])


def standin_parts(body: dict) -> list[dict]:
    """The parts of the stand-in's answer: a function call when tools are offered and no function
    response came back yet, else the scripted answer to the question."""
    contents = body.get("contents", [])
    parts = [p for c in contents for p in c.get("parts", [])]
    if body.get("tools") and not any("functionResponse" in p for p in parts):
        return [{"functionCall": {"name": "check_stock", "args": {"city": "Oslo"}}}]
    asked = next(" ".join(p["text"] for p in c["parts"] if "text" in p) for c in reversed(contents)
                 if c.get("role", "user") == "user" and any("text" in p for p in c.get("parts", [])))
    return [{"text": standin.scripted(asked)}]


def _chunk(parts: list[dict], finish: str | None) -> dict:
    candidate: dict = {"content": {"role": "model", "parts": parts}, "index": 0}
    chunk: dict = {"candidates": [candidate], "modelVersion": "standin-gemini"}
    if finish:
        candidate["finishReason"] = finish
        chunk["usageMetadata"] = {"promptTokenCount": 60, "candidatesTokenCount": 20, "totalTokenCount": 80}
    return chunk


def standin_answer(path: str, body: dict) -> tuple[bytes, str]:
    parts = standin_parts(body)
    if ":streamGenerateContent" not in path:
        return json.dumps(_chunk(parts, "STOP")).encode(), "application/json"
    pieces = [[{"text": parts[0]["text"][i:i + 16]}] for i in range(0, len(parts[0]["text"]), 16)] \
        if "text" in parts[0] else [parts]  # SSE: the text in pieces, usage in the last chunk
    return standin.sse([_chunk(p, "STOP" if i == len(pieces) - 1 else None) for i, p in enumerate(pieces)]), "text/event-stream"


def main(argv: list[str] | None = None) -> int:
    args = standin.arguments("google", __doc__, argv)
    with standin.standin_unless(bool(os.environ.get("GEMINI_API_KEY") or os.environ.get("GOOGLE_API_KEY")), standin_answer, "GEMINI_API_KEY / GOOGLE_API_KEY are not set") as url:
        client = genai.Client() if url is None else genai.Client(api_key="offline", http_options=types.HttpOptions(base_url=url))
        model = standin.model(url, "GROUNDLENS_GEMINI_MODEL", "gemini-2.5-flash", "standin-gemini", "Gemini API")
        guard = standin.guard_demo(GoogleProvider, model, client)

        # Instrument the client: the calls are unchanged; each becomes a step of the trace.
        instrument(client, recorder=guard.recorder)
        config = types.GenerateContentConfig(tools=[CHECK_STOCK],
                                             automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True))
        contents: list = [types.Content(role="user", parts=[types.Part.from_text(text=standin.STOCK_QUESTION)])]
        with guard_of(client).trace("stock-check"):
            first = client.models.generate_content(model=model, contents=contents, config=config)
            if first.function_calls:  # the model asked for the tool: run it, send the result back, stream the answer
                call = first.function_calls[0]
                contents += [first.candidates[0].content,
                             types.Content(role="user", parts=[types.Part.from_function_response(
                                 name=call.name, response={"output": standin.STOCK})])]
                text = "".join(c.text or "" for c in client.models.generate_content_stream(
                    model=model, contents=contents, config=config))
            else:
                text = first.text or ""
        print(f"Instrumented client: {text.strip()}")
        standin.write_report(guard, args.out, "google", "groundlens: Gemini guard")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
