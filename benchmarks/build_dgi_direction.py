"""Build the bundled generic DGI direction from grounded rows of HaluEval general.

    python benchmarks/build_dgi_direction.py

Fits mu_hat on the label-1 rows of the *fit* part of halueval_general.csv in ``$GROUNDLENS_SHARED_DATA`` (see
halueval_split.py), writes groundlens_core/data/dgi_direction_halueval_general.json with its
provenance, and copies the *held-out* rows (both labels) to
groundlens_core/data/halueval_general_heldout.csv for `groundlens benchmark`. HaluEval is MIT
licensed (Li et al., EMNLP 2023); the licence travels in groundlens_core/data/README.md.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from halueval_split import SHARED, in_fit, read_rows, sha256_file  # noqa: E402

from groundlens_core import calibrate, get_embedder  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "groundlens_core" / "data"


def main() -> None:
    rows = read_rows("halueval_general.csv")
    fit = [r for r in rows if in_fit(r["id"]) and r["label"] == "1"]
    held = [r for r in rows if not in_fit(r["id"])]
    emb = get_embedder()
    cal = calibrate(
        pairs=[(r["question"], r["response"]) for r in fit],
        embedder=emb,
        metadata={
            "name": "halueval_general",
            "bundled": True,
            "source": "HaluEval general_data.json (RUCAIBox/HaluEval), via shared/data/halueval_general.csv",
            "licence": "MIT",
            "citation": "Li et al., HaluEval: A Large-Scale Hallucination Evaluation Benchmark for Large Language Models, EMNLP 2023",
            "source_sha256": sha256_file(SHARED / "halueval_general.csv"),
            "split": "fit part: first byte of sha256(id) < 179; only label-1 rows of it are used",
            "fit_rows": len(fit),
            "held_out_rows": len(held),
            "embedding_backend": emb.backend,
        },
    )
    out = cal.save(DATA / "dgi_direction_halueval_general.json")
    with open(DATA / "halueval_general_heldout.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=["id", "question", "context", "response", "label", "source"])
        w.writeheader()
        w.writerows(held)
    print(f"wrote {out} from {cal.n_pairs} grounded pairs (concentration {cal.concentration:.4f}); "
          f"{len(held)} held-out rows -> halueval_general_heldout.csv")


if __name__ == "__main__":
    main()
