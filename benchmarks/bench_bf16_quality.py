"""Is the opt-in ``packed-bf16`` backend (CPUs with native bf16) good enough? Its scores next to fp32.

    .venv/bin/python benchmarks/bench_bf16_quality.py

On halueval_qa.csv in ``$GROUNDLENS_SHARED_DATA`` (1000 rows, label 1 = grounded) and faithbench_dev.csv (250
summaries, label 1 = consistent or benign; no question, so SGI uses the fixed question "Summarize
the source text." and the response-source cosine is shown too): AUROC ("grounded rows score
higher") of each signal with the fp32 backend (``packed-torch``) and with ``packed-bf16``,
the paired difference with a 95 % bootstrap interval (2000 resamples of rows), how many rows change
triage band, and the cosine of every bf16 embedding to its fp32 reference. The bar: AUROC
within 0.005 of fp32 on both sets. Speed is measured by bench_agent_throughput.py.
"""

from __future__ import annotations

import csv
import sys

import numpy as np
from halueval_split import shared_data  # benchmarks/, the script's folder

from groundlens_core.embedding import get_embedder
from groundlens_core.embedding.packed import bf16_supported
from groundlens_core.quality.metrics import auroc
from groundlens_core.scoring import evaluate_batch

DATA = shared_data()
FAITH_QUESTION = "Summarize the source text."


def paired_delta(y: np.ndarray, a: np.ndarray, b: np.ndarray, n: int = 2000) -> tuple[float, float, float]:
    rng = np.random.default_rng(13)
    d = []
    for _ in range(n):
        idx = rng.integers(0, len(y), len(y))
        if len(set(y[idx])) < 2:
            continue
        d.append(auroc(b[idx], y[idx]) - auroc(a[idx], y[idx]))
    return auroc(b, y) - auroc(a, y), float(np.percentile(d, 2.5)), float(np.percentile(d, 97.5))


def read(name: str) -> list[dict[str, str]]:
    with open(DATA / name, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def main() -> int:
    if not (DATA / "halueval_qa.csv").is_file():
        print(f"data not found under {DATA.resolve()}: skipped")
        return 0
    if not bf16_supported():
        print("this CPU has no native bf16 (AVX-512 BF16 / AMX): packed-bf16 is unavailable here")
        return 0
    fp32, bf16 = get_embedder(backend="packed-torch"), get_embedder(backend="packed-bf16")
    sets = [("halueval_qa.csv", read("halueval_qa.csv"), None)]
    if (DATA / "faithbench_dev.csv").is_file():
        sets.append(("faithbench_dev.csv", read("faithbench_dev.csv"), FAITH_QUESTION))
    all_texts: dict[str, None] = {}
    print(f"{'data':20s} {'signal':16s} {'fp32 AUROC':>10s} {'bf16 AUROC':>10s} {'bf16 - fp32 [95% CI]':>26s} band changes")
    for name, rows, fixed_q in sets:
        items = [{"question": fixed_q or r["question"], "response": r["response"], "context": r["context"]} for r in rows]
        y = np.array([int(r["label"]) for r in rows])
        res = {k: evaluate_batch(items, embedder=e) for k, e in (("fp32", fp32), ("bf16", bf16))}
        ok = [i for i in range(len(rows)) if all(getattr(res[k][i], "method", None) == "sgi" for k in res)]
        a = np.array([res["fp32"][i].value for i in ok])
        b = np.array([res["bf16"][i].value for i in ok])
        bands = sum(res["fp32"][i].triage != res["bf16"][i].triage for i in ok)
        d, lo, hi = paired_delta(y[ok], a, b)
        print(f"{name:20s} {'SGI':16s} {auroc(a, y[ok]):10.4f} {auroc(b, y[ok]):10.4f} {d:+10.4f} [{lo:+.4f}, {hi:+.4f}] "
              f"{bands} of {len(ok)} rows; max |SGI diff| {np.abs(a - b).max():.5f}")
        if fixed_q:
            cos = {}
            for k, e in (("fp32", fp32), ("bf16", bf16)):
                r_ = e.encode([rows[i]["response"] for i in ok])
                c_ = e.encode([e.split(rows[i]["context"])[0] for i in ok])
                cos[k] = (r_ * c_).sum(1).astype(np.float64)
            d, lo, hi = paired_delta(y[ok], cos["fp32"], cos["bf16"])
            print(f"{name:20s} {'cos(resp, src)':16s} {auroc(cos['fp32'], y[ok]):10.4f} {auroc(cos['bf16'], y[ok]):10.4f} "
                  f"{d:+10.4f} [{lo:+.4f}, {hi:+.4f}]")
        for it in items:
            for t in (it["question"], it["response"]):
                all_texts.setdefault(t, None)
            for piece in fp32.split(it["context"]):
                all_texts.setdefault(piece, None)
    texts = list(all_texts)
    cos = (fp32.encode(texts) * bf16.encode(texts)).sum(1)
    print(f"cosine of bf16 to fp32 embeddings over {len(texts)} unique texts: min {cos.min():.6f}, "
          f"mean {cos.mean():.6f}, 1st percentile {np.percentile(cos, 1):.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
