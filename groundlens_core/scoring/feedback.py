"""What a flagged answer is told when it is sent back for revision: the findings, named.

The revision loops (the LangGraph router and node, the CrewAI guardrail, the LangChain wrapper)
send the agent one message built here from the structured findings of its score, never from the
explanation text: for a contradicted fact what the source says instead ("The source says 15%, not
25%."), for a contradicted claim both sides as one sentence ("The source says return shipping is
paid by the customer; the answer says it is free."), for an unsupported one that the source does not
state it, and, when no single fact failed (the answer ignores its source), the words the source
lacks. There is no second model: the agent's own model tries again with the source's values in
front of it.

:func:`score_of` and :func:`findings_of` are the only places that read the band, the score and the
findings off a result, so a change in how a result carries them is a change here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable

from groundlens_core.scoring.decision import CLAIM_KINDS
from groundlens_core.scoring.results import FactFinding, quote_sentence

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


# ---------------------------------------------------------------- a claim quoted inside a sentence

#: words that join a clause to the one before it ("..., and return shipping is free"): not the claim's
_JOINERS = frozenset("and but or so yet while whereas although though because since also then however".split())
#: sentence-initial words that are never names: lowercased when the claim is quoted mid-sentence
_COMMON_FIRST = frozenset(
    "the a an this that these those it its they their there you your we our he she his her each every all "
    "any some no none one our my i'm it's there's".split()
)
_SINGULAR = frozenset({"is", "was", "has", "does", "isn't", "wasn't", "hasn't", "doesn't"})
_PLURAL = frozenset({"are", "were", "have", "do", "aren't", "weren't", "haven't", "don't"})
_MODAL = frozenset({"can", "will", "would", "could", "should", "must", "may", "might", "cannot", "can't", "won't"})
_PRONOUNS = frozenset({"i", "you", "we", "they", "it", "he", "she"})


def _clause(text: str, known: str) -> str:
    """A claim as it reads inside a sentence: no joining word in front ("and"), no end punctuation,
    and its first word in lower case unless it is a name. A first word counts as a name unless it is
    a common sentence opener or ``known`` (the source and the answer) has it in lower case too."""
    words = text.strip().rstrip(".;:,!?").split()
    while len(words) > 1 and words[0].lower().strip(",") in _JOINERS:
        words.pop(0)
    if not words:
        return text.strip()
    first = words[0]
    lower = first[:1].lower() + first[1:]
    if first[:1].isupper() and not first[1:2].isupper():  # "The", "Return"; never "X200", "USB"
        if first.lower() in _COMMON_FIRST or re.search(rf"(?<![\w-]){re.escape(lower)}(?![\w-])", known):
            words[0] = lower
    return " ".join(words)


def _what_the_answer_says(source: str, answer: str) -> str:
    """``answer`` with the subject it shares with ``source`` said once: "return shipping is free"
    against "return shipping is paid by the customer" is "it is free"."""
    s, a = source.split(), answer.split()
    shared = 0
    while shared < min(len(s), len(a)) - 1 and s[shared].lower() == a[shared].lower():
        shared += 1
    for i in range(1, shared):  # the first verb after a subject of one word or more, both shared
        verb = a[i].lower()
        if verb not in _SINGULAR | _PLURAL | _MODAL:
            continue
        subject = a[:i]
        if len(subject) == 1 and subject[0].lower() in _PRONOUNS:
            return answer  # "you can ...": already as short as it gets
        if verb in _SINGULAR:
            pronoun = "it"
        elif verb in _PLURAL:
            pronoun = "they"
        else:
            last = subject[-1].lower()
            pronoun = "they" if last.endswith("s") and not last.endswith("ss") else "it"
        return " ".join([pronoun, *a[i:]])
    return answer


def _finding_line(f: FactFinding, known: str) -> str:
    if f.kind == "scope" and f.source:  # one word of a copied sentence: quote the source's sentence
        return f'The source says: "{f.source}". The answer says "{f.text}" instead.'
    if f.kind in CLAIM_KINDS:  # a whole claim, not a value: quote it inside the sentence
        said = _clause(f.text, known)
        if f.status == "contradicted" and f.source:
            source = _clause(f.source, known)
            return f"The source says {source}; the answer says {_what_the_answer_says(source, said)}."
        if f.status == "contradicted":
            return f"The source says otherwise than that {said}."
        if f.kind == "condition" and f.source:
            return f"The answer says {said}; the source adds a condition: {_clause(f.source, known)}."
        return f"The source does not say that {said}."
    if f.status == "contradicted" and f.source:
        return f"The source says {f.source}, not {f.text}."
    if f.status == "contradicted":
        return f"The source states another value than {f.text}."
    return f"The source does not state {f.text}."


def _known_text(result: Any, findings: Iterable[FactFinding]) -> str:
    """The texts a finding's words can be looked up in: the findings, the response's sentences and
    their passages of the source."""
    parts = [t for f in findings for t in (f.text, f.source) if t]
    for sentence in getattr(getattr(result, "evidence", None), "sentences", None) or ():
        parts += [getattr(sentence, "text", "") or "", getattr(sentence, "passage", "") or ""]
    return "\n".join(parts)


def render_feedback(result: Any) -> str:
    """The message a flagged answer is sent back with (see the module docstring)."""
    findings = findings_of(result)
    lines: list[str] = []
    if findings:
        known = _known_text(result, findings)
        lines.extend(_finding_line(f, known) for f in findings[:MAX_FINDINGS])
        if len(findings) > MAX_FINDINGS:
            lines.append(f"({len(findings) - MAX_FINDINGS} more of its facts are not supported by the source.)")
    else:
        evidence = getattr(result, "evidence", None)
        weakest = getattr(evidence, "weakest_sentence", None)
        if weakest is not None and weakest.unsupported:
            words = list(dict.fromkeys(u.text for u in weakest.unsupported))
            shown = ", ".join(words[:_MAX_WORDS]) + (", ..." if len(words) > _MAX_WORDS else "")
            lines.append(f'The source does not support "{quote_sentence(weakest.text)}" (not in the source: {shown}).')
        elif weakest is not None:  # the sentence the verifier doubts most, though every word is in the source
            lines.append(f'The source does not support "{quote_sentence(weakest.text)}" as you state it.')
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
    """The :class:`Feedback` of a result object: a message only when it is flagged."""
    band = str(getattr(result, "triage", "") or "")
    flagged = band == "flagged"
    return Feedback(
        band=band,
        score=score_of(result),
        findings=findings_of(result),
        text=render_feedback(result) if flagged else None,
    )
