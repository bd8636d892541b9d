"""Sentences that say the source does not answer: an assistant's abstention.

"The document does not say when the offer ends." states nothing about the world; it says what the
source lacks. Its words name the question's topic ("the offer", "ends"), so the word and fact checks
would hold them against the source as if they were claims: a correct abstention would be flagged
for naming what it could not find. A sentence read as an abstention is therefore left out of the
fact checks and the word support; a response that only abstains is sent to review (a person checks
that the source really does not say), never flagged and never trusted on its words.

Only a whole sentence abstains: "The document does not mention a fee, so there is none" goes on to
assert something, and is checked as any other sentence.
"""

from __future__ import annotations

import re

__all__ = ["abstains"]

_SOURCE = (
    r"(?:the|this|that|your|these|those|provided|given|above|available)\s+"
    r"(?:(?:provided|given|supplied|attached|above|available|retrieved|source|shared|reference)\s+)?"
    r"(?:document|documents|source|sources|text|texts|context|passage|passages|article|excerpt|excerpts|"
    r"information|search\s+results|snippets?)"
)
_NEG = r"(?:does\s+not|doesn't|do\s+not|don't|did\s+not|didn't|is\s+not|isn't|are\s+not|aren't|cannot|can't|never)"
_SAY = (
    r"(?:say|says|said|state|states|stated|mention|mentions|mentioned|specify|specifies|specified|give|gives|given|"
    r"provide|provides|provided|contain|contains|include|includes|address|addresses|discuss|discusses|"
    r"indicate|indicates|answer|answers|explain|explains|tell|tells|describe|describes|clarify|clarifies|"
    r"detail|details)"
)
_PATTERNS = [
    # the document does not say / mention / specify ...
    rf"(?:according\s+to\s+)?{_SOURCE}\s+(?:I\s+was\s+given\s+|you\s+(?:provided|gave|shared)\s+)?{_NEG}\s+(?:\w+\s+)?{_SAY}\b",
    # the document says nothing about / is silent on
    rf"{_SOURCE}\s+(?:says|mentions|states|gives|contains)\s+nothing\b",
    rf"{_SOURCE}\s+(?:is|are)\s+silent\b",
    # there is no information / mention / detail about ... (in the document)
    r"there\s+(?:is|are|was|were)\s+no\s+(?:\w+\s+)?(?:information|mention|details?|data|indication|reference|answer|record)\b",
    # no information is given / provided
    r"no\s+(?:\w+\s+)?(?:information|details?|data|mention)\s+(?:is|are|was|were)\s+(?:given|provided|available|included|mentioned|found)\b",
    # ... is not mentioned / specified / stated in the document
    rf"\b(?:is|are|was|were)\s+not\s+(?:\w+\s+)?(?:mentioned|specified|stated|given|provided|addressed|covered|"
    rf"discussed|listed|included|described|explained|indicated)\s+(?:in|by)\s+{_SOURCE}",
    # I could not find / I cannot tell from the document / I don't have that information
    r"\bI\s+(?:could\s+not|couldn't|cannot|can't|can\s+not|was\s+unable\s+to|am\s+unable\s+to|did\s+not|didn't)\s+"
    r"(?:find|locate|see|determine|tell|confirm|answer)\b",
    r"\bI\s+(?:do\s+not|don't)\s+(?:have|see|know)\b",
    r"\bI'm\s+(?:not\s+able|unable)\s+to\s+(?:find|determine|tell|confirm|answer)\b",
    # it is not possible to tell / determine from the document
    r"\b(?:it\s+is|it's)\s+(?:not\s+possible|impossible|unclear)\s+(?:to\s+(?:tell|determine|say|know)\s+)?(?:from|based\s+on|in)\b",
    r"\b(?:it\s+is|it's)\s+not\s+(?:clear|stated|specified|mentioned)\s+(?:from|in|by)\b",
]
_ABSTAINS = re.compile("|".join(f"(?:{p})" for p in _PATTERNS), re.IGNORECASE)
#: where a clause ends and another begins ("...; so there is none", "..., but the fee is ...")
_CLAUSE_END = re.compile(
    r"[;:]\s*|,\s*(?=(?:so|but|therefore|thus|hence|however|which\s+means|although|though|yet|instead)\b)"
    r"|\.\s+(?=\w)|\s+(?=(?:but|however|therefore)\b)",
    re.IGNORECASE,
)
#: a following clause that goes on abstaining about the same source ("...; it does not say how")
_STILL = re.compile(rf"\s*(?:and\s+)?(?:it|they)\s+{_NEG}\s+(?:\w+\s+)?{_SAY}\b", re.IGNORECASE)
#: a few words and a comma before it ("Unfortunately, ", "According to the notice, ")
_PREFACE = re.compile(r"\s*(?:[A-Za-z']+(?:\s+[A-Za-z']+){0,4}\s*,\s*)?")
#: what, before the abstention, would be a statement of its own ("The fee is 20 euros and ...")
_STATES = re.compile(r"\d|[,;:]|\b(?:and|but|while|whereas|although)\b", re.IGNORECASE)


def abstains(sentence: str) -> bool:
    """True when ``sentence`` says the source does not answer, and asserts nothing besides."""
    m = _ABSTAINS.search(sentence)
    if m is None:
        return False
    before = sentence[: m.start()]
    preface = _PREFACE.match(before)
    if _STATES.search(before[preface.end() if preface else 0 :]):
        return False
    end = _CLAUSE_END.search(sentence, m.end())
    while end is not None:  # every clause after it abstains too
        rest = sentence[end.end() :]
        if not rest.strip(" .!?"):
            return True
        again = _ABSTAINS.match(rest) or _STILL.match(rest)
        if again is None:
            return False
        end = _CLAUSE_END.search(rest, again.end())
        sentence = rest
    return True
