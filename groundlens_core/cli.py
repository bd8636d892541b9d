"""The ``groundlens`` command: doctor, check, evaluate, calibrate, benchmark; ``report`` comes from the trace package.

Errors are one line on stderr and exit code 2; no traceback for anything the user can fix.
``--fail-on flagged|review`` makes ``check`` and ``evaluate`` exit 3 when a response is at or below
that band (a CI job fails on a flagged answer).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from groundlens_core._version import __version__
from groundlens_core.batch.columns import OUT_COLUMNS  # noqa: F401  (re-exported: the appended columns)
from groundlens_core.batch.columns import result_columns as _row_values  # noqa: F401  (the one row -> columns map)
from groundlens_core.batch.input_columns import ROLES
from groundlens_core.errors import GroundlensError, GroundlensInputError, printable
from groundlens_core.extensions import command_adders
from groundlens_core.ledger.cli import add_ledger_commands, add_ledger_options, evaluate_ledger
from groundlens_core.scoring.bands import TRIAGE_NOTE, band_order

# ---------------------------------------------------------------- commands

#: the exit status of ``check`` and ``evaluate`` when ``--fail-on`` finds a response at or below its band
EXIT_FAIL_ON = 3
FAIL_ON_BANDS = ("flagged", "review")


def failing_rows(counts: dict[str, int], fail_on: str | None) -> dict[str, int]:
    """The rows by band that ``--fail-on`` fails on: those at or below its band in the review order
    (``review`` takes ``flagged`` too; a row that could not be scored is below every band)."""
    if fail_on is None:
        return {}
    return {band: n for band, n in counts.items() if n and band_order(band) <= band_order(fail_on)}


def _fail_on_status(counts: dict[str, int], fail_on: str | None, rows: int | None = None) -> int:
    """0, or :data:`EXIT_FAIL_ON` with one line on stderr saying what failed (``rows``: of a file)."""
    failing = failing_rows(counts, fail_on)
    if not failing:
        return 0
    if rows is None:
        what = f"the response is {next(iter(failing))}"
    else:
        parts = ", ".join(f"{failing[b]} {b}" for b in ("error", "flagged", "review") if b in failing)
        what = f"{sum(failing.values())} of {rows} rows at or below {fail_on} ({parts})"
    print(f"groundlens: --fail-on {fail_on}: {what}; exit {EXIT_FAIL_ON}", file=sys.stderr)
    return EXIT_FAIL_ON


def mark_unsupported(sentence: Any, response: str) -> str:
    """The sentence with each unsupported token in ``[[ ]]`` (offsets index the response)."""
    out, pos = [], sentence.start
    for tok in sentence.unsupported:
        out.append(response[pos : tok.start])
        out.append(f"[[{response[tok.start : tok.end]}]]")
        pos = tok.end
    out.append(response[pos : sentence.end])
    return " ".join("".join(out).split())


def evidence_lines(res: Any, response: str) -> list[str]:
    """Each response sentence with its support, unsupported tokens marked, and its best passage."""
    ev = getattr(res, "evidence", None)
    if ev is None:
        return []
    lines = [
        f"sentences ({len(ev.sentences)}; support = share of content words found in the context; "
        "[[...]] = not in the context):"
    ]
    for i, s in enumerate(ev.sentences):
        mark = "  <- weakest" if i == ev.weakest else ""
        lines.append(f"  {i + 1:>2}. support {s.support:.2f}  {mark_unsupported(s, response)}{mark}")
        passage = " ".join(s.passage.split())
        passage = passage if len(passage) <= 200 else passage[:199] + "\u2026"
        lines.append(f"      best passage (similarity {s.similarity:.2f}): {passage}")
    return lines


def cmd_check(args: argparse.Namespace) -> int:
    from groundlens_core.scoring import evaluate
    from groundlens_core.scoring.calibration import CalibrationResult

    cal = CalibrationResult.load(args.calibration) if args.calibration else None  # checked before the model loads
    res = evaluate(args.question, args.response, args.context, calibration=cal, long_context=args.long_context)
    if args.json:
        print(json_for_terminal(res.to_json()))
    else:
        line = f"score {res.score:.3f}  {res.triage.upper()}" + (
            "  (no context: weak signal)" if res.method == "dgi" else ""
        )
        line += f"  |  {res.method.upper()} {res.value:.4f}, normalized {res.normalized:.3f}"
        if getattr(res, "support", None) is not None and res.method != "support":
            line += f", support {res.support:.3f}"  # type: ignore[attr-defined]
        print(line)
        for text in [*res.explanation.split("\n"), *evidence_lines(res, args.response)]:
            print(printable(text))  # they quote the response: an escape sequence in it is shown, never run
    return _fail_on_status({res.triage: 1}, args.fail_on)


_JSON_RAW_CONTROLS = re.compile("[\x7f-\x9f]")


def json_for_terminal(text: str) -> str:
    """JSON text with DEL and the C1 controls (which JSON leaves raw; a terminal may run ``\\x9b``
    as an escape sequence) written as ``\\u`` escapes: the same JSON value, safe to print."""
    return _JSON_RAW_CONTROLS.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def cmd_evaluate(args: argparse.Namespace) -> int:
    """Streaming: chunked read -> score -> write, resumable; the engine lives in groundlens_core.stream."""
    from groundlens_core.batch.threads import use_threads
    from groundlens_core.stream import EvaluateJob, run_evaluate

    if (args.address or args.workers) and args.engine != "ray":
        raise GroundlensInputError("--address and --workers are for --engine ray")
    threads = use_threads(args.threads)
    job = EvaluateJob(
        input=Path(args.input),
        output=Path(args.output),
        sort=args.sort,
        html=Path(args.html) if args.html else None,
        html_rows=args.html_rows,
        batch_size=args.batch_size,
        calibration=args.calibration,
        long_context=args.long_context,
        resume=args.resume,
        progress=True if args.progress else None,
        engine=args.engine,
        address=args.address,
        workers=args.workers,
        threads=threads,
        ledger=evaluate_ledger(args),
        keep_columns=tuple(c.strip() for c in (args.keep_columns or "").split(",") if c.strip()),
        group_by=args.group_by,
        columns={role: getattr(args, f"{role}_col") for role in ROLES},
    )
    summary = run_evaluate(job)
    counts = summary.counts
    n_err = counts.get("error", 0)
    parts = ", ".join(f"{counts[k]} {k}" for k in ("flagged", "review", "trusted", "error") if counts.get(k))
    report = ""
    if args.html:
        shown = (
            "all rows"
            if summary.html_rows >= summary.rows
            else f"the riskiest {summary.html_rows:,} of {summary.rows:,} rows"
        )
        report = f"; report {args.html} ({shown})"
    print(
        printable(f"scored {summary.rows - n_err}/{summary.rows} rows -> {args.output} ({parts}){report}"),
        file=sys.stderr,
    )
    print(f"note: scores are {TRIAGE_NOTE}", file=sys.stderr)
    return _fail_on_status(counts, args.fail_on, rows=summary.rows)


def cmd_calibrate(args: argparse.Namespace) -> int:
    from groundlens_core.batch.outputs import check_target
    from groundlens_core.scoring.calibration import calibrate

    check_target(args.output, what="the calibration file", inputs=[args.pairs])  # before any embedding
    cal = calibrate(csv_path=args.pairs)
    cal.save(args.output)
    print(
        f"wrote {args.output}: direction from {cal.n_pairs} pairs, concentration {cal.concentration:.4f}, "
        f"embedder {cal.fingerprint}"
    )
    return 0


def cmd_benchmark(args: argparse.Namespace) -> int:
    from groundlens_core.quality.benchmark import run_benchmark

    report = run_benchmark(
        limit=args.limit,
        long_context=args.long_context,
        data=args.data,
        faithbench=args.faithbench,
        bootstrap=args.bootstrap,
        claims=args.claims,
    )
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
    hub = os.environ.get("HF_HUB_OFFLINE")
    line(
        "ok", "offline", f"the model loads from local files only (HF_HUB_OFFLINE {hub or 'unset'}, left as you set it)"
    )
    try:
        from groundlens_core.embedding import get_embedder
        from groundlens_core.embedding.resolve import resolve_model_path

        path, model_id = resolve_model_path()
        line("ok", "model", f"{model_id} at {path}")
        t0 = time.perf_counter()
        emb = get_embedder()
        line(
            "ok",
            "embedder",
            f"{emb.backend}, dim {emb.dim}, window {emb.max_tokens + 2} word pieces, "
            f"loaded in {time.perf_counter() - t0:.2f}s",
        )
        line("ok", "fingerprint", emb.fingerprint)
    except Exception as exc:  # noqa: BLE001
        line("FAIL", "model", str(exc))
        return 1
    try:
        from groundlens_core.scoring.calibration import bundled_direction, weights_of

        cal = bundled_direction()
        same = weights_of(cal.fingerprint) == weights_of(emb.fingerprint)  # fp32 and bf16 of one model
        ok &= same
        line(
            "ok" if same else "FAIL",
            "bundled DGI direction",
            f"{cal.n_pairs} pairs, {'matches' if same else 'does NOT match'} the embedder",
        )
    except Exception as exc:  # noqa: BLE001
        ok = False
        line("FAIL", "bundled DGI direction", str(exc))
    try:
        from groundlens_core.scoring import evaluate

        t0 = time.perf_counter()
        good = evaluate(
            "Where is the Oberoi Group's head office?",
            "The Oberoi Group, a hotel company, has its head office in Delhi.",
            "The Oberoi Group is a hotel company with its head office in Delhi. It was founded in 1934.",
        )
        wrong = evaluate(
            "When was the Oberoi Group founded?",
            "The Oberoi Group was founded in 1954.",
            "The Oberoi Group is a hotel company with its head office in Delhi. It was founded in 1934.",
        )
        status = "ok" if good.triage == "trusted" and wrong.triage == "flagged" else "FAIL"
        ok = ok and status == "ok"
        line(
            status,
            "quick score",
            f"a grounded answer scores {good.score:.2f} ({good.triage}: its facts are in its source and it moves "
            f"toward it, SGI {good.value:.2f}); one with a changed year scores {wrong.score:.2f} ({wrong.triage}) "
            f"in {time.perf_counter() - t0:.2f}s",
        )
    except Exception as exc:  # noqa: BLE001
        ok = False
        line("FAIL", "quick score", str(exc))
    print("all checks passed" if ok else "some checks FAILED")
    return 0 if ok else 1


# ---------------------------------------------------------------- parser


#: the help of ``--long-context``, the same on every command that takes it
LONG_CONTEXT_HELP = (
    "how a context longer than the model window (256 word pieces) is compared: mean = the mean of its "
    "pieces (default), nearest = the piece nearest the response"
)


def _positive_int(value: str) -> int:
    try:
        n = int(value)
    except ValueError:  # argparse would name this function ("invalid _positive_int value")
        raise argparse.ArgumentTypeError(f"must be a whole number, got {value!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def _add_fail_on(s: argparse.ArgumentParser, subject: str) -> None:
    s.add_argument(
        "--fail-on",
        choices=FAIL_ON_BANDS,
        default=None,
        help=f"exit {EXIT_FAIL_ON} when {subject} at or below this band (review includes flagged; "
        "a row that could not be scored counts too): fails a CI job",
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="groundlens", description=f"Grounding triage for LLM outputs. Scores are {TRIAGE_NOTE}."
    )
    p.add_argument("--version", action="version", version=f"groundlens-core {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    _add_doctor(sub)
    _add_check(sub)
    _add_evaluate(sub)
    _add_calibrate(sub)
    _add_benchmark(sub)
    for add in command_adders():  # ``report`` and any other command an installed package registers
        add(sub)
    add_ledger_commands(sub)
    return p


def _add_doctor(sub: argparse._SubParsersAction) -> None:
    """``doctor``: the offline installation check; it takes no options."""
    s = sub.add_parser("doctor", help="check the installation offline: versions, model, fingerprint, a quick score")
    s.set_defaults(func=cmd_doctor)


def _add_check(sub: argparse._SubParsersAction) -> None:
    """``check``: one response, scored from the command line."""
    s = sub.add_parser("check", help="score one response (with -c and no -q: against the context alone)")
    s.add_argument(
        "--question", "-q", default=None, help="the question; without it, a context is needed (method support)"
    )
    s.add_argument("--response", "-r", required=True, help="the response to score (the LLM's answer)")
    s.add_argument("--context", "-c", default=None, help="the source text; without it DGI is used (needs -q)")
    s.add_argument("--calibration", default=None, help="a DGI direction from `groundlens calibrate`")
    s.add_argument("--long-context", choices=("mean", "nearest"), default="mean", help=LONG_CONTEXT_HELP)
    s.add_argument("--json", action="store_true", help="print the full result as JSON")
    _add_fail_on(s, "the response is")
    s.set_defaults(func=cmd_check)


def _add_evaluate(sub: argparse._SubParsersAction) -> None:
    """``evaluate``: a whole file, streamed; its options come in two groups, files then scoring."""
    s = sub.add_parser(
        "evaluate", help="score a CSV, JSONL or Parquet file (columns question, response, optional context), streaming"
    )
    _add_evaluate_files(s)
    _add_evaluate_scoring(s)
    _add_fail_on(s, "any row is")
    add_ledger_options(s)
    s.set_defaults(func=cmd_evaluate)


def _add_evaluate_files(s: argparse.ArgumentParser) -> None:
    """What ``evaluate`` reads and writes: the files, the report, the columns. The order of the
    ``add_argument`` calls is the order ``--help`` lists the options in."""
    s.add_argument("input", help=".csv, .jsonl, .parquet (.csv.gz, .jsonl.gz)")
    s.add_argument(
        "--output", "-o", required=True, help=".csv, .jsonl or .parquet, by extension; appears when complete"
    )
    s.add_argument("--sort", action="store_true", help="riskiest rows first (a second pass over the written rows)")
    s.add_argument("--html", default=None, help="also write an HTML triage report")
    s.add_argument(
        "--html-rows",
        type=_positive_int,
        default=1000,
        help="rows the HTML report shows, riskiest first; its summary counts every row (default 1000)",
    )
    for role, option in ROLES.items():  # the file's own names for the columns a row is read from
        s.add_argument(option, default=None, metavar="COL", help=f"the column holding the {role} (default: {role})")
    s.add_argument(
        "--keep-columns",
        default=None,
        metavar="COL,COL",
        help="input columns the HTML report shows with each row (the id column is always kept)",
    )
    s.add_argument(
        "--group-by", default=None, metavar="COL", help="the input column the HTML report groups rows by (its nodes)"
    )
    s.add_argument("--resume", action="store_true", help="continue an interrupted run from its last written chunk")


def _add_evaluate_scoring(s: argparse.ArgumentParser) -> None:
    """How ``evaluate`` scores: the calibration, the chunking, the threads and the engine, listed
    by ``--help`` after the file options."""
    s.add_argument(
        "--calibration", default=None, help="a DGI direction from `groundlens calibrate`, for rows without a context"
    )
    s.add_argument("--long-context", choices=("mean", "nearest"), default="mean", help=LONG_CONTEXT_HELP)
    s.add_argument("--batch-size", type=_positive_int, default=256, help="rows per chunk (and per checkpoint)")
    s.add_argument(
        "--threads",
        type=_positive_int,
        default=None,
        help="scoring threads (default 1, or GROUNDLENS_THREADS): encode lanes of one torch thread each, "
        "same scores; on a busy machine more threads gain little but do not collapse",
    )
    s.add_argument(
        "--engine",
        choices=("local", "ray"),
        default="local",
        help='ray: score on a Ray cluster (pip install "groundlens-core[ray]")',
    )
    s.add_argument("--address", default=None, help="Ray cluster address (default: start a local one)")
    s.add_argument(
        "--workers", type=_positive_int, default=None, help="Ray scoring workers (default: the cluster's CPUs)"
    )
    s.add_argument("--progress", action="store_true", help="show the progress bar even when stderr is not a terminal")


def _add_calibrate(sub: argparse._SubParsersAction) -> None:
    """``calibrate``: the DGI direction that ``check`` and ``evaluate`` take with ``--calibration``."""
    s = sub.add_parser("calibrate", help="build a DGI direction from your verified grounded (question, response) pairs")
    s.add_argument("--pairs", required=True, help="CSV with question, response (and optional label: only 1s are used)")
    s.add_argument("--output", "-o", required=True, help="the direction file to write (JSON)")
    s.set_defaults(func=cmd_calibrate)


def _add_benchmark(sub: argparse._SubParsersAction) -> None:
    """``benchmark``: the signals measured on labelled data, yours or the shared sets."""
    s = sub.add_parser(
        "benchmark", help="every signal's AUROC (with 95%% intervals) on labelled data, next to simple baselines"
    )
    s.add_argument(
        "--data",
        default=None,
        help="your labelled CSV/JSONL: response, label (1 = grounded), question and/or context, optional spans",
    )
    s.add_argument(
        "--faithbench",
        default=None,
        help="path of faithbench_dev.csv (default: in the folder GROUNDLENS_SHARED_DATA names; never bundled)",
    )
    s.add_argument(
        "--claims",
        default=None,
        help="a claim set with a kind column, flag rates by kind "
        "(default: claims_dev.csv and claims_v2_dev.csv in $GROUNDLENS_SHARED_DATA)",
    )
    s.add_argument("--bootstrap", type=_positive_int, default=1000, help="bootstrap resamples for the intervals")
    s.add_argument("--limit", type=_positive_int, default=None, help="use only the first N rows of each set")
    s.add_argument("--long-context", choices=("mean", "nearest"), default="mean", help=LONG_CONTEXT_HELP)
    s.add_argument("--json", action="store_true", help="print the report as JSON")
    s.set_defaults(func=cmd_benchmark)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # here, not at exit: a reader that has gone is seen below
        return code
    except BrokenPipeError:
        return _reader_went_away()
    except GroundlensError as exc:
        print(f"groundlens: error: {printable(str(exc))}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:
        print(f"groundlens: error: {printable(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _reader_went_away() -> int:
    """The reader of our output closed it (``groundlens benchmark | head -1``): end quietly, as
    the Python documentation on SIGPIPE recommends, with stdout pointed at /dev/null so that the
    interpreter's own flush at exit does not fail again. The status is a shell's for SIGPIPE."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no real stdout (a test's capture): nothing left to flush
        pass
    return 128 + 13


if __name__ == "__main__":
    sys.exit(main())
