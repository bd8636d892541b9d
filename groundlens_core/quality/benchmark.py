"""`groundlens benchmark`: every signal's AUROC on labelled data, next to simple baselines, with intervals.

Sets:
- ``halueval_qa.csv`` (bundled, MIT, HaluEval, Li et al. EMNLP 2023): 1000 HotpotQA rows with a
  question and a knowledge passage. Known shortcut: the grounded answers are short entities and the
  hallucinated ones full sentences, so response length alone separates them; every signal is also
  reported *within response-length quintiles* ("length-matched"), where that shortcut cannot help.
- ``halueval_general_heldout.csv`` (bundled, MIT): the held-out part of HaluEval general (no
  context) -> DGI. The bundled direction was fitted on the other part.
- ``faithbench_dev.csv`` (FaithBench, Bao et al. NAACL 2025, CC BY-NC-SA 4.0): summaries without a
  question. Never bundled: read from ``--faithbench PATH``, ``$GROUNDLENS_FAITHBENCH`` or the folder
  ``$GROUNDLENS_SHARED_DATA``, and skipped when absent. Its ``spans`` column marks the human-annotated
  unsupported spans, which gives the localisation hit rate of the weakest sentence.
- ``--data my.csv``: any labelled CSV/JSONL with ``response`` and ``label`` (1 = grounded), and
  ``question`` and/or ``context``; optional ``spans`` (JSON list of ``[start, end)`` in the response).

Signals: SGI (question + context), DGI (question, context ignored), support (context), the fact
tier alone (fewer failed findings rank higher), the triage ranking (the ``rank`` the product sorts
by, for each row as given), and the baselines: shorter response, and word overlap with the context
(with the question when there is no context). The ranking is printed beside each of its components
so that a combination that loses to one of its parts shows. The claim sets (``claims_dev.csv``,
``claims_v2_dev.csv``, read from ``$GROUNDLENS_SHARED_DATA`` when there) also get flag rates by kind. AUROC
reads "label 1 (grounded) scores higher"; intervals are 95 % percentile bootstrap over rows
(1000 resamples, fixed seed, so the same data prints the same figures).
"""

from __future__ import annotations

import csv
import math
import os
import time
from importlib import resources
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from groundlens_core import settings
from groundlens_core.batch import json_input
from groundlens_core.errors import GroundlensInputError
from groundlens_core.quality.metrics import auroc, length_baseline, overlap_baseline
from groundlens_core.scoring.bands import TRIAGE_NOTE

QA_FILE = "halueval_qa.csv"
GENERAL_FILE = "halueval_general_heldout.csv"
FAITHBENCH_FILE = "faithbench_dev.csv"
CLAIMS_FILE = "claims_dev.csv"
CLAIMS_V2_FILE = "claims_v2_dev.csv"
BOOTSTRAP = 1000
SEED = 20261129


# ---------------------------------------------------------------- data


def _bundled(name: str) -> list[dict[str, Any]]:
    with resources.files("groundlens_core.data").joinpath(name).open("r", encoding="utf-8", newline="") as fh:  # type: ignore[call-overload]
        return list(csv.DictReader(fh))


def faithbench_path(explicit: str | os.PathLike[str] | None = None) -> Path | None:
    """FaithBench is CC BY-NC-SA and never shipped. Where it is read from: ``explicit``,
    ``$GROUNDLENS_FAITHBENCH``, else ``$GROUNDLENS_SHARED_DATA/faithbench_dev.csv``; None when
    none is given (nothing outside the package is searched)."""
    if explicit:
        return Path(explicit)
    named = settings.path("GROUNDLENS_FAITHBENCH")
    if named is not None:
        return named
    shared = settings.path("GROUNDLENS_SHARED_DATA")
    return shared / FAITHBENCH_FILE if shared is not None else None


def read_labelled(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Rows of a labelled CSV/JSONL: ``response`` and ``label`` required; ``question``, ``context``
    and ``spans`` optional."""
    from groundlens_core.batch.io_formats import iter_rows, scan_table

    info = scan_table(path)  # type: ignore[arg-type]
    cols = list(info.columns)
    rows = list(iter_rows(info))
    if "label" not in cols:
        raise GroundlensInputError(f"{path}: missing column label (1 = grounded, 0 = hallucinated)")
    if "question" not in cols and "context" not in cols:
        raise GroundlensInputError(f"{path}: needs a question and/or a context column")
    out = []
    for n, r in enumerate(rows, 1):
        try:
            label = int(float(str(r.get("label")).strip()))
        except ValueError:
            raise GroundlensInputError(f"{path}: row {n}: label must be 0 or 1, got {r.get('label')!r}") from None
        if label not in (0, 1):
            raise GroundlensInputError(f"{path}: row {n}: label must be 0 or 1, got {label}")
        spans = r.get("spans")
        if isinstance(spans, str) and spans.strip():
            try:
                spans = json_input.loads(spans, name=f"{path}: row {n}")
            except GroundlensInputError:
                raise GroundlensInputError(
                    f"{path}: row {n}: spans must be a JSON list of [start, end) pairs"
                ) from None
        out.append(
            {
                "question": r.get("question") or "",
                "context": r.get("context") or "",
                "response": r.get("response"),
                "label": label,
                "spans": spans if isinstance(spans, list) else None,
                "kind": str(r.get("kind") or ""),
            }
        )
    return out


def claims_path(explicit: str | os.PathLike[str] | None = None, name: str = CLAIMS_FILE) -> Path | None:
    """A claim set (correct answers in other words beside answers with one unsupported element, by
    ``kind``): ``explicit`` or ``$GROUNDLENS_SHARED_DATA/<name>``; None when neither is there."""
    if explicit:
        return Path(explicit)
    shared = settings.path("GROUNDLENS_SHARED_DATA")
    if shared is not None and (shared / name).is_file():
        return shared / name
    return None


# ---------------------------------------------------------------- statistics


def _auroc_fast(s: np.ndarray, y: np.ndarray) -> float:
    pos = int(y.sum())
    neg = len(y) - pos
    if pos == 0 or neg == 0:
        return float("nan")
    order = np.argsort(s, kind="mergesort")
    ss = s[order]
    ranks = np.empty(len(s))
    # average ranks over ties
    _, first, counts = np.unique(ss, return_index=True, return_counts=True)
    avg = first + (counts + 1) / 2.0
    ranks[order] = np.repeat(avg, counts)
    return float((ranks[y == 1].sum() - pos * (pos + 1) / 2.0) / (pos * neg))


def auroc_ci(scores: Sequence[float], labels: Sequence[int], n: int = BOOTSTRAP, seed: int = SEED) -> dict[str, float]:
    """AUROC and its 95 % percentile bootstrap interval (rows resampled with replacement)."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=np.int64)
    point = auroc(s, y)  # type: ignore[arg-type]
    rng = np.random.default_rng(seed)
    vals = []
    for _ in range(n):
        idx = rng.integers(0, len(s), len(s))
        v = _auroc_fast(s[idx], y[idx])
        if not math.isnan(v):
            vals.append(v)
    lo, hi = (float(np.percentile(vals, 2.5)), float(np.percentile(vals, 97.5))) if vals else (float("nan"),) * 2
    return {"auroc": point, "low": lo, "high": hi}


def length_matched_auroc(
    scores: Sequence[float], labels: Sequence[int], lengths: Sequence[int], strata: int = 5
) -> float:
    """AUROC within response-length quintiles, averaged with weight min(#grounded, #hallucinated) per
    stratum: what a signal ranks once the length shortcut is taken away."""
    s, y, L = (np.asarray(a) for a in (scores, labels, lengths))
    edges = np.quantile(L, np.linspace(0, 1, strata + 1))
    vals, weights = [], []
    for i in range(strata):
        m = (L >= edges[i]) & ((L < edges[i + 1]) if i < strata - 1 else (L <= edges[i + 1]))
        w = min(int((y[m] == 1).sum()), int((y[m] == 0).sum()))
        if w:
            vals.append(auroc(s[m], y[m]))
            weights.append(w)
    return float(np.average(vals, weights=weights)) if weights else float("nan")


def _hit_ci(hits: Sequence[float], n: int = BOOTSTRAP, seed: int = SEED) -> dict[str, float]:
    h = np.asarray(hits, dtype=np.float64)
    if not len(h):
        return {"rate": float("nan"), "low": float("nan"), "high": float("nan"), "rows": 0}
    rng = np.random.default_rng(seed)
    means = [float(h[rng.integers(0, len(h), len(h))].mean()) for _ in range(n)]
    return {
        "rate": float(h.mean()),
        "low": float(np.percentile(means, 2.5)),
        "high": float(np.percentile(means, 97.5)),
        "rows": int(len(h)),
    }


def _overlaps(start: int, end: int, spans: Sequence[Sequence[int]]) -> bool:
    return any(a < end and start < b for a, b in spans)


# ---------------------------------------------------------------- one set


def score_set(
    rows: list[dict[str, Any]],
    name: str,
    *,
    dgi_only: bool = False,
    long_context: str = "mean",
    bootstrap: int = BOOTSTRAP,
) -> dict[str, Any]:
    """Every signal on ``rows`` (dicts with question, context, response, label[, spans])."""
    from groundlens_core.scoring import evaluate_batch

    y = [int(r["label"]) for r in rows]
    lengths = [len(r["response"]) for r in rows]
    has_q = any((r.get("question") or "").strip() for r in rows)
    has_c = any((r.get("context") or "").strip() for r in rows) and not dgi_only
    items = [
        {
            "question": r.get("question") or None,
            "response": r["response"],
            "context": (r.get("context") or None) if has_c else None,
        }
        for r in rows
    ]
    t0 = time.perf_counter()
    res = evaluate_batch(items, errors="record", long_context=long_context)
    seconds = time.perf_counter() - t0
    signals = _signals(rows, items, res, has_q=has_q, has_c=has_c)
    out: dict[str, Any] = {
        "data": name,
        "rows": len(rows),
        "grounded": sum(y),
        "errors": sum(1 for x in res if x.method == "error"),
        "methods": sorted({x.method for x in res}),
        "auroc": _auroc_table(signals, y, lengths, bootstrap),
        "flag_rate": {
            lab: _rate([x.flagged for x, yy in zip(res, y) if yy == v and x.method != "error"])
            for lab, v in (("grounded", 1), ("hallucinated", 0))
        },
        # per kind of row (a claim set's paraphrase, number, date ...): flagged share and row count
        "flag_rate_by_kind": _flag_rate_by_kind(rows, res),
        "rows_per_second": len(rows) / seconds if seconds > 0 else float("nan"),
        "seconds": seconds,
    }
    localisation = _localisation(rows, res, bootstrap)
    if localisation is not None:
        out["localisation"] = localisation
    return out


def _signals(
    rows: list[dict[str, Any]], items: list[dict[str, Any]], res: list[Any], *, has_q: bool, has_c: bool
) -> dict[str, list[float | None]]:
    """Each signal's score per row (None where the row has none), in the order the report prints
    them: the model's signals, the triage ranking beside its components, then the baselines."""
    from groundlens_core.scoring import evaluate_batch

    signals: dict[str, list[float | None]] = {}
    if has_q and has_c:
        signals["sgi"] = [x.value if x.method == "sgi" else None for x in res]
    if has_q:
        if has_c:  # DGI on the same rows, context ignored: what the question alone gives
            dres = evaluate_batch(
                [{"question": it["question"], "response": it["response"]} for it in items], errors="record"
            )
        else:
            dres = res
        signals["dgi"] = [x.value if x.method == "dgi" else None for x in dres]  # type: ignore[union-attr]
    if has_c:
        signals["support"] = [x.evidence.support if getattr(x, "evidence", None) else None for x in res]
        # the fact tier alone: fewer failed findings (values, names, polarity, conditions, added claims) rank higher
        signals["facts (fewer failed findings)"] = [
            -float(len(x.evidence.failed_facts())) if getattr(x, "evidence", None) else None for x in res
        ]
        signals["verifier"] = [x.verdict.probability if getattr(x, "verdict", None) is not None else None for x in res]
    signals["triage ranking"] = [x.score if x.method != "error" else None for x in res]
    signals["baseline: shorter response"] = [length_baseline(r["response"]) for r in rows]
    other = "context" if has_c else "question"
    signals[f"baseline: word overlap with {other}"] = [
        overlap_baseline(r["response"], r.get(other) or "") for r in rows
    ]
    return signals


def _auroc_table(
    signals: dict[str, list[float | None]], y: list[int], lengths: list[int], bootstrap: int
) -> dict[str, dict[str, float]]:
    """AUROC with its interval and the length-matched AUROC per signal, each over the rows the
    signal scored (a signal that scored none is left out)."""
    table = {}
    for sig, vals in signals.items():
        keep = [i for i, v in enumerate(vals) if v is not None]
        if not keep:
            continue
        s = [vals[i] for i in keep]
        yy = [y[i] for i in keep]
        entry = auroc_ci(s, yy, n=bootstrap)  # type: ignore[arg-type]
        entry["length_matched"] = length_matched_auroc(s, yy, [lengths[i] for i in keep])  # type: ignore[arg-type]
        entry["rows"] = len(keep)
        table[sig] = entry
    return table


def _flag_rate_by_kind(rows: list[dict[str, Any]], res: list[Any]) -> dict[str, dict[str, int]]:
    """Flagged count and row count per ``kind`` (rows without a kind and unscored rows left out)."""
    by_kind: dict[str, list[bool]] = {}
    for r, x in zip(rows, res):
        if r.get("kind") and x.method != "error":
            by_kind.setdefault(str(r["kind"]), []).append(bool(x.flagged))
    return {k: {"flagged": sum(v), "rows": len(v)} for k, v in sorted(by_kind.items())}


def _localisation(rows: list[dict[str, Any]], res: list[Any], bootstrap: int) -> dict[str, Any] | None:
    """How often the weakest sentence overlaps an annotated span, beside a random and the longest
    sentence; None when no hallucinated row has spans and at least two sentences."""
    loc_rows = [
        (r, x)
        for r, x in zip(rows, res)
        if r.get("spans")
        and int(r["label"]) == 0
        and getattr(x, "evidence", None) is not None
        and len(x.evidence.sentences) >= 2
    ]
    if not loc_rows:
        return None
    weakest, rand, longest = [], [], []
    for r, x in loc_rows:
        ev = x.evidence
        hits = [_overlaps(s.start, s.end, r["spans"]) for s in ev.sentences]
        weakest.append(float(ev.weakest is not None and hits[ev.weakest]))  # naming none is a miss
        rand.append(sum(hits) / len(hits))
        longest.append(
            float(hits[max(range(len(hits)), key=lambda i: (ev.sentences[i].end - ev.sentences[i].start, -i))])
        )
    return {
        "what": "hallucinated rows with >= 2 sentences and annotated spans: "
        "share whose named sentence overlaps a span "
        "(a row where no sentence is named counts as a miss)",
        "weakest sentence": _hit_ci(weakest, n=bootstrap),
        "baseline: random sentence (expected)": _hit_ci(rand, n=bootstrap),
        "baseline: longest sentence": _hit_ci(longest, n=bootstrap),
    }


def _rate(flags: list[bool]) -> float:
    return sum(flags) / len(flags) if flags else float("nan")


# ---------------------------------------------------------------- the command


def run_benchmark(
    limit: int | None = None,
    long_context: str = "mean",
    data: str | None = None,
    faithbench: str | None = None,
    bootstrap: int = BOOTSTRAP,
    claims: str | None = None,
) -> dict[str, Any]:
    from groundlens_core.batch.outputs import check_input_file

    for option, given in (("--faithbench", faithbench), ("--claims", claims)):  # checked before any scoring
        if given and data:
            raise GroundlensInputError(f"{option} is for the built-in sets; with --data only your file is scored")
        if given:
            check_input_file(given, what=f"{option} file")
    sets: list[dict[str, Any]] = []

    def add(rows: list[dict[str, Any]], name: str, **kw: Any) -> None:
        """Score the first ``limit`` rows as one set (``name`` formats with its row counts)."""
        sets.append(score_set(rows[:limit] if limit else rows, name, bootstrap=bootstrap, **kw))

    if data:
        add(read_labelled(data), f"{Path(data).name}, {{n}} rows, {{grounded}} grounded", long_context=long_context)
    else:
        add(
            [{**r, "label": int(r["label"])} for r in _bundled(QA_FILE)],
            f"HaluEval QA ({QA_FILE}, MIT), {{n}} rows, {{grounded}} grounded",
            long_context=long_context,
        )
        # the dev sets that are never bundled: scored when their files are there
        found = (
            (
                faithbench_path(faithbench),
                "FaithBench dev ({file}, CC BY-NC-SA 4.0, not bundled), {{n}} rows, "
                "{{grounded}} grounded; summaries, no question",
            ),
            (
                claims_path(claims),
                "Claims dev ({file}), {{n}} rows, {{grounded}} grounded; correct paraphrases "
                "beside answers that keep the source's words and change one fact",
            ),
            (
                None if claims else claims_path(None, CLAIMS_V2_FILE),
                "Claims v2 dev ({file}), {{n}} rows, {{grounded}} grounded; answers worded as an assistant "
                "would, beside answers with one unsupported element (a value, a name, a polarity, a dropped "
                "condition, an added claim)",
            ),
        )
        for path, name in found:
            if path is not None and path.is_file():
                add(read_labelled(path), name.format(file=path.name), long_context=long_context)
        add(
            [{**r, "label": int(r["label"]), "context": ""} for r in _bundled(GENERAL_FILE)],
            f"HaluEval general, held-out part ({GENERAL_FILE}, MIT), {{n}} rows, {{grounded}} grounded; "
            "direction fitted on the other rows",
            dgi_only=True,
        )
    for s in sets:
        s["data"] = s["data"].format(n=s["rows"], grounded=s["grounded"])
    out: dict[str, Any] = {"note": f"scores are {TRIAGE_NOTE}", "bootstrap": bootstrap, "sets": sets}
    if not data:
        out["leave_one_file_out"] = _shipped_validation()
    fb = faithbench_path(faithbench)
    if not data and (fb is None or not fb.is_file()):
        out["skipped"] = [
            "FaithBench dev: not found (--faithbench PATH, or GROUNDLENS_SHARED_DATA naming its folder); "
            "it is never bundled"
        ]
    out["text"] = format_report(out)
    return out


def _shipped_validation() -> dict[str, Any]:
    """The verifier's leave-one-file-out table, as measured when its weights were fitted."""
    import json

    try:
        manifest = json.loads(resources.files("groundlens_core.data").joinpath("verifier.json").read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return dict(manifest.get("leave_one_file_out") or {})


def format_report(out: dict[str, Any]) -> str:
    lines = [f"groundlens benchmark (AUROC: 0.5 = chance, [95% bootstrap interval]; {out['note']})"]
    for s in out["sets"]:
        lines.append(f"\n{s['data']}" + (f"  ({s['errors']} rows could not be scored)" if s["errors"] else ""))
        lines.append(f"  {'signal':<38} {'AUROC':>6}  {'95% interval':<15} {'length-matched':>14}")
        for k, v in s["auroc"].items():
            lines.append(
                f"  {k:<38} {v['auroc']:>6.3f}  [{v['low']:.3f}, {v['high']:.3f}]  {v['length_matched']:>14.3f}"
            )
        lines.append(
            f"  flagged: {s['flag_rate']['grounded']:.1%} of grounded rows, "
            f"{s['flag_rate']['hallucinated']:.1%} of hallucinated rows"
            f"; {s['rows_per_second']:.0f} rows/s ({', '.join(s['methods'])})"
        )
        kinds = s.get("flag_rate_by_kind")
        if kinds:
            lines.append(
                "  flagged by kind: "
                + ", ".join(
                    f"{k} {v['flagged']}/{v['rows']} ({v['flagged'] / v['rows']:.0%})" for k, v in kinds.items()
                )
            )
        loc = s.get("localisation")
        if loc:
            lines.append(f"  localisation ({loc['weakest sentence']['rows']} {loc['what']}):")
            for k, v in loc.items():
                if k != "what":
                    lines.append(f"    {k:<36} {v['rate']:.3f}  [{v['low']:.3f}, {v['high']:.3f}]")
    lofo = out.get("leave_one_file_out")
    if lofo:
        lines.append(
            "\nThe verifier on each file written by others, left out of its fit (leave-one-file-out, "
            "from the shipped manifest verifier.json; AUROC [95% interval]; flagged at the shipped edges):"
        )
        lines.append(
            f"  {'file':<18} {'rows':>5}  {'verifier':<22} {'word overlap':<22} {'shorter':<22} flagged ok/wrong"
        )
        for name, v in lofo.items():

            def cell(e: dict[str, float]) -> str:
                return f"{e['auroc']:.3f} [{e['low']:.3f}, {e['high']:.3f}]"

            lines.append(
                f"  {name:<18} {v['rows']:>5}  {cell(v['verifier']):<22} {cell(v['baseline: word overlap']):<22} "
                f"{cell(v['baseline: shorter response']):<22} {v['flagged correct']:.0%} / {v['flagged wrong']:.0%}"
            )
    for note in out.get("skipped", ()):
        lines.append(f"\nskipped: {note}")
    return "\n".join(lines)
