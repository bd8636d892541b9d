"""What cascade lineage costs the recorder's worker: the lineage calls per step next to scoring one.

    python benchmarks/bench_lineage.py [--steps 48] [--flagged 20]

Realistic steps (benchmarks/rag_graph.py: ~270 word pieces per step, every text unique) are scored
in one batch with ``evaluate_batch`` (the worker's work per step); then, for the same steps, what
the worker does around the scoring: ``upstream_of`` (before it: the unverified outputs the step's
context carries, the core's input for its band) and ``Trace.add_step`` (after it: its
``cascade_from``), once into a trace with no
flagged step (the common case: lineage does nothing) and once into a trace that already holds
``--flagged`` flagged steps, whose every sentence is searched in each new step's context (the
expensive case), with the previous flagged answer carried in each step's context so links are found.
Prints the per-step times and the lineage share of a scored step; asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rag_graph import make_texts  # noqa: E402

from groundlens_core.scoring import evaluate_batch  # noqa: E402
from groundlens_core.trace import ContextPiece, Step, Trace  # noqa: E402
from groundlens_core.trace.lineage import upstream_of  # noqa: E402


def _steps(texts, scores, *, carry: bool):
    out = []
    for i, ((q, c, a), res) in enumerate(zip(texts, scores)):
        pieces = [ContextPiece(c, "retriever")]
        if carry and i:
            pieces.append(ContextPiece("Notes: " + texts[i - 1][2], "state:notes"))
        out.append(Step(id=f"s{i}", index=i, node="answer", kind="llm", method=res.method, result=res,
                        triage=res.triage, question=q, context=tuple(pieces), response=a))
    return out


def _append_ms(flagged: list[Step], steps: list[Step], rounds: int = 5) -> float:
    best = []
    for _ in range(rounds):
        t = Trace(id="t", name="bench", framework="bench", started_at="2025-01-01T00:00:00Z")
        for s in flagged:
            t.add_step(s)
        t0 = time.perf_counter()
        for s in steps:
            upstream_of(t, s.context, s.id)
            t.add_step(s)
        best.append((time.perf_counter() - t0) * 1000 / len(steps))
    return statistics.median(best)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--flagged", type=int, default=20)
    args = ap.parse_args()
    texts = make_texts(args.steps + args.flagged)
    items = [{"question": q, "response": a, "context": [c]} for q, c, a in texts]
    evaluate_batch(items[:4])  # load the model
    t0 = time.perf_counter()
    scores = evaluate_batch(items)
    score_ms = (time.perf_counter() - t0) * 1000 / len(items)
    origins = [
        Step(id=f"f{i}", index=i, node="plan", kind="llm", method="sgi", result=scores[i], triage="flagged",
             question=q, response=a)
        for i, (q, c, a) in enumerate(texts[: args.flagged])
    ]
    steps = _steps(texts[args.flagged :], scores[args.flagged :], carry=True)
    steps = [Step(**{**s.__dict__, "index": s.index + args.flagged}) for s in steps]
    none_ms = _append_ms([], steps)
    busy_ms = _append_ms(origins, steps)
    print(f"scoring (evaluate_batch, {len(items)} steps): {score_ms:.2f} ms/step")
    print(f"lineage, trace without flagged steps:      {none_ms * 1000:.1f} us/step ({none_ms / score_ms:.3%} of scoring)")
    print(f"lineage, trace with {args.flagged} flagged steps:      {busy_ms * 1000:.1f} us/step ({busy_ms / score_ms:.3%} of scoring)")


if __name__ == "__main__":
    main()
