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
    r"(?:the|this|that|these|those|provided|given|above|available)\s+"
    r"(?:(?:provided|given|supplied|attached|above|available|retrieved|source|shared|reference)\s+)?"
    r"(?:document|documents|source|sources|text|texts|context|passage|passages|article|excerpt|excerpts|"
    r"information|search\s+results|snippets?)"
)
_NEG = r"(?:does\s+not|doesn't|do\s+not|don't|did\s+not|didn't|is\s+not|isn't|are\s+not|aren't|cannot|can't|never)"
#: verbs that say what a text states, whatever follows
_SAY = (
    r"(?:say|says|said|state|states|stated|mention|mentions|mentioned|specify|specifies|specified|address|"
    r"addresses|discuss|discusses|indicate|indicates|answer|answers|explain|explains|tell|tells|describe|"
    r"describes|clarify|clarifies|detail|details)"
)
#: verbs that say so only with information as their object ("does not give the price", not "does not
#: give access", "does not contain lead")
_GIVE = r"(?:give|gives|given|provide|provides|provided|contain|contains|include|includes|offer|offers|list|lists)"
_INFO = (
    r"(?:[\w'-]+\s+){0,3}?"
    r"(?:information|info|details?|figures?|numbers?|answers?|dates?|times?|prices?|pricing|costs?|fees?|rates?|"
    r"amounts?|reasons?|explanation|specifics|data|indication|mention|breakdown|address|schedule|hours|deadline|"
    r"that|this|it|anything)\b"
)
#: what may follow "there is no information" or "no details are given" for it to be about the text
_ABOUT = (
    r"(?=\s+(?:about|on|regarding|concerning|of|to|as\s+to|for|in\s+the|in\s+this|from\s+the|here)\b|\s*[.!?]?\s*$)"
)
_PATTERNS = [
    # the document does not say / mention / specify ..., does not give the price
    rf"(?:according\s+to\s+)?{_SOURCE}\s+(?:I\s+was\s+given\s+|you\s+(?:provided|gave|shared)\s+)?{_NEG}\s+"
    rf"(?:\w+\s+)?(?:{_SAY}\b|{_GIVE}\s+{_INFO})",
    # the document says nothing about / is silent on
    rf"{_SOURCE}\s+(?:says|mentions|states|gives|contains)\s+nothing\b",
    rf"{_SOURCE}\s+(?:is|are)\s+silent\b",
    # there is no information / mention / detail about ... (in the document)
    rf"there\s+(?:is|are|was|were)\s+no\s+(?:\w+\s+)?(?:information|mention|details?|reference|data){_ABOUT}",
    # no information is given / provided
    rf"no\s+(?:\w+\s+)?(?:information|details?|mention)\s+(?:is|are|was|were)\s+"
    rf"(?:given|provided|available|included|mentioned|found){_ABOUT}",
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
    r"[;:]\s*|,\s*(?=(?:so|but|therefore|thus|hence|however|which|although|though|yet|instead)\b)"
    r"|\.\s+(?=\w)|\s+(?=(?:but|however|therefore)\b)"
    # "... does not mention a discount and a ticket costs 20 euros": another statement, with its verb
    r"|,?\s+and\s+(?=(?:a|an|the|it|its|they|their|there|this|that|these|you|your|we|our|he|she|\d)\b"
    r"[^,;.]*?\b(?:is|are|was|were|cost|costs|has|have|had|will|can|must|should|opens?|closes?|takes?|runs?|"
    r"starts?|ends?|needs?|includes?|requires?|lasts?|applies|apply)\b)",
    re.IGNORECASE,
)
#: a following clause that goes on abstaining about the same source ("...; it does not say how")
_STILL = re.compile(rf"\s*(?:and\s+)?(?:it|they)\s+{_NEG}\s+(?:\w+\s+)?{_SAY}\b", re.IGNORECASE)
#: an embedded question after the abstention: an "and" inside it joins its parts
_ASKS = re.compile(r"\s+(?:whether|if|how|what|when|where|who|whom|which|why)\b", re.IGNORECASE)
#: a few words and a comma before it ("Unfortunately, ", "According to the notice, ")
_PREFACE = re.compile(
    r"\s*(?:[A-Za-z']+(?:\s+[A-Za-z']+){0,4}\s*,\s*)?(?:(?:but|however|unfortunately|sadly),?\s+)?", re.I
)
#: what, before the abstention, would be a statement of its own ("The fee is 20 euros and ...")
_STATES = re.compile(r"\d|[,;:]|\b(?:and|but|while|whereas|although)\b", re.IGNORECASE)


def abstains(sentence: str) -> bool:
    """True when ``sentence`` says the source does not answer, and asserts nothing besides."""
    sentence = sentence.replace("\u2019", "'").replace("\u2018", "'")  # "doesn’t" as written by most models
    m = _ABSTAINS.search(sentence)
    if m is None:
        return False
    before = sentence[: m.start()]
    preface = _PREFACE.match(before)
    if _STATES.search(before[preface.end() if preface else 0 :]):
        return False
    end = _CLAUSE_END.search(sentence, m.end())
    if _ASKS.match(sentence, m.end()):  # "... does not say whether parking and the cafe are free"
        while end is not None and end.group(0).strip(" ,").lower() == "and":
            end = _CLAUSE_END.search(sentence, end.end())
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
