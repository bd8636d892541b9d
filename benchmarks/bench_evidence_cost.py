"""The cost of the sentence evidence (support, weakest sentence) next to SGI alone, side by side in one run.

    GROUNDLENS_SHARED_DATA=<data folder> .venv/bin/python -u benchmarks/bench_evidence_cost.py [ROWS]

On the first ROWS (default 300) rows of halueval_qa.csv: the packed raw encode of the unique texts
(bench_core.py's reference), evaluate_batch with evidence=False (SGI only) and with the default
(every signal), alternately, three times each with a fresh cache; then warm single checks both
ways. Prints as it goes (a shorter companion of bench_core.py for a loaded machine); asserts nothing.
"""
import statistics
import sys
import time

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
from halueval_split import read_rows

import groundlens_core as g
from groundlens_core.evidence import plan_evidence

n = int(sys.argv[1]) if len(sys.argv) > 1 else 300
rows = read_rows("halueval_qa.csv")[:n]
items = [{"question": r["question"], "response": r["response"], "context": r["context"]} for r in rows]
texts = list(dict.fromkeys(t for it in items for t in (it["question"], it["response"], it["context"])))
sents = list(dict.fromkeys(s for it in items for s in plan_evidence(it["response"], it["context"]).texts()))
new = [s for s in sents if s not in set(texts)]
print(f"{n} rows, {len(texts)} unique texts ({sum(map(len, texts))} chars), evidence adds {len(new)} sentences ({sum(map(len, new))} chars)", flush=True)
emb = g.get_embedder(); emb.encode(["warm up"])
res = {"raw": [], False: [], True: []}
for rep in range(3):
    emb.clear(); t = time.perf_counter(); emb.inner.encode(texts); res["raw"].append(time.perf_counter() - t)
    for ev in (False, True):
        emb.clear(); t = time.perf_counter(); g.evaluate_batch(items, evidence=ev); res[ev].append(time.perf_counter() - t)
    print(f"rep {rep}: raw packed encode {res['raw'][-1]:.2f}s, evaluate_batch SGI only {res[False][-1]:.2f}s, every signal {res[True][-1]:.2f}s, ratio {res[True][-1]/res[False][-1]:.2f}", flush=True)
b = {k: min(v) for k, v in res.items()}
print(f"best of 3: raw {b['raw']:.2f}s; SGI only {b[False]:.2f}s ({n/b[False]:.0f} rows/s, {b[False]/b['raw']:.2f}x raw); every signal {b[True]:.2f}s ({n/b[True]:.0f} rows/s, {b[True]/b['raw']:.2f}x raw); every signal / SGI only {b[True]/b[False]:.2f}x", flush=True)
extra = read_rows("halueval_qa.csv")[n:n + 30]
for ev in (False, True):
    emb.clear(); fresh = []
    for r in extra:
        t = time.perf_counter(); g.evaluate(r["question"], r["response"], r["context"], evidence=ev); fresh.append(time.perf_counter() - t)
    cached = []
    for i, r in enumerate(extra):
        t = time.perf_counter(); g.evaluate(r["question"], f"Answer number {i}: {r['response']}", r["context"], evidence=ev); cached.append(time.perf_counter() - t)
    print(f"single check, {'every signal' if ev else 'SGI only'}: nothing cached median {statistics.median(fresh)*1000:.1f} ms; question+context cached median {statistics.median(cached)*1000:.1f} ms", flush=True)
