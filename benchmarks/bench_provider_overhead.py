"""How much an instrumented SDK client costs the caller's thread per call, next to the bare SDK.

    python benchmarks/bench_provider_overhead.py [--sdk all|openai|anthropic|google] [--calls 300] [--delay 0.02] [--chunks 20]

For each SDK (``openai``, ``anthropic``, ``google-genai``; ``--sdk`` picks one), three clients of
that SDK talk to the same local server (tests/fake_llm_server.py on 127.0.0.1, speaking that SDK's
wire format, answering after ``--delay`` seconds, like a fast API): one bare; one instrumented with
the module's ``instrument`` (real recorder, real embedder: every call is scored on the recorder's
worker thread while the calls go on); one instrumented with a constant embedder (scoring next to
free), to tell the wrapper from the scoring worker. The calls rotate between the three, in one run,
so all see the same machine. The calls: OpenAI ``chat.completions.create``, Anthropic
``messages.create``, Gemini ``models.generate_content`` / ``generate_content_stream``, each with a
tool round-trip in the conversation (the tool result is the context), without and with streaming.

1. **Time in our wrapper** (the figure the target is about): the SDK method under the wrapper is
   timed too (the call, and for a stream every pull from the SDK's event iterator), so the time
   outside the SDK per call is ours plus the harness's; the bare client gets the same timer with
   nothing of ours, and its time outside the SDK (the harness) is subtracted. Median and p95 on the
   caller's thread (wall), and the thread-CPU median. Target < 1 ms median. For a stream it
   includes reading every event as it passes.
2. **Whole call**: median / p95 of each client's ``create`` call (a stream: until consumed), and
   the paired difference (each instrumented call minus the bare call of the same round; median,
   p95): the end-to-end view, which also holds what the scoring worker costs the caller by sharing
   the process (the GIL, the cores). On a shared 2-core machine it is far noisier than the
   wrapper's own time.
3. ``flush()`` after the calls (the scores still pending), timed separately.

The embedding model is loaded and warmed before timing.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import math
import statistics
import sys
import time
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the fake server and each SDK's wire format live with the tests

from fake_llm_server import FakeLLMServer, Reply, Request  # noqa: E402
from measures import pct  # noqa: E402

from groundlens_core import get_embedder  # noqa: E402

QUESTION = "How long does the Aurora-7 take to charge?"
CONTEXT = ("The Aurora-7 battery pack stores 12 kWh and charges fully in 4 hours from a 240 V outlet. "
           "It carries a 10-year warranty.")
ANSWER = "It charges fully in 4 hours from a 240 V outlet; the 12 kWh pack has a 10-year warranty."
MESSAGES = [
    {"role": "system", "content": "You answer questions about our products."},
    {"role": "user", "content": "Which battery packs do you sell?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_0", "type": "function", "function": {"name": "catalog", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "call_0", "content": CONTEXT},
    {"role": "user", "content": QUESTION},
]


class Timed:
    """Wraps the SDK method under our wrapper; accumulates the time spent inside the SDK: the call,
    and for a stream every pull from the SDK's own event iterator (our tap wraps this one)."""

    def __init__(self, fn):
        self.fn = fn
        self.wall = 0.0
        self.cpu = 0.0

    def __call__(self, *args, **kwargs):
        w, c = time.perf_counter(), time.thread_time()
        try:
            result = self.fn(*args, **kwargs)
        finally:
            self.wall += time.perf_counter() - w
            self.cpu += time.thread_time() - c
        if isinstance(result, types.GeneratorType):  # google-genai: the stream is a generator
            return self._timed_events(result)
        return result  # an openai / anthropic Stream: its events are timed by time_sdk_streams

    def _timed_events(self, events):
        while True:
            w, c = time.perf_counter(), time.thread_time()
            try:
                event = next(events)
            except StopIteration:
                return
            finally:
                self.wall += time.perf_counter() - w
                self.cpu += time.thread_time() - c
            yield event


#: the timer of each client (by id) whose SDK ``Stream`` events are being timed
STREAM_TIMERS: dict[int, Timed] = {}


def time_sdk_streams() -> None:
    """Time every pull from the SDK's own event generator (``Stream.__stream__``) of the openai and
    anthropic SDKs, for the client's timer: whatever wraps the events (our tap, at any seam) stays
    outside the SDK's time."""
    import importlib

    for name in ("openai", "anthropic"):
        try:
            stream_cls = importlib.import_module(name).Stream
        except ImportError:
            continue
        original = stream_cls.__stream__
        if getattr(original, "timed", False):
            continue

        def __stream__(self, _original=original):
            timer = STREAM_TIMERS.get(id(self._client))
            events = _original(self)
            return events if timer is None else timer._timed_events(events)

        __stream__.timed = True
        stream_cls.__stream__ = __stream__


def ms(x: float) -> str:
    return f"{x * 1000:.3f} ms"


class ConstantEmbedder:
    """Embeds every text as the same unit vector: scoring costs next to nothing, so the
    ``instrumented, trivial scoring`` client shows the wrapper and recorder without the model's CPU."""

    model_id = "constant"
    backend = "constant"
    dim = 384
    max_tokens = 256
    fingerprint = "constant"

    def encode(self, texts):
        import numpy as np

        vecs = np.zeros((len(texts), self.dim), dtype=np.float32)
        vecs[:, 0] = 1.0
        return vecs

    def count_tokens(self, text):
        return len(text.split())

    def split(self, text, max_tokens=None):
        return [text]


CLIENTS = ("bare", "instrumented", "instrumented, trivial scoring")


@dataclass
class Api:
    """What the harness needs of one SDK: a client on the local server, the method it calls (and
    its instrumented operation), the call's arguments, and the server's answer in that wire format."""

    name: str
    version: str
    instrument: Callable[..., Any]
    make_client: Callable[[str], Any]
    method: Callable[[Any, bool], tuple[Any, str, str]]  # (client, stream) -> (owner, attr, operation)
    kwargs: Callable[[bool], dict[str, Any]]
    answer: Callable[[float, int], Callable[[Request], Reply]]  # (delay, chunks) -> server default
    title: Callable[[bool, int], str]


def _pieces(text: str, chunks: int) -> list[str]:
    return [text[i * len(text) // chunks:(i + 1) * len(text) // chunks] for i in range(chunks)]


def _sse(events: list[str], delay: float) -> Reply:
    return Reply(events=tuple(events), headers={"content-type": "text/event-stream"}, delay=delay)


def openai_api() -> Api:
    import openai
    from openai_wire import chat_chunks, chat_completion

    from groundlens_core.providers.openai import instrument

    def answer(delay: float, chunks: int) -> Callable[[Request], Reply]:
        body, events = chat_completion(ANSWER), chat_chunks(_pieces(ANSWER, chunks))
        return lambda request: _sse(events, delay) if request.json.get("stream") else Reply.json(body, delay=delay)

    def kwargs(stream: bool) -> dict[str, Any]:
        kw: dict[str, Any] = {"model": "gpt-4o-mini", "messages": MESSAGES}
        if stream:
            kw.update(stream=True, stream_options={"include_usage": True})
        return kw

    return Api("openai", openai.__version__, instrument,
               lambda url: openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0),
               lambda client, stream: (client.chat.completions, "create", "chat"), kwargs, answer,
               lambda stream, chunks: f"chat.completions.create(stream=True), {chunks} text chunks, consumed"
               if stream else "chat.completions.create")


ANTHROPIC_MESSAGES = [
    {"role": "user", "content": "Which battery packs do you sell?"},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_0", "name": "catalog", "input": {}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_0", "content": CONTEXT},
                                 {"type": "text", "text": QUESTION}]},
]


def anthropic_api() -> Api:
    import anthropic
    from anthropic_wire import message, message_events

    from groundlens_core.providers.anthropic import instrument

    def answer(delay: float, chunks: int) -> Callable[[Request], Reply]:
        body = message(ANSWER)
        events = message_events(body, piece=math.ceil(len(ANSWER) / chunks))
        return lambda request: _sse(events, delay) if request.json.get("stream") else Reply.json(body, delay=delay)

    def kwargs(stream: bool) -> dict[str, Any]:
        kw: dict[str, Any] = {"model": "claude-test", "max_tokens": 200, "system": "You answer questions about our products.",
                              "messages": ANTHROPIC_MESSAGES}
        if stream:
            kw["stream"] = True
        return kw

    return Api("anthropic", anthropic.__version__, instrument,
               lambda url: anthropic.Anthropic(base_url=url, api_key="k", max_retries=0),
               lambda client, stream: (client.messages, "create", "messages"), kwargs, answer,
               lambda stream, chunks: f"messages.create(stream=True), {chunks} text chunks, consumed"
               if stream else "messages.create")


def google_api() -> Api:
    from google import genai
    from google.genai import types as gtypes
    from google_wire import response, stream_chunks

    from groundlens_core.providers.google import instrument

    contents = [
        gtypes.Content(role="user", parts=[gtypes.Part.from_text(text="Which battery packs do you sell?")]),
        gtypes.Content(role="model", parts=[gtypes.Part.from_function_call(name="catalog", args={})]),
        gtypes.Content(role="user", parts=[gtypes.Part.from_function_response(name="catalog", response={"output": CONTEXT}),
                                           gtypes.Part.from_text(text=QUESTION)]),
    ]

    def answer(delay: float, chunks: int) -> Callable[[Request], Reply]:
        body = response(ANSWER)
        events = stream_chunks(body, piece=math.ceil(len(ANSWER) / chunks))
        return lambda request: (_sse(events, delay) if ":streamGenerateContent" in request.path
                                else Reply.json(body, delay=delay))

    def method(client: Any, stream: bool) -> tuple[Any, str, str]:
        attr = "generate_content_stream" if stream else "generate_content"
        return client.models, attr, attr

    return Api("google-genai", importlib.metadata.version("google-genai"), instrument,
               lambda url: genai.Client(api_key="k", http_options=gtypes.HttpOptions(base_url=url)),
               method, lambda stream: {"model": "gemini-test", "contents": contents}, answer,
               lambda stream, chunks: f"models.generate_content_stream, {chunks} text chunks, consumed"
               if stream else "models.generate_content")


APIS = {"openai": openai_api, "anthropic": anthropic_api, "google": google_api}


def run(api: Api, calls: int, delay: float, chunks: int, stream: bool) -> dict[str, dict[str, list[float]]]:
    from groundlens_core.plugins.providers import Target, guard_of

    time_sdk_streams()
    server = FakeLLMServer(default=api.answer(delay, chunks))
    try:
        clients, timers, guards = {}, {}, []
        for name in CLIENTS:
            client = api.make_client(server.url)
            owner, attr, operation = api.method(client, stream)
            if name == "bare":
                # the same timer with nothing of ours around it: its time outside the SDK is the
                # harness's own (the timer, the loop), subtracted from ours in the report
                timers[name] = Timed(getattr(owner, attr))
                setattr(owner, attr, timers[name])
            else:
                api.instrument(client, name="bench", embedder=ConstantEmbedder() if "trivial" in name else None)
                guard = guard_of(client)
                guards.append(guard)
                # time the SDK method under our wrapper: rebuild the wrapper around a timed original
                timers[name] = Timed(getattr(owner, attr).__groundlens_original__)
                setattr(owner, attr, guard._wrap(Target(owner, attr, operation), timers[name]))
            clients[name] = (owner, attr, client)  # keep the client: google-genai closes its transport when collected
            STREAM_TIMERS[id(client)] = timers[name]

        kwargs = api.kwargs(stream)

        def call(name: str) -> tuple[float, float, float]:
            owner, attr, _ = clients[name]
            timer = timers[name]
            timer.wall = timer.cpu = 0.0
            w0, c0 = time.perf_counter(), time.thread_time()
            result = getattr(owner, attr)(**kwargs)
            if stream:
                for _ in result:
                    pass
            wall, cpu = time.perf_counter() - w0, time.thread_time() - c0
            return wall, wall - timer.wall, cpu - timer.cpu

        for _ in range(10):  # warm the connections and the wrappers
            for name in CLIENTS:
                call(name)
        for guard in guards:
            guard.flush()
        out = {name: {"wall": [], "outside": [], "outside_cpu": []} for name in CLIENTS}
        for i in range(calls):
            k = i % len(CLIENTS)
            for name in CLIENTS[k:] + CLIENTS[:k]:  # rotate the order every round
                wall, outside, outside_cpu = call(name)
                out[name]["wall"].append(wall)
                out[name]["outside"].append(outside)
                out[name]["outside_cpu"].append(outside_cpu)
        t0 = time.perf_counter()
        for guard in guards:
            guard.flush()
        out["after"] = {"flush": [time.perf_counter() - t0],
                        "steps": [float(sum(len(t.steps) for t in guards[0].get_traces()))]}
        return out
    finally:
        server.close()


def report(title: str, r: dict[str, dict[str, list[float]]], calls: int) -> None:
    med = statistics.median
    print(f"\n{title}: {calls} calls per client, interleaved")
    harness, harness_cpu = med(r["bare"]["outside"]), med(r["bare"]["outside_cpu"])
    print(f"  {'client':<31}{'call median':>12}{'p95':>11}{'paired diff':>13}{'p95':>11}"
          f"{'our wrapper: wall':>19}{'p95':>11}{'CPU':>10}")
    for name in CLIENTS:
        w = r[name]["wall"]
        line = f"  {name:<31}{ms(med(w)):>12}{ms(pct(w, 0.95)):>11}"
        if name == "bare":
            print(line + f"   (harness outside the SDK: {ms(harness)} wall, {ms(harness_cpu)} CPU)")
            continue
        paired = [o - b for o, b in zip(w, r["bare"]["wall"])]  # the same round: the same machine moment
        mine = [x - harness for x in r[name]["outside"]]
        mine_cpu = [x - harness_cpu for x in r[name]["outside_cpu"]]
        print(line + f"{med(paired) * 1000:>+10.3f} ms{pct(paired, 0.95) * 1000:>+8.3f} ms"
              f"{ms(med(mine)):>19}{ms(pct(mine, 0.95)):>11}{ms(med(mine_cpu)):>10}")
    print(f"  target: our wrapper < 1 ms median per call.  flush after the calls: {r['after']['flush'][0]:.2f} s "
          f"({int(r['after']['steps'][0])} steps in the kept traces)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sdk", choices=("all", *APIS), default="all", help="which SDK (default: all three)")
    parser.add_argument("--calls", type=int, default=300, help="calls per client and mode (default 300)")
    parser.add_argument("--delay", type=float, default=0.02, help="server answer delay in seconds (default 0.02)")
    parser.add_argument("--chunks", type=int, default=20, help="text chunks per streamed answer (default 20)")
    args = parser.parse_args(argv)

    get_embedder().encode(["warm up the model", QUESTION, ANSWER, CONTEXT])
    for key in APIS if args.sdk == "all" else (args.sdk,):
        api = APIS[key]()
        print(f"\n== {api.name} {api.version}; local server answers after {args.delay * 1000:.0f} ms; "
              "scores computed on the recorder's worker meanwhile")
        for stream in (False, True):
            report(api.title(stream, args.chunks), run(api, args.calls, args.delay, args.chunks, stream), args.calls)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
