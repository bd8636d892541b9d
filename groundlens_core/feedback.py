"""What a flagged answer is told when it is sent back for revision: the findings, named.

The revision loops (the LangGraph router and node, the CrewAI guardrail, the LangChain wrapper)
send the agent one message built here from the structured findings of its score, never from the
explanation text: for a contradicted fact what the source says instead ("The source says 15%, not
25%."), for an unsupported one that the source does not state it, and, when no single fact failed
(the answer ignores its source), the words the source lacks. There is no second model: the agent's
own model tries again with the source's values in front of it.

:func:`score_of` and :func:`findings_of` are the only places that read the band, the score and the
findings off a result, so a change in how a result carries them is a change here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from groundlens_core.results import FactFinding, quote_sentence

__all__ = ["MAX_FINDINGS", "Feedback", "feedback_for", "findings_of", "render_feedback", "score_of"]

#: findings named in one message; the rest are counted
MAX_FINDINGS = 5
#: unsupported words named when no single fact failed
_MAX_WORDS = 8
_CLOSING = "Answer again from the source: use its values and state nothing it does not support."
#: a flagged answer scored without a source (DGI): there are no values to name
_NO_SOURCE = (
    "Your answer does not look grounded, and there was no source to check it against. "
    "Look up a source if you can and answer again from it; state only what you can support."
)


def score_of(result: Any) -> float | None:
    """The ranked score of a result in [0, 1] (``score`` where the result has it, else ``rank``)."""
    for name in ("score", "rank"):
        value = getattr(result, name, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None


def findings_of(result: Any) -> tuple[FactFinding, ...]:
    """The failed facts of a result (contradicted or unsupported), in the order the response states them.

    From the result's decision when it carries its findings, else from its evidence."""
    decision = getattr(result, "decision", None)
    found = getattr(decision, "findings", None)
    if found is not None:
        return tuple(f for f in found if isinstance(f, FactFinding) and f.failed)
    evidence = getattr(result, "evidence", None)
    return tuple(evidence.failed_facts()) if evidence is not None else ()


def _finding_line(f: FactFinding) -> str:
    if f.status == "contradicted" and f.source:
        return f"The source says {f.source}, not {f.text}."
    if f.status == "contradicted":
        return f"The source states another value than {f.text}."
    return f"The source does not state {f.text}."


def render_feedback(result: Any) -> str:
    """The message a flagged answer is sent back with (see the module docstring)."""
    findings = findings_of(result)
    lines: list[str] = []
    if findings:
        lines.extend(_finding_line(f) for f in findings[:MAX_FINDINGS])
        if len(findings) > MAX_FINDINGS:
            lines.append(f"({len(findings) - MAX_FINDINGS} more of its facts are not supported by the source.)")
    else:
        evidence = getattr(result, "evidence", None)
        weakest = getattr(evidence, "weakest_sentence", None)
        if weakest is not None and weakest.unsupported:
            words = list(dict.fromkeys(u.text for u in weakest.unsupported))
            shown = ", ".join(words[:_MAX_WORDS]) + (", ..." if len(words) > _MAX_WORDS else "")
            lines.append(f'The source does not support "{quote_sentence(weakest.text)}" (not in the source: {shown}).')
        elif evidence is None and getattr(result, "method", None) == "dgi":
            return _NO_SOURCE
        else:
            lines.append("Your answer is not supported by the source.")
    lines.append(_CLOSING)
    return " ".join(lines)


@dataclass(frozen=True)
class Feedback:
    """One scored answer as a revision loop sees it: whether to send it back, and with what message."""

    band: str  # "flagged" | "review" | "trusted"
    score: float | None
    findings: tuple[FactFinding, ...]
    text: str | None  # the message for the agent; None unless the answer is flagged

    @property
    def revise(self) -> bool:
        return self.text is not None


def feedback_for(result: Any) -> Feedback:
    """The :class:`Feedback` of a score object: a message only when it is flagged."""
    band = str(getattr(result, "triage", "") or "")
    flagged = band == "flagged"
    return Feedback(
        band=band,
        score=score_of(result),
        findings=findings_of(result),
        text=render_feedback(result) if flagged else None,
    )
