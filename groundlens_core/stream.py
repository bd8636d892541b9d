"""Scoring that streams: :func:`evaluate_stream`, a lazy Python API over an iterable of any length.

The resumable file job behind ``groundlens evaluate`` lives in :mod:`groundlens_core.batch.evaluate_job`;
its names are importable from here too.
"""

from __future__ import annotations

from itertools import islice
from typing import Any, Iterable, Iterator, Mapping

from groundlens_core.batch.chunks import score_chunk
from groundlens_core.batch.evaluate_job import DEFAULT_HTML_ROWS, EvaluateJob, JobSummary, run_evaluate
from groundlens_core.batch.input_columns import InputColumns
from groundlens_core.batch.partial_output import KEY_DTYPE
from groundlens_core.errors import GroundlensInputError
from groundlens_core.scoring.results import GroundlensResult, ScoreError

__all__ = [
    "DEFAULT_HTML_ROWS",
    "KEY_DTYPE",
    "EvaluateJob",
    "JobSummary",
    "evaluate_stream",
    "run_evaluate",
    "score_chunk",
]


def evaluate_stream(
    rows: Iterable[Any],
    *,
    batch_size: int = 256,
    embedder=None,
    calibration=None,
    long_context: str = "mean",
    errors: str = "record",
    columns: InputColumns | Mapping[str, str] | None = None,
) -> Iterator[GroundlensResult | ScoreError]:
    """Score an iterable of any length lazily, yielding one result per row in input order.

    Rows are what :func:`~groundlens_core.scoring.evaluate_batch` takes (mappings with ``question``,
    ``response``, optional ``context``, or tuples). Only ``batch_size`` rows are held at a time; the
    unique texts of a chunk are embedded together. A bad row yields a :class:`ScoreError` whose
    ``index`` is its position in the whole stream, and every other row is scored (``errors="raise"``
    raises on the first bad row instead). Results are byte-identical to ``evaluate_batch`` on the same
    rows, whatever ``batch_size``.

    ``columns`` reads mapping rows by your own keys, e.g. ``{"question": "query", "context":
    "passage", "response": "answer"}``; a first row without them is a one-line error that names the
    closest key it has.
    """
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise GroundlensInputError(f"batch_size must be a whole number of at least 1, got {batch_size!r}")
    if errors not in ("record", "raise"):
        raise ValueError("errors must be 'record' or 'raise'")
    from groundlens_core.scoring import get_default_embedder
    from groundlens_core.scoring.calibration import CalibrationResult

    emb = embedder or get_default_embedder()
    if calibration is not None and not isinstance(calibration, CalibrationResult):
        calibration = CalibrationResult.load(calibration)  # once, not once per chunk
    it = iter(rows) if columns is None else _read_by(rows, InputColumns.of(columns))
    start = 0
    while True:
        chunk = list(islice(it, batch_size))
        if not chunk:
            return
        yield from score_chunk(
            chunk, start=start, embedder=emb, calibration=calibration, long_context=long_context, errors=errors
        )
        start += len(chunk)


def _read_by(rows: Iterable[Any], names: InputColumns) -> Iterator[Any]:
    """Mapping rows as ``{question, response, context}`` read through ``names``; other rows as they are."""
    first = True
    for row in rows:
        if isinstance(row, Mapping):
            if first:  # a wrong name shows on the first row: one error, not a failed row each
                names.require(list(row), where="evaluate_stream: the first row", python=True)
                first = False
            yield names.item(row, has_context=True)
        else:
            yield row
