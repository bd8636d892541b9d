"""The ``groundlens_*`` columns a scored table gets: one place that maps a result to its cells.

Every writer (CSV, JSONL, Parquet; one process or a Ray cluster) goes through
:func:`result_columns`, so a new signal is one new entry here and in :data:`OUT_COLUMN_TYPES`
and nothing else changes. Order matters: it is the order of the appended columns.

Besides method, value, normalized, flagged, triage and error:

- ``groundlens_score``: the score shown and ranked by, in [0, 1] (higher = better grounded); the band
  is a function of it (see decision.py). Older versions also wrote it as ``groundlens_rank``;
- ``groundlens_facts``: the facts the source does not support, ``; ``-separated
  ("25% — the source says 15%");
- ``groundlens_support``: share of the response's content the context contains (empty without context);
- ``groundlens_weakest_sentence``: the sentence stating the most the context lacks (empty when none);
- ``groundlens_unsupported``: the absent numbers, dates, names and words, ``; ``-separated, first
  occurrence of each, in order;
- ``groundlens_reason``: why the row is in its band, in words (the decision's reason: the rule that
  decided it, with the failed facts and what the source says); empty for an error row or a score
  saved without a decision.
"""

from __future__ import annotations

from typing import Any, Mapping

from groundlens_core.scoring import bands
from groundlens_core.scoring.bands import STEP_BANDS, band_order
from groundlens_core.scoring.fields import score_fields

#: the appended columns, in order
OUT_COLUMNS: tuple[str, ...] = (
    "groundlens_method",
    "groundlens_value",
    "groundlens_normalized",
    "groundlens_flagged",
    "groundlens_triage",
    "groundlens_score",
    "groundlens_error",
    "groundlens_support",
    "groundlens_weakest_sentence",
    "groundlens_unsupported",
    "groundlens_facts",
    "groundlens_reason",
)

#: value type of each appended column in typed formats (Parquet/Arrow): "string", "float64", "bool".
#: A column missing here is written as a string.
OUT_COLUMN_TYPES: dict[str, str] = {
    "groundlens_method": "string",
    "groundlens_value": "float64",
    "groundlens_normalized": "float64",
    "groundlens_flagged": "bool",
    "groundlens_triage": "string",
    "groundlens_score": "float64",
    "groundlens_error": "string",
    "groundlens_support": "float64",
    "groundlens_weakest_sentence": "string",
    "groundlens_unsupported": "string",
    "groundlens_facts": "string",
    "groundlens_reason": "string",
}

#: review order of the bands, riskiest first (rows that could not be scored come before all): the
#: band field of the keys file's records
BAND_ORDER = {band: band_order(band) for band in STEP_BANDS if band != "skipped"}  # from bands.py


def unsupported_text(evidence: Any, limit: int = 50) -> str:
    """The absent tokens of an :class:`~groundlens_core.scoring.results.Evidence`, first of each, ``; ``-joined."""
    if evidence is None:
        return ""
    words = list(dict.fromkeys(tok.text for tok in evidence.unsupported()))
    more = len(words) - limit
    return "; ".join(words[:limit]) + (f"; ... ({more} more)" if more > 0 else "")


def result_columns(res: Any) -> dict[str, Any]:
    """The appended cells for one result (a score or a ScoreError), keys in :data:`OUT_COLUMNS` order;
    a score's cells are its :func:`~groundlens_core.scoring.fields.score_fields`."""
    if res.method == "error":
        cells: dict[str, Any] = dict.fromkeys(OUT_COLUMNS)
        cells.update({"groundlens_method": "error", "groundlens_triage": "error", "groundlens_error": res.error})
        return cells
    f = score_fields(res)
    ev = getattr(res, "evidence", None)
    return {
        "groundlens_method": f["method"],
        "groundlens_value": f["value"],
        "groundlens_normalized": f["normalized"],
        "groundlens_flagged": f["flagged"],
        "groundlens_triage": f["triage"],
        "groundlens_score": f["score"],
        "groundlens_error": None,
        "groundlens_support": f["support"],
        "groundlens_weakest_sentence": f["weakest_sentence"],
        "groundlens_unsupported": None if ev is None else unsupported_text(ev),
        "groundlens_facts": None if f["facts"] is None else "; ".join(f["facts"]),
        "groundlens_reason": f["reason"],
    }


#: small codes for the per-row keys file of a run (see ``stream.py``); -1 = a method not listed here
METHOD_CODES = {"error": 0, "sgi": 1, "dgi": 2, "support": 3}


def risk_key(cells: Mapping[str, Any]) -> tuple[int, float]:
    """:func:`groundlens_core.scoring.bands.risk_key` of a row from its appended cells (``groundlens_score``,
    else ``groundlens_rank`` or ``groundlens_normalized`` of a file written by an older version; ties
    keep input order). ``--sort``, the keys file of a run and the HTML report of a batch all rank by this."""
    value = cells.get("groundlens_score", cells.get("groundlens_rank", cells.get("groundlens_normalized")))
    try:
        score = float(value) if value not in (None, "") else None
    except (TypeError, ValueError):
        score = None
    band = str(cells.get("groundlens_triage"))
    return bands.risk_key(band if band in BAND_ORDER else "skipped", score)
