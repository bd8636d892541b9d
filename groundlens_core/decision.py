"""The band of a result and its one risk value: the number shown everywhere is the number ranked.

The band is decided from the evidence, in this order:

- **flagged** ("review first"): a specific fact of the response (an amount, a duration, a date, a
  name ...) is contradicted by its source or absent from it, or a claim without a number is (a
  polarity the source states the other way, a condition of the source dropped, a clause the source
  never makes: :mod:`groundlens_core.claims`); without a question, only the findings that mark
  summaries (see :func:`_loose_in_a_summary`); or the response ignores its source:
  SGI below 0.95 (no closer to its context than to the question) with one content word in three
  absent from the source (``support < 2/3``) and no value of the source stated, or, with no
  question, half its content words absent (``support < 0.50``). Without a context: DGI at or below
  the method's pass mark (0.30).
- **trusted**: every fact is in the source, SGI is a strong pass (> 1.20) and support is at least
  0.80 (support above 0.95 when there is no question, so no SGI).
- **review**: the rest. Weaker word evidence (a paraphrase, a response that leans only weakly toward
  its context, SGI below 0.95) means review, never flagged: words rank, facts flag. A response
  scored without a context (DGI) is never trusted: no context, weak signal.

The **score** is in [0, 1], higher = better grounded, and a function of the band first: flagged
scores lie in [0, 1/3), review in [1/3, 2/3), trusted in [2/3, 1]. Within a band it follows the
word-level evidence (the mean of normalized SGI and support; support alone without a question;
normalized DGI without a context), halved for each failed fact. So a flagged result never shows a
higher score than a trusted one, and sorting by the score is sorting by the band, then the evidence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from groundlens_core.bands import Triage, normalize, triage
from groundlens_core.results import Evidence, FactFinding

__all__ = ["Decision", "decide_sgi", "decide_support", "decide_dgi", "band_of_score", "SCORE_EDGES"]

#: scores below the first edge are flagged, below the second review, the rest trusted
SCORE_EDGES = (1 / 3, 2 / 3)
_BAND_START = {"flagged": 0.0, "review": SCORE_EDGES[0], "trusted": SCORE_EDGES[1]}
IGNORES_SOURCE = 0.50  # support below this: at least half the content words are not in the source
IGNORES_SOURCE_WITH_SGI = 2 / 3  # with SGI below 0.95: a third of the content words are not in the source
STRONG_SUPPORT = 0.80  # with SGI > 1.20: trusted
STRONG_SUPPORT_ALONE = 0.95  # no question: trusted on support alone
MAX_FACTS_SHOWN = 3
_NOT_VALUES = frozenset({"name", "label", "polarity", "count", "year"})


@dataclass(frozen=True)
class Decision:
    band: Triage
    score: float  # in the band's third of [0, 1]
    reason: str  # why the band, in a few words (the explanation's first clause)


def band_of_score(score: float) -> Triage:
    """The band a score lies in (the inverse of the banding in :func:`_score`)."""
    if score < SCORE_EDGES[0]:
        return "flagged"
    return "review" if score < SCORE_EDGES[1] else "trusted"


def _score(band: Triage, evidence_value: float, failed: int = 0) -> float:
    inner = min(max(evidence_value, 0.0), 1.0) * 0.5**failed
    return _BAND_START[band] + min(inner, 0.999) / 3.0


#: findings about a clause, not a value
CLAIM_KINDS = frozenset({"polarity", "claim", "condition"})


def _facts_reason(ev: Evidence, failed: Sequence[FactFinding] | None = None, flags: bool = True) -> str:
    failed = ev.failed_facts() if failed is None else list(failed)
    shown = "; ".join(f.describe() for f in failed[:MAX_FACTS_SHOWN])
    more = f" (and {len(failed) - MAX_FACTS_SHOWN} more)" if len(failed) > MAX_FACTS_SHOWN else ""
    if len(failed) > 1:
        what = f"{len(failed)} findings are"
    else:
        what = "a claim is" if failed[0].kind in CLAIM_KINDS else "a specific fact is"
    if not flags:
        return f"{what} not supported by the source, which in a text without a question ranks it lower: {shown}{more}"
    return f"{what} not supported by the source: {shown}{more}"


def _words_reason(ev: Evidence) -> str:
    absent, total = ev.unsupported_tokens, ev.content_tokens
    return f"{absent} of its {total} content words are not in the source; it may ignore its source"


def decide_sgi(raw: float, ev: Evidence | None) -> Decision:
    """SGI with (or, with ``evidence=False``, without) sentence evidence."""
    sgi_band = triage("sgi", raw)
    if ev is None:  # SGI alone: the method's own bands
        reason = {
            "flagged": "SGI is below 0.95: the response is no closer to its context than to the question",
            "review": "SGI leans only weakly toward the context",
            "trusted": "SGI is a strong pass",
        }[sgi_band]
        return Decision(sgi_band, _score(sgi_band, normalize("sgi", raw)), reason)
    base = (normalize("sgi", raw) + normalize("support", ev.support)) / 2.0
    if raw == 0.0:  # the response embeds like the question: it restates it, whatever its words
        return Decision("flagged", _score("flagged", base), "the response restates the question")
    failed = len(ev.failed_facts())
    if failed:
        return Decision("flagged", _score("flagged", base, failed), _facts_reason(ev))
    # it states a value of its source with its unit (an amount, a duration, a date ...); a name or a
    # bare number ("Aurora-7") only echoes the topic
    supported = any(f.status == "supported" and f.kind not in _NOT_VALUES for f in ev.facts)
    if ev.content_tokens and ev.support < IGNORES_SOURCE_WITH_SGI and sgi_band == "flagged" and not supported:
        return Decision("flagged", _score("flagged", base), _words_reason(ev) + ", and SGI is below 0.95")
    if sgi_band == "trusted" and ev.support >= STRONG_SUPPORT:
        return Decision("trusted", _score("trusted", base), "every fact it states is in the source")
    if sgi_band == "flagged":
        why = "the facts it states are in the source, but it is no closer to its context than to the question"
    elif sgi_band == "review":
        why = "the facts it states are in the source, but it leans only weakly toward its context"
    else:
        why = "the facts it states are in the source, but much of its wording is not"
    return Decision("review", _score("review", base), why)


def _loose_in_a_summary(f: FactFinding) -> bool:
    """A finding that does not flag a text read without a question (a summary, a rewrite): a
    summary drops conditions, adds framing, shortens names ("Johnstone" for "Denny Johnstone" is
    supported, but "Volta Pass" against "Volta World Pass" is contradicted) and dates things
    loosely, so an added clause, a dropped condition, a name the source gives otherwise and a year
    rank it lower within review instead. On the FaithBench dev rows these findings marked
    hallucinated summaries no more often than chance, while a changed or absent value, an absent
    name and a flipped polarity marked them four times in five."""
    return f.kind in ("claim", "condition", "year") or (f.kind == "name" and f.status == "contradicted")


def decide_support(ev: Evidence) -> Decision:
    """No question: the response against its context alone."""
    failed = ev.failed_facts()
    hard = [f for f in failed if not _loose_in_a_summary(f)]
    if hard:
        return Decision("flagged", _score("flagged", ev.support, len(hard)), _facts_reason(ev, hard))
    if failed:
        return Decision("review", _score("review", ev.support), _facts_reason(ev, failed, flags=False))
    if not ev.content_tokens:
        return Decision("review", _score("review", ev.support), "it has no content words to check")
    if ev.support < IGNORES_SOURCE:
        return Decision("flagged", _score("flagged", ev.support), _words_reason(ev))
    if ev.support > STRONG_SUPPORT_ALONE:
        return Decision(
            "trusted", _score("trusted", ev.support), "its facts and nearly all its words are in the source"
        )
    return Decision(
        "review", _score("review", ev.support), "its facts are in the source, but some of its words are not"
    )


def decide_dgi(raw: float) -> Decision:
    """No context: DGI is a weak signal, so it can flag or ask for review, never trust."""
    if triage("dgi", raw) == "flagged":
        return Decision(
            "flagged", _score("flagged", normalize("dgi", raw)), "no context, and DGI is at or below its pass mark"
        )
    return Decision("review", _score("review", normalize("dgi", raw)), "no context: a weak signal")
