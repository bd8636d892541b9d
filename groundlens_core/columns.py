"""The ``groundlens_*`` columns a scored table gets: one place that maps a result to its cells.

Every writer (CSV, JSONL, Parquet; one process or a Ray cluster) goes through
:func:`result_columns`, so a new signal is one new entry here and in :data:`OUT_COLUMN_TYPES`
and nothing else changes. Order matters: it is the order of the appended columns.
"""

from __future__ import annotations

from typing import Any

from groundlens_core.bands import STEP_BANDS, risk_rank

#: the appended columns, in order
OUT_COLUMNS: tuple[str, ...] = (
    "groundlens_method",
    "groundlens_value",
    "groundlens_normalized",
    "groundlens_flagged",
    "groundlens_triage",
    "groundlens_error",
)

#: value type of each appended column in typed formats (Parquet/Arrow): "string", "float64", "bool".
#: A column missing here is written as a string.
OUT_COLUMN_TYPES: dict[str, str] = {
    "groundlens_method": "string",
    "groundlens_value": "float64",
    "groundlens_normalized": "float64",
    "groundlens_flagged": "bool",
    "groundlens_triage": "string",
    "groundlens_error": "string",
}

#: review order of the bands, riskiest first (rows that could not be scored come before all)
RISK_RANK = {band: risk_rank(band) for band in STEP_BANDS if band != "skipped"}  # from bands.py


def result_columns(res: Any) -> dict[str, Any]:
    """The appended cells for one result (a score or a ScoreError), keys in :data:`OUT_COLUMNS` order."""
    if res.method == "error":
        return {"groundlens_method": "error", "groundlens_value": None, "groundlens_normalized": None,
                "groundlens_flagged": None, "groundlens_triage": "error", "groundlens_error": res.error}
    return {"groundlens_method": res.method, "groundlens_value": res.value, "groundlens_normalized": res.normalized,
            "groundlens_flagged": res.flagged, "groundlens_triage": res.triage, "groundlens_error": None}


def risk_key(triage: Any, normalized: Any) -> tuple[int, float]:
    """Sort key of a scored row, riskiest first: band, then the lowest normalized score (ties: input order)."""
    rank = RISK_RANK.get(str(triage), 4)
    try:
        norm = float(normalized) if normalized not in (None, "") else 2.0
    except (TypeError, ValueError):
        norm = 2.0
    return rank, norm
