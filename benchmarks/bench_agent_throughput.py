"""Does scoring keep pace with the agent it watches? The realistic RAG graph, side by side.

    .venv/bin/python benchmarks/bench_agent_throughput.py [--invocations 120] [--delays 0,0.05] [--steps 16]

The graph (benchmarks/rag_graph.py): a retriever node, then one LLM node; every invocation has unique
texts of realistic size (~25-piece question, ~179-piece context, ~67-piece answer: ~270 word pieces
per scored step), so no embedding can come from a cache. Prints, asserting nothing:

1. Per invocation, at each model latency in ``--delays``: no callback, the groundlens callback, and
   OpenInference's LangChain tracer (a peer, exporting to a no-op OTel exporter through a batch span
   processor) when ``openinference-instrumentation-langchain`` is installed (``pip install -r
   benchmarks/requirements.txt``; skipped otherwise). The variants run interleaved, invocation by
   invocation, so machine noise hits them alike. Median and p95 per invocation; for groundlens the
   time spent in its own callback methods (the agent thread's share that is ours), the
   backlog left after the last invocation, the steps recorded unscored (overload), the time
   ``get_traces()`` then waits, and the RSS growth over the phase.
2. Worker throughput on realistic steps with the agent's thread idle: ``--steps`` steps recorded at
   once, time until all are scored (every default signal on). Rotating round by round in this one
   process: plain sentence-transformers on one thread encoding each step's three texts (the
   yardstick: no recorder, no evidence), the baseline worker (the eager fp32 forward, which takes
   the GIL back after every torch call, batches of 64, no nice, one thread), and the worker on each
   backend this machine has (``packed-torch``; ``packed-bf16`` on a CPU with native bf16;
   ``onnx-fp32`` and ``onnx-int8`` with ONNX Runtime) with one lane and with two encode lanes
   (``Recorder(worker_lanes=)``, groundlens_core/embedding/lanes.py). The ratio of their medians is
   the figure to read (on a shared machine absolute times are noise).
3. The same with the agent's thread busy: the graph driven flat out (0 ms model, no callback) on the
   main thread while the worker scores ``--steps`` steps.
Peak RSS of the process at the end.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measures import pct  # noqa: E402
from rag_graph import build_rag_graph, make_texts  # noqa: E402

from groundlens_core import get_embedder  # noqa: E402
from groundlens_core.embedding.onnx_backend import onnx_available  # noqa: E402
from groundlens_core.embedding.packed import bf16_supported  # noqa: E402
from groundlens_core.plugins.langgraph import GroundlensLangGraphCallback  # noqa: E402
from groundlens_core.trace import recorder as recorder_mod  # noqa: E402
from groundlens_core.trace.recorder import CallRecord, Recorder  # noqa: E402
from groundlens_core.trace.recorder import worker as worker_mod


def rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peer_handler() -> Any | None:
    """OpenInference's LangChain tracer (what ``LangChainInstrumentor().instrument()`` adds to every
    callback manager), passed explicitly so it can be interleaved with the other variants."""
    try:
        from openinference.instrumentation import OITracer, TraceConfig
        from openinference.instrumentation.langchain._tracer import OpenInferenceTracer
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
    except ImportError:
        return None

    class Drop(SpanExporter):
        def export(self, spans):  # noqa: ANN001 - the SDK's signature
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Drop()))
    return OpenInferenceTracer(OITracer(provider.get_tracer("bench"), config=TraceConfig()), False)


class BaselineWorker:
    """Switch the recorder and embedder to the baseline worker settings (eager fp32, batches of 64, no nice) and back."""

    def __init__(self, inner: Any):
        self.inner = inner

    def __enter__(self) -> None:
        self.saved = (worker_mod.BATCH_MAX, recorder_mod.WORKER_NICE, self.inner.use_script)
        worker_mod.BATCH_MAX, recorder_mod.WORKER_NICE, self.inner.use_script = 64, None, False

    def __exit__(self, *exc: Any) -> None:
        worker_mod.BATCH_MAX, recorder_mod.WORKER_NICE, self.inner.use_script = self.saved


def latency_phase(delay: float, n: int, texts: list, peer: Any | None) -> None:
    graph = build_rag_graph(texts, delay=delay)
    for q, _, _ in texts[:3]:
        graph.invoke({"question": q})
    cb = GroundlensLangGraphCallback(name="bench", max_traces=10 * n)
    own = time_own_callbacks(cb)
    variants: dict[str, Any] = {"no callback": None, "groundlens": cb}
    if peer is not None:
        variants["openinference"] = peer
    times: dict[str, list[float]] = {k: [] for k in variants}
    rss0 = rss_mb()
    own_per_invocation: list[float] = []
    i = 3
    for _ in range(n):
        for name, handler in variants.items():
            config = {"callbacks": [handler]} if handler is not None else {}
            own.clear()
            t0 = time.perf_counter()
            graph.invoke({"question": texts[i][0]}, config=config)
            times[name].append(time.perf_counter() - t0)
            if handler is cb:
                own_per_invocation.append(sum(own))
            i += 1
    backlog = cb.recorder.backlog()
    t0 = time.perf_counter()
    traces = cb.get_traces(timeout=300)
    wait_s = time.perf_counter() - t0
    steps = [s for t in traces for s in t.steps if s.kind == "llm"]
    scored = sum(s.method in ("sgi", "dgi") for s in steps)
    overload = sum(t.unscored()["overload"] for t in traces)
    print(f"\nmodel latency {delay * 1000:.0f} ms, {n} invocations per variant, interleaved:")
    base = statistics.median(times["no callback"])
    for name, ts in times.items():
        med, p95 = statistics.median(ts), pct(ts, 0.95)
        extra = "" if name == "no callback" else f"  (median {1000 * (med - base):+.2f} ms vs no callback)"
        print(f"  {name:14s} median {med * 1000:7.2f} ms  p95 {p95 * 1000:7.2f} ms{extra}")
    print(f"  groundlens's own callback methods (on the agent's thread): median {1000 * statistics.median(own_per_invocation):.3f} ms "
          f"per invocation (one LLM call, one retriever, three chain runs); the rest of its difference is LangChain's "
          f"dispatch to a handler")
    print(f"  groundlens: backlog after the last invocation {backlog['steps'] + backlog['in_flight']} steps to score "
          f"({backlog['bytes'] / 1024:.0f} KiB of text, {backlog['events']} events); get_traces() then waited "
          f"{wait_s:.2f} s; {scored} of {len(steps)} LLM steps scored, {overload} recorded unscored (overload); "
          f"RSS {rss0:.0f} -> {rss_mb():.0f} MB")


def time_own_callbacks(cb: Any) -> list[float]:
    """Time every ``on_*`` method of ``cb`` on this instance; returns the list the seconds go to."""
    spent: list[float] = []
    for name in dir(type(cb)):
        if name.startswith("on_"):
            method = getattr(cb, name)

            def timed(*args: Any, _method: Any = method, **kwargs: Any) -> Any:
                t0 = time.perf_counter()
                try:
                    return _method(*args, **kwargs)
                finally:
                    spent.append(time.perf_counter() - t0)

            setattr(cb, name, timed)
    return spent


def _calls(texts: list, key: str) -> list[CallRecord]:
    return [CallRecord(trace_key=key, node="answer", question=q, context=[c], response=a) for q, c, a in texts]


def worker_round(texts: list, key: str, busy: tuple[Any, list[str]] | None, embedder: Any, lanes: int) -> float:
    """Steps per second for one recorder scoring ``texts`` (recorded at once)."""
    rec = Recorder("bench", max_pending_steps=len(texts) + 1, quiet_seconds=0.0, embedder=embedder,
                   worker_lanes=lanes)
    rec.start_trace("warm")
    rec.record(_calls(texts[:1], "warm")[0])
    rec.flush()  # the worker thread exists and has its torch settings
    t0 = time.perf_counter()
    for call in _calls(texts, key):
        rec.record(call)
    if busy is None:
        rec.flush(600)
    else:
        graph, questions = busy
        k = 0
        while not rec.idle() and time.perf_counter() - t0 < 600:  # the agent's thread never waits
            graph.invoke({"question": questions[k % len(questions)]})
            k += 1
    dt = time.perf_counter() - t0
    trace = rec.get_trace(key, wait=False)
    assert trace is not None and sum(s.method == "sgi" for s in trace.steps) == len(texts)
    return len(texts) / dt


class RawST:
    """The yardstick: plain sentence-transformers on one thread, encoding each step's question,
    context and answer (one text per forward pass), no recorder, no evidence."""

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.model = get_embedder(backend="sentence-transformers").inner

    def rate(self, texts: list) -> float:
        threads = self.torch.get_num_threads()
        self.torch.set_num_threads(1)
        try:
            t0 = time.perf_counter()
            for step in texts:
                self.model.encode(list(step))
            return len(texts) / (time.perf_counter() - t0)
        finally:
            self.torch.set_num_threads(threads)


def throughput_phase(steps: int, rounds: int, texts: list, workers: dict[str, tuple[Any, int]], busy: bool) -> None:
    busy_graph = None
    if busy:
        flat = make_texts(200, seed=99)
        busy_graph = (build_rag_graph(flat, delay=0.0), [q for q, _, _ in flat])
    variants: dict[str, tuple[Any, int]] = {"baseline worker": workers["packed-torch, 1 lane"]}
    variants.update(workers)
    st = RawST() if not busy else None
    names = list(variants) + (["sentence-transformers, 1 thread"] if st is not None else [])
    rates: dict[str, list[float]] = {k: [] for k in names}
    offset = 0
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:  # rotate the order round by round
            chunk = texts[offset:offset + steps]
            offset += steps
            if name == "sentence-transformers, 1 thread":
                rates[name].append(st.rate(chunk))  # type: ignore[union-attr]
                continue
            emb, lanes = variants[name]
            if name == "baseline worker":
                with BaselineWorker(emb.inner):
                    rates[name].append(worker_round(chunk, f"r{r}", busy_graph, emb, lanes))
            else:
                rates[name].append(worker_round(chunk, f"r{r}", busy_graph, emb, lanes))
    label = "agent's thread busy (graph driven flat out)" if busy else "agent's thread idle"
    print(f"\nworker throughput, realistic steps, {label}: {rounds} rounds of {steps} steps each, rotating")
    baseline = statistics.median(rates["baseline worker"])
    st_rate = statistics.median(rates["sentence-transformers, 1 thread"]) if st is not None else None
    for name, rs in rates.items():
        vs = f"  {statistics.median(rs) / baseline:5.2f}x baseline"
        if st_rate:
            vs += f"  {statistics.median(rs) / st_rate:5.2f}x sentence-transformers"
        print(f"  {name:34s} median {statistics.median(rs):6.1f} steps/s{vs}  (rounds: {', '.join(f'{x:.1f}' for x in rs)})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--invocations", type=int, default=120)
    parser.add_argument("--delays", default="0,0.05", help="model latencies in seconds, comma separated")
    parser.add_argument("--steps", type=int, default=16, help="steps per worker-throughput round")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args(argv)

    emb = get_embedder()
    emb.encode(["warm up the embedding model"])
    inner = getattr(emb, "inner", emb)
    delays = [float(x) for x in args.delays.split(",") if x.strip()]
    n_texts = 8 + len(delays) * (args.invocations * 3 + 3) + 2 * args.rounds * args.steps * 12  # <= 12 variants
    texts = make_texts(n_texts)
    lens = [sum(inner.count_tokens(t) + 2 for t in tr) for tr in texts[:200]]
    print(f"steps: unique texts, median {statistics.median(lens):.0f} word pieces per step "
          f"(question + context + answer, with [CLS]/[SEP]); default backend {inner.backend}, "
          f"worker lanes {Recorder('probe').worker_lanes}; bounds {recorder_mod.MAX_PENDING_STEPS} steps / {recorder_mod.MAX_PENDING_BYTES // 2**20} MiB")
    peer = peer_handler()
    if peer is None:
        print("OpenInference LangChain tracer not installed: the peer column is skipped "
              "(pip install -r benchmarks/requirements.txt)")
    used = 0
    for delay in delays:
        chunk = texts[used:used + args.invocations * 3 + 3]
        used += len(chunk)
        latency_phase(delay, args.invocations, chunk, peer)
    rest = texts[used:]
    workers: dict[str, tuple[Any, int]] = {}
    backends = ["packed-torch"] + (["packed-bf16"] if bf16_supported() else [])
    backends += ["onnx-fp32", "onnx-int8"] if onnx_available() else []
    for backend in backends:
        e = get_embedder(backend=backend)
        e.encode([f"warm up the {backend} path"])
        default = " (the default here)" if backend == inner.backend else ""
        workers[f"{backend}, 1 lane"] = (e, 1)
        workers[f"{backend}, 2 lanes{default}"] = (e, 2)
    if not bf16_supported():
        print("no native bf16 on this CPU: the packed-bf16 rows are skipped")
    throughput_phase(args.steps, args.rounds, rest[: len(rest) // 2], workers, busy=False)
    throughput_phase(args.steps, args.rounds, rest[len(rest) // 2:], workers, busy=True)
    print(f"\npeak RSS of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
