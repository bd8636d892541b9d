"""What a signed decision ledger costs the recorder's worker: steps/s with and without one.

    python benchmarks/bench_ledger.py [--rounds 8] [--steps 48]

Realistic steps (benchmarks/rag_graph.py: ~270 word pieces per scored step, every text unique, so no
embedding comes from a cache) are recorded at once into a fresh recorder; the figure is the time
until the worker has scored them all (steps/s). The two variants, no ledger and a ledger
(``Recorder(ledger=Ledger(...))``: a record body per step, then per batch one locked append of the
signed records and one fsync), alternate round by round in this one process (ABBA order), so machine
noise hits them alike; the ratio of the medians is the figure to read (target: within 5 %).
Also printed: the ledger's own time on the worker per step (building, signing, appending, fsync),
measured inside the listener, and its share of a step's time without a ledger: on a busy machine
the rounds vary more than the ledger costs, and that share is the steadier figure. Prints, asserts
nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rag_graph import make_texts  # noqa: E402

from groundlens_core import get_embedder  # noqa: E402
from groundlens_core.ledger import Ledger, verify_ledger, write_keypair  # noqa: E402
from groundlens_core.trace.recorder import CallRecord, Recorder  # noqa: E402
from groundlens_core.trace.recorder import ledger as trace_ledger

LEDGER_SECONDS = [0.0]  # time spent inside the ledger listener, on the worker


def timed(fn):
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            LEDGER_SECONDS[0] += time.perf_counter() - t0

    return wrapper


trace_ledger.LedgerListener.on_step = timed(trace_ledger.LedgerListener.on_step)
trace_ledger.LedgerListener.on_batch_end = timed(trace_ledger.LedgerListener.on_batch_end)


def worker_round(texts: list, key: str, embedder, ledger: Ledger | None) -> float:
    """Steps per second for one recorder scoring ``texts`` (recorded at once)."""
    rec = Recorder("bench", max_pending_steps=len(texts) + 1, quiet_seconds=0.0, embedder=embedder,
                   ledger=ledger if ledger is not None else False)
    rec.record(CallRecord(trace_key="warm", node="answer", question=texts[0][0], context=[texts[0][1]],
                          response=texts[0][2]))
    rec.flush()  # the worker thread exists and has its torch settings
    t0 = time.perf_counter()
    for q, c, a in texts:
        rec.record(CallRecord(trace_key=key, node="answer", question=q, context=[c], response=a))
    rec.flush(600)
    dt = time.perf_counter() - t0
    trace = rec.get_trace(key, wait=False)
    assert trace is not None and sum(s.method == "sgi" for s in trace.steps) == len(texts)
    return len(texts) / dt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8, help="rounds per variant (alternating)")
    parser.add_argument("--steps", type=int, default=48, help="steps per round")
    args = parser.parse_args()
    emb = get_embedder()
    texts = make_texts(args.rounds * 2 * args.steps + args.steps, seed=29)
    with tempfile.TemporaryDirectory() as tmp:
        private, public, _ = write_keypair(Path(tmp) / "keys")
        ledger = Ledger(Path(tmp) / "ledger.jsonl", private)
        worker_round(texts[: args.steps], "warm-up", emb, ledger)  # both paths warm before timing
        worker_round(texts[: args.steps], "warm-up", emb, None)
        LEDGER_SECONDS[0] = 0.0
        rates: dict[str, list[float]] = {"no ledger": [], "ledger": []}
        i = args.steps
        for r in range(args.rounds):
            order = ("no ledger", "ledger") if r % 2 == 0 else ("ledger", "no ledger")
            for name in order:
                chunk = texts[i : i + args.steps]
                i += args.steps
                rates[name].append(worker_round(chunk, f"r{r}", emb, ledger if name == "ledger" else None))
        verdict = verify_ledger(ledger.path, public)
        recorded = args.rounds * args.steps
    print(f"worker throughput, realistic steps: {args.rounds} rounds of {args.steps} steps per variant, alternating")
    for name, rs in rates.items():
        print(f"  {name:9s} median {statistics.median(rs):6.1f} steps/s  (rounds: {', '.join(f'{x:.1f}' for x in rs)})")
    ratio = statistics.median(rates["ledger"]) / statistics.median(rates["no ledger"])
    print(f"  ledger / no ledger: {ratio:.3f} ({100 * (ratio - 1):+.1f} %; target within 5 %)")
    own = LEDGER_SECONDS[0] / recorded
    print(f"  the ledger's own time on the worker: {1000 * own:.3f} ms per step (record, signature, locked append, "
          f"one fsync per batch) = {100 * own * statistics.median(rates['no ledger']):.1f} % of a step's time "
          f"without a ledger (the steady figure when the machine is busy and the ratio above is noisy)")
    print(f"  ledger check: {verdict.message()}")


if __name__ == "__main__":
    main()
