"""One sentence splitter for responses and contexts, with character offsets.

Why our own: evidence is reported as offsets into the caller's text, so every sentence must map back
to an exact ``[start, end)`` slice, and the split must not depend on a language model or a download.
The rules, in order:

1. **Hard breaks**: a blank line, a line that starts a list item (``-``, ``*``, ``•``, ``1.``,
   ``2)``, ``a)``), a line after one that ends in ``.!?:;`` or a line that is a heading-like fragment
   ends a sentence. A single newline inside running text (hard-wrapped prose whose next line starts
   in lower case) does not.
2. **Terminators**: ``.``, ``!``, ``?`` (and runs like ``?!`` or ``...``), optionally followed by
   closing quotes/brackets, then whitespace, then something that can start a sentence (an upper-case
   letter, a digit, a quote, an opening bracket, a currency sign).
3. **Not a terminator**: the period of a known abbreviation (``Dr.``, ``e.g.``, ``U.S.``, ``Jan.``
   ...), of a single-letter initial (``J. K. Rowling``), of a list number at the start of a line, or
   inside a number (``3.14``, ``$1.5 million``: no whitespace follows, so no break).
4. List markers are not part of the sentence; pieces without a letter or digit are dropped.

Offsets are into the original text; ``text[start:end] == sentence.text`` always holds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["TextSpan", "split_sentences", "ABBREVIATIONS"]

#: lower-case, without the final period; dotted forms are matched on the token before the period
ABBREVIATIONS = frozenset(
    """
    mr mrs ms dr prof sr jr st mt ft vs v no nos fig figs approx ca cf al gen gov sen rep col lt sgt capt cmdr
    adm maj rev hon pres supt dept univ assn bros inc ltd co corp plc llc jan feb mar apr jun jul aug sep sept
    oct nov dec mon tue tues wed thu thur thurs fri sat sun e.g i.e a.m p.m u.s u.k u.n e.u u.s.a d.c n.y l.a
    ph.d m.d b.a m.a b.sc m.sc op vol vols pp ed eds est dist ave blvd rd mgr
    """.split()
)

_LIST_MARKER = re.compile(r"[ \t]*(?:[-*\u2022\u2023\u25e6\u2043\u2219>]+|\(?\d{1,3}[.)]|\(?[a-zA-Z][.)](?=\s))[ \t]+")
_TERMINATOR = re.compile(r"[.!?\u2026]+[\"'\u201d\u2019)\]]*(?=\s)")
_STARTER = re.compile(r"[\"'\u201c\u2018(\[$\u00a3\u20ac\d]|[^\W\d_]")
_HAS_WORD = re.compile(r"[^\W_]")
_TOKEN_BEFORE = re.compile(r"(\S+)$")


@dataclass(frozen=True)
class TextSpan:
    """A slice of a text: ``text == source[start:end]``."""

    start: int
    end: int
    text: str

    def to_dict(self) -> dict:
        return {"start": self.start, "end": self.end, "text": self.text}


def _is_abbreviation(before: str) -> bool:
    """``before`` is the text up to (not including) a period."""
    m = _TOKEN_BEFORE.search(before)
    if not m:
        return False
    token = m.group(1).lstrip("\"'(\u201c\u2018[").lower()
    if not token:
        return False
    if token in ABBREVIATIONS:
        return True
    if len(token) == 1 and token.isalpha():  # an initial: "J. K. Rowling"
        return True
    if re.fullmatch(r"(?:[a-z]\.)+[a-z]", token):  # dotted acronyms not in the list: "f.b.i"
        return True
    return False


def _lines(text: str) -> list[tuple[int, int]]:
    """``[start, end)`` of each line, newlines excluded (\\n, \\r\\n, \\r, U+2028/2029)."""
    out, start = [], 0
    for m in re.finditer(r"\r\n|[\n\r\u2028\u2029]", text):
        out.append((start, m.start()))
        start = m.end()
    out.append((start, len(text)))
    return out


def _blocks(text: str) -> list[tuple[int, int]]:
    """Join lines into blocks that may hold several sentences but never cross a hard break."""
    blocks: list[tuple[int, int]] = []
    cur: tuple[int, int] | None = None
    for start, end in _lines(text):
        line = text[start:end]
        if not line.strip():
            if cur:
                blocks.append(cur)
            cur = None
            continue
        marker = _LIST_MARKER.match(line)
        if marker and _HAS_WORD.search(line[marker.end() :]):
            if cur:
                blocks.append(cur)
            cur = (start + marker.end(), end)
            continue
        stripped = line.lstrip()
        continues = (
            cur is not None
            and not text[cur[0] : cur[1]].rstrip().endswith((".", "!", "?", ":", ";", "\u2026"))
            and stripped[:1].islower()
        )
        if continues:
            cur = (cur[0], end)  # type: ignore[index]
        else:
            if cur:
                blocks.append(cur)
            cur = (start + len(line) - len(stripped), end)
    if cur:
        blocks.append(cur)
    return blocks


def _trimmed(text: str, start: int, end: int) -> TextSpan | None:
    piece = text[start:end]
    lead = len(piece) - len(piece.lstrip())
    piece = piece.strip()
    if not piece or not _HAS_WORD.search(piece):
        return None
    return TextSpan(start + lead, start + lead + len(piece), piece)


def split_sentences(text: str) -> list[TextSpan]:
    """The sentences of ``text`` (see the module docstring for the rules), in order, with offsets."""
    spans: list[TextSpan] = []
    for b_start, b_end in _blocks(text):
        block = text[b_start:b_end]
        cut = 0
        for m in _TERMINATOR.finditer(block):
            after = block[m.end() :].lstrip()
            if not after or not _STARTER.match(after):
                continue
            if (
                block[m.start()] == "."
                and m.group(0).rstrip("\"'\u201d\u2019)]") == "."
                and _is_abbreviation(block[cut : m.start()])
            ):
                continue
            span = _trimmed(text, b_start + cut, b_start + m.end())
            if span:
                spans.append(span)
            cut = m.end()
        span = _trimmed(text, b_start + cut, b_end)
        if span:
            spans.append(span)
    return spans
