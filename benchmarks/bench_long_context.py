"""How phi(ctx) is formed for contexts longer than the model window: measured, not assumed.

    .venv/bin/python benchmarks/bench_long_context.py [--rows 1000]

SGI AUROC on halueval_qa.csv in ``$GROUNDLENS_SHARED_DATA`` (label 1 = grounded) for the two long-context modes:
``mean`` (normalised mean of the pieces) and ``nearest`` (the piece nearest the response), printed
next to the baselines. HotpotQA passages mostly fit the 256-piece window, so the script also
forces smaller windows (128, 64, 32 word pieces) to make every context "long" and compare the
modes where they differ; "truncate" shows what silently cutting to the first window would give.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from halueval_split import read_rows  # noqa: E402

import groundlens_core as g  # noqa: E402
from groundlens_core.quality.metrics import auroc, length_baseline, overlap_baseline  # noqa: E402


class Window:
    """The real embedder, with a smaller window for splitting decisions."""

    def __init__(self, inner, max_tokens: int):
        self.inner, self.max_tokens = inner, max_tokens
        self.model_id, self.backend, self.dim = inner.model_id, inner.backend, inner.dim

    @property
    def fingerprint(self):
        return self.inner.fingerprint

    def encode(self, texts):
        return self.inner.encode(texts)

    def count_tokens(self, text):
        return self.inner.count_tokens(text)

    def split(self, text, max_tokens=None):
        return self.inner.split(text, max_tokens or self.max_tokens)


def truncate_scores(emb, rows, window):
    out = []
    for r in rows:
        first = emb.split(r["context"], window)[0]
        out.append(g.evaluate(r["question"], r["response"], first, embedder=emb).value)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1000)
    args = ap.parse_args()
    rows = read_rows("halueval_qa.csv")[: args.rows]
    y = [int(r["label"]) for r in rows]
    emb = g.get_embedder()
    n_tok = np.array([emb.count_tokens(r["context"]) for r in rows])
    print(f"data: {len(rows)} rows of halueval_qa.csv (HaluEval QA, MIT), {sum(y)} grounded")
    print(f"context length in word pieces: median {np.median(n_tok):.0f}, max {n_tok.max()}, "
          f"over the {emb.max_tokens}-piece window: {(n_tok > emb.max_tokens).sum()} rows")
    print(f"baseline shorter response:  AUROC {auroc([length_baseline(r['response']) for r in rows], y):.3f}")
    print(f"baseline word overlap:      AUROC {auroc([overlap_baseline(r['response'], r['context']) for r in rows], y):.3f}")
    items = [{"question": r["question"], "response": r["response"], "context": r["context"]} for r in rows]
    for window in (emb.max_tokens, 128, 64, 32):
        w = emb if window == emb.max_tokens else Window(emb, window)
        line = [f"window {window:>3}:"]
        for mode in ("mean", "nearest"):
            res = g.evaluate_batch(items, embedder=w, long_context=mode, errors="raise")
            chunked = sum(1 for s in res if s.context_chunks > 1)
            line.append(f"{mode} AUROC {auroc([s.value for s in res], y):.3f} ({chunked} split)")
        if window != emb.max_tokens:
            line.append(f"truncate AUROC {auroc(truncate_scores(emb, rows, window), y):.3f}")
        print("  ".join(line))


if __name__ == "__main__":
    main()
