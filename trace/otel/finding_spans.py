"""Where a score's failed findings and its weakest sentence stand in the response, as ``[start, end)``
character offsets: what the exports outside the report carry so a reviewer's tool can point at the
words (the OpenTelemetry attributes, the score sinks' metadata) and what the report marks.

Plain functions of a score object; nothing here imports OpenTelemetry or a vendor's client.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["cut_text", "failed_findings", "finding_records", "findings_json", "weakest_span"]

#: the JSON list of findings stays under this many characters (whole findings are left out past it;
#: the count of all of them is exported beside it)
FINDINGS_MAX_CHARS = 4096


def _key(f: Any) -> tuple[Any, ...]:
    return (f.start, f.end, f.sentence, f.kind, f.status)


def failed_findings(score: Any) -> tuple[Any, ...]:
    """The failed findings (contradicted or unsupported) of the response itself, in order, each with
    offsets into that response. When the score has a decision that names findings, these are the ones
    it names (the ones that decided the band; when the verifier decided, only those in the sentences
    it doubts), else the evidence's failed facts. A decision grounded in a flagged output names the
    origin step's findings, whose offsets index the origin's response: they are not this response's
    and are left out (the origin's own export carries them)."""
    ev = getattr(score, "evidence", None)
    if ev is None:
        return ()
    own = tuple(ev.failed_facts())
    decision = getattr(score, "decision", None)
    verdict = getattr(score, "verdict", None)
    if decision is None:
        return own
    if decision.rule == "grounded_in_flagged":  # its own findings, as far as the verifier doubts them
        return _doubted(own, verdict)
    if not decision.findings and verdict is None:
        return own
    named = {_key(f) for f in decision.findings}
    return tuple(f for f in own if _key(f) in named)


def _doubted(own: tuple[Any, ...], verdict: Any) -> tuple[Any, ...]:
    """``own`` without the findings in sentences the verifier trusted: a finding the verifier judges
    supported is no reason to look at a step (all of them when the verdict does not carry its edge)."""
    edge = getattr(verdict, "trust_from", None) if verdict is not None else None
    if edge is None:
        return own
    doubted = [s for s in verdict.sentences if s.probability < edge]
    return tuple(f for f in own if any(f.start < s.end and s.start < f.end for s in doubted))


def cut_text(text: str | None, limit: int | None) -> str | None:
    if text is None or limit is None or len(text) <= limit:
        return text
    return text[:limit] + f"… [cut: {len(text)} chars]"


def finding_record(f: Any, max_text_chars: int | None = None) -> dict[str, Any]:
    """One finding as the exports carry it: ``text`` (the fact as the checker read it), ``kind``,
    ``status``, ``source`` (what the source says; None when it says nothing of the kind) and
    ``start``/``end`` (its characters in the response). Texts are cut to ``max_text_chars``."""
    return {
        "text": cut_text(str(f.text), max_text_chars),
        "kind": str(f.kind),
        "status": str(f.status),
        "source": cut_text(None if f.source is None else str(f.source), max_text_chars),
        "start": int(f.start),
        "end": int(f.end),
    }


def finding_records(
    score: Any, max_text_chars: int | None = None, max_chars: int = FINDINGS_MAX_CHARS
) -> tuple[list[dict[str, Any]], int]:
    """The records of :func:`failed_findings` (texts cut to ``max_text_chars``), as many as fit in
    ``max_chars`` characters of JSON (the first always), and how many failed findings there are."""
    findings = failed_findings(score)
    out: list[dict[str, Any]] = []
    size = 2
    for f in findings:
        record = finding_record(f, max_text_chars)
        grow = len(json.dumps(record, ensure_ascii=False)) + (2 if out else 0)
        if out and size + grow > max_chars:
            break
        out.append(record)
        size += grow
    return out, len(findings)


def findings_json(records: list[dict[str, Any]]) -> str:
    """The records as one JSON string (an attribute value): keys sorted, no ASCII escaping."""
    return json.dumps(records, ensure_ascii=False, sort_keys=True)


def weakest_span(score: Any) -> tuple[int, int] | None:
    """``(start, end)`` of the evidence's weakest sentence in the response, or None."""
    ev = getattr(score, "evidence", None)
    weakest = None if ev is None else ev.weakest_sentence
    return None if weakest is None else (int(weakest.start), int(weakest.end))
