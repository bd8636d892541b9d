"""Streaming ``groundlens evaluate`` at 10k / 100k / 1M rows, the cold-text rate, threads, and Ray.

    .venv/bin/python benchmarks/bench_stream.py                       # everything, in one run
    .venv/bin/python benchmarks/bench_stream.py --sizes 10000,100000  # skip the 1M-row run

What the figures measure (read before quoting them):

- **Synthetic rows** (10k / 100k / 1M) cycle through the 1,000 bundled HaluEval QA rows
  (``groundlens_core/data/halueval_qa.csv``: 1,954 distinct texts). They fit in the embedder's
  LRU cache (4,096 texts), so after the first 1,000 rows almost nothing is embedded: their rows/s is
  the rate of the streaming machinery (read, plan, cache look-ups, SGI/DGI, write, fsync per chunk),
  **not** the rate on real, mostly distinct texts. Their point is peak RSS: it must not grow with
  the number of rows (1M within 1.2x of 10k).
- **Cold-text rate**: the 1,000 bundled rows once, in a fresh process (every distinct text
  embedded once): what one process scores on new text. Threads 1 and 2 and Ray with 1 and 2 workers
  run on these same rows, in this run, and are given as ratios to the single-process, one-thread
  run. The machine's load average is printed next to them: this 2-core machine is shared.

Each measurement runs ``groundlens evaluate`` (its engine, ``run_evaluate``) in a fresh child
process; peak RSS is that child's ``ru_maxrss`` (``os.wait4``). Start-up (imports, model load,
Ray cluster start) is timed apart from scoring.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "groundlens_core" / "data" / "halueval_qa.csv"


def base_rows() -> list[dict]:
    with open(DATA, encoding="utf-8", newline="") as fh:
        return [{"question": r["question"], "context": r["context"], "response": r["response"]} for r in csv.DictReader(fh)]


def write_synthetic(path: Path, n: int, base: list[dict]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "question", "context", "response"])
        for i in range(n):
            r = base[i % len(base)]
            w.writerow([i, r["question"], r["context"], r["response"]])


# ---------------------------------------------------------------- the child: one measured run


def child(args: argparse.Namespace) -> None:
    t0 = time.perf_counter()
    from groundlens_core.batch.threads import use_threads
    from groundlens_core.scoring import get_default_embedder
    from groundlens_core.stream import EvaluateJob, run_evaluate

    use_threads(args.threads)
    get_default_embedder().encode(["warm up"])
    started = False
    if args.engine == "ray":
        from groundlens_core.distributed import init_local_ray

        started = init_local_ray(num_cpus=args.workers)
    t1 = time.perf_counter()
    job = EvaluateJob(input=Path(args.input), output=Path(args.output), batch_size=args.batch_size,
                      engine=args.engine, workers=args.workers, threads=args.threads, progress=False)
    summary = run_evaluate(job, log=lambda m: None)
    t2 = time.perf_counter()
    if started:
        import ray

        ray.shutdown()
    print(json.dumps({"startup_s": t1 - t0, "score_s": t2 - t1, "rows": summary.rows}))


def measure(input_path: Path, out_path: Path, *, engine: str = "local", workers: int | None = None, threads: int = 1,
            batch_size: int = 256) -> dict:
    cmd = [sys.executable, __file__, "--child", "--input", str(input_path), "--output", str(out_path),
           "--engine", engine, "--threads", str(threads), "--batch-size", str(batch_size)]
    if workers:
        cmd += ["--workers", str(workers)]
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONWARNINGS": "ignore"}
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    out = proc.stdout.read()
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"child failed ({proc.returncode}): {err.decode()[-2000:]}")
    data = json.loads(out.decode().strip().splitlines()[-1])
    data.update({"wall_s": wall, "peak_rss_mb": usage.ru_maxrss / 1024, "load": (load_before + os.getloadavg()[0]) / 2})
    data["rows_per_s"] = data["rows"] / data["score_s"]
    return data


# ---------------------------------------------------------------- the parent


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="10000,100000,1000000")
    p.add_argument("--ray-workers", default="1,2", help="comma-separated; empty to skip Ray")
    p.add_argument("--threads-list", default="1,2")
    p.add_argument("--workdir", default=None, help="where the synthetic files go (default: a temporary folder)")
    # child mode
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--input")
    p.add_argument("--output")
    p.add_argument("--engine", default="local")
    p.add_argument("--workers", type=int, default=None)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=256)
    args = p.parse_args()
    if args.child:
        child(args)
        return

    import torch

    work = Path(args.workdir or tempfile.mkdtemp(prefix="groundlens-bench-stream-"))
    work.mkdir(parents=True, exist_ok=True)
    base = base_rows()
    print(f"machine: {os.cpu_count()} cores, torch {torch.__version__}, load average at start {os.getloadavg()[0]:.1f}")
    print(f"workdir: {work}\n")

    # cold texts: the bundled rows once, fresh process each
    cold_in = work / "cold.csv"
    write_synthetic(cold_in, len(base), base)
    print(f"== cold text: the {len(base):,} bundled HaluEval QA rows once (1,954 distinct texts), fresh process each run")
    print(f"{'run':<34} {'start-up s':>10} {'score s':>8} {'rows/s':>7} {'ratio':>6} {'peak RSS MB':>11} {'load':>5}")
    cold = {}
    runs = [(f"local, {t} thread{'s' if t > 1 else ''}", "local", None, t) for t in map(int, filter(None, args.threads_list.split(",")))]
    runs += [(f"ray, {w} worker{'s' if w > 1 else ''} (1 thread each)", "ray", w, 1) for w in map(int, filter(None, args.ray_workers.split(",")))]
    outputs = {}
    for label, engine, workers, threads in runs:
        out = work / f"cold-{engine}-{workers or threads}.csv"
        r = measure(cold_in, out, engine=engine, workers=workers, threads=threads)
        cold[label] = r
        outputs[label] = out.read_bytes()
        ref = next(iter(cold.values()))
        print(f"{label:<34} {r['startup_s']:>10.1f} {r['score_s']:>8.1f} {r['rows_per_s']:>7.1f} "
              f"{ref['score_s'] / r['score_s']:>5.2f}x {r['peak_rss_mb']:>11.0f} {r['load']:>5.1f}", flush=True)
    first = next(iter(outputs.values()))
    print(f"outputs byte-identical across all runs above: {all(v == first for v in outputs.values())}")
    print("(ratio = score time of the first run / this run's; >1 is faster. Ray start-up includes the cluster start;"
          " Ray score time includes each worker's model load.)\n")

    print("== synthetic rows (cycling the 1,000 bundled rows: cache-absorbed, NOT the cold-text rate), local, 1 thread")
    print(f"{'rows':>9} {'start-up s':>10} {'score s':>8} {'rows/s':>7} {'peak RSS MB':>11} {'vs 10k':>7} {'load':>5}")
    first_rss = None
    for n in map(int, filter(None, args.sizes.split(","))):
        src = work / f"synthetic-{n}.csv"
        write_synthetic(src, n, base)
        out = work / f"synthetic-{n}-out.csv"
        r = measure(src, out)
        first_rss = first_rss or r["peak_rss_mb"]
        print(f"{n:>9,} {r['startup_s']:>10.1f} {r['score_s']:>8.1f} {r['rows_per_s']:>7.0f} {r['peak_rss_mb']:>11.0f} "
              f"{r['peak_rss_mb'] / first_rss:>6.2f}x {r['load']:>5.1f}", flush=True)
        src.unlink()
        out.unlink()
    print(f"\nload average at end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
