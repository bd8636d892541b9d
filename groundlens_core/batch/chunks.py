"""One chunk of a stream scored: ``evaluate_batch`` with error indices counted from the chunk's first row.

The stream API, the file job, the Ray workers and the HTML report's second pass all score through
:func:`score_chunk`, so a row scores the same whichever path reaches it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from groundlens_core.scoring.results import GroundlensResult, ScoreError


def score_chunk(
    items: Sequence[Any],
    *,
    start: int = 0,
    embedder=None,
    calibration=None,
    long_context: str = "mean",
    errors: str = "record",
) -> list[GroundlensResult | ScoreError]:
    """``evaluate_batch`` on one chunk, with error indices counted from ``start`` (the chunk's first row)."""
    from groundlens_core.scoring import evaluate_batch

    results = evaluate_batch(
        items,
        embedder=embedder,
        calibration=calibration,
        long_context=long_context,
        errors=errors,
        chunk_size=max(1, len(items)),
    )
    return [dataclasses.replace(r, index=r.index + start) if isinstance(r, ScoreError) else r for r in results]
