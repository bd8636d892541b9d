"""What the three provider guard examples (openai_guard.py, anthropic_guard.py, google_guard.py) share:
the product sheet and the script the stand-in model answers from, a tiny stand-in LLM server on
127.0.0.1 (each example supplies how its SDK's wire format looks), the guard demo itself (a grounded
and a flagged answer, raise mode, a stream) and the report it writes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

PRODUCT_SHEET = ("The Aurora-7 battery pack stores 12 kWh and charges fully in 4 hours from a 240 V outlet. "
                 "It carries a 10-year warranty.")
STOCK = "Oslo store: Aurora-7 in stock, 3 units, ready for pickup today."
STOCK_QUESTION = "Is the Aurora-7 in stock in Oslo?"

# What the stand-in model answers, by the question it is asked. The second answer invents a
# warranty the product sheet does not give: the kind of answer groundlens should put first in line.
SCRIPT = {
    "How long does the Aurora-7 take to charge?":
        "It charges fully in 4 hours from a 240 V outlet; the 12 kWh pack has a 10-year warranty.",
    "What warranty does the Aurora-7 have?":
        "The Aurora-7 comes with a lifetime warranty and free yearly servicing by our technicians.",
    STOCK_QUESTION:
        "Yes: the Oslo store has 3 Aurora-7 packs in stock, ready for pickup today.",
}


def scripted(asked: str) -> str:
    """The stand-in model's answer to a user message."""
    return next((answer for question, answer in SCRIPT.items() if question in asked), "I do not know.")


def sse(events: list[Any], names: list[str] | None = None) -> bytes:
    """Server-sent events: ``data: {...}`` lines (named with ``event:`` when ``names`` are given)."""
    lines = [(f"event: {names[i]}\n" if names else "") + f"data: {json.dumps(e) if not isinstance(e, str) else e}\n\n"
             for i, e in enumerate(events)]
    return "".join(lines).encode()


def start_standin(answer: Callable[[str, dict], tuple[bytes, str]]) -> ThreadingHTTPServer:
    """A stand-in LLM server on 127.0.0.1 (a free port): ``answer(path, request body)`` gives the
    reply's bytes and content type."""

    class StandIn(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body are separate writes: send each at once

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
            data, content_type = answer(self.path, body)
            self.send_response(200)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@contextlib.contextmanager
def standin_unless(api_key_set: bool, answer: Callable[[str, dict], tuple[bytes, str]], what: str) -> Iterator[str | None]:
    """The stand-in server's URL for the block (None when an API key is set: the real API is called)."""
    if api_key_set:
        yield None
        return
    server = start_standin(answer)
    print(f"{what}: using a local stand-in server that answers from a script.\n")
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def model(url: str | None, env: str, default: str, standin_model: str, api: str) -> str:
    """The model to ask: on the real API (``url`` is None) ``$env`` or ``default``, said aloud; on the
    stand-in at ``url``, the name the stand-in answers with."""
    if url is not None:
        return standin_model
    name = os.environ.get(env, default)
    print(f"Calling the {api} (model {name}).\n")
    return name


def arguments(name: str, doc: str, argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--out", default="out", help=f"folder for {name}_traces.json and {name}_report.html")
    return parser.parse_args(argv)


def _result(result: Any) -> str:
    return "no score" if result is None else f"{result.method.upper()}={result.value:.2f} {result.triage}"


def show(label: str, answer: Any) -> None:
    verdict = _result(answer.groundlens_result) if answer.groundlens_result else "no score: " + str(answer.scoring_error)
    print(f"{label}\n  answer: {answer.text.strip()}\n  groundlens: {verdict}\n")


def guard_demo(provider: type, model: str, client: Any) -> Any:
    """The guard calls: a grounded and a flagged answer, the same in raise mode, a stream. Returns the guard."""
    guard = provider(model=model, client=client, name="aurora-support")
    show("Grounded question", guard.complete("How long does the Aurora-7 take to charge?", context=PRODUCT_SHEET))
    answer = guard.complete("What warranty does the Aurora-7 have?", context=PRODUCT_SHEET)
    show("Second question", answer)
    if answer.flagged:
        print("  -> flagged: this answer goes to the front of the human review queue.\n")

    # The same call in raise mode: a flagged answer raises instead of returning.
    strict = provider(model=model, client=client, mode="raise", recorder=guard.recorder)
    try:
        strict.complete("What warranty does the Aurora-7 have?", context=PRODUCT_SHEET)
        print("mode='raise': the answer passed.\n")
    except Exception as exc:  # GroundlensFlaggedError
        print(f"mode='raise': {type(exc).__name__}: {exc}\n")

    # A guard stream: the text as it arrives, the result once it ended.
    stream = guard.stream("How long does the Aurora-7 take to charge?", context=PRODUCT_SHEET)
    print("Streamed: ", end="")
    for text in stream:
        print(text, end="", flush=True)
    print(f"\n  groundlens: {_result(stream.groundlens_result)}\n")
    return guard


def write_report(guard: Any, out: str, name: str, title: str) -> None:
    """The traces as JSON and the HTML report, and the steps a human should review first."""
    from groundlens_core.trace.html import write_html

    traces = guard.get_traces()
    print(f"  trace: {traces[-1].summary()}\n")
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}_traces.json").write_text(json.dumps([t.to_dict() for t in traces], indent=2), encoding="utf-8")
    write_html(traces, folder / f"{name}_report.html", title=title)
    print("Review first (riskiest first):")
    for step in sorted((s for t in traces for s in t.steps), key=lambda s: s.risk_key())[:4]:
        print(f"  {step.node:<36} {step.label:<22} {str(step.question)[:60]}")
    print(f"\nwrote {folder / f'{name}_traces.json'} and {folder / f'{name}_report.html'}")
    print("(groundlens scores are triage signals for ranking human review, not verdicts of truth)")
