"""The ``groundlens`` command: doctor, check, evaluate, calibrate, benchmark, report.

Errors are one line on stderr and exit code 2; no traceback for anything the user can fix.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from groundlens_core import _offline  # noqa: F401
from groundlens_core._version import __version__
from groundlens_core.bands import TRIAGE_NOTE
from groundlens_core.errors import GroundlensError, GroundlensInputError

OUT_COLUMNS = ("groundlens_method", "groundlens_value", "groundlens_normalized", "groundlens_flagged", "groundlens_triage", "groundlens_error")
_RISK = {"error": 0, "flagged": 1, "review": 2, "trusted": 3}


# ---------------------------------------------------------------- files


def read_table(path: str | Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Rows and column names of a CSV or JSONL file (by extension)."""
    path = Path(path)
    if not path.is_file():
        raise GroundlensInputError(f"input file not found: {path}")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise GroundlensInputError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start}); re-save it as UTF-8") from None
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        rows: list[dict[str, Any]] = []
        columns: dict[str, None] = {}
        # split on \n only: str.splitlines() also breaks at U+2028, \x0c ... inside values
        for n, line in enumerate(text.split("\n"), 1):
            line = line.rstrip("\r")
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise GroundlensInputError(f"{path}:{n}: not valid JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise GroundlensInputError(f"{path}:{n}: each line must be a JSON object")
            rows.append(row)
            columns.update(dict.fromkeys(row))
        cols = list(columns)
    elif suffix == ".csv":
        reader = csv.DictReader(io.StringIO(text, newline=""))
        cols = list(reader.fieldnames or [])
        rows = [dict(r) for r in reader]
    else:
        raise GroundlensInputError(f"{path}: unsupported file type {suffix or '(none)'}; use .csv or .jsonl")
    missing = [c for c in ("question", "response") if c not in cols]
    if missing:
        raise GroundlensInputError(f"{path}: missing column(s) {', '.join(missing)}; found: {', '.join(cols) or 'none'}")
    return rows, cols


def write_table(path: str | Path, rows: list[dict[str, Any]], columns: list[str]) -> None:
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".csv":
        with open(path, "w", newline="", encoding="utf-8") as fh:
            w = csv.DictWriter(fh, fieldnames=columns, extrasaction="ignore")
            w.writeheader()
            for r in rows:
                w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in columns})
    elif suffix in (".jsonl", ".ndjson"):
        with open(path, "w", encoding="utf-8") as fh:
            for r in rows:
                fh.write(json.dumps({k: r.get(k) for k in columns}, ensure_ascii=False) + "\n")
    else:
        raise GroundlensInputError(f"{path}: unsupported output type {suffix or '(none)'}; use .csv or .jsonl")


class Progress:
    """A one-line progress bar on stderr (silent when stderr is not a terminal unless forced)."""

    def __init__(self, label: str, enabled: bool | None = None):
        self.label = label
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.start = time.perf_counter()

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or total == 0:
            return
        width = 30
        filled = int(width * done / total)
        rate = done / max(1e-9, time.perf_counter() - self.start)
        sys.stderr.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} ({rate:.0f} rows/s)")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()


# ---------------------------------------------------------------- commands


def cmd_check(args: argparse.Namespace) -> int:
    from groundlens_core.scoring import evaluate

    res = evaluate(args.question, args.response, args.context, calibration=args.calibration, long_context=args.long_context)
    if args.json:
        print(res.to_json())
    else:
        print(f"{res.method.upper()} {res.value:.4f}  normalized {res.normalized:.3f}  {res.triage.upper()}")
        print(res.explanation)
    return 0


def _row_values(res: Any) -> dict[str, Any]:
    if res.method == "error":
        return {"groundlens_method": "error", "groundlens_value": None, "groundlens_normalized": None,
                "groundlens_flagged": None, "groundlens_triage": "error", "groundlens_error": res.error}
    return {"groundlens_method": res.method, "groundlens_value": res.value, "groundlens_normalized": res.normalized,
            "groundlens_flagged": res.flagged, "groundlens_triage": res.triage, "groundlens_error": None}


def cmd_evaluate(args: argparse.Namespace) -> int:
    from groundlens_core.scoring import evaluate_batch

    rows, cols = read_table(args.input)
    items = []
    for r in rows:
        ctx = r.get("context") if "context" in cols else None
        items.append({"question": r.get("question"), "response": r.get("response"), "context": ctx if ctx != "" else None})
    progress = Progress("groundlens evaluate", enabled=None if not args.progress else True)
    results = evaluate_batch(items, calibration=args.calibration, long_context=args.long_context, errors="record",
                             chunk_size=args.batch_size, progress=progress)
    out_rows = []
    for r, res in zip(rows, results):
        out = dict(r)
        out.update(_row_values(res))
        out_rows.append(out)
    order = list(range(len(out_rows)))
    if args.sort:
        order.sort(key=lambda i: (_RISK.get(out_rows[i]["groundlens_triage"], 4),
                                  out_rows[i]["groundlens_normalized"] if out_rows[i]["groundlens_normalized"] is not None else 2.0, i))
    columns = [c for c in cols if c not in OUT_COLUMNS] + list(OUT_COLUMNS)
    write_table(args.output, [out_rows[i] for i in order], columns)
    if args.html:
        from groundlens_core.trace.batch import trace_from_batch
        from groundlens_core.trace.html import write_html

        trace = trace_from_batch(rows, items, results, name=Path(args.input).name)
        write_html([trace], args.html, title=f"groundlens triage: {Path(args.input).name}")
    n_err = sum(1 for r in results if r.method == "error")
    counts: dict[str, int] = {}
    for r in results:
        counts[r.triage] = counts.get(r.triage, 0) + 1
    summary = ", ".join(f"{counts[k]} {k}" for k in ("flagged", "review", "trusted", "error") if counts.get(k))
    print(f"scored {len(rows) - n_err}/{len(rows)} rows -> {args.output} ({summary})" + (f"; report {args.html}" if args.html else ""), file=sys.stderr)
    print(f"note: scores are {TRIAGE_NOTE}", file=sys.stderr)
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    from groundlens_core.calibration import calibrate

    cal = calibrate(csv_path=args.pairs)
    cal.save(args.output)
    print(f"wrote {args.output}: direction from {cal.n_pairs} pairs, concentration {cal.concentration:.4f}, embedder {cal.fingerprint}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from groundlens_core.trace.html import write_html
    from groundlens_core.trace.model import Trace

    traces = []
    for p in args.traces:
        path = Path(p)
        if not path.is_file():
            raise GroundlensInputError(f"trace file not found: {path}")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise GroundlensInputError(f"{path} is not a JSON trace: {exc}") from None
        items = data if isinstance(data, list) else [data]
        try:
            traces.extend(Trace.from_dict(d) for d in items)
        except (KeyError, TypeError, ValueError) as exc:
            raise GroundlensInputError(f"{path} is not a groundlens trace (missing {exc})") from None
    write_html(traces, args.output, title=args.title, redact=args.redact)
    print(f"wrote {args.output} ({sum(len(t.steps) for t in traces)} steps from {len(traces)} trace(s))")
    return 0


def cmd_benchmark(args: argparse.Namespace) -> int:
    from groundlens_core.benchmark import run_benchmark

    report = run_benchmark(limit=args.limit, long_context=args.long_context)
    print(json.dumps(report, indent=2) if args.json else report["text"])
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    ok = True

    def line(status: str, what: str, detail: str = "") -> None:
        print(f"[{status:>4}] {what}" + (f": {detail}" if detail else ""))

    line("ok", "groundlens-core", __version__)
    line("ok", "python", sys.version.split()[0])
    for mod in ("numpy", "torch", "tokenizers", "safetensors"):
        try:
            m = __import__(mod)
            line("ok", mod, getattr(m, "__version__", "?"))
        except Exception as exc:  # noqa: BLE001
            ok = False
            line("FAIL", mod, f"{exc}")
    line("ok", "offline mode", f"HF_HUB_OFFLINE={os.environ.get('HF_HUB_OFFLINE')}")
    try:
        from groundlens_core.embedding import get_embedder
        from groundlens_core.embedding.resolve import resolve_model_path

        path, model_id = resolve_model_path()
        line("ok", "model", f"{model_id} at {path}")
        t0 = time.perf_counter()
        emb = get_embedder()
        line("ok", "embedder", f"{emb.backend}, dim {emb.dim}, window {emb.max_tokens + 2} word pieces, loaded in {time.perf_counter() - t0:.2f}s")
        line("ok", "fingerprint", emb.fingerprint)
    except Exception as exc:  # noqa: BLE001
        line("FAIL", "model", str(exc))
        return 1
    try:
        from groundlens_core.calibration import bundled_direction

        cal = bundled_direction()
        same = cal.fingerprint == emb.fingerprint
        ok &= same
        line("ok" if same else "FAIL", "bundled DGI direction", f"{cal.n_pairs} pairs, {'matches' if same else 'does NOT match'} the embedder")
    except Exception as exc:  # noqa: BLE001
        ok = False
        line("FAIL", "bundled DGI direction", str(exc))
    try:
        from groundlens_core.scoring import evaluate

        t0 = time.perf_counter()
        good = evaluate("Where is the Oberoi Group's head office?", "Its head office is in Delhi.",
                        "The Oberoi Group is a hotel company with its head office in Delhi.")
        dgi = evaluate("What is the capital of France?", "The capital of France is Paris.")
        line("ok", "quick score", f"SGI {good.value:.3f} ({good.triage}), DGI {dgi.value:.3f} ({dgi.triage}) in {time.perf_counter() - t0:.2f}s")
    except Exception as exc:  # noqa: BLE001
        ok = False
        line("FAIL", "quick score", str(exc))
    print("all checks passed" if ok else "some checks FAILED")
    return 0 if ok else 1


# ---------------------------------------------------------------- parser


def _positive_int(value: str) -> int:
    n = int(value)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="groundlens", description=f"Grounding triage for LLM outputs. Scores are {TRIAGE_NOTE}.")
    p.add_argument("--version", action="version", version=f"groundlens-core {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("doctor", help="check the installation offline: versions, model, fingerprint, a quick score")
    s.set_defaults(func=cmd_doctor)

    s = sub.add_parser("check", help="score one response")
    s.add_argument("--question", "-q", required=True)
    s.add_argument("--response", "-r", required=True)
    s.add_argument("--context", "-c", default=None, help="the source text; without it DGI is used")
    s.add_argument("--calibration", default=None, help="a DGI direction from `groundlens calibrate`")
    s.add_argument("--long-context", choices=("mean", "nearest"), default="mean")
    s.add_argument("--json", action="store_true", help="print the full result as JSON")
    s.set_defaults(func=cmd_check)

    s = sub.add_parser("evaluate", help="score a CSV or JSONL file (columns question, response, optional context)")
    s.add_argument("input")
    s.add_argument("--output", "-o", required=True, help="CSV or JSONL, by extension")
    s.add_argument("--sort", action="store_true", help="riskiest rows first")
    s.add_argument("--html", default=None, help="also write an HTML triage report")
    s.add_argument("--calibration", default=None)
    s.add_argument("--long-context", choices=("mean", "nearest"), default="mean")
    s.add_argument("--batch-size", type=_positive_int, default=256)
    s.add_argument("--progress", action="store_true", help="show the progress bar even when stderr is not a terminal")
    s.set_defaults(func=cmd_evaluate)

    s = sub.add_parser("calibrate", help="build a DGI direction from your verified grounded (question, response) pairs")
    s.add_argument("--pairs", required=True, help="CSV with question, response (and optional label: only 1s are used)")
    s.add_argument("--output", "-o", required=True)
    s.set_defaults(func=cmd_calibrate)

    s = sub.add_parser("benchmark", help="AUROC on the bundled labelled data, next to simple baselines")
    s.add_argument("--limit", type=int, default=None, help="use only the first N rows of each set")
    s.add_argument("--long-context", choices=("mean", "nearest"), default="mean")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_benchmark)

    s = sub.add_parser("report", help="render saved trace JSON file(s) as an HTML triage report")
    s.add_argument("traces", nargs="+")
    s.add_argument("--output", "-o", required=True)
    s.add_argument("--title", default=None)
    s.add_argument("--redact", action="store_true", help="show hashes and lengths instead of text")
    s.set_defaults(func=cmd_report)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except GroundlensError as exc:
        print(f"groundlens: error: {exc}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:
        print(f"groundlens: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
