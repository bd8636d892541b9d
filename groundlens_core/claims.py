"""Claims without a number: a polarity the source states the other way, a condition it attaches that
the response leaves out, and a clause whose content the source never mentions.

Why: the fact tier (:mod:`groundlens_core.factcheck`) catches a changed amount, date or name, but
most wrong answers in the wild change no number: "it is open on Mondays" against "the museum is
closed on Mondays", "you can get a refund" against "refunds only for cancellations made 48 hours
ahead", "installation is included" where the source says nothing of installation. Three checks,
each a rule a reviewer can follow, on word stems (:mod:`groundlens_core.lemmas`):

1. **Polarity.** Each clause has a polarity in each *family* it names (open / closed, allowed /
   prohibited, free / charged, included / separately, approved / pending, added / deprecated,
   rises / falls ...), flipped by each negation ("not permitted" is prohibited). A response clause
   is **contradicted** when the context clauses that say the most about the same thing (the most
   shared content stems, words of the same sentence counting half) all state the opposite polarity
   in that family. A negated clause that names no family ("do not bathe") prohibits, so "baths are
   fine" contradicts it. A clause that copies most of a context clause's words with the negation
   added or dropped is contradicted too.
2. **A dropped condition.** A context sentence that restricts what it says ("only if", "only for",
   "unless", "provided that", "as long as", "except") has a main part and a condition. A response
   sentence that asserts the main part (half its content stems, not negated) while the whole
   response says nothing of the condition's own words (those no other context sentence uses) is
   **unsupported**: "the source adds a condition".
3. **An added claim.** A response clause with no supported fact in it whose content stems the
   context and the question do not use is **unsupported** ("not in the source: installation is
   included") when it is a sentence of its own none of whose stems they use, when its sentence
   holds no supported fact and three or more of its stems, the majority, are new, or when it says it
   adds something ("also", "too", "in addition") with two or more new stems.

4. **Scope.** A response clause that copies most of a context clause's words (as the negation rule
   above reads "copies") but states another scope is **contradicted**: a universal word where the
   source qualifies ("all", "always", "every" against "most", "usually", "some"), or the reverse; a
   requirement where the source states a possibility ("must" against "can", "may") or the reverse
   ("may only" is a requirement). An "only" the response adds is not held against it: it often says
   in one word what the source says in two sentences. "In all countries, training takes seven years" against "In
   most countries ..." is a wrong answer that keeps every value.

5. **A name swapped in a copied sentence.** Where a response sentence copies a context sentence word
   for word but puts another name in place of one the source gives there ("an antidote developed by
   Ra" against "... developed by Fox"), the name is **contradicted**, even when the source names it
   elsewhere: "attended Tom" against "attended Oxford".

6. **An item added to a copied list.** Where a response sentence copies a context sentence but adds
   an item to one of its lists whose words the context and the question do not use ("models,
   brands, items or distribution" against "models, brands or items"), the item is **unsupported**.

Every finding is a :class:`~groundlens_core.results.FactFinding` beside the value facts, so the band,
the explanation and the exports treat them alike. These are triage findings, never verdicts.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

from groundlens_core.content import DISCOURSE_WORDS, NUMBER_WORDS, STOP_WORDS
from groundlens_core.facts import blank_controls
from groundlens_core.lemmas import stem
from groundlens_core.results import FactFinding
from groundlens_core.sentences import TextSpan
from groundlens_core.units import MONTHS, UNITS
from groundlens_core.word_index import WordIndex

__all__ = ["ContextClaims", "context_claims", "check_claims", "copied_sentence", "swapped_numbers", "FAMILIES"]

#: polar families: the words that say one side, then the words that say the other
FAMILIES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "open": (("open", "opens", "reopen"), ("closed", "close", "closes", "shut", "closure")),
    "permitted": (
        ("allowed", "allow", "permitted", "permit", "fine", "ok", "okay", "welcome", "entitled", "eligible",
         "can", "may", "accepted", "accept"),
        ("prohibited", "prohibit", "forbidden", "banned", "ban", "disallowed", "rejected", "reject", "refused",
         "denied", "barred", "ineligible"),
    ),
    "free": (("free", "complimentary", "gratis"), ("charged", "charge", "charges", "cost", "costs", "pay", "paid",
                                                     "fee", "payable")),
    "included": (("included", "include", "includes", "including"), ("excluded", "exclude", "separately", "extra")),
    "approved": (("approved", "approve", "granted", "confirmed"), ("declined", "pending", "unapproved")),
    "available": (("available",), ("unavailable",)),
    "required": (("required", "require", "mandatory", "compulsory", "obligatory"), ("optional", "voluntary")),
    "added": (("introduced", "introduces", "added", "adds", "launched", "new"),
              ("deprecated", "removed", "discontinued", "retired", "withdrawn")),
    "rises": (("increased", "increase", "rose", "rise", "rises", "grew", "grow", "grows", "gained", "higher"),
              ("decreased", "decrease", "fell", "fall", "falls", "declined", "reduced", "reduce", "lower",
               "shrank", "dropped")),
    "succeeds": (("succeeded", "succeeds", "passed", "won"), ("failed", "fails", "lost")),
    "valid": (("valid",), ("invalid", "expired")),
    "possible": (("possible",), ("impossible",)),
    "enabled": (("enabled", "enable"), ("disabled", "disable")),
    "safe": (("safe",), ("unsafe", "dangerous")),
    "online": (("online",), ("offline",)),
}  # fmt: skip
#: each polar word as written (not its stem: "fines" is no "fine", "universe" no "university")
_POLAR: dict[str, list[tuple[str, int]]] = {}
for _family, (_yes, _no) in FAMILIES.items():
    for _sign, _forms in ((1, _yes), (-1, _no)):
        for _w in _forms:
            _POLAR.setdefault(_w, []).append((_family, _sign))
#: modal verbs among them, which a negation right after turns ("may not", "can not")
_MODALS = frozenset({"can", "may"})
#: a polar word followed by one of these names a time, not a state ("closes at 9 pm" is "open until 9 pm")
_SCHEDULE = frozenset({"at", "until", "till", "from", "by", "before", "after"})
_SCHEDULED = frozenset({"open", "opens", "closed", "close", "closes", "valid", "expired", "available"})

#: phrases that say one polar word in several ("free of charge" is free, not charged)
_PHRASES = (
    (re.compile(r"\b(?:free of charge|at no (?:extra |additional )?(?:cost|charge)|without (?:charge|paying|payment)"
                r"|for free|no charge|no fee|no cost|costs? nothing)\b", re.I), "free"),
    (re.compile(r"\bnot yet\b|\bno longer\b(?!\s+than)", re.I), "not"),
)  # fmt: skip
_CLAUSE_BREAK = re.compile(
    r"[;()\[\]\u2013\u2014]|[,:](?=\s)|\s-\s|\b(?:but|unless|while|whereas|although|though|except|so)\b", re.I
)
_WORD = re.compile(r"[^\W\d_]+(?:['\u2019][^\W\d_]+)*")
_VERBAL_NEGATION = frozenset({"not", "never", "neither", "nor", "cannot", "without", "non"})
#: "no", "none" ... negate a clause when they open it ("No refunds are given") or stand before a polar
#: word ("no entry"); elsewhere they negate a noun ("with no time limit" says nothing of "free")
_NO = frozenset({"no", "none", "nothing", "nobody"})
_NEGATION = _VERBAL_NEGATION | _NO
#: what may open a clause before its own words: an answer's "Yes," / "No." (no negation of what
#: follows) and a connective ("but do not bathe" prohibits as "do not bathe" does)
_LEAD = re.compile(
    r"^[\s,;:]*(?:(?:yes|no|nope|yep|yeah|sure|okay|ok)\b\s*[.,!:;-]+\s*)?(?:(?:but|and|or|so|then|yet)\b\s*)?"
)
_ADDS = re.compile(r"\b(?:also|too|additionally|in addition|as well|besides|plus|furthermore|moreover)\b")
#: a prohibition in words that name no polar family
_FORBIDS = re.compile(
    r"^\s*(?:do not|don't|never)\b|\b(?:must not|mustn't|may not|cannot|can't|can not|should not|shouldn't)\b"
)
#: bounds, not negations: "no later than", "not more than", "no fewer than"
_NOT_NEGATION = re.compile(r"\b(?:no|not)\s+(?:later|earlier|more|less|fewer|longer|sooner)\s+than\b", re.I)
#: words a clause names its polarity or modality with, never its topic
_NOT_TOPIC = STOP_WORDS | DISCOURSE_WORDS | _NEGATION | {"also", "still", "even", "too", "just", "yes", "ll", "re"}
#: words of values (numbers, units, months): the fact checks' business, not a clause's topic
_NOT_TOPIC |= frozenset(NUMBER_WORDS) | frozenset(UNITS) | frozenset(MONTHS) | {"half", "quarter", "percent", "cent"}
_RESTRICT = re.compile(
    r"\b(?:only\s+(?:if|when|where|for|after|before|with|on|by|until|once|while|within|during|to|in)"
    r"|unless|provided(?:\s+that)?|providing|as\s+long\s+as|so\s+long\s+as|on\s+condition\s+that|except(?:\s+for)?)\b",
    re.I,
)
#: a time limit on what a clause says ("may be submitted until 5 May", "cannot ... after 5 May"): the
#: two sides of the limit state opposite polarities, so neither is evidence against the other
_TIME_BOUND = re.compile(r"\b(?:until|till|after|before|from)\s+(?:\S+\s+){0,2}?\S*\d", re.I)
#: where one statement of a sentence ends and another begins
_STATEMENT_BREAK = re.compile(r"[;:]|,\s+(?:and|but|or|so|while|whilst|whereas)\b|\s(?:but|whereas|while)\s", re.I)
_RESTRICT_STEMS = frozenset({"onli", "if", "unless", "only"})
#: a condition is checked when the statement it restricts has at least this many content stems
CONDITION_MIN_MAIN = 2
#: a response sentence sharing this share of its stems with one unrestricted context clause of another
#: sentence states that clause, and a condition of another sentence does not restrict it
CONDITION_ELSEWHERE = 0.6
#: closing courtesies of an assistant's answer, which claim nothing about the source
_COURTESY = re.compile(
    r"^\W*(?:i hope (?:this|that) helps|hope (?:this|that) helps|let me know|feel free|happy \w+ing|great question"
    r"|good question|thanks? (?:you )?for (?:asking|your question)|have a (?:great|good|nice) \w+|enjoy)\b",
    re.I,
)
#: a polarity is contradicted when the best context clause shares this share of the response clause's topic
POLARITY_MIN_SHARE = 0.5
#: a clause that copies this many of a context clause's words, and this share of the larger, with the
#: negation flipped, is contradicted even when it names no polar family
COPY_MIN_WORDS, COPY_MIN_SHARE = 3, 0.6
#: an added claim: at least this many content stems absent from context and question, the majority of the clause
CLAIM_MIN_NEW = 3
#: ... or this many in a clause that says it adds something ("also", "too", "in addition", "plus")
CLAIM_MIN_NEW_ADDED = 2


@dataclass(frozen=True)
class _Clause:
    text: str
    start: int
    end: int
    topic: frozenset[str]  # content stems
    polar: tuple[tuple[str, int], ...]  # (family, sign) after negation
    negated: bool
    sentence: int  # which sentence of its text
    capitalised: frozenset[str] = frozenset()  # stems of words written with a capital inside the clause
    forbids: bool = False  # "do not bathe", "must not", "cannot": a prohibition that names no polar word
    conditional: bool = False  # it is restricted ("available only if ...", "free unless ...")
    adds: bool = False  # it says it adds to what came before ("also", "too", "in addition", "plus")
    timed: bool = False  # restricted by a time limit alone ("open from 10:00"), no condition


def _words(text: str) -> list[tuple[str, int, int]]:
    out = []
    for m in _WORD.finditer(text):
        out.append((m.group(0), m.start(), m.end()))
    return out


def _not_polar(words: list[str], originals: list[str], k: int) -> bool:
    """A polar word that says no state here: "May" the month, "closes at 9 pm" (a time)."""
    w = words[k]
    if w == "may" and k < len(originals) and originals[k] == "May" and k > 0:
        return True
    return w in _SCHEDULED and k + 1 < len(words) and words[k + 1] in _SCHEDULE


def _analyse(piece: str, start: int, end: int, sentence: int, first: bool, conditional: bool) -> _Clause | None:
    low = _LEAD.sub("", _NOT_NEGATION.sub(" ", piece.lower().replace("\u2019", "'")))
    for pattern, word in _PHRASES:
        low = pattern.sub(word, low)
    # "you're" -> "you", "it's" -> "it"; "don't" stays whole (a negation)
    words = [w if w.endswith("n't") else w.split("'")[0] for w, _, _ in _words(low)]
    polar: list[tuple[str, int]] = []
    topic: set[str] = set()
    flips = 0  # negations so far: a negation turns the polar words after it

    def negates(k: int) -> bool:
        w = words[k]
        if w in _VERBAL_NEGATION or w.endswith("n't"):
            return True
        return w in _NO and (k == 0 or (k + 1 < len(words) and words[k + 1] in _POLAR))

    originals = [w for w, _, _ in _words(piece)]
    negations = 0  # every negation, "no" anywhere included: for a copied clause with its negation flipped
    for k, w in enumerate(words):
        if w in _NO:
            negations += 1
        if negates(k):
            flips += 1
            negations += 0 if w in _NO else 1
            continue
        if w in _POLAR and not _not_polar(words, originals, k):
            turned = flips + (1 if w in _MODALS and k + 1 < len(words) and negates(k + 1) else 0)
            sign = -1 if turned % 2 else 1
            polar.extend((family, side * sign) for family, side in _POLAR[w])
        elif w not in _NOT_TOPIC and len(w) > 1:
            topic.add(stem(w))
    caps = frozenset(
        stem(w.lower()) for k, (w, _, _) in enumerate(_words(piece)) if w[:1].isupper() and not (first and k == 0)
    )
    if not topic and not polar:
        return None
    text = piece.strip(" ,;:").rstrip(" .!?")
    lead = len(piece) - len(piece.lstrip(" ,;:"))
    forbids = bool(_FORBIDS.search(low)) and not polar
    adds = bool(_ADDS.search(low))
    return _Clause(text, start + lead, start + lead + len(text), frozenset(topic), tuple(dict.fromkeys(polar)),
                   negations % 2 == 1, sentence, caps, forbids, conditional, adds)  # fmt: skip


#: "at least as long as the stair is wide": a comparison, not a condition
_COMPARES_BEFORE = re.compile(
    r"\b(?:at least|at most|twice|half|nearly|almost|just|about|roughly|not|times|quite)\s*$", re.I
)
_COMPARES_AFTER = re.compile(
    r"^as\s+long\s+as\s+(?:\S+\s+){0,4}?(?:is|are|was|were)\s+(?:wide|long|tall|high|deep|thick|broad)\b", re.I
)


def _restriction(text: str, at_start: bool = False) -> re.Match[str] | None:
    """The first restriction of ``text`` ("only if", "unless", "provided that", "as long as" ...),
    or None; "as long as" in a comparison ("at least as long as the stair is wide") restricts nothing."""
    for m in _RESTRICT.finditer(text):
        if at_start and text[: m.start()].strip():
            return None
        low = m.group(0).lower()
        if low.endswith("long as") and (
            _COMPARES_BEFORE.search(text[: m.start()]) or _COMPARES_AFTER.match(text[m.start() :])
        ):
            continue
        return m
    return None


def _clauses(span: TextSpan, sentence: int) -> list[_Clause]:
    text = blank_controls(span.text)  # a terminal's escape sequence is no clause ("ESC]0;title BEL")
    cuts = [0, *(m.start() for m in _CLAUSE_BREAK.finditer(text)), len(text)]
    pieces = [text[a:b] for a, b in zip(cuts, cuts[1:])]
    out = []
    for n, (a, b) in enumerate(zip(cuts, cuts[1:])):
        # restricted: it names the restriction, or the clause after it opens with one ("... unless ...")
        following = pieces[n + 1].lstrip(" ,;:") if n + 1 < len(pieces) else ""
        restricted = _restriction(pieces[n]) is not None or _restriction(following, at_start=True) is not None
        timed = not restricted and bool(_TIME_BOUND.search(pieces[n]))
        c = _analyse(pieces[n], span.start + a, span.start + b, sentence, a == 0, restricted or timed)
        if c is not None:
            out.append(dataclasses.replace(c, timed=timed) if timed else c)
    return out


@dataclass(frozen=True)
class _Condition:
    main: frozenset[str]  # content stems of the restricted statement
    own: frozenset[str]  # the condition's stems that no other context sentence uses
    text: str  # the condition as written ("only if the loan completes on or before 30 November")
    sentence: int = -1  # the context sentence it is in


@dataclass(frozen=True)
class ContextClaims:
    """A context's clauses and conditions, computed once per context."""

    clauses: tuple[_Clause, ...]
    sentence_topics: tuple[frozenset[str], ...]
    stems: frozenset[str]  # every content stem of the context
    conditions: tuple[_Condition, ...]
    sentence_texts: tuple[str, ...] = ()
    indexes: dict[object, object] = field(default_factory=dict, compare=False, repr=False)  # built on first use

    def by_family(self, family: str) -> list[tuple[int, WordIndex, list[int]]]:
        """For each sign of ``family``: the positions of the unrestricted clauses that state it, in
        order, indexed by their words as :func:`_polarity` weighs them (:func:`_near_words`)."""
        found = self.indexes.get(family)
        if found is None:
            signs: dict[int, list[int]] = {}
            for pos, k in enumerate(self.clauses):
                if not k.conditional:  # "available only if ...": its polarity holds under the condition only
                    for f, s in _families(k):
                        if f == family:
                            signs.setdefault(s, []).append(pos)
            found = [(s, WordIndex([_near_words(self.clauses[p], self) for p in at]), at) for s, at in signs.items()]
            self.indexes[family] = found
        return found  # type: ignore[return-value]

    def by_topic(self) -> WordIndex:
        """Every clause, indexed by its topic (for the clause sharing most words with another)."""
        found = self.indexes.get(None)
        if found is None:
            found = self.indexes[None] = WordIndex([dict.fromkeys(k.topic, 1.0) for k in self.clauses])
        return found  # type: ignore[return-value]


def _stems_of(text: str) -> set[str]:
    return {stem(w.lower()) for w, _, _ in _words(blank_controls(text)) if w.lower() not in _NOT_TOPIC and len(w) > 1}


def _numbers_of(text: str) -> set[str]:
    return {"#" + n.replace(",", "") for n in re.findall(r"\d+(?:,\d{3})*(?:\.\d+)?", blank_controls(text))}


def context_claims(spans: Sequence[TextSpan]) -> ContextClaims:
    clauses = tuple(c for i, span in enumerate(spans) for c in _clauses(span, i))
    grouped: list[set[str]] = [set() for _ in spans]
    for c in clauses:
        grouped[c.sentence] |= c.topic
    topics = [frozenset(g) for g in grouped]
    per_sentence = [_stems_of(s.text) | _numbers_of(s.text) for s in spans]
    used_in = Counter(x for stems in per_sentence for x in stems)  # how many sentences use each stem
    conditions = []
    for n, span in enumerate(spans):
        m = _restriction(span.text)
        if m is None:
            continue
        rest = span.text[m.start() :]
        cut = re.search(r"[;.!?]|,\s", rest[len(m.group(0)) :])
        cond = rest[: len(m.group(0)) + cut.start()] if cut else rest
        # what it restricts: the statement around it, up to a semicolon or a joined statement
        # (", and ...", ", but ..."), not the whole sentence
        before = span.text[: m.start()]
        joins = list(_STATEMENT_BREAK.finditer(before))
        after = rest[len(cond) :]
        end = _STATEMENT_BREAK.search(after)
        main = before[joins[-1].end() :] if joins else before
        if not _stems_of(main) - set(_POLAR):  # "Unless ..., X is ...": the statement after it
            main += after[: end.start()] if end else after
        # the condition's own words: those no other sentence uses (each stem of this sentence counts once)
        own = {x for x in _stems_of(cond) | _numbers_of(cond) if used_in[x] == 1} - _RESTRICT_STEMS
        main_stems = frozenset(_stems_of(main) - set(_POLAR))
        if own and len(main_stems) >= CONDITION_MIN_MAIN:
            conditions.append(_Condition(main_stems, frozenset(own), cond.strip(" ,;"), n))
    stems = frozenset(set().union(*per_sentence)) if per_sentence else frozenset()
    return ContextClaims(clauses, tuple(topics), stems, tuple(conditions), tuple(s.text for s in spans))


def _near_words(k: _Clause, ctx: ContextClaims) -> dict[str, float]:
    """A context clause's words as the overlap weighs them: its own 1, the rest of its sentence's 1/2."""
    return {**dict.fromkeys(ctx.sentence_topics[k.sentence], 0.5), **dict.fromkeys(k.topic, 1.0)}


def _weights(c: _Clause) -> dict[str, float]:
    """A response clause's stems, a name counting twice (it says what the clause is about)."""
    return {s: 2.0 if s in c.capitalised else 1.0 for s in c.topic}


def _families(c: _Clause) -> list[tuple[str, int]]:
    """The clause's polar families; a prohibition that names none ("do not bathe") prohibits."""
    return list(c.polar) if c.polar else ([("permitted", -1)] if c.forbids else [])


def _polarity(c: _Clause, ctx: ContextClaims) -> _Clause | None:
    """The context clause that ``c`` contradicts, if any: among the unrestricted context clauses of
    one of its polar families, those sharing the most content stems with it (a name counting twice,
    the words of the context clause's sentence outside the clause counting half) all state the
    other side. Found through the context's word indexes, not by comparing ``c`` with each clause."""
    if c.conditional and not c.timed:  # "open every day except Monday": what it asserts holds only in part
        return None
    weights = _weights(c)
    for family, sign in _families(c):
        by_sign = ctx.by_family(family)
        if not by_sign or not c.topic:
            continue
        tops = [(s, index.top(weights), ks) for s, index, ks in by_sign]
        best = max(top.best for _, top, _ in tops)
        if best < max(1.0, POLARITY_MIN_SHARE * sum(weights.values())):
            continue
        if all(s != sign for s, top, _ in tops if top.best == best):
            return ctx.clauses[min(at[top.first()] for _, top, at in tops if top.best == best)]
    # copied wording with the negation added or dropped
    if not c.polar and ctx.clauses:
        best_k = ctx.clauses[ctx.by_topic().top(dict.fromkeys(c.topic, 1.0)).first()]
        if not best_k.polar:
            shared = len(c.topic & best_k.topic)
            similar = shared >= COPY_MIN_SHARE * max(len(c.topic), len(best_k.topic))
            if shared >= COPY_MIN_WORDS and similar and c.negated != best_k.negated:
                return best_k
    return None


#: scope classes: a clause's word of one class against the copied context clause's word of its
#: opposite is a changed scope
_SCOPE_CLASSES: dict[str, frozenset[str]] = {
    "universal": frozenset(
        "all every always everyone everybody everything everywhere entire entirely completely invariably".split()
    ),
    "partial": frozenset(
        "some most many several usually often sometimes generally typically mostly partly partially frequently "
        "occasionally commonly rarely majority".split()
    ),
    "necessary": frozenset("must required mandatory obligatory".split()),
    "possible": frozenset("can may might could optional possibly".split()),
}
_SCOPE_OPPOSITE = {"universal": "partial", "partial": "universal", "necessary": "possible", "possible": "necessary"}
_SCOPE_WORD = re.compile(
    r"\b(?:" + "|".join(sorted(set().union(*_SCOPE_CLASSES.values()), key=len, reverse=True)) + r")\b", re.I
)
_ONLY_AFTER = re.compile(r"\s+only\b", re.I)


def _scope_words(text: str) -> list[tuple[str, str, int]]:
    """(class, word, offset) of each scope word of ``text``."""
    out = []
    for m in _SCOPE_WORD.finditer(text):
        w = m.group(0).lower()
        if w == "can" and text[m.end() : m.end() + 3].lower() == "not":  # "cannot": a negation
            continue
        cls = next(k for k, ws in _SCOPE_CLASSES.items() if w in ws)
        if cls == "possible" and _ONLY_AFTER.match(text, m.end()):  # "may only be handled in": a requirement
            cls = "necessary"
        out.append((cls, w, m.start()))
    return out


#: a scope is compared between sentences sharing at least this many content stems, and this share
#: of the larger sentence's
SCOPE_MIN_WORDS, SCOPE_MIN_SHARE = 2, 0.6


def _scope(text: str, topic: set[str], ctx: ContextClaims) -> tuple[int, str, int, str] | None:
    """The context sentence a response sentence copies (most of both sentences' content stems
    shared) when the response sentence states another scope than it does: that sentence's index, the
    response's word, its offset in ``text`` and the context's word."""
    mine = _scope_words(text)
    j = _copied_sentence(topic, ctx) if mine else None
    if j is None:
        return None
    theirs = _scope_words(ctx.sentence_texts[j])
    their_classes = {cls for cls, _, _ in theirs}
    for cls, word, at in mine:
        if cls in their_classes:
            continue
        other = next((w for o, w, _ in theirs if o == _SCOPE_OPPOSITE[cls]), None)
        if other is not None:
            return j, word, at, other
    return None


#: a capitalised word that is no name: a pronoun or a determiner opening a clause
_NOT_NAMES = frozenset(
    "i he she it we they you his her its our their this that these those the a an there here mr mrs ms dr".split()
)


def _copied_sentence(topic: set[str], ctx: ContextClaims) -> int | None:
    """The context sentence a response sentence with content stems ``topic`` copies: the one sharing
    the most stems, when they are :data:`SCOPE_MIN_WORDS` or more and :data:`SCOPE_MIN_SHARE` of the
    larger sentence's."""
    if not topic or not ctx.sentence_texts:
        return None
    j = max(range(len(ctx.sentence_topics)), key=lambda n: (len(topic & ctx.sentence_topics[n]), -n))
    shared = len(topic & ctx.sentence_topics[j])
    if shared < SCOPE_MIN_WORDS or shared < SCOPE_MIN_SHARE * max(len(topic), len(ctx.sentence_topics[j])):
        return None
    return j


def _names_in(words: list[tuple[str, int, int]]) -> list[int]:
    return [k for k, (w, _, _) in enumerate(words) if w[:1].isupper() and k > 0 and w.lower() not in _NOT_NAMES]


def _swapped_name(text: str, source: str) -> tuple[int, int, str] | None:
    """Where ``text`` copies ``source`` word for word with one name put in place of another: the
    response name's offsets in ``text`` and the source's name."""
    mine, theirs = _words(text), _words(source)
    if len(mine) < 4 or len(theirs) < 4:
        return None
    a, b = [w.lower() for w, _, _ in mine], [w.lower() for w, _, _ in theirs]
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    if matcher.ratio() < COPY_MIN_SHARE:
        return None
    named_mine, named_theirs = set(_names_in(mine)), set(_names_in(theirs))
    said, kept = set(b), set(a)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op != "replace" or i2 - i1 > 3 or j2 - j1 > 3:
            continue
        # a name the source sentence does not use, or one it uses elsewhere put where a name the
        # response leaves out stood (not a reordering: "Gatsby is accused by Tom")
        old = [k for k in range(j1, j2) if k in named_theirs]
        dropped = bool(old) and all(b[k] not in kept for k in old)
        new = [k for k in range(i1, i2) if k in named_mine and (a[k] not in said or dropped)]
        if not new or not old:
            continue
        old_text = source[theirs[old[0]][1] : theirs[old[-1]][2]]
        new_text = text[mine[new[0]][1] : mine[new[-1]][2]]
        if new_text.lower() in old_text.lower() or old_text.lower() in new_text.lower():
            continue  # "Smith" for "John Smith"
        initials = "".join(w[:1] for w, _, _ in theirs[old[0] : old[-1] + 1]).lower()
        if new_text.replace(".", "").lower() == initials:  # "EMA" for "European Medicines Agency"
            continue
        return mine[new[0]][1], mine[new[-1]][2], old_text
    return None


_TOKEN = re.compile(r"\w+(?:[.,:]\d+)*")
_NUMBER = re.compile(r"\d+(?:[.,:]\d+)*")
#: a number written as another in a copied sentence by one of these factors is a conversion, not a swap
_FACTORS = (10.0, 12.0, 24.0, 60.0, 100.0, 1000.0, 3600.0)


def _as_number(token: str) -> float | None:
    if not _NUMBER.fullmatch(token) or ":" in token:
        return None
    try:
        return float(token.replace(",", ""))
    except ValueError:
        return None


def swapped_numbers(text: str, source: str, topic: set[str] | None = None) -> list[tuple[int, int, str]]:
    """Where ``text`` copies ``source`` word for word with one number put in place of another ("In
    February 1947, the Communists forced ..." against "In February 1948, ..."): each response
    number's offsets in ``text`` and the source's number. One token for one token only, so a value
    written in another unit ("0.5 s" for "500 ms"), a count in words or a rounding with its own words
    is left to the fact checks, and a number off by a conversion factor (48 and 0.48) is no swap."""
    mine = [(m.group(0), m.start(), m.end()) for m in _TOKEN.finditer(text)]
    theirs = [m.group(0) for m in _TOKEN.finditer(source)]
    if len(mine) < 4 or len(theirs) < 4:
        return []
    a, b = [w.lower() for w, _, _ in mine], [w.lower() for w in theirs]
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    if matcher.ratio() < COPY_MIN_SHARE:
        return []
    out = []
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op != "replace" or i2 - i1 != 1 or j2 - j1 != 1:
            continue
        x, y = _as_number(a[i1]), _as_number(b[j1])
        if x is None or y is None or x == y:
            continue
        if (
            x
            and y
            and any(abs(x * f - y) < 1e-9 * max(1.0, y) or abs(y * f - x) < 1e-9 * max(1.0, x) for f in _FACTORS)
        ):
            continue
        out.append((mine[i1][1], mine[i1][2], theirs[j1]))
    return out


_LIST_JOIN = frozenset({"and", "or"})
#: words that close or open a list without adding an item ("among others", "etc.", "such as")
_LIST_WORDS = re.compile(
    r"^(?:and|or)?\s*(?:among\s+others|among\s+other\s+things|others|and\s+more|etc|and\s+so\s+on|"
    r"and\s+so\s+forth|for\s+example|for\s+instance|such\s+as|including|e\.?g|i\.?e)\W*$",
    re.I,
)


def added_items(text: str, source: str, known: set[str]) -> list[tuple[int, int]]:
    """Where ``text`` copies ``source`` word for word with an item added to one of its lists ("models,
    brands, items or distribution" against "models, brands or items"): the added words' offsets in
    ``text``, when they carry a content stem in ``known`` (the context's and the question's) not."""
    mine = [(m.group(0), m.start(), m.end()) for m in _TOKEN.finditer(text)]
    theirs = [m.group(0) for m in _TOKEN.finditer(source)]
    if len(mine) < 4 or len(theirs) < 4:
        return []
    a, b = [w.lower() for w, _, _ in mine], [w.lower() for w in theirs]
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    if matcher.ratio() < COPY_MIN_SHARE:
        return []
    out = []
    for op, i1, i2, _, _ in matcher.get_opcodes():
        if op != "delete" or i2 - i1 > 3:  # words of the response the source sentence lacks
            continue
        start, end = mine[i1][1], mine[i2 - 1][2]
        before = text[:start].rstrip()
        # an item of a list: after a comma or "and"/"or" the source's list has, or before one
        joined = before.endswith(",") or a[i1] in _LIST_JOIN or (i1 > 0 and a[i1 - 1] in _LIST_JOIN)
        listed = "," in source or bool(_LIST_JOIN & set(b))
        new = _stems_of(text[start:end]) - known
        closes = bool(_LIST_WORDS.match(text[start:end].strip(" ,")))
        if joined and listed and new and not closes and all(not w.isdigit() for w in a[i1:i2]):
            out.append((start, end))
    return out


def copied_sentence(text: str, ctx: ContextClaims) -> int | None:
    """The context sentence ``text`` (one response sentence) copies, if any (see :func:`_copied_sentence`)."""
    return _copied_sentence(_stems_of(text), ctx)


def _finding(c: _Clause, kind: str, status: str, source: str | None) -> FactFinding:
    return FactFinding(text=c.text, kind=kind, start=c.start, end=c.end, sentence=c.sentence, status=status,
                       source=source)  # fmt: skip


def check_claims(
    response_spans: Sequence[TextSpan],
    ctx: ContextClaims,
    facts: Sequence[FactFinding] = (),
    question: str | None = None,
) -> tuple[FactFinding, ...]:
    """The claim findings of a response (``sentence`` indexes ``response_spans``); ``facts`` are its
    value facts already checked (a clause holding a supported one is no added claim)."""
    asked = _stems_of(question or "")
    supported = [(f.start, f.end) for f in facts if f.status in ("supported", "question")]
    out: list[FactFinding] = []
    clauses = [c for i, span in enumerate(response_spans) for c in _clauses(span, i)]
    for c in clauses:
        k = _polarity(c, ctx)
        if k is not None:
            out.append(_finding(c, "polarity", "contradicted", k.text))
            continue
        new = {s for s in c.topic - ctx.stems - asked if s not in c.capitalised}
        if not new or any(c.start <= a and b <= c.end for a, b in supported) or _COURTESY.match(c.text):
            continue
        span = response_spans[c.sentence]
        sentence_holds = any(span.start <= a and b <= span.end for a, b in supported)
        alone = sum(1 for o in clauses if o.sentence == c.sentence and o.topic) == 1
        if (
            (alone and new == c.topic)
            or (not sentence_holds and len(new) >= CLAIM_MIN_NEW and 2 * len(new) > len(c.topic))
            or (c.adds and len(new) >= CLAIM_MIN_NEW_ADDED)
        ):
            out.append(_finding(c, "claim", "unsupported", None))
    contradicted = {f.sentence for f in out if f.kind == "polarity"}
    for i, span in enumerate(response_spans):
        topic = set().union(*(c.topic for c in clauses if c.sentence == i))
        scoped = None if i in contradicted else _scope(span.text, topic, ctx)
        if scoped is not None:
            j, word, at, _theirs = scoped
            quoted = ctx.sentence_texts[j].strip().rstrip(" .!?")
            out.append(
                FactFinding(
                    text=word,
                    kind="scope",
                    start=span.start + at,
                    end=span.start + at + len(word),
                    sentence=i,
                    status="contradicted",
                    source=quoted,
                )  # fmt: skip
            )
    failed_at = [(f.start, f.end) for f in facts if f.failed]
    for i, span in enumerate(response_spans):
        if i in contradicted or any(f.sentence == i and f.kind == "scope" for f in out):
            continue
        copied = _copied_sentence(set().union(*(c.topic for c in clauses if c.sentence == i)), ctx)
        swapped = None if copied is None else _swapped_name(span.text, ctx.sentence_texts[copied])
        if swapped is not None:
            a, b, theirs = swapped
            if not any(x < span.start + b and span.start + a < y for x, y in failed_at):  # not named already
                out.append(
                    FactFinding(
                        text=span.text[a:b],
                        kind="name",
                        start=span.start + a,
                        end=span.start + b,
                        sentence=i,
                        status="contradicted",
                        source=theirs,
                    )  # fmt: skip
                )
        if copied is not None and not any(f.sentence == i for f in out):
            for a, b in added_items(span.text, ctx.sentence_texts[copied], set(ctx.stems) | asked):
                at, end = span.start + a, span.start + b
                if not any(x < end and at < y for x, y in failed_at):
                    out.append(
                        FactFinding(
                            text=span.text[a:b],
                            kind="claim",
                            start=at,
                            end=end,
                            sentence=i,
                            status="unsupported",
                            source=None,
                        )  # fmt: skip
                    )
    said = set().union(*(c.topic for c in clauses)) if clauses else set()
    said |= {n for span in response_spans for n in _numbers_of(span.text)}
    by_sentence: list[list[_Clause]] = [[] for _ in response_spans]
    for c in clauses:
        by_sentence[c.sentence].append(c)
    flagged: set[int] = set()  # one condition finding a response sentence at most
    # what each response sentence is about: the context clause sharing the most with it, when it is
    # another sentence's than a condition's, says the condition restricts something else
    closest: dict[int, tuple[float, int]] = {}
    for i, mine in enumerate(by_sentence):
        topic = set().union(*(c.topic for c in mine)) if mine else set()
        if topic and ctx.clauses:
            top = ctx.by_topic().top(dict.fromkeys(topic, 1.0))
            closest[i] = (top.best, ctx.clauses[top.first()].sentence)
    for cond in ctx.conditions:
        if cond.own & said:
            continue
        need = max(1, math.ceil(len(cond.main) / 2))
        for i, mine in enumerate(by_sentence):
            if i in flagged or not mine:
                continue
            topic = set().union(*(c.topic for c in mine))
            asserting = [c for c in mine if not c.negated and c.topic & cond.main]
            if not asserting or len(topic & cond.main) < need:
                continue
            best, where = closest.get(i, (0.0, cond.sentence))
            if where != cond.sentence and best > len(topic & cond.main) and best >= CONDITION_ELSEWHERE * len(topic):
                continue  # the sentence states what another context sentence says, unrestricted
            out.append(_finding(asserting[0], "condition", "unsupported", cond.text))
            flagged.add(i)
            break
    return tuple(out)
