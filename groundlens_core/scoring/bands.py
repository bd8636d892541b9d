"""Each signal's own marks, the step bands, their order and colours: every label is derived from here.

| signal  | below the pass mark      | weak pass            | strong pass  |
|---------|--------------------------|----------------------|--------------|
| SGI     | raw < 0.95               | 0.95 <= raw <= 1.20  | raw > 1.20   |
| DGI     | raw <= 0.30              | 0.30 < raw <= 0.50   | raw > 0.50   |
| support | raw < 0.80               | 0.80 <= raw <= 0.95  | raw > 0.95   |

These marks describe one signal each (the explanation's sentence about SGI, DGI or support, and
SGI's band when evidence is off). The band of a result is decided in ``decision.py`` from the facts,
SGI and support together, with its one score. SGI's thresholds are the method's (review below 0.95,
strong pass above 1.20); DGI's pass mark is the method's (pass above 0.30), its strong-pass mark
0.50 is ours; the support marks are round numbers, not fitted. Scores rank outputs for human
review; they are not verdicts of truth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

Triage = Literal["trusted", "review", "flagged"]
Method = Literal["sgi", "dgi", "support"]

TRIAGE_ORDER: tuple[str, ...] = ("flagged", "review", "trusted")  # riskiest first
EPSILON = 1e-6  # distances below this count as "the same point" (degenerate SGI/DGI)
SGI_DEGENERATE_HIGH = 10.0  # d(r, ctx) < EPSILON: the response restates its context
TRIAGE_NOTE = "a triage signal for ranking, not a verdict of truth"
#: the sentence every report and export carries (HTML header, OTel ``groundlens.note``)
TRIAGE_NOTE_LONG = "groundlens scores are triage signals for ranking human review, not verdicts of truth"

# ---------------------------------------------------------------- bands of trace steps
# A trace step is in one of five bands: the three triage bands of a scored step, ``error`` (the
# call or its scoring failed) and ``skipped`` (nothing to score: a tool result, a tool-call turn).
# Every ordering, count and colour of the trace model, the HTML report and the OTel export comes
# from here.

#: the five step bands, riskiest first: what a human should look at before the rest
STEP_BANDS: tuple[str, ...] = ("error", "flagged", "review", "trusted", "skipped")
#: the order counts are listed in (summaries, report cards, OTel ``groundlens.count.<band>``)
COUNT_ORDER: tuple[str, ...] = ("trusted", "review", "flagged", "error", "skipped")
#: (text colour, background colour) of each band in the HTML report
BAND_COLOURS: dict[str, tuple[str, str]] = {
    "flagged": ("#d93025", "#fce8e6"),
    "review": ("#e37400", "#fef3e0"),
    "trusted": ("#188038", "#e6f4ea"),
    "error": ("#7b5e9c", "#efe9f5"),
    "skipped": ("#80868b", "#f1f3f4"),
}
#: the review order of the bands, riskiest first: 0 for ``error`` up to 4 for ``skipped``
_BAND_ORDER = {band: i for i, band in enumerate(STEP_BANDS)}
SCORED_METHODS: tuple[str, ...] = ("sgi", "dgi", "support")  # support: against the context alone (no question)


def step_band(method: str | None, triage_label: str | None) -> str:
    """The band of a trace step: its triage when it was scored, else ``error`` or ``skipped``."""
    if method in SCORED_METHODS and triage_label in TRIAGE_ORDER:
        return triage_label  # type: ignore[return-value]
    if method == "error" or triage_label == "error":
        return "error"
    return "skipped"


def band_order(band: str) -> int:
    """The place of ``band`` in the review order: 0 for the riskiest band (``error``) up to 4 (``skipped``)."""
    return _BAND_ORDER.get(band, len(STEP_BANDS))


def risk_key(band: str, score: float | None, *order: Any) -> tuple[Any, ...]:
    """The one sort key of the review order, riskiest first: the band, then the lowest score (a
    score's ``score``; unscored last in a band), then ``order`` (trace and step order, say), which
    breaks ties. Steps, report rows, node summaries and the rows of a scored file all sort by it."""
    return (band_order(band), score if score is not None else 2.0, *order)


def empty_counts() -> dict[str, int]:
    """``{band: 0}`` for every step band, in :data:`COUNT_ORDER`."""
    return {band: 0 for band in COUNT_ORDER}


@dataclass(frozen=True)
class Band:
    method: str
    review_below: float  # raw values under this (SGI) / at or under this (DGI) are flagged
    strong_above: float  # raw values over this are trusted
    inclusive_flag: bool  # DGI: "pass above 0.30" -> 0.30 itself is flagged

    def triage(self, raw: float) -> Triage:
        if math.isnan(raw):
            return "flagged"
        flagged = raw <= self.review_below if self.inclusive_flag else raw < self.review_below
        if flagged:
            return "flagged"
        return "trusted" if raw > self.strong_above else "review"


SGI_BAND = Band("sgi", review_below=0.95, strong_above=1.20, inclusive_flag=False)
DGI_BAND = Band("dgi", review_below=0.30, strong_above=0.50, inclusive_flag=True)
SUPPORT_BAND = Band("support", review_below=0.80, strong_above=0.95, inclusive_flag=False)
BANDS: dict[str, Band] = {"sgi": SGI_BAND, "dgi": DGI_BAND, "support": SUPPORT_BAND}


def normalize(method: str, raw: float) -> float:
    """Map a raw score to [0, 1] for display and sorting: SGI ``tanh(max(0, raw - 0.3))``, DGI ``(raw + 1) / 2``."""
    if method == "sgi":
        return math.tanh(max(0.0, raw - 0.3))
    if method == "dgi":
        return (raw + 1.0) / 2.0
    if method == "support":
        return min(1.0, max(0.0, raw))
    raise ValueError(f"unknown method {method!r}")


def triage(method: str, raw: float) -> Triage:
    return BANDS[method].triage(raw)


def riskier(a: Triage, b: Triage) -> Triage:
    """The band that is reviewed first of the two."""
    return a if TRIAGE_ORDER.index(a) <= TRIAGE_ORDER.index(b) else b


_SENTENCES = {
    ("sgi", "flagged"): (
        "SGI {v:.2f} < 0.95: the response is no closer to its context than to the question; it may ignore the context."
    ),
    ("sgi", "review"): ("SGI {v:.2f} in [0.95, 1.20]: the response leans toward its context, but only weakly."),
    ("sgi", "trusted"): "SGI {v:.2f} > 1.20: the response moved well toward its context (strong pass).",
    ("dgi", "flagged"): (
        "DGI {v:.2f} <= 0.30: the question-to-response step does not point the way grounded answers go."
    ),
    ("dgi", "review"): ("DGI {v:.2f} in (0.30, 0.50]: the step points roughly the way grounded answers go."),
    ("dgi", "trusted"): "DGI {v:.2f} > 0.50: the step points the way grounded answers go (strong pass).",
    (
        "support",
        "flagged",
    ): ("Support {v:.2f} < 0.80: {absent} of the response's {total} content words {are} not in the context."),
    (
        "support",
        "review",
    ): ("Support {v:.2f} in [0.80, 0.95]: {absent} of the response's {total} content words {are} not in the context."),
    (
        "support",
        "trusted",
    ): "Support {v:.2f} > 0.95: the context contains {present} of the response's {total} content words (strong pass).",
}


def shown_value(method: str, raw: float, band: Triage) -> float:
    """``raw`` to two decimals, nudged by 0.01 toward its band when plain rounding would cross a
    threshold (0.949 is flagged: printing "0.95 < 0.95" would contradict the label)."""
    shown = round(raw, 2)
    order = TRIAGE_ORDER.index(band)
    for _ in range(2):
        got = TRIAGE_ORDER.index(BANDS[method].triage(shown))
        if got == order:
            break
        shown = round(shown + (0.01 if got < order else -0.01), 2)
    return shown


def explain_support(support: float, total: int, absent: int, weakest: str | None = None) -> str:
    """One or two sentences on the support signal, without the triage note."""
    if total == 0:
        return "Support: the response has no content words (numbers, names, words) to look for in the context."
    band = triage("support", support)
    text = _SENTENCES[("support", band)].format(
        v=shown_value("support", support, band),
        absent=absent,
        total=total,
        present=total - absent,
        are="is" if absent == 1 else "are",
    )
    if weakest:
        text += f' Weakest sentence: "{weakest}"' + ("" if weakest.endswith((".", "!", "?", "\u2026")) else ".")
    return text


def explain(method: str, raw: float, band: Triage, detail: str = "") -> str:
    text = _SENTENCES[(method, band)].format(v=shown_value(method, raw, band))
    if detail:
        text = f"{text} {detail}"
    return f"{text} ({TRIAGE_NOTE})"
