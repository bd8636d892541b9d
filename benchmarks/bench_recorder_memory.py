"""Process memory of a CPU-bound agent loop traced by the recorder, over 50,000 calls.

Each call is what an agent run records: a trace start, a tool event, an LLM step (question, context,
response: scored by the worker) and a trace end, with some pure-Python work in between that holds
the GIL, so the worker gets little time and the bounds decide what queues. RSS (from
/proc/self/statm) and the recorder's backlog are printed every 10,000 calls; flat RSS means every
event kind is bounded.

    python benchmarks/bench_recorder_memory.py            # the worker scores with the real embedder
    python benchmarks/bench_recorder_memory.py --held     # the worker is held the whole loop (worst case)

Linux only (/proc). The model is loaded and warmed before the loop, so its memory is in the
baseline; the recorder keeps its default bounds and ``max_traces`` (100).
"""

from __future__ import annotations

import argparse
import os
import random
import threading
import time

from groundlens_core import get_embedder
from groundlens_core.trace.recorder import CallRecord, Recorder

WORDS = (
    "refund policy annual plan monthly invoice support hours export project owner password reset email "
    "data retention backup region storage limit upgrade contract customer account billing cycle"
).split()


def rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def text(rng: random.Random, n: int, tag: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + f" (call {tag})."


def busy(n: int) -> int:
    """The agent's own CPU-bound work (pure Python: it holds the GIL)."""
    acc = 0
    for i in range(n):
        acc = (acc * 31 + i) % 1_000_003
    return acc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=50_000)
    ap.add_argument("--every", type=int, default=10_000, help="print a line every this many calls")
    ap.add_argument("--work", type=int, default=2_000, help="iterations of pure-Python work per call")
    ap.add_argument("--held", action="store_true", help="hold the worker for the whole loop")
    args = ap.parse_args()

    get_embedder().encode(["warm up the model before the baseline"])
    rec = Recorder("bench")
    gate = threading.Event()
    if args.held:
        entered = threading.Event()
        process = rec._worker.process

        def held(items):
            entered.set()
            gate.wait()
            return process(items)

        rec._worker.process = held  # type: ignore[method-assign]
        rec.start_trace("warm-up")
        rec.flush(0)
        entered.wait(60)
    else:
        rec.record(CallRecord(trace_key="warm-up", node="answer", question="Warm up?", context=["Warm."], response="Up."))
        rec.flush(120)
        gate.set()

    rng = random.Random(7)
    print(f"worker: {'held for the whole loop' if args.held else 'scoring with the real embedder'}")
    print(f"{'calls':>7} {'RSS MB':>8} {'queued':>8} {'held':>8} {'s':>6}")
    base = rss_mb()
    print(f"{0:>7} {base:>8.1f} {'':>8} {'':>8} {0:>6.1f}")
    t0 = time.monotonic()
    for i in range(1, args.calls + 1):
        key = f"run-{i}"
        rec.start_trace(key)
        busy(args.work)
        rec.record(CallRecord(trace_key=key, node="search", kind="tool", response=text(rng, 40, i)))
        busy(args.work)
        rec.record(
            CallRecord(
                trace_key=key,
                node="answer",
                question=text(rng, 15, i) + "?",
                context=[text(rng, 80, i)],
                response=text(rng, 30, i),
            )
        )
        rec.end_trace(key)
        if i % args.every == 0:
            b = rec.backlog()
            print(f"{i:>7} {rss_mb():>8.1f} {b['events']:>8} {b.get('held', 0):>8} {time.monotonic() - t0:>6.1f}")
    gate.set()
    t1 = time.monotonic()
    flushed = rec.flush(600)
    print(f"flushed: {flushed} in {time.monotonic() - t1:.1f} s; RSS {rss_mb():.1f} MB; stats {rec.stats}")


if __name__ == "__main__":
    main()
