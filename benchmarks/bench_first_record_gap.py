"""Does the agent's thread stall while the recorder's worker imports torch and loads the model?

    .venv/bin/python benchmarks/bench_first_record_gap.py [--rounds 3] [--timeout 120]

Each round runs two fresh processes (so torch is not imported yet, as in a freshly started agent),
side by side:

- ``recorder``: the caller's thread runs a 1 ms sleep loop (an agent that wants the GIL back every
  millisecond), records one LLM call with a context after 100 ms and loops on until that call is
  scored (the worker's first batch: the import of torch, the model's load, the first encode). The
  figure is the caller's largest gap between two iterations from the ``record()`` call until the
  score is there, and the time ``record()`` itself took.
- ``none``: the same loop in a process that imports the recorder module but records nothing, for as
  long as the ``recorder`` process waited for its score: the machine's own noise.

Prints the gaps of every round, the medians, and whether the median largest gap with the recorder is
within the target (50 ms). Asserts nothing: on a shared machine read the two columns together.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

TARGET_MS = 50.0
WARM_SECONDS = 0.1  # the loop runs this long before the call is recorded


def child(variant: str, seconds: float, timeout: float) -> dict[str, float]:
    """One process's measurement (runs in the fresh subprocess)."""
    from groundlens_core.trace.recorder import CallRecord, Recorder

    recorder = Recorder("bench") if variant == "recorder" else None
    start = last = time.perf_counter()
    recorded_at: float | None = None
    record_ms = 0.0
    largest = 0.0
    scored = False
    while True:
        time.sleep(0.001)
        now = time.perf_counter()
        if recorded_at is not None or recorder is None:
            largest = max(largest, now - last)
        last = now
        if recorder is not None and recorded_at is None and now - start >= WARM_SECONDS:
            t0 = time.perf_counter()
            recorder.record(
                CallRecord(
                    trace_key="run",
                    node="llm",
                    kind="llm",
                    question="When was the company founded?",
                    response="The company was founded in 1998 and employs 1,200 people.",
                    context=["The company was founded in 1998. It employs 1,200 people in four countries."],
                )
            )
            recorded_at = time.perf_counter()  # the gap that follows includes record() itself
            record_ms = (recorded_at - t0) * 1000.0
        if recorder is not None and recorded_at is not None and recorder.idle():
            trace = recorder.get_trace("run", wait=False)
            scored = trace is not None and trace.steps[0].score is not None
            break
        if recorder is None and now - start >= seconds:
            break
        if now - start >= timeout:
            break
    waited = (last - recorded_at) if recorded_at is not None else (last - start)
    return {"largest_gap_ms": largest * 1000.0, "record_ms": record_ms, "seconds": waited, "scored": float(scored)}


def run_child(variant: str, seconds: float, timeout: float) -> dict[str, float]:
    code = f"import sys; sys.path.insert(0, {sys.path[0]!r}); import bench_first_record_gap as b, json; "
    code += f"print(json.dumps(b.child({variant!r}, {seconds!r}, {timeout!r})))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=timeout + 60)
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds a process waits for its first score at most")
    args = ap.parse_args()
    with_rec: list[float] = []
    without: list[float] = []
    print("round  recorder: largest gap  record()  first score after  |  no recorder: largest gap")
    for i in range(args.rounds):
        rec = run_child("recorder", 0.0, args.timeout)
        base = run_child("none", max(rec["seconds"], 0.5) + WARM_SECONDS, args.timeout)
        with_rec.append(rec["largest_gap_ms"])
        without.append(base["largest_gap_ms"])
        note = "" if rec["scored"] else "  (no score: timed out or failed)"
        print(
            f"{i + 1:>5}  {rec['largest_gap_ms']:>18.1f} ms  {rec['record_ms']:>5.2f} ms  {rec['seconds']:>14.2f} s"
            f"  |  {base['largest_gap_ms']:>21.1f} ms{note}"
        )
    med, base_med = statistics.median(with_rec), statistics.median(without)
    verdict = "within" if med <= TARGET_MS else "OVER"
    print(
        f"median largest gap: {med:.1f} ms with the recorder, {base_med:.1f} ms without "
        f"({verdict} the {TARGET_MS:.0f} ms target)"
    )


if __name__ == "__main__":
    main()
