"""The HTML report at scale: 10,000 traces and 100,000 steps in one file, in headless Chromium.

    python benchmarks/bench_report_scale.py [--traces 10000] [--steps 10]

Builds hand-made traces (short texts, SGI scores in every band, a cascade in every tenth trace),
writes one report, and prints its size, the time to render it in Python, the browser's load time
(navigation to the script's ready mark) and the script's own timings: init, a filter of the steps
table and a filter of the index. Needs /usr/bin/chromium (``bash .ci/install-chromium.sh``) and
Playwright. Prints, asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from groundlens_core.trace import ContextPiece, Step, Trace
from groundlens_core.trace.html import write_html

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the trace builder lives with the tests
from synthetic_traces import trace_of  # noqa: E402

BANDS = ("flagged", "review", "trusted", "trusted", "review")
NODES = ("plan", "research", "write", "review", "answer", "search", "tool", "critic")


def make_traces(n: int, per: int) -> list[Trace]:
    out = []
    for t in range(n):
        steps = []
        for i in range(per):
            band = BANDS[(t + i) % len(BANDS)]
            rank = {"flagged": 0.1, "review": 0.5, "trusted": 0.9}[band] + ((t * 7 + i) % 10) / 100
            resp = f"Answer {t}-{i}: the policy allows returns within {(t + i) % 30} days for item {i}."
            ctx = (ContextPiece(f"Policy text {t}: returns within 14 days, fee 15%.", "retriever"),)
            if i and t % 10 == 0:
                ctx += (ContextPiece(steps[-1].response, "state:notes"),)
            steps.append(Step(id=f"t{t}s{i}", index=i, node=NODES[i % len(NODES)], kind="llm", method="sgi",
                              result={"method": "sgi", "value": 1.0, "normalized": 0.5, "triage": band,
                                     "flagged": band == "flagged", "score": rank,
                                     "explanation": f"Score {rank:.2f}, {band}: a reason for it. More.",
                                     "fingerprint": "fp", "version": "0"},
                              triage=band, question=f"Question {t}-{i}?", context=ctx, response=resp,
                              parent_id=None if i == 0 else f"t{t}s0", model="gpt-test", llm_latency_ms=120.0 + i))
        out.append(trace_of(steps, id=f"t{t}", name=f"run-{t}", ended_at="2025-01-01T00:00:03Z"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", type=int, default=10_000)
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    traces = make_traces(args.traces, args.steps)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "report.html"
        t0 = time.perf_counter()
        write_html(traces, path)
        render_s = time.perf_counter() - t0
        size = path.stat().st_size
        from playwright.sync_api import sync_playwright

        with sync_playwright() as pw:
            b = pw.chromium.launch(executable_path="/usr/bin/chromium", args=["--headless=new", "--no-sandbox", "--disable-gpu"])
            page = b.new_page(viewport={"width": 1400, "height": 900})
            t0 = time.perf_counter()
            page.goto(path.as_uri(), timeout=600_000)
            page.wait_for_selector("html[data-gl-ready]", timeout=600_000)
            load_s = time.perf_counter() - t0
            init = page.evaluate("window.__glTimings.init")
            page.uncheck("#gl-f-bands input[value=trusted]")
            step_filter = page.evaluate("window.__glTimings.lastFilter")
            page.select_option("#gl-t-band", "flagged")
            index_filter = page.evaluate("window.__glTimings.lastIndex")
            matched = page.get_attribute("#gl-t-shown", "data-matched")
            b.close()
    steps = args.traces * args.steps
    print(f"{args.traces:,} traces, {steps:,} steps: file {size / 1e6:.1f} MB ({size / steps:.0f} bytes/step), "
          f"rendered in {render_s:.1f} s")
    print(f"browser: load {load_s:.1f} s (script init {init / 1000:.2f} s), filter steps {step_filter:.0f} ms, "
          f"filter index {index_filter:.0f} ms ({matched} traces with a flagged step)")


if __name__ == "__main__":
    main()
