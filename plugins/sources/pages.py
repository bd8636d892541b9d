"""What the vendor span sources share when they make a page: the sample is drawn by trace, so a
trace's spans are scored together or not at all, and each one left out is counted with its reason."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from groundlens_core.trace.sources.job import Filters
from groundlens_core.trace.sources.spans import StoredSpan

__all__ = ["NOT_SAMPLED", "sampled_by_trace"]

#: the reason a span the sample leaves out is counted under in the run's summary
NOT_SAMPLED = "not sampled (--sample)"


def sampled_by_trace(
    spans: Iterable[StoredSpan], filters: Filters, skipped: Counter[str]
) -> dict[str, list[StoredSpan]]:
    """``spans`` of the traces ``filters`` samples, by trace id in the order first seen; every span
    of another trace is counted in ``skipped``."""
    by_trace: dict[str, list[StoredSpan]] = {}
    for span in spans:
        if filters.keeps_trace(span.trace_id):
            by_trace.setdefault(span.trace_id, []).append(span)
        else:
            skipped[NOT_SAMPLED] += 1
    return by_trace
