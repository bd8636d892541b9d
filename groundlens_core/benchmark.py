"""`groundlens benchmark`: AUROC on bundled labelled data, next to simple baselines.

Data (MIT, HaluEval, Li et al. EMNLP 2023; see groundlens_core/data/README.md):
- ``halueval_qa.csv``: 1000 HotpotQA rows with a knowledge passage -> SGI. SGI fits nothing, so
  every row may be used.
- ``halueval_general_heldout.csv``: the held-out part of HaluEval general (no context) -> DGI. The
  bundled direction was fitted on the other part; these rows never took part in the fit.
AUROC reads "label 1 (grounded) scores higher". The QA set has a known shortcut: the grounded
answers are short entities and the hallucinated ones full sentences, so response length alone
separates them; read SGI's figure against that baseline.
"""

from __future__ import annotations

import csv
from importlib import resources
from typing import Any

from groundlens_core.bands import TRIAGE_NOTE
from groundlens_core.metrics import auroc, length_baseline, overlap_baseline

QA_FILE = "halueval_qa.csv"
GENERAL_FILE = "halueval_general_heldout.csv"


def _rows(name: str, limit: int | None) -> list[dict[str, str]]:
    with resources.files("groundlens_core.data").joinpath(name).open("r", encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    return rows[:limit] if limit else rows


def _score_set(rows: list[dict[str, str]], method: str, overlap_with: str, data: str, **kwargs: Any) -> dict[str, Any]:
    """AUROC of ``method`` on ``rows`` next to the two baselines, and the flag rate per label."""
    from groundlens_core.scoring import evaluate_batch

    with_context = method == "sgi"
    items = [{"question": r["question"], "response": r["response"], **({"context": r["context"]} if with_context else {})}
             for r in rows]
    res = evaluate_batch(items, errors="raise", **kwargs)
    y = [int(r["label"]) for r in rows]
    return {
        "data": data.format(n=len(rows), grounded=sum(y)),
        "method": method,
        "auroc": {
            method: auroc([s.value for s in res], y),
            "baseline: shorter response": auroc([length_baseline(r["response"]) for r in rows], y),
            f"baseline: word overlap with {overlap_with}": auroc([overlap_baseline(r["response"], r[overlap_with]) for r in rows], y),
        },
        "flag_rate": {"grounded": _rate(res, y, 1), "hallucinated": _rate(res, y, 0)},
    }


def run_benchmark(limit: int | None = None, long_context: str = "mean") -> dict[str, Any]:
    out: dict[str, Any] = {"note": f"scores are {TRIAGE_NOTE}", "sets": [
        _score_set(_rows(QA_FILE, limit), "sgi", "context",
                   f"HaluEval QA ({QA_FILE}, MIT), {{n}} rows, {{grounded}} grounded", long_context=long_context),
        _score_set(_rows(GENERAL_FILE, limit), "dgi", "question",
                   f"HaluEval general, held-out part ({GENERAL_FILE}, MIT), {{n}} rows, {{grounded}} grounded; "
                   "direction fitted on the other rows"),
    ]}
    lines = [f"groundlens benchmark (AUROC: 0.5 = chance; {out['note']})"]
    for s in out["sets"]:
        lines.append(f"\n{s['data']}")
        for k, v in s["auroc"].items():
            lines.append(f"  {k:<40} AUROC {v:.3f}")
        lines.append(f"  flagged: {s['flag_rate']['grounded']:.1%} of grounded rows, {s['flag_rate']['hallucinated']:.1%} of hallucinated rows")
    out["text"] = "\n".join(lines)
    return out


def _rate(results, labels, label: int) -> float:
    sel = [r.flagged for r, y in zip(results, labels) if y == label]
    return sum(sel) / len(sel) if sel else float("nan")
