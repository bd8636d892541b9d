"""The rules' bands on the generated pairs, kind by kind: which faithful rewrites they flag and which
minimal edits they trust.

The pairs come from :mod:`groundlens_core.verifier.edits` (deterministic, seeded) made from the
contexts of the five files written by others in ``$GROUNDLENS_SHARED_DATA/train``: faithful rewrites
(a copy, the same claim in other words, a conversion, a derived value, a shortened list, an
abstention) beside minimal edits (a value, a name, a polarity, a scope, a dropped condition, an added
list item or claim). A seeded sample of at most ``--per-kind`` pairs of each kind is scored with the
rules (the verifier off). These pairs are generated, not written by people: a figure here says what
the rules do with one kind of wording, not how well they rank real answers.

Usage: ``GROUNDLENS_SHARED_DATA=... python benchmarks/rules_on_generated.py [--per-kind 300]``
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from collections import Counter, defaultdict

os.environ["GROUNDLENS_VERIFIER"] = "off"

from groundlens_core.scoring import evaluate_batch
from groundlens_core.verifier import edits, pool
from groundlens_core.verifier.train import SEED


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-kind", type=int, default=300)
    args = ap.parse_args()
    source = [(r.question, r.context, r.origin) for name in pool.TRAIN_FILES for r in pool.read(name)]
    by_kind: dict[tuple[str, int], list] = defaultdict(list)
    for p in edits.generate(source, seed=SEED):
        by_kind[(p.kind, p.label)].append(p)
    rnd = random.Random(SEED)
    print(f"{'kind':<18} {'label':<9} {'pairs':>5}  {'flagged':>8} {'review':>8} {'trusted':>8}")
    for (kind, label), pairs in sorted(by_kind.items(), key=lambda kv: (-kv[0][1], kv[0][0])):
        picked = rnd.sample(pairs, min(args.per_kind, len(pairs)))
        res = evaluate_batch(
            [{"question": p.question or None, "response": p.response, "context": p.context} for p in picked],
            errors="record",
        )
        bands = Counter(r.triage for r in res)
        n = len(picked)
        print(
            f"{kind:<18} {'faithful' if label else 'edited':<9} {n:>5}  "
            + " ".join(f"{bands[b] / n:>8.1%}" for b in ("flagged", "review", "trusted")),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
