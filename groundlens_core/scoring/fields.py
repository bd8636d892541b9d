"""The one projection of a score into named fields: what every consumer that flattens a result reads.

The batch columns (``groundlens_<field>``), the LangChain evaluator's metadata, the decision ledger
and the OpenTelemetry attributes (``groundlens.<field>``) all take their values from
:func:`score_fields`, so a field means the same thing, and holds the same number, everywhere. The
``score`` is the ranked value; ``value`` is the method's own raw number (SGI, DGI or support, named by
``method``) and ``normalized`` its mapping to [0, 1], kept for readers of the raw signal.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FIELDS", "score_fields"]

#: the fields of :func:`score_fields`, in order
FIELDS: tuple[str, ...] = (
    "method",
    "score",
    "triage",
    "flagged",
    "rule",
    "reason",
    "value",
    "normalized",
    "support",
    "weakest_sentence",
    "unsupported",
    "facts",
    "fingerprint",
)


def score_fields(res: Any) -> dict[str, Any]:
    """The named fields of a result object (``None`` where a field does not apply: no evidence, no
    decision in a score saved by an older version). ``unsupported`` is the absent tokens, first
    occurrence of each, in order; ``facts`` the failed facts as a reviewer reads them
    ("25% — the source says 15%"), both tuples."""
    ev = getattr(res, "evidence", None)
    decision = getattr(res, "decision", None)
    weakest = None if ev is None else ev.weakest_sentence
    verdict = getattr(res, "verdict", None)
    if decision is not None and (decision.findings or verdict is not None):
        # the facts that decided the band; when the verifier decided, only those in the sentences
        # it doubts (a fact it judges supported is never shown as a reason)
        facts: tuple[str, ...] | None = tuple(f.describe() for f in decision.findings)
    else:
        facts = None if ev is None else tuple(f.describe() for f in ev.failed_facts())
    return {
        "method": res.method,
        "score": res.score,
        "triage": res.triage,
        "flagged": res.flagged,
        "rule": None if decision is None else decision.rule,
        "reason": None if decision is None else decision.reason,
        "value": res.value,
        "normalized": res.normalized,
        "support": None if ev is None else ev.support,
        "weakest_sentence": None if weakest is None else weakest.text,
        "unsupported": None if ev is None else tuple(dict.fromkeys(u.text for u in ev.unsupported())),
        "facts": facts,
        "fingerprint": res.fingerprint,
    }
