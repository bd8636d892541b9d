"""Check each fact of a response against the facts its context states about the same thing.

The rule (one parameter-free comparison, so that it can be explained to a reviewer):

1. The context's facts of the same dimension are the *candidates* ("25%" competes with every
   percentage in the context; "2 weeks" with every duration, "14 days" included).
2. Each candidate's *anchor* is the set of content words of its clause (the words around it up to
   a comma, semicolon, bracket or a "but"/"unless"/"while"); the response fact has one too. The
   candidates whose anchors share the most words with the response fact's anchor are the ones the
   context states *about the same thing*.
3. The fact is **supported** when one of those best-anchored candidates has the same value. It is
   **contradicted** when they all state another value (the explanation names it: "25% — the source
   says 15%"), including when the same value appears elsewhere in the context about something else
   ("14 days" of a renewal reminder is no support for a 14-day refund window). It is **unsupported**
   when the context states nothing of that dimension at all.

A bare count ("3 attempts") with no count in the context is supported when the context states the
same number in any form; a name is supported when its words occur in the context. Names compete
only with context names that share a word with them ("Volta World Pass" against "Volta Boost").
"""

from __future__ import annotations

import bisect
import dataclasses
import re
from collections import Counter
from dataclasses import dataclass, field
from itertools import islice
from typing import Callable, Collection, Iterator, Sequence, cast

from groundlens_core.evidence.analysed import analysed
from groundlens_core.evidence.claims import ContextClaims, check_claims, context_claims, copies_of
from groundlens_core.evidence.content import STOP_WORDS, ContentToken, content_tokens
from groundlens_core.evidence.copied import Copy, swapped_name, swapped_numbers
from groundlens_core.evidence.derive import CUE, POOL, derivable, derivation
from groundlens_core.evidence.facts import MONTHS, UNITS, Fact, blank_controls, extract_facts
from groundlens_core.evidence.sentences import TextSpan
from groundlens_core.evidence.word_index import Top, WordIndex
from groundlens_core.scoring.results import FactFinding

__all__ = ["ContextFacts", "context_facts", "check_facts"]

_CLAUSE_BREAK = re.compile(
    r"[;()\[\]\u2013\u2014]|[,:](?=\s)|\s-\s|\b(?:but|unless|while|whereas|although|though|except)\b", re.I
)
_JOIN = re.compile(r"\b(?:and|or)\b", re.I)
_NOT_ANCHOR = frozenset(UNITS) | frozenset(MONTHS) | {"per", "cent", "percent", "o'clock"}
_NOT_ANCHOR |= {"but", "unless", "while", "whereas", "although", "though", "except"}


@dataclass(frozen=True)
class _Mention:
    fact: Fact
    anchor: dict[str, float]
    slot: dict[str, float] | None = None  # the anchor less a duration's measured noun (see _slot_anchor)


#: the words that say whose a value is, and which of them are names (see _slot_anchor)
_Slot = tuple[dict[str, float], frozenset[str]]
_MEASURE = re.compile(r"\s+of\s+((?:[^\W\d_]+\s+){0,2}[^\W\d_]+)")


def _slot_anchor(fact: Fact, anchor: dict[str, float], sentence: str, offset: int, names: frozenset[str]) -> _Slot:
    """The words that say *whose* value a fact is: its anchor less the noun a duration measures
    ("30 days of paid leave": interns' or staff's, not "paid leave"), and which of them are names
    (``names``: those of the sentence, :attr:`~.analysed.AnalysedSentence.names`)."""
    names = names & frozenset(anchor)
    if fact.dim not in ("duration", "month"):
        return anchor, names
    m = _MEASURE.match(sentence, fact.end - offset)
    if not m:
        return anchor, names
    measured = {t.key for t in content_tokens(m.group(1))}
    return {k: w for k, w in anchor.items() if k not in measured}, names


@dataclass(frozen=True)
class ContextFacts:
    """The facts of one context, each with its anchor; computed once per context."""

    mentions: tuple[_Mention, ...]
    words: frozenset[str]  # every folded word of the context (for names)
    phrases: str  # the context's words, folded, space-separated and padded (for name phrases)
    numbers: frozenset[float]  # every number the context states, in any dimension
    claims: ContextClaims | None = None  # clauses and conditions, for the checks without a number
    initials: frozenset[str] = frozenset()  # initials of runs of capitalised words ("managing director" -> "md")
    acronyms: frozenset[str] = frozenset()  # the abbreviations the context writes in capitals, folded
    groups: dict[tuple, _Group | None] = field(default_factory=dict, compare=False, repr=False)  # by _group_key
    #: the times and dates the context calls off ("the 07:40 departure will not run"), with the clause
    called_off: dict[tuple[str, float | str], str] = field(default_factory=dict, compare=False, repr=False)

    def by_key(self) -> dict[tuple, list[int]]:
        """The mentions by what makes them candidates (see :func:`_candidates`), built once."""
        by = cast("dict[tuple, list[int]] | None", self.groups.get(("by",)))
        if by is None:
            by = {}
            for i, m in enumerate(self.mentions):
                f = m.fact
                keys: list[tuple[str, ...]]
                if f.dim in ("name", "count"):
                    words = str(f.value).split() if f.dim == "name" else f.noun.split()
                    keys = [(f.dim, w) for w in dict.fromkeys(words)]
                elif f.dim == "label":
                    keys = [("label", str(f.value).split()[0])]
                else:
                    keys = [(f.dim,)]
                for key in keys:
                    by.setdefault(key, []).append(i)
            self.groups[("by",)] = by  # type: ignore[assignment]
        return by

    def group(self, fact: Fact) -> _Group | None:
        """The candidates :func:`_candidates` gives ``fact``, indexed once for every fact that has them."""
        key = _group_key(fact)
        if key not in self.groups:
            cands = _candidates(fact, self)
            self.groups[key] = _Group(cands) if cands else None
        return self.groups[key]


#: clauses further than this from a fact do not count in its anchor (their weight would be 1/32 or less)
_ANCHOR_REACH = 4


def _joins_a_range(sentence: str, m: re.Match[str], spans: Sequence[tuple[int, int]]) -> bool:
    """``and`` / ``or`` with nothing but a value on each side ("between 12:30 am and 7:30 am") joins
    the two ends of one range, not two statements."""
    before = any(b <= m.start() and not sentence[b : m.start()].strip() for _, b in spans)
    after = any(a >= m.end() and not sentence[m.end() : a].strip() for a, _ in spans)
    return before and after


def _anchors(
    sentence: str, offset: int, facts: Sequence[Fact], tokens: Sequence[ContentToken] | None = None
) -> list[dict[str, float]]:
    """For each of ``facts`` (the facts of one sentence), the content-word keys of the sentence around
    it, each weighted by nearness: 1 in the fact's own clause, halved for each clause further out
    (up to four). Numbers, amounts and dates are left out; names stay (they say what a value is
    about). A clause ends at a comma, semicolon, colon, bracket or dash, at "but", "unless", "while"
    ..., and at an "and"/"or" with a fact on each side ("21 days and DVDs for 7 days"). Linear in
    the sentence: the cuts and the words are found once, then each fact reads the clauses near it.
    ``tokens``: the sentence's content tokens when its analysed sentence has them already."""
    punct = [m.start() for m in _CLAUSE_BREAK.finditer(sentence)]
    starts = sorted(f.start - offset for f in facts if f.dim != "name")
    cuts = list(punct)
    fact_spans = [(f.start - offset, f.end - offset) for f in facts if f.dim != "name"]
    for m in _JOIN.finditer(sentence):
        if _joins_a_range(sentence, m, fact_spans):
            continue
        k = bisect.bisect_left(punct, m.start())
        before = punct[k - 1] if k else -1
        k_after = bisect.bisect_left(punct, m.end())
        after = punct[k_after] if k_after < len(punct) else len(sentence)
        left = bisect.bisect_left(starts, m.start()) - bisect.bisect_right(starts, before)
        right = bisect.bisect_left(starts, after) - bisect.bisect_left(starts, m.end())
        if left > 0 and right > 0:
            cuts.append(m.start())
    cuts.sort()
    value_spans = sorted((f.start - offset, f.end - offset) for f in facts if f.dim != "name")
    span_starts = [a for a, _ in value_spans]
    by_clause: dict[int, list[tuple[int, str]]] = {}
    for t in content_tokens(sentence) if tokens is None else tokens:
        low = t.text.lower().replace("\u2019", "'")
        if low in _NOT_ANCHOR or low.split("'")[0] in STOP_WORDS:
            continue
        if t.key.startswith("#") and not low.isalpha():  # digits are facts; "first", "second" are words
            continue
        k = bisect.bisect_right(span_starts, t.start) - 1
        if k >= 0 and t.start < value_spans[k][1]:
            continue  # a word of a number, amount or date
        key = low if t.key.startswith("#") else t.key
        by_clause.setdefault(bisect.bisect_left(cuts, t.start), []).append((t.start, key))
    out = []
    for fact in facts:
        lo, hi = fact.start - offset, fact.end - offset
        c_lo, c_hi = bisect.bisect_left(cuts, lo), bisect.bisect_left(cuts, hi)
        weights: dict[str, float] = {}
        for c in range(c_lo - _ANCHOR_REACH, c_hi + _ANCHOR_REACH + 1):
            apart = c_lo - c if c < c_lo else max(0, c - c_hi)
            for pos, key in by_clause.get(c, ()):
                if lo <= pos < hi:
                    continue  # the fact's own words (a name)
                weights[key] = max(weights.get(key, 0.0), 0.5**apart)
        out.append(weights)
    return out


def _overlap(a: dict[str, float], b: dict[str, float]) -> float:
    return sum(w * b[k] for k, w in a.items() if k in b)


#: words an abbreviation leaves out ("Department of Health" is "DH")
_ABBREVIATION_SKIPS = frozenset({"of", "and", "the", "for"})


def _initials(sentence: str) -> set[str]:
    """The initials of every run of two to six capitalised words of a sentence ("the Managing
    Director" -> "md"; "Department of Health" -> "dh")."""
    out: set[str] = set()
    run: list[str] = []
    for w in [*re.findall(r"[^\W\d_]+", sentence), ""]:
        if w[:1].isupper():
            run.append(w[0].lower())
            continue
        if run and w.lower() in _ABBREVIATION_SKIPS:
            continue
        for a in range(len(run)):
            for b in range(a + 2, min(len(run), a + 6) + 1):
                out.add("".join(run[a:b]))
        run = []
    return out


def context_facts(context: str, spans: Sequence[TextSpan]) -> ContextFacts:
    mentions: list[_Mention] = []
    called_off: dict[tuple[str, float | str], str] = {}
    sentences = [analysed(span) for span in spans]  # each tokenised once, for the facts and the claims
    for span in sentences:
        facts = span.facts
        for key, clause in _calls_off(span, facts).items():
            called_off.setdefault(key, clause)
        for f, a in zip(facts, _anchors(span.text, span.start, facts, span.content_tokens)):
            slot, _ = _slot_anchor(f, a, span.text, span.start, span.names)
            mentions.append(_Mention(f, a, slot))
    numbers = {float(x.replace(",", "")) for x in re.findall(r"\d+(?:,\d{3})*(?:\.\d+)?", blank_controls(context))}
    numbers |= {float(m.fact.value) for m in mentions if m.fact.dim == "count"}  # number words
    folded = [w.lower().removesuffix("'s") for w in re.findall(r"[^\W_]+(?:['\u2019][^\W_]+)*", context)]
    initials = frozenset(i for span in sentences for i in _initials(span.text))
    acronyms = frozenset(w.lower() for w in re.findall(r"\b[A-Z]{2,6}\b", context))
    return ContextFacts(
        tuple(mentions),
        frozenset(folded),
        f" {' '.join(folded)} ",
        frozenset(numbers),
        context_claims(sentences),
        initials,
        acronyms,
        called_off=called_off,
    )


_TIME_RATES = frozenset({"second", "minute", "hour", "day", "night", "week", "month", "year"})


def _bounds_disagree(a: str, b: str) -> bool:
    """Two qualifiers that bound a value from opposite sides ("at most" / "at least", "under" / "over"),
    or one that includes the value and one that excludes it from the same side ("no more than" / "less than")."""
    up, down = {"<=", "<"}, {">=", ">"}
    if (a in up and b in down) or (a in down and b in up):
        return True
    return {a, b} in ({"<=", ">"}, {">=", "<"})


def _same_side(a: str, b: str) -> bool:
    """Two bounds from the same side, one inclusive and one not ("more than" / "at least")."""
    return a != b and ({a, b} == {">", ">="} or {a, b} == {"<", "<="})


def _same(a: Fact, b: Fact) -> bool:
    if a.dim == "name":  # "Johnstone" names "Denny Johnstone"; "The Thicket" is "Thicket"
        x, y = str(a.value).split(), str(b.value).split()
        x, y = (x, y) if len(x) <= len(y) else (y, x)
        return any(y[k : k + len(x)] == x for k in range(len(y) - len(x) + 1))
    if isinstance(a.value, str) or isinstance(b.value, str):
        if a.dim == "date":
            x, y = str(a.value).split("-"), str(b.value).split("-")
            return x[:2] == y[:2] and (len(x) < 3 or len(y) < 3 or x[2] == y[2])
        return a.value == b.value
    if a.rate and b.rate and a.rate != b.rate and (a.rate in _TIME_RATES or b.rate in _TIME_RATES):
        return False  # "$18 per rental" is not "$18 per day", "€25 a year" not "€25 a month"
    if _bounds_disagree(a.approx, b.approx):  # "more than 23 kg" against "no more than 23 kg"
        return False
    if _same_side(a.approx, b.approx) and isinstance(a.value, float) and isinstance(b.value, float):
        # "over a year" / "at least 12 months", "more than 12 months" / "at least 13 months": one bound,
        # worded from the same side; a bound moved further than that is a changed limit
        return abs(a.value - b.value) <= 0.1 * max(abs(a.value), abs(b.value))
    if a.approx in _LIMITS and not b.approx and isinstance(a.value, float) and isinstance(b.value, float):
        # "at least 70%", "within 30 days", "up to 48 hours" state a limit: the source's own limit is
        # another one ("80%", "14 days"), however the two compare
        return abs(a.value - b.value) <= 1e-9 * max(1.0, abs(a.value), abs(b.value))
    if a.approx and a.approx != b.approx and isinstance(a.value, float) and isinstance(b.value, float):
        # "more than $160 million" is borne out by $181,674,817; "about 20" by 19 or 21
        if a.value == b.value:
            return a.approx in ("~", "<=", ">=") or not b.approx
        if a.approx in (">", ">="):
            return b.value > a.value
        if a.approx in ("<", "<="):
            return b.value < a.value
        return abs(a.value - b.value) <= 0.1 * max(abs(a.value), abs(b.value))
    if a.dim == "time" and "12h" in (a.noun, b.noun):  # "12:30" without am/pm: either half of the day
        return abs(a.value - b.value) % 720 == 0
    return abs(a.value - b.value) <= 1e-9 * max(1.0, abs(a.value), abs(b.value))


#: bounds that state a limit rather than describe a size ("at least", "at most", "up to", "within")
_LIMITS = frozenset({"<=", ">="})
_NEAR = 1e-6  # the margin of a range of values (a range only narrows what :func:`_same` then decides)
_INF = float("inf")


def _rate_class(rate: str) -> str:
    """What of an amount's rate :func:`_same` reads: none, which unit of time, or some other unit."""
    return rate if not rate or rate in _TIME_RATES else "*"


def _rate_clash(a: str, b_class: str) -> bool:
    """:func:`_same`'s test of two rates, against a class of rates (:func:`_rate_class`)."""
    if not a or not b_class:
        return False
    return a in _TIME_RATES if b_class == "*" else a != b_class


@dataclass
class _Bucket:
    """The distinct values, ascending, of the candidates with one bound, one class of rate and one
    reading of the clock; ``below[k]``: how many candidates hold the values before the k-th."""

    approx: str
    rate: str
    half_day: bool
    values: list[float]
    slots: list[int]
    below: list[int]


class _Values:
    """Candidates by value, so that whether one of them states the same value as a response fact
    (:func:`_same`), or another one, is found without comparing the fact with each. Candidates alike
    in all that :func:`_same` reads share a *slot*, compared once. A number is looked for in the
    range of values of each bucket that could be the same (each then compared), or, on the side of
    a bound ("more than 5": every larger value), taken as a whole. Every candidate outside the
    ranges states another value: numbers and words never compare equal."""

    def __init__(self, facts: Sequence[Fact], ids: Sequence[int]):
        self.n = len(ids)
        slot_of: dict[tuple, int] = {}
        self.reps: list[Fact] = []  # one fact per slot
        self.members: list[list[int]] = []  # the candidates of each slot
        self.slot: dict[int, int] = {}
        for i in ids:
            f = facts[i]
            if type(f.value) is float and f.value == f.value:
                key: tuple = ("f", f.value, f.approx, _rate_class(f.rate), f.noun == "12h")
            elif isinstance(f.value, str):
                key = ("s", self._string_key(f), f.value, f.approx, f.rate, f.noun)
            else:
                key = ("x", i)
            s = slot_of.get(key)
            if s is None:
                s = slot_of[key] = len(self.reps)
                self.reps.append(f)
                self.members.append([])
            self.members[s].append(i)
            self.slot[i] = s
        grouped: dict[tuple[str, str, bool], list[tuple[float, int]]] = {}
        self.strings: dict[str, list[int]] = {}  # the slots of each value in words, by its key
        self.odd: list[int] = []  # slots of neither (compared every time)
        for key, s in slot_of.items():
            if key[0] == "f":
                grouped.setdefault((key[2], key[3], key[4]), []).append((key[1], s))
            elif key[0] == "s":
                self.strings.setdefault(key[1], []).append(s)
            else:
                self.odd.append(s)
        self.all_strings = [s for slots in self.strings.values() for s in slots]
        self.buckets: list[_Bucket] = []
        self.where: dict[int, tuple[int, int]] = {}  # slot -> (bucket, position)
        for (approx, rate, half_day), pairs in grouped.items():
            pairs.sort()
            below = [0]
            for _, s in pairs:
                below.append(below[-1] + len(self.members[s]))
            for pos, (_, s) in enumerate(pairs):
                self.where[s] = (len(self.buckets), pos)
            self.buckets.append(_Bucket(approx, rate, half_day, [v for v, _ in pairs], [s for _, s in pairs], below))

    @staticmethod
    def _string_key(f: Fact) -> str:
        """What a value in words must share to be the same: a date's month and day, a label's text;
        names are compared with every name (their candidates already share a word)."""
        if f.dim == "date":
            return "-".join(str(f.value).split("-")[:2])
        return "" if f.dim == "name" else str(f.value)

    def _ranges(self, fact: Fact) -> list[tuple[int, int, int, bool]]:
        """Disjoint (bucket, start, stop, certain) ranges holding every value that may be the same as
        ``fact``'s: ``certain`` when each value in it is. Mirrors :func:`_same`, branch by branch."""
        va, aa = fact.value, fact.approx
        assert isinstance(va, float)
        out: list[tuple[int, int, int, bool]] = []
        for b, bucket in enumerate(self.buckets):
            vals = bucket.values
            first, last = bisect.bisect_right(vals, -_INF), bisect.bisect_left(vals, _INF)
            if abs(va) == _INF:
                out.append((b, 0, len(vals), False))
                continue
            if _rate_clash(fact.rate, bucket.rate) or _bounds_disagree(aa, bucket.approx):
                continue
            out += [(b, 0, first, False), (b, last, len(vals), False)]  # an infinite value
            near: list[tuple[float, float]]
            if _same_side(aa, bucket.approx) or (aa == "~" and bucket.approx != aa):
                d = 0.12 * abs(va) + _NEAR  # within a tenth of the larger
                near = [(va - d, va + d)]
            elif aa in _LIMITS and not bucket.approx:
                d = 2e-9 * max(1.0, abs(va)) + _NEAR
                near = [(va - d, va + d)]
            elif aa and aa != bucket.approx:
                at, past = bisect.bisect_left(vals, va), bisect.bisect_right(vals, va)
                out.append((b, at, past, False))
                out.append((b, past, last, True) if aa in (">", ">=") else (b, first, at, True))
                continue
            elif fact.dim == "time" and (fact.noun == "12h" or bucket.half_day):
                near = [(va + 720 * k - _NEAR, va + 720 * k + _NEAR) for k in range(-3, 4)]
            else:
                d = 2e-9 * max(1.0, abs(va)) + _NEAR
                near = [(va - d, va + d)]
            for x, y in near:
                out.append((b, max(first, bisect.bisect_left(vals, x)), min(last, bisect.bisect_right(vals, y)), False))
        return [r for r in out if r[2] > r[1]]

    def _looked_at(self, fact: Fact) -> tuple[list[tuple[Sequence[int], bool]], Callable[[int], bool]]:
        """The slots that may hold ``fact``'s value, in runs (with whether each surely does), and a
        test of whether a slot is among them."""
        runs: list[tuple[Sequence[int], bool]]
        if not isinstance(fact.value, float):
            strings = self.all_strings if fact.dim == "name" else self.strings.get(self._string_key(fact), [])
            if isinstance(fact.value, str):
                runs = [(strings, False), (self.odd, False)]
                inside = set(strings) | set(self.odd)
            else:
                runs = [(list(range(len(self.reps))), False)]
                inside = set(range(len(self.reps)))
            return runs, inside.__contains__
        ranges = self._ranges(fact)
        odd = set(self.odd)
        runs = [(_Slice(self.buckets[b].slots, lo, hi), certain) for b, lo, hi, certain in ranges]
        runs.append((self.odd, False))

        def looked(s: int) -> bool:
            if s in odd:
                return True
            b, pos = self.where.get(s, (-1, -1))
            return any(b == rb and lo <= pos < hi for rb, lo, hi, _ in ranges)

        return runs, looked

    def _count(self, fact: Fact) -> int:
        """How many candidates the slots :meth:`_looked_at` gives hold."""
        if not isinstance(fact.value, float):
            runs, _ = self._looked_at(fact)
            return sum(len(self.members[s]) for slots, _ in runs for s in slots)
        below = [self.buckets[b].below[hi] - self.buckets[b].below[lo] for b, lo, hi, _ in self._ranges(fact)]
        return sum(below) + sum(len(self.members[s]) for s in self.odd)

    def _free(self, s: int, skip: Collection[int]) -> bool:
        """Some candidate of slot ``s`` is not in ``skip``."""
        return len(self.members[s]) > sum(1 for i in skip if self.slot.get(i) == s)

    def same(self, fact: Fact, skip: Collection[int] = ()) -> bool:
        """Some candidate outside ``skip`` states ``fact``'s value."""
        runs, _ = self._looked_at(fact)
        return any(
            (certain or _same(fact, self.reps[s])) and self._free(s, skip) for slots, certain in runs for s in slots
        )

    def other(self, fact: Fact, skip: Collection[int] = ()) -> bool:
        """Some candidate outside ``skip`` states another value than ``fact``'s."""
        runs, looked = self._looked_at(fact)
        outside = self.n - self._count(fact) - sum(1 for i in skip if i in self.slot and not looked(self.slot[i]))
        if outside > 0:
            return True
        return any(
            not _same(fact, self.reps[s]) and self._free(s, skip)
            for slots, certain in runs
            if not certain
            for s in slots
        )


@dataclass(frozen=True)
class _Slice(Sequence[int]):
    """``items[start:stop]`` without the copy."""

    items: Sequence[int]
    start: int
    stop: int

    def __len__(self) -> int:
        return self.stop - self.start

    def __getitem__(self, k):  # type: ignore[override]
        if isinstance(k, slice):
            return [self[j] for j in range(*k.indices(len(self)))]
        if not 0 <= k < len(self):
            raise IndexError(k)
        return self.items[self.start + k]

    def __iter__(self) -> Iterator[int]:
        return (self.items[j] for j in range(self.start, self.stop))


def _group_key(fact: Fact) -> tuple:
    """Facts of one key have the same candidates (see :func:`_candidates`)."""
    if fact.dim == "name":
        return ("name", frozenset(str(fact.value).split()))
    if fact.dim == "count":
        return ("count", frozenset(fact.noun.split()))
    if fact.dim == "label":
        return ("label", str(fact.value).split()[0])
    return (fact.dim,)


#: a contradicted fact names at most this many of the values the source gives in its place
SHOWN_VALUES = 6
#: and looks at no more of them than this to find those
_SHOWN_LOOK = 64


class _Group:
    """The candidates of a fact (the context facts it competes with), indexed once for every response
    fact that has them: by anchor word (:class:`WordIndex`), by value (:class:`_Values`), and by the
    own-clause words that single out one of them (:func:`_slot_says`)."""

    def __init__(self, mentions: list[_Mention]):
        self.mentions = mentions
        self.facts = [m.fact for m in mentions]
        owns = [_own(m) for m in mentions]
        counts = Counter(k for o in owns for k in o)
        self.owner = {k: i for i, o in enumerate(owns) for k in o if counts[k] == 1}
        self.anchor_own = [frozenset(k for k, w in m.anchor.items() if w == 1.0) for m in mentions]
        self.words = WordIndex([m.anchor for m in mentions])
        self.values = _Values(self.facts, range(len(mentions)))

    def _rest(self, top: Top) -> tuple[_Values, Counter[str], list[int]]:
        """The value index and own-word counts of the candidates scoring ``top.best`` on common words."""
        memo = self.words.levels_memo(top)
        got = memo.get(top.best)
        if got is None:
            rest = list(top.rest)
            got = memo[top.best] = (
                _Values(self.facts, rest),
                Counter(k for i in rest for k in self.anchor_own[i]),
                rest,
            )
        return got  # type: ignore[return-value]

    def top_same(self, fact: Fact, top: Top) -> bool:
        """One of ``top`` states ``fact``'s value."""
        if any(_same(fact, self.facts[i]) for i in top.touched):
            return True
        return bool(top.rest) and self._rest(top)[0].same(fact, top.skip)

    def top_own_words(self, own: set[str], top: Top) -> int:
        """How many of ``own`` are own-clause words of some candidate of ``top``."""
        found = {k for i in top.touched for k in self.anchor_own[i] if k in own}
        if top.rest:
            _, counts, rest = self._rest(top)
            skipped = [i for i in top.skip if _holds(rest, i)]
            for k in own - found:
                if counts[k] > sum(1 for i in skipped if k in self.anchor_own[i]):
                    found.add(k)
        return len(found)

    def shown(self, top: Top) -> str:
        """What the source says in place of a fact: the values of ``top``, each once, the first few."""
        shown: dict[str, None] = {}
        looked = 0
        for i in top:
            shown.setdefault(_shown(self.facts[i]), None)
            looked += 1
            if len(shown) > SHOWN_VALUES or looked >= _SHOWN_LOOK:
                break
        values = list(shown)
        more = len(values) > SHOWN_VALUES or looked < len(top)
        return "; ".join(values[:SHOWN_VALUES]) + ("; \u2026" if more else "")


def _holds(ascending: Sequence[int], i: int) -> bool:
    k = bisect.bisect_left(ascending, i)
    return k < len(ascending) and ascending[k] == i


def _candidates(fact: Fact, ctx: ContextFacts) -> list[_Mention]:
    """The context facts ``fact`` competes with, in the context's order: those of its dimension; for
    a name, the names sharing a word with it; for a count, the counts of a noun sharing a word ("3
    attempts" competes with other counts of attempts only); for a label, those of its first word."""
    by = ctx.by_key()
    if fact.dim == "name":
        found = {i for w in str(fact.value).split() for i in by.get(("name", w), ())}
    elif fact.dim == "count":
        found = {i for w in fact.noun.split() for i in by.get(("count", w), ())}
    elif fact.dim == "label":
        found = set(by.get(("label", str(fact.value).split()[0]), ()))
    else:
        found = set(by.get((fact.dim,), ()))
    return [ctx.mentions[i] for i in sorted(found)]


#: demonyms whose country shares no four-letter start with them ("French" for "France")
_DEMONYMS = {
    "french": "france", "dutch": "netherlands", "spanish": "spain", "irish": "ireland", "welsh": "wales",
    "british": "britain", "english": "england", "scottish": "scotland", "swiss": "switzerland",
    "greek": "greece", "danish": "denmark", "swedish": "sweden", "finnish": "finland", "polish": "poland",
    "turkish": "turkey", "norwegian": "norway", "thai": "thailand", "filipino": "philippines",
    "peruvian": "peru", "portuguese": "portugal", "belgian": "belgium", "chilean": "chile",
}  # fmt: skip


def _name_word_in(word: str, ctx: ContextFacts) -> bool:
    """``word`` of a name occurs in the context, or is the demonym of a country it names
    ("French" / "France", "Canadian" / "Canada")."""
    if word in ctx.words or (word.endswith("s") and word[:-1] in ctx.words) or word + "s" in ctx.words:
        return True  # "Thursday" / "Thursdays"
    if word in _DEMONYMS:
        return _DEMONYMS[word] in ctx.words
    if word.endswith(("ian", "an", "ese", "ish", "i")) and len(word) >= 6:
        # the country's name less its last letter starts the demonym: "Canad(a)ian", "Ital(y)ian", "Indi(a)an"
        return any(len(w) >= 5 and word.startswith(w[:-1]) and len(word) - len(w) <= 4 for w in ctx.words)
    return False


def _own(m: _Mention) -> set[str]:
    return {k for k, w in (m.slot or m.anchor).items() if w == 1.0}


def _slot_says(fact: Fact, slot: _Slot, group: _Group) -> tuple[str | None, list[_Mention]]:
    """Whose value the response states, judged by its slot: the words of the fact's own clause that
    single out one candidate of the source (in that candidate's own clause and no other's:
    "interns", "Europe"). ``("other", them)`` when they single out candidates with another value at
    least as strongly as any with this value (a name counts twice, and on a tie a name settles it),
    ``("same", [])`` when they single out this value more strongly, else ``(None, [])``. Only the
    candidates a word singles out are looked at one by one; of the rest (each singled out by no
    word, so scoring 0) it is enough to know whether one states this value and one another."""
    own_words, names = {k for k, w in slot[0].items() if w == 1.0}, slot[1]
    found: dict[int, set[str]] = {}
    for k in own_words:
        if (i := group.owner.get(k)) is not None:
            found.setdefault(i, set()).add(k)
    score = {i: sum(2.0 if k in names else 1.0 for k in ks) for i, ks in found.items()}
    named = {i: bool(ks & names) for i, ks in found.items()}
    same = [i for i in sorted(found) if _same(fact, group.facts[i])]
    other = [i for i in sorted(found) if i not in same]
    rest_same, rest_other = group.values.same(fact, found), group.values.other(fact, found)
    if not (same or rest_same) or not (other or rest_other):
        return None, []
    best_same = max([score[i] for i in same] + ([0.0] if rest_same else []))
    best_other = max([score[i] for i in other] + ([0.0] if rest_other else []))
    if best_same > best_other:
        return "same", []
    if best_other <= 0:
        return None, []
    is_named = any(named[i] for i in other if score[i] == best_other)
    if best_other > best_same or (is_named and not any(named[i] for i in same if score[i] == best_same)):
        return "other", [group.mentions[i] for i in other]
    return None, []


def _abbreviation(fact: Fact, ctx: ContextFacts) -> str | None:
    """An abbreviation is no name: "MD" is supported by "Managing Director" (its initials, in either
    direction), and one the source neither writes nor spells out ("VAT", "PIN", "IBAN") is
    ``unverified``, shown and counted in word support, never a flag, unless the source writes
    abbreviations of its own (then it competes with them as a name). Initials are read from runs of
    capitalised words within one sentence. None for any other name."""
    written = fact.text.replace(".", "")
    words = str(fact.value).split()
    if len(words) == 1 and written.isupper() and 2 <= len(written) <= 6 and written.isalpha():
        if words[0] in ctx.words or words[0] in ctx.initials:
            return "supported"
        # one the source has a rival for ("FDA" where it says "EMA") competes as a name does
        return None if ctx.acronyms else "unverified"
    if len(words) >= 2 and "".join(w[0] for w in words) in ctx.acronyms:
        return "supported"  # "Managing Director" where the source writes "MD"
    return None


def _check_one(
    fact: Fact,
    anchor: dict[str, float],
    ctx: ContextFacts,
    sentence: int,
    slot: _Slot | None = None,
    delta: bool = False,
    held: set[int] | None = None,
) -> FactFinding:
    """``fact`` checked; ``delta`` when it is a difference ("3 more days", "2 hours longer"), which no
    value of the source contradicts as such. A contradiction by the very slot the fact fills (its
    own words single out the source's value, or repeat the passage that states it) adds
    the fact's ``id`` to ``held``: no derivation then makes it supported."""
    group = ctx.group(fact)
    if fact.dim == "name":
        abbreviation = _abbreviation(fact, ctx)
        if abbreviation is not None:
            return _finding(fact, sentence, abbreviation, None)
        words = str(fact.value).split()
        if not all(_name_word_in(w, ctx) for w in re.findall(r"[^\W_]+", str(fact.value))):
            pass  # a word the context never uses: compete below, or unsupported
        elif f" {' '.join(words)} " not in ctx.phrases or group is None:
            return _finding(fact, sentence, "supported", None)  # every word is there (perhaps split otherwise)
    if group is None:
        if fact.dim == "count" and float(fact.value) in ctx.numbers:  # type: ignore[arg-type]
            return _finding(fact, sentence, "supported", None)
        if fact.dim == "count" and not fact.text[:1].isdigit() and float(fact.value) <= 12:  # type: ignore[arg-type]
            # "the two teams", "three players": a small count in words that a summary may infer from a list
            return _finding(fact, sentence, "unverified", None)
        return _finding(fact, sentence, "unsupported", None)
    # the candidates whose anchors share the most with this one's (all of them when none shares a word)
    top = group.words.top(anchor)
    if delta and any(w in _DELTA_WORDS for i in islice(iter(top), 8) for w in group.facts[i].text.lower().split()):
        delta = False  # "12 further weeks" against the source's "10 further weeks": the same kind of value
    judged, others = _slot_says(fact, slot, group) if slot is not None else (None, [])
    if judged == "other" and not delta:
        says = "; ".join(dict.fromkeys(_shown(m.fact) for m in others))
        if held is not None:
            held.add(id(fact))
        return _finding(fact, sentence, "contradicted", says)
    if judged == "same":  # "interns get 10 days" where the source gives interns 10 and staff 30
        return _finding(fact, sentence, "supported", None)
    if group.top_same(fact, top):
        return _finding(fact, sentence, "supported", None)
    # the value is stated about something else: support, unless the response repeats the words of a
    # passage that states another value (two or more shared words, half of the fact's own clause)
    own = {k for k, w in anchor.items() if w == 1.0}
    shared = group.top_own_words(own, top)
    strong = shared >= 2 and 2 * shared >= len(own)
    if not strong and group.values.same(fact):
        return _finding(fact, sentence, "supported", None)
    if delta or (top.best <= 0 and judged is None):
        # nothing of the source measures the same thing (no anchor word shared, or a difference
        # against a value): the fact is judged on its own, and it is not in the source
        return _finding(fact, sentence, "unsupported", None)
    if strong and held is not None:
        held.add(id(fact))
    return _finding(fact, sentence, "contradicted", group.shown(top))


_QUALIFIER_WORDS = {"<=": "at most", ">=": "at least", ">": "more than", "<": "less than", "~": "about"}


def _shown(fact: Fact) -> str:
    """The fact as a reviewer reads it: with its bound ("at most 23 kg") when it has one."""
    text = f"{fact.text} per {fact.rate}" if fact.rate else fact.text
    return f"{_QUALIFIER_WORDS[fact.approx]} {text}" if fact.approx in _QUALIFIER_WORDS else text


def _finding(fact: Fact, sentence: int, status: str, source: str | None) -> FactFinding:
    return FactFinding(
        text=_shown(fact) if status == "contradicted" else fact.text,
        kind=fact.dim,
        start=fact.start,
        end=fact.end,
        sentence=sentence,
        status=status,
        source=source,
    )


_WEEKDAYS = frozenset("monday tuesday wednesday thursday friday saturday sunday".split())
_WEEKDAYS |= {d + "s" for d in _WEEKDAYS}
#: the kinds of value that say the user's situation (when, how long, how many): an amount or a rate
#: the question names and the source does not is still a claim about the source
_SITUATION = frozenset(
    {"date", "time", "name", "duration", "month", "year", "count", "business day", "school day", "night"}
)


def _from_question(checked: list[FactFinding], facts: list[Fact], question: Sequence[Fact]) -> list[FactFinding]:
    """A value the question states is the user's situation, not a claim about the source ("I arrive
    on 9 June" -> "arriving on 9 June is after the 1 June deadline"; "on Tuesday"): it is not held
    against the source, unless the response puts it in the place of the source's own value (it
    states no supported value of that kind beside it). Names other than days stay checked: a name
    the question brings is what the answer is about, and the source must bear it out."""
    out = []
    for finding, fact in zip(checked, facts):
        if fact.dim == "name" and str(fact.value) not in _WEEKDAYS:
            out.append(finding)  # a name the question brings is a topic, which the source must bear out
            continue
        asked = [
            q
            for q in question
            if q.dim == fact.dim and (q.value == fact.value if fact.dim == "name" else _same(fact, q))
        ]
        if finding.failed and asked:
            # a name the source gives for something else stays a swap; a value stays a swap unless
            # the response states the source's own value of that kind beside it
            beside = fact.dim != "name" and any(
                o.status == "supported" and o.kind == finding.kind and o.text != finding.text for o in checked
            )
            if (finding.status == "unsupported" and fact.dim in _SITUATION) or beside:
                finding = dataclasses.replace(finding, status="question", source=None)
        out.append(finding)
    return out


_RANGE_JOIN = re.compile(r"\s*(?:to|and|or|until|till|through|-|\u2013)\s*", re.I)


def _range_ends(facts: Sequence[Fact], sentence: str, offset: int) -> set[int]:
    """Indexes of facts that are an end of a range ("from 10:00 to 14:00"): what the words around a
    range say applies to the whole range, so neither end is judged by its own slot."""
    out: set[int] = set()
    for k in range(len(facts) - 1):
        a, b = facts[k], facts[k + 1]
        if a.dim == b.dim and _RANGE_JOIN.fullmatch(sentence[a.end - offset : b.start - offset]):
            out |= {k, k + 1}
    return out


_DELTA_AFTER = re.compile(
    r"\s*(?:more|less|fewer|longer|shorter|later|earlier|sooner|cheaper|dearer|higher|lower|extra|faster|slower)\b",
    re.I,
)
_DELTA_BEFORE = re.compile(r"\b(?:another|by|an extra|an additional|a further|(?:up|down) by)\s*$", re.I)
_DELTA_WORDS = frozenset({"more", "fewer", "less", "extra", "additional", "further"})


def _is_delta(fact: Fact, sentence: str, offset: int) -> bool:
    """A difference, not a value: "1.8 fewer days", "2 hours longer", "another 3 days", "up by 5%"."""
    if type(fact.value) is not float or fact.dim in ("time", "year", "date"):
        return False
    if any(w in _DELTA_WORDS for w in fact.text.lower().split()[1:]):
        return True
    return bool(_DELTA_AFTER.match(sentence, fact.end - offset)) or bool(
        _DELTA_BEFORE.search(sentence[: fact.start - offset])
    )


_FOLD = re.compile(r"[^\W_]+(?:['\u2019][^\W_]+)*")
_LEAD_IN = re.compile(r"^\s*(?:(?:yes|no|sure|note|remember|important|in short)\b\W*)+", re.I)
#: a clause copied word for word is supported when it has at least this many words
VERBATIM_MIN_WORDS = 6


def _fold(text: str) -> str:
    return " ".join(w.lower().replace("\u2019", "'").removesuffix("'s") for w in _FOLD.findall(text))


def _copied(span: TextSpan, found: Sequence[Fact], ctx: ContextFacts) -> set[int]:
    """Indexes of ``found`` (the facts of one response sentence) in a clause copied word for word
    from the context: the whole sentence (less a lead-in such as "Yes,"), or a clause of at least
    :data:`VERBATIM_MIN_WORDS` words when no other clause of the sentence names something (a name
    there may say the copy is about something else)."""
    text = blank_controls(span.text)
    whole = _fold(_LEAD_IN.sub("", text))
    if whole and f" {whole} " in ctx.phrases:
        return set(range(len(found)))
    cuts = [0, *(m.start() for m in _CLAUSE_BREAK.finditer(text)), len(text)]
    clauses = [(a, b) for a, b in zip(cuts, cuts[1:]) if text[a:b].strip(" ,;:.")]
    named = [bool(re.search(r"(?<!^)(?<![.!?:]\s)\b[A-Z][a-z]", text[a:b].strip(" ,;:"))) for a, b in clauses]
    out: set[int] = set()
    for c, (a, b) in enumerate(clauses):
        words = _fold(text[a:b])
        if len(words.split()) < VERBATIM_MIN_WORDS or any(n for k, n in enumerate(named) if k != c):
            continue
        if f" {words} " in ctx.phrases:
            out |= {k for k, f in enumerate(found) if a <= f.start - span.start and f.end - span.start <= b}
    return out


#: a context clause saying a scheduled thing will not happen ("the 07:40 departure will not run")
_CALLED_OFF = re.compile(
    r"\b(?:cancel+ed|suspended|called off|withdrawn|(?:will|does|do|is|are|won't|shall)\s+not\s+"
    r"(?:run|operate|sail|depart|leave|take place|go ahead|be running|be operating|be held|happen)|"
    r"(?:won't|doesn't|don't|isn't|aren't)\s+(?:run|operate|sail|depart|running|operating|take place|go ahead)|"
    r"not\s+(?:running|operating|sailing|in service)|no longer (?:runs|operates|sails)|out of service)\b",
    re.I,
)
#: a response that itself says so (or says no) asserts nothing against it
_SAYS_OFF = re.compile(r"\b(?:no|not|never|cancel\w*|suspend\w*|won't|isn't|aren't|doesn't|off|instead)\b", re.I)


#: a comma that lists values ("the 07:40, 09:15 and 11:30 departures"), not one that ends a clause
_LIST_COMMA = re.compile(r"\s+(?:(?:and|or)\s+)?\d")


def _clause_at(text: str, at: int) -> str:
    """The clause of ``text`` around character ``at``: cut where :data:`_CLAUSE_BREAK` cuts, except
    at the commas of a list of values, so every value of "the 07:40, 09:15 and 11:30 departures will
    not run" is in the clause that calls it off."""
    cuts = [0]
    for m in _CLAUSE_BREAK.finditer(text):
        if m.group() == "," and _LIST_COMMA.match(text, m.end()):
            continue
        cuts.append(m.start())
    cuts.append(len(text))
    k = bisect.bisect_right(cuts, at) - 1
    return text[cuts[k] : cuts[min(k + 1, len(cuts) - 1)]].strip(" ,;:.")


def _calls_off(span: TextSpan, facts: Sequence[Fact]) -> dict[tuple[str, float | str], str]:
    """The times and dates a context sentence calls off, each with the clause that does."""
    text = span.text
    if not _CALLED_OFF.search(text):
        return {}
    out: dict[tuple[str, float | str], str] = {}
    for f in facts:
        if f.dim not in ("time", "date"):
            continue
        clause = _clause_at(text, f.start - span.start)
        if _CALLED_OFF.search(clause):
            out.setdefault((f.dim, f.value), clause)
    return out


def _operand_pool(fact: Fact, anchor: dict[str, float], ctx: ContextFacts) -> list[Fact]:
    """The context values a derivation of ``fact`` may use: of its dimension, scalars (counts and
    percentages), clock times for a duration, and the quantities a rate among them applies to; of a
    kind with more than :data:`~groundlens_core.evidence.derive.POOL` values, those whose anchors share the
    most with ``fact``'s."""
    by = ctx.by_key()

    def near(key: tuple, ids: Sequence[int]) -> list[Fact]:
        if len(ids) <= POOL:
            return [ctx.mentions[i].fact for i in ids]
        group = ctx.groups.get(("pool",) + key)
        if group is None:
            group = ctx.groups[("pool",) + key] = _Group([ctx.mentions[i] for i in ids])
        return [group.facts[i] for i in islice(iter(group.words.top(anchor)), POOL)]

    out = near((fact.dim,), by.get((fact.dim,), []))
    scalars = ctx.groups.get(("scalars",))
    if scalars is None:
        scalars = ctx.groups[("scalars",)] = [i for i, m in enumerate(ctx.mentions) if m.fact.dim == "count"]  # type: ignore[assignment]
    out += near(("count",), scalars) + near(("percent",), by.get(("percent",), []))  # type: ignore[arg-type]
    if fact.dim == "duration":
        out += near(("time",), by.get(("time",), []))
    for rate in dict.fromkeys(f.rate for f in out if f.rate):
        unit = UNITS.get(rate) or UNITS.get(rate + "s")
        if unit is not None and unit[0] != fact.dim:
            out += near((unit[0],), by.get((unit[0],), []))
    return out


def _derived(
    checked: list[FactFinding],
    facts: list[Fact],
    anchors: list[dict[str, float]],
    spans: Sequence[TextSpan],
    ctx: ContextFacts,
    held: set[int],
) -> list[FactFinding]:
    """Failed values worked out from values the source states (:mod:`groundlens_core.evidence.derive`) are
    supported; the working is the finding's ``source``. Operands: the response's own values in the
    sentence and the one before (each checked in its own right), and the context's
    (:func:`_operand_pool`)."""
    by_sentence: dict[int, list[int]] = {}
    for k, finding in enumerate(checked):
        by_sentence.setdefault(finding.sentence, []).append(k)
    out = list(checked)
    for k, (finding, fact) in enumerate(zip(checked, facts)):
        if not finding.failed or id(fact) in held or not derivable(fact):
            continue
        if not CUE.search(spans[finding.sentence].text):
            continue
        near = by_sentence.get(finding.sentence, []) + by_sentence.get(finding.sentence - 1, [])
        own = [facts[j] for j in near if j != k][:POOL]  # each is checked in its own right
        pool = _operand_pool(fact, anchors[k], ctx)
        if fact.dim not in ("percent", "count"):
            # a bare count multiplies an amount only where the response states it ("3 tickets at €12 each")
            pool = [f for f in pool if f.dim != "count"]
        working = derivation(fact, own + pool)
        if working is not None:
            out[k] = dataclasses.replace(finding, text=fact.text, status="supported", source=working)
    return out


def check_facts(
    response_spans: Sequence[TextSpan], ctx: ContextFacts, question: str | None = None
) -> tuple[FactFinding, ...]:
    """Every fact of every response sentence, checked (``sentence`` indexes ``response_spans``), then
    the claims without a number (:mod:`groundlens_core.evidence.claims`). A fact in a clause copied word for
    word from the context is supported; a failed value worked out from the source's values
    (:mod:`groundlens_core.evidence.derive`) is supported; a time or date the context calls off ("the 07:40
    departure will not run") is contradicted where the response states it without saying so, even
    when the question states it."""
    checked: list[FactFinding] = []
    facts: list[Fact] = []
    anchors: list[dict[str, float]] = []
    held: set[int] = set()
    copied: set[int] = set()
    sentences = [analysed(span) for span in response_spans]  # each tokenised once, for every check below
    for i, span in enumerate(sentences):
        found = span.facts
        ends = _range_ends(found, span.text, span.start)
        copies = _copied(span, found, ctx) if found else set()
        for k, (f, anchor) in enumerate(zip(found, _anchors(span.text, span.start, found, span.content_tokens))):
            if k in copies:
                copied.add(len(facts))
                checked.append(_finding(f, i, "supported", None))
            else:
                slot = None if k in ends else _slot_anchor(f, anchor, span.text, span.start, span.names)
                delta = _is_delta(f, span.text, span.start)
                checked.append(_check_one(f, anchor, ctx, i, slot, delta, held))
            facts.append(f)
            anchors.append(anchor)
    if question:
        checked = _from_question(checked, facts, extract_facts(question))
    checked = _derived(checked, facts, anchors, sentences, ctx, held)
    off = ctx.called_off
    if off:
        for k, fact in enumerate(facts):
            clause = off.get((fact.dim, fact.value))  # type: ignore[arg-type]
            span = sentences[checked[k].sentence]
            # said so in the clause that states it ("the 07:40 will not run"); a "no" elsewhere in the
            # sentence ("No changes: take the 07:40 as usual") is not
            says_so = _SAYS_OFF.search(_clause_at(span.text, fact.start - span.start))
            if clause is not None and k not in copied and not says_so:
                checked[k] = _finding(fact, checked[k].sentence, "contradicted", clause)
    if ctx.claims is not None:
        copied_from = copies_of(sentences, ctx.claims)
        _swapped(checked, facts, sentences, copied_from)
        checked.extend(check_claims(sentences, ctx.claims, checked, question, copied_from))
    return tuple(checked)


def _swapped(
    checked: list[FactFinding], facts: Sequence[Fact], spans: Sequence[TextSpan], copies: Sequence[Copy | None]
) -> None:
    """A number or a name put in place of another in a sentence the response copies from the
    context is contradicted, even when the source gives it elsewhere: "In February 1947, the
    Communists forced ..." against "In February 1948, ..." (:mod:`groundlens_core.evidence.copied`). The
    finding that held it supported is replaced in place; a swapped name no fact covers is added."""
    in_sentence: dict[int, list[int]] = {}  # each sentence's findings: no scan of the whole response
    for k, f in enumerate(checked):
        in_sentence.setdefault(f.sentence, []).append(k)
    for i, (span, copy) in enumerate(zip(spans, copies)):
        if copy is None:
            continue
        swaps = swapped_numbers(copy)
        name = swapped_name(copy)
        for a, b, theirs in swaps + ([name] if name is not None else []):
            at, end = span.start + a, span.start + b
            mine = in_sentence.get(i, [])
            if any(checked[k].failed and checked[k].start < end and at < checked[k].end for k in mine):
                continue  # named already
            hit = next(
                (
                    k
                    for k in mine
                    if checked[k].status == "supported" and checked[k].start <= at and end <= checked[k].end
                ),
                None,
            )
            if hit is not None and hit < len(facts):
                checked[hit] = _finding(facts[hit], i, "contradicted", theirs)
            elif (a, b, theirs) == name:
                checked.append(FactFinding(text=span.text[a:b], kind="name", start=at, end=end, sentence=i,
                                           status="contradicted", source=theirs))  # fmt: skip
