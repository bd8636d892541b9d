"""What the sentence evidence costs next to the raw encode of the texts, side by side in one run.

    GROUNDLENS_SHARED_DATA=<data folder> .venv/bin/python -u benchmarks/bench_evidence_cost.py [--rows 1000] [--backend B]

On the first ROWS rows of halueval_qa.csv, with the default backend (or ``--backend``), one thread:

1. Model work: the word pieces of the unique question, response and context texts, and the word
   pieces the evidence's sentences would add if each were embedded on its own (what the sentence
   alignment cost before it was pooled from the texts' own pass; now it adds none).
2. Time, alternately, best of 3 with a fresh cache each: the raw encode of the unique texts (the
   backend's own ``encode``), ``evaluate_batch`` with ``evidence=False`` (SGI only), with every
   signal (the default) and with the verifier deciding (``GROUNDLENS_VERIFIER=on``); the ratio to
   the raw encode (target: every signal <= 1.2x) and the verifier's share of a row's time.
3. The alignment itself: for each response sentence, whether its best passage is the one the
   sentence-alone embeddings pick, and whether the weakest sentence is the same.

Prints as it goes; asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from halueval_split import read_rows  # noqa: E402

import groundlens_core as g  # noqa: E402
from groundlens_core.embedding.plan import embed_many  # noqa: E402
from groundlens_core.evidence.passages import plan_evidence  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--backend", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    rows = read_rows("halueval_qa.csv")[: args.rows]
    items = [{"question": r["question"], "response": r["response"], "context": r["context"]} for r in rows]
    emb = g.get_embedder(backend=args.backend)
    emb.encode(["warm up"])
    texts = list(dict.fromkeys(t for it in items for t in (it["question"], it["response"], it["context"])))
    plans = [plan_evidence(it["response"], it["context"]) for it in items]
    sents = list(dict.fromkeys(s for p in plans for s in p.texts()))
    alone_new = [s for s in sents if s not in set(texts)]
    pieces = sum(emb.count_tokens(t) + 2 for t in texts)
    extra = sum(emb.count_tokens(s) + 2 for s in alone_new)
    print(f"{len(items)} rows of halueval_qa.csv, backend {emb.backend}: {len(texts)} unique texts, {pieces} word pieces; "
          f"embedding each sentence on its own would add {len(alone_new)} texts, {extra} word pieces "
          f"(+{extra / pieces:.0%}); pooled from the texts' pass it adds none", flush=True)
    import os

    runs: dict[str, list[float]] = {"raw": [], "sgi": [], "all": [], "verifier": []}
    for rep in range(3):
        emb.clear()
        t = time.perf_counter()
        embed_many(emb.inner, texts)  # the backend's own encode (a text over the window: its pieces)
        runs["raw"].append(time.perf_counter() - t)
        for key, evidence in (("sgi", False), ("all", True), ("verifier", True)):
            emb.clear()
            os.environ["GROUNDLENS_VERIFIER"] = "on" if key == "verifier" else "off"
            t = time.perf_counter()
            g.evaluate_batch(items, evidence=evidence, embedder=emb)
            runs[key].append(time.perf_counter() - t)
        os.environ.pop("GROUNDLENS_VERIFIER")
        print(f"rep {rep}: raw encode {runs['raw'][-1]:.2f} s, evaluate_batch SGI only {runs['sgi'][-1]:.2f} s, "
              f"every signal {runs['all'][-1]:.2f} s ({runs['all'][-1] / runs['raw'][-1]:.2f}x raw), "
              f"with the verifier {runs['verifier'][-1]:.2f} s ({runs['verifier'][-1] / runs['raw'][-1]:.2f}x raw)", flush=True)
    best = {k: min(v) for k, v in runs.items()}
    n = len(items)
    print(f"best of 3: raw encode {best['raw']:.2f} s ({n / best['raw']:.0f} rows/s); SGI only {best['sgi']:.2f} s "
          f"({best['sgi'] / best['raw']:.2f}x raw); every signal {best['all']:.2f} s ({n / best['all']:.0f} rows/s, "
          f"{best['all'] / best['raw']:.2f}x raw, target <= 1.2x); with the verifier (GROUNDLENS_VERIFIER=on) "
          f"{best['verifier']:.2f} s ({n / best['verifier']:.0f} rows/s, {best['verifier'] / best['raw']:.2f}x raw; "
          f"the verifier's share {1 - best['all'] / best['verifier']:.0%})", flush=True)

    # the alignment: pooled sentence vectors against each sentence embedded alone
    results = g.evaluate_batch(items, embedder=emb)
    alone = dict(zip(sents, embed_many(emb, sents)))
    same_passage = total = same_weakest = with_weakest = 0
    for plan, res in zip(plans, results):
        ev = res.evidence
        ctx = np.stack([alone[s.text] for s in plan.context_spans])
        sims_alone = []
        for span, sent in zip(plan.response_spans, ev.sentences):
            sims = ctx @ alone[span.text]
            best_i = int(np.argmax(sims))
            same_passage += plan.context_spans[best_i].start == sent.passage_start
            total += 1
            sims_alone.append(float(sims[best_i]))
        cands = [i for i, s in enumerate(ev.sentences) if s.unsupported]
        if cands:
            old = min(cands, key=lambda i: (-len(ev.sentences[i].unsupported), sims_alone[i], i))
            same_weakest += old == ev.weakest
            with_weakest += 1
    print(f"alignment: {same_passage} of {total} response sentences ({same_passage / max(1, total):.1%}) get the best "
          f"passage the sentence-alone embeddings give; the weakest sentence is the same in {same_weakest} of "
          f"{with_weakest} rows that name one", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
