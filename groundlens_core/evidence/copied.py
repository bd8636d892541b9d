"""A response sentence that copies a context sentence with one thing changed.

Why: an answer often repeats a sentence of its source word for word and changes one thing — a year,
a name, "most" into "all", "can" into "must", one more item in a list. The value checks
(:mod:`groundlens_core.evidence.factcheck`) see a value the source gives somewhere and the word checks see
words the source uses, so such an answer passes them. Read against the sentence it copies, the
change is plain. Each check here is one word (or a few) of the response aligned, by
:class:`difflib.SequenceMatcher`, with the words the copied sentence has in their place:

- :func:`swapped_numbers`: one number in place of another ("In February 1947" against "In February
  1948"), not one written in another unit, off by a conversion factor (0.48 and 48), moved to
  another place of the sentence, nor one beside a changed unit or rate (a value worked out);
- :func:`swapped_name`: a name in place of another the response leaves out ("developed by Gatsby"
  against "developed by Fox"), not a shortened name, an acronym or a reordering;
- :func:`scope_changes`: another scope ("all" against "most", "must" against "can", "may" against
  "must"), not a prohibition ("must not" and "may not" forbid alike) nor a superlative ("the most");
- :func:`added_items`: an item added inside one of the sentence's lists whose words the context and
  the question do not use, not a phrase after the list ("in total", "among others").

A sentence *copies* a context sentence when it shares the most words with it (numbers and months
included, so "In 2020 the company had 150 employees" copies the 2020 sentence, not the 2019 one) and
their word sequences match at :data:`COPY_RATIO` or more. Long sentences are not aligned
(:data:`MAX_TOKENS`): the alignment's cost grows with the square of their length.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from functools import cached_property, lru_cache
from itertools import islice
from typing import Sequence

from groundlens_core.evidence.analysed import CopyToken, analysed
from groundlens_core.evidence.sentences import TextSpan
from groundlens_core.evidence.units import UNITS
from groundlens_core.evidence.word_index import WordIndex

__all__ = [
    "Copy",
    "COPY_RATIO",
    "sentence_words",
    "find_copy",
    "swapped_numbers",
    "swapped_name",
    "scope_changes",
    "added_items",
]

COPY_RATIO = 0.6  # the share of both sentences' words the alignment must match
MAX_TOKENS = 150  # sentences longer than this many words are not aligned
MIN_TOKENS = 4

_NUMBER = re.compile(r"\d+(?:[.,:]\d+)*")
#: a number written as another by one of these factors is a conversion, not a swap
_FACTORS = (10.0, 12.0, 24.0, 60.0, 100.0, 1000.0, 3600.0)


@dataclass(frozen=True)
class Copy:
    """A response sentence aligned with the context sentence it copies. Offsets are into the
    response sentence (``mine``) and into the context sentence (``theirs``)."""

    index: int  # the context sentence's index
    source: str  # the context sentence
    mine: tuple[CopyToken, ...]
    theirs: tuple[CopyToken, ...]
    opcodes: tuple[tuple[str, int, int, int, int], ...]

    @cached_property
    def words(self) -> tuple[list[str], list[str]]:
        """The response's and the context sentence's words, lower-cased (read by every check)."""
        return _lowered(self.mine), _lowered(self.theirs)


def _lowered(tokens: Sequence[CopyToken]) -> list[str]:
    return [w.lower().replace("\u2019", "'") for w, _, _ in tokens]


def sentence_words(sentences: Sequence[str] | Sequence[TextSpan]) -> WordIndex:
    """The context sentences indexed by their lower-cased words (computed once per context): the
    sentence a response sentence copies is found without comparing it with every sentence. Analysed
    sentences (:mod:`.analysed`) give the words they carry; texts are tokenised here."""
    return WordIndex([dict.fromkeys(analysed(s).copy_words, 1.0) for s in sentences])


@lru_cache(maxsize=512)
def _align(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[float, tuple[tuple[str, int, int, int, int], ...]]:
    """The alignment of two sentences' lower-cased words (kept: a pair recurs across a batch)."""
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    return matcher.ratio(), tuple(matcher.get_opcodes())


def find_copy(text: str | TextSpan, sentences: Sequence[str] | Sequence[TextSpan], words: WordIndex) -> Copy | None:
    """The context sentence ``text`` copies, aligned with it; None when none does. Analysed sentences
    (:mod:`.analysed`) are read with the words they carry, so a sentence is tokenised once."""
    me = analysed(text)
    mine = me.copy_tokens
    if not (MIN_TOKENS <= len(mine) <= MAX_TOKENS) or not sentences:
        return None
    own = dict.fromkeys(me.copy_words, 1.0)
    top = words.top(own)
    if top.best < COPY_RATIO * len(own) / 2:  # cannot reach the ratio
        return None
    scored = []
    for j in islice(top, 3):  # the sentences sharing the most distinct words, the first three
        source = analysed(sentences[j])
        theirs = source.copy_tokens
        if not (MIN_TOKENS <= len(theirs) <= MAX_TOKENS):
            continue
        ratio, opcodes = _align(me.copy_words, source.copy_words)
        scored.append((ratio, -j, j, theirs, opcodes))
    if not scored:
        return None
    ratio, _, j, theirs, opcodes = max(scored)
    if ratio < COPY_RATIO:
        return None
    return Copy(j, analysed(sentences[j]).text, mine, theirs, opcodes)


def _as_number(token: str) -> float | None:
    if not _NUMBER.fullmatch(token) or ":" in token:
        return None
    try:
        return float(token.replace(",", ""))
    except ValueError:
        return None


def _one_for_one(copy: Copy) -> list[tuple[int, int]]:
    """(response word, context word) indexes replaced one for one."""
    return [(i1, j1) for op, i1, i2, j1, j2 in copy.opcodes if op == "replace" and i2 - i1 == 1 and j2 - j1 == 1]


def swapped_numbers(copy: Copy) -> list[tuple[int, int, str]]:
    """Each number of the response put in place of another of the copied sentence: its offsets in
    the response sentence and what the source says there (the number, with its unit when the
    response keeps that unit)."""
    a, b = copy.words
    # a unit or a rate changed elsewhere in the sentence ("70 euros per week" for "10 euros per
    # day"): a value worked out from the source's, which the fact checks read
    units_changed = any(
        w in UNITS or w == "per" for op, i1, i2, j1, j2 in copy.opcodes if op != "equal" for w in a[i1:i2] + b[j1:j2]
    )
    out = []
    for i, j in _one_for_one(copy):
        x, y = _as_number(a[i]), _as_number(b[j])
        if x is None or y is None or x == y or units_changed:
            continue
        if (
            x
            and y
            and any(abs(x * f - y) < 1e-9 * max(1.0, y) or abs(y * f - x) < 1e-9 * max(1.0, x) for f in _FACTORS)
        ):
            continue
        if b[j] in a or int(x) == int(y):  # a reordering ("at 10 ... at 9"), or "2 hours and 30 minutes" for 2.5
            continue
        end = copy.theirs[j][2]
        if i + 1 < len(a) and j + 1 < len(b) and a[i + 1] == b[j + 1] and b[j + 1] in UNITS:
            end = copy.theirs[j + 1][2]  # "10 dollars"
        out.append((copy.mine[i][1], copy.mine[i][2], copy.source[copy.theirs[j][1] : end]))
    return out


#: a capitalised word that is no name: a pronoun or a determiner opening a clause
_NOT_NAMES = frozenset(
    "i he she it we they you his her its our their this that these those the a an there here mr mrs ms dr".split()
)


def _named(tokens: Sequence[CopyToken]) -> set[int]:
    """Capitalised words of two or more letters, the sentence's first word excepted ("°C" and "Plan
    A" name no one)."""
    return {
        k
        for k, (w, _, _) in enumerate(tokens)
        if w[:1].isupper() and k > 0 and len(w) > 1 and w.lower() not in _NOT_NAMES
    }


def _acronym(text: str) -> bool:
    letters = re.sub(r"[^A-Za-z]", "", text)
    return len(letters) >= 2 and letters.isupper()


def swapped_name(copy: Copy) -> tuple[int, int, str] | None:
    """A name the response puts where the copied sentence has another one the response leaves out
    (or one the sentence does not use): its offsets in the response sentence and the source's name."""
    a, b = copy.words
    named_mine, named_theirs = _named(copy.mine), _named(copy.theirs)
    said, kept = set(b), set(a)
    for op, i1, i2, j1, j2 in copy.opcodes:
        if op != "replace" or i2 - i1 > 3 or j2 - j1 > 3:
            continue
        old = [k for k in range(j1, j2) if k in named_theirs]
        # not a reordering ("Gatsby is accused by Tom"): the source's name is gone from the response
        dropped = bool(old) and all(b[k] not in kept for k in old)
        new = [k for k in range(i1, i2) if k in named_mine and (a[k] not in said or dropped)]
        if not new or not old:
            continue
        old_text = copy.source[copy.theirs[old[0]][1] : copy.theirs[old[-1]][2]]
        new_text = " ".join(w for w, _, _ in copy.mine[new[0] : new[-1] + 1])
        if new_text.lower() in old_text.lower() or old_text.lower() in new_text.lower():
            continue  # "Smith" for "John Smith"
        if _acronym(new_text) or _acronym(old_text):  # "USA" for "United States", "WWII"
            continue
        return copy.mine[new[0]][1], copy.mine[new[-1]][2], old_text
    return None


_SCOPE_CLASSES: dict[str, frozenset[str]] = {
    "universal": frozenset(
        "all every always everyone everybody everything everywhere entire entirely completely invariably".split()
    ),
    "partial": frozenset(
        "some most many several usually often sometimes generally typically mostly partly partially frequently "
        "occasionally commonly rarely".split()
    ),
    "necessary": frozenset("must required mandatory obligatory".split()),
    "possible": frozenset("can may might could optional possibly".split()),
}
_OPPOSITE = {"universal": "partial", "partial": "universal", "necessary": "possible", "possible": "necessary"}
_NEGATED_AFTER = frozenset({"not", "never", "no"})


def _scope_class(words: Sequence[str], k: int) -> str | None:
    """The scope class of word ``k``, None when it has none here: a negated modal ("must not", "can't",
    "cannot") forbids whatever the modal, and "the most" is a superlative."""
    w = words[k]
    if w.endswith("n't") or w == "cannot":
        return None
    cls = next((c for c, ws in _SCOPE_CLASSES.items() if w in ws), None)
    if cls is None:
        return None
    nxt = words[k + 1] if k + 1 < len(words) else ""
    if cls in ("necessary", "possible") and nxt in _NEGATED_AFTER:
        return None
    if w == "most" and k > 0 and words[k - 1] in ("the", "a"):
        return None
    if cls == "possible" and nxt == "only":  # "may only be handled in": a requirement
        return "necessary"
    return cls


def scope_changes(copy: Copy) -> list[tuple[int, int, str]]:
    """Each scope word of the response put in place of a word of the opposite scope in the copied
    sentence: its offsets in the response sentence and the source's word."""
    a, b = copy.words
    out = []
    for op, i1, i2, j1, j2 in copy.opcodes:
        if op != "replace" or i2 - i1 > 3 or j2 - j1 > 3:  # "Yes, all residents" for "Most residents"
            continue
        theirs = {c: k for k in range(j1, j2) if (c := _scope_class(b, k)) is not None}
        for i in range(i1, i2):
            mine = _scope_class(a, i)
            if mine is not None and mine not in theirs and _OPPOSITE[mine] in theirs:
                out.append((copy.mine[i][1], copy.mine[i][2], copy.theirs[theirs[_OPPOSITE[mine]]][0]))
                break
    return out


_LIST_JOIN = frozenset({"and", "or"})
#: what opens a phrase between commas that is no item: a hedge or an aside ("for example", "per the
#: manual", "as listed", "if you prefer", "in total")
_ASIDE = frozenset(
    "for per as if in of e.g i.e eg ie say perhaps possibly alternatively notably especially particularly "
    "including such namely respectively amongst among etc that which".split()
)


def added_items(copy: Copy, text: str, known_stem: set[str], stems_of) -> list[tuple[int, int]]:  # type: ignore[no-untyped-def]
    """Items the response adds inside one of the copied sentence's lists ("a tamper, a milk jug, a
    descaling kit and two filter baskets" against "a tamper, a milk jug and two filter baskets"),
    whose content stems (``stems_of``) are not in ``known_stem``: their offsets in ``text`` (the
    response sentence). An item sits between two list separators (a comma, "and", "or"), or ends the
    list when the response moved the source's "and"/"or" before it."""
    a, b = copy.words
    if not ("," in copy.source or _LIST_JOIN & set(b)):
        return []
    moved = sum(w in _LIST_JOIN for w in a) == sum(w in _LIST_JOIN for w in b)
    out = []
    for op, i1, i2, _, _ in copy.opcodes:
        if op != "delete" or i2 - i1 > 3:  # words of the response the copied sentence lacks
            continue
        start, end = copy.mine[i1][1], copy.mine[i2 - 1][2]
        before, after = text[:start].rstrip(), text[end:].lstrip()
        opens = before.endswith(",") or a[i1] in _LIST_JOIN
        closes = after.startswith(",") or (i2 < len(a) and a[i2] in _LIST_JOIN)
        ends_list = a[i1] in _LIST_JOIN and moved and (not after or after[:1] in ".;!?")
        if not (opens and (closes or ends_list)):
            continue
        first = a[i1 + 1] if a[i1] in _LIST_JOIN and i2 - i1 > 1 else a[i1]
        if first in _ASIDE or any(_NUMBER.fullmatch(w) for w in a[i1:i2]):
            continue
        if stems_of(text[start:end]) - known_stem:
            out.append((start, end))
    return out
