"""What ``evaluate --html`` costs next to ``evaluate`` on the same rows, side by side in one run.

    GROUNDLENS_SHARED_DATA=<data folder> .venv/bin/python -u benchmarks/bench_html_cost.py [--rows 2000] [--rescore]

On ROWS rows of halueval_qa.csv written to a CSV (the file has 1,000 rows; further copies get a
`` [copy k]`` suffix on every text, so each row is new text to the embedder and nothing is cheaper
for being a repeat), in this process, one thread, the model loaded once: ``run_evaluate`` without
and with an HTML report (the default 1,000 riskiest rows), alternately, best of 3, with the
embedder's cache cleared before each run. Prints both times and the ratio (target: at most 1.35x).

``--rescore`` keeps nothing, so the report scores every row it shows a second time: the cost that
keeping the results of the riskiest rows saves.

Prints as it goes; asserts nothing.
"""

from __future__ import annotations

import argparse
import csv
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from halueval_split import read_rows  # noqa: E402


def write_input(path: Path, n: int) -> None:
    """``n`` rows of halueval_qa.csv, cycled; every text of a repeat made distinct by its copy number."""
    base = read_rows("halueval_qa.csv")
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "question", "context", "response"])
        for i in range(n):
            r, copy = base[i % len(base)], i // len(base)
            tag = f" [copy {copy}]" if copy else ""
            w.writerow([f"{r['id']}{tag}", r["question"] + tag, r["context"] + tag, r["response"] + tag])


def timed_run(src: Path, out: Path, html: Path | None, emb) -> float:
    """Seconds of one ``run_evaluate`` from a cold embedder cache (the model stays loaded)."""
    from groundlens_core.stream import EvaluateJob, run_evaluate

    for p in (out, html):
        if p is not None:
            p.unlink(missing_ok=True)
    emb.clear()
    job = EvaluateJob(input=src, output=out, html=html, threads=1, progress=False)
    t = time.perf_counter()
    run_evaluate(job, log=lambda msg: None)
    return time.perf_counter() - t


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rescore", action="store_true", help="the report scores every row it shows again")
    args = ap.parse_args(argv)

    import groundlens_core.batch.evaluate_job as evaluate_job
    from groundlens_core.batch.threads import use_threads
    from groundlens_core.scoring import get_default_embedder

    if args.rescore:
        evaluate_job.riskiest_keeper = lambda job: None  # nothing kept: the report scores its rows
    use_threads(1)
    emb = get_default_embedder()
    emb.encode(["warm up"])
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        src = work / "in.csv"
        write_input(src, args.rows)
        plain: list[float] = []
        html: list[float] = []
        for rep in range(args.repeats):
            plain.append(timed_run(src, work / "out.csv", None, emb))
            html.append(timed_run(src, work / "out.csv", work / "report.html", emb))
            print(
                f"rep {rep}: evaluate {plain[-1]:.2f} s, evaluate --html {html[-1]:.2f} s "
                f"({html[-1] / plain[-1]:.2f}x)",
                flush=True,
            )
    a, b = min(plain), min(html)
    how = "every shown row scored again" if args.rescore else "kept results"
    print(
        f"best of {args.repeats}, {args.rows:,} rows ({how}): evaluate {a:.2f} s ({args.rows / a:.0f} rows/s), "
        f"evaluate --html {b:.2f} s ({args.rows / b:.0f} rows/s); ratio {b / a:.2f}x (target <= 1.35x)",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
