"""What fact checking costs as a response grows: 500, 1,000 and 2,000 sentences of "Item i costs N
dollars" against a context of as many, each price changed by one dollar in the response.

    python benchmarks/bench_factcheck_scale.py [--sizes 500 1000 2000] [--repeat 3]

For each size: the time of the context's facts (:func:`context_facts`) and of the check itself
(:func:`check_facts`, claims included), best of ``--repeat``, the findings by status, and the ratio
of each size's total to the first size's. Target: 2,000 sentences at most 6x 500 (the work is
linear in the sentences; the count of calls is asserted in tests/test_edges_runtime.py). Prints,
asserts nothing.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

from groundlens_core.evidence.factcheck import check_facts, context_facts
from groundlens_core.evidence.passages import plan_evidence


def items(n: int, shift: int = 0) -> str:
    return " ".join(f"Item {i} costs {i * 7 + 3 + shift} dollars." for i in range(n))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[500, 1000, 2000])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    first = None
    for n in args.sizes:
        context, response = items(n), items(n, 1)
        plan = plan_evidence(response, context)
        best_ctx = best_check = float("inf")
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            facts = context_facts(context, plan.context_spans)
            t1 = time.perf_counter()
            found = check_facts(plan.response_spans, facts)
            t2 = time.perf_counter()
            best_ctx, best_check = min(best_ctx, t1 - t0), min(best_check, t2 - t1)
        total = best_ctx + best_check
        first = first or total
        statuses = dict(Counter(f.status for f in found))
        print(
            f"{n:>6} sentences: context facts {best_ctx:.3f} s, check {best_check:.3f} s, "
            f"total {total:.3f} s ({total / first:.2f}x the first size); {statuses}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
