"""Content words, numbers, dates and names of a sentence, and which of them a source lacks.

Why: an embedding says a sentence is *about* the same thing as a passage; it barely notices that
"$181 million" became "$118 million" or that a new name appeared. Checking the sentence's content
tokens against the source's is the cheap, exact complement. Normalisation, so that formatting never
counts as new content:

- case and punctuation are ignored; ``$181,674,817`` = ``181,674,817`` = ``181674817``;
  ``3.50`` = ``3.5``; ``25%`` = ``25``; small number words match digits (``three`` = ``3``);
- words are compared on their Snowball stem (``grossed`` = ``grosses`` = ``gross``; ``films`` =
  ``film``; ``using`` = ``use``), so inflection is not new content;
- stop words (articles, pronouns, auxiliaries, common prepositions), words about the text itself
  ("the passage describes ...") and one-letter words are not content.

Each content token gets a kind: ``number`` (digits, number words), ``date`` (month names and
four-digit years), ``name`` (a capitalised word that is not the first word of its sentence) or
``word``. Nothing here is a judgement of truth: an absent token is a claim the source does not
state, which a reviewer should look at.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from groundlens_core.evidence.lemmas import stem
from groundlens_core.scoring.results import TokenSpan

__all__ = ["ContentToken", "content_tokens", "source_keys", "STOP_WORDS", "DISCOURSE_WORDS"]

STOP_WORDS = frozenset(
    """
    a an the and or but nor so yet if then than that this these those there here it its it's itself they them
    their theirs themselves he him his himself she her hers herself we us our ours ourselves you your yours i me my
    mine who whom whose which what when where why how all any both each few more most other some such only own same
    too very can could will would shall should may might must do does did done doing be been being is are was were
    am has have had having not no yes as at by for from in into of off on onto out over under up down to with
    within without about above below after before between through during against among across along around
    upon per via also just again further once while because until although though whether either neither
    s t d ll m re ve don doesn didn isn aren wasn weren hasn haven hadn wouldn shouldn couldn can't
    one's someone something anything everything nothing
    """.split()
)

#: words that talk about the text rather than the world ("The passage describes ..."): a summary's
#: framing is not a claim about its source, so it is not content either
DISCOURSE_WORDS = frozenset(
    """
    passage text article document source summary summarize summarizes summarized summarise summarises
    summarised concise brief briefly overview information info detail details key core main point points
    piece pieces describe describes described mention mentions mentioned discuss discusses discussed
    provide provides provided cover covers covering highlight highlights highlighted state states stated
    note notes noted here here's below above following according additionally furthermore moreover however
    overall specifically
    """.split()
)
#: "in short", "in brief", "in sum", "in conclusion": framing, when the word follows "in"
_AFTER_IN = frozenset({"short", "brief", "sum", "conclusion", "summary", "essence", "addition", "particular", "total"})

NUMBER_WORDS = {
    "zero": "0",
    "one": "1",
    "two": "2",
    "three": "3",
    "four": "4",
    "five": "5",
    "six": "6",
    "seven": "7",
    "eight": "8",
    "nine": "9",
    "ten": "10",
    "eleven": "11",
    "twelve": "12",
    "twenty": "20",
    "thirty": "30",
    "forty": "40",
    "fifty": "50",
    "hundred": "100",
    "first": "1",
    "second": "2",
    "third": "3",
    "once": "1",
    "twice": "2",
    "single": "1",
    "double": "2",
    "dozen": "12",
}
MONTHS = frozenset("january february march april may june july august september october november december".split())

# a number: optional currency, digits with thousands separators and a decimal part, optional %;
# or a word. Apostrophes inside words are kept ("o'neill"), a trailing possessive is dropped.
_TOKEN = re.compile(r"(?:[$\u00a3\u20ac\u00a5][ \t]?)?\d+(?:,\d{3})*(?:\.\d+)?%?|[^\W\d_]+(?:['\u2019][^\W\d_]+)*")


def _number_key(raw: str) -> str:
    digits = re.sub(r"[^\d.]", "", raw)
    if "." in digits:
        digits = digits.rstrip("0").rstrip(".")
    return "#" + (digits.lstrip("0") or "0")


@dataclass(frozen=True)
class ContentToken(TokenSpan):
    """One content token of a sentence: its span in the text and its normalised ``key``."""

    key: str


def content_tokens(text: str, offset: int = 0) -> list[ContentToken]:
    """The content tokens of ``text`` (one sentence); offsets are shifted by ``offset``."""
    out: list[ContentToken] = []
    first_word = True
    previous = ""
    for m in _TOKEN.finditer(text):
        raw = m.group(0)
        start, end = m.start() + offset, m.end() + offset
        if raw[0].isdigit() or raw[0] in "$\u00a3\u20ac\u00a5":
            kind = "date" if re.fullmatch(r"1[5-9]\d\d|20\d\d", raw) else "number"
            out.append(ContentToken(raw, kind, start, end, _number_key(raw)))
            first_word = False
            continue
        low = raw.lower().replace("\u2019", "'")
        is_first, first_word = first_word, False
        after_in, previous = previous == "in", low
        if after_in and low in _AFTER_IN:
            continue
        if low in NUMBER_WORDS:
            out.append(ContentToken(raw, "number", start, end, "#" + NUMBER_WORDS[low]))
            continue
        if low in STOP_WORDS or low in DISCOURSE_WORDS or len(low) < 2:
            continue
        if low in MONTHS:
            kind = "date"
        elif raw[0].isupper() and not is_first:
            kind = "name"
        else:
            kind = "word"
        out.append(ContentToken(raw, kind, start, end, stem(low)))
    return out


def source_keys(text: str) -> frozenset[str]:
    """Every key a source text supplies: what :func:`content_tokens` would produce, plus stop-listed
    number words, so that a response's token is 'present' exactly when the source states it."""
    keys = {t.key for t in content_tokens(text)}
    return frozenset(keys)
