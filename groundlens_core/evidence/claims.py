"""Claims without a number: a polarity the source states the other way, a condition it attaches that
the response leaves out, and a clause whose content the source never mentions.

Why: the fact tier (:mod:`groundlens_core.evidence.factcheck`) catches a changed amount, date or name, but
most wrong answers in the wild change no number: "it is open on Mondays" against "the museum is
closed on Mondays", "you can get a refund" against "refunds only for cancellations made 48 hours
ahead", "installation is included" where the source says nothing of installation. Three checks,
each a rule a reviewer can follow, on word stems (:mod:`groundlens_core.evidence.lemmas`):

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

4. **A sentence copied with one thing changed** (:mod:`groundlens_core.evidence.copied`): another scope
   ("all" against "most", "must" against "can") is **contradicted**, and an item added inside one of
   its lists whose words the context and the question do not use is **unsupported**. (A name or a
   number swapped in a copied sentence is a value finding: :mod:`groundlens_core.evidence.factcheck`.)

Every finding is a :class:`~groundlens_core.scoring.results.FactFinding` beside the value facts, so the band,
the explanation and the exports treat them alike. These are triage findings, never verdicts.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

from groundlens_core.evidence.content import DISCOURSE_WORDS, NUMBER_WORDS, STOP_WORDS
from groundlens_core.evidence.copied import Copy, added_items, find_copy, scope_changes, sentence_words
from groundlens_core.evidence.facts import blank_controls
from groundlens_core.evidence.lemmas import stem
from groundlens_core.evidence.sentences import TextSpan
from groundlens_core.evidence.units import MONTHS, UNITS
from groundlens_core.evidence.word_index import WordIndex
from groundlens_core.scoring.results import FactFinding

__all__ = ["ContextClaims", "context_claims", "check_claims", "copies_of", "FAMILIES"]

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

    written = _words(piece)
    originals = [w for w, _, _ in written]
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
        stem(w.lower()) for k, (w, _, _) in enumerate(written) if w[:1].isupper() and not (first and k == 0)
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
    #: the sentences themselves (analysed ones carry the words the copy alignment reads); () for texts alone
    sentences: tuple[TextSpan, ...] = field(default=(), compare=False, repr=False)

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
    return ContextClaims(
        clauses, tuple(topics), stems, tuple(conditions), tuple(s.text for s in spans), sentences=tuple(spans)
    )


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


def copies_of(response_spans: Sequence[TextSpan], ctx: ContextClaims) -> list[Copy | None]:
    """Each response sentence aligned with the context sentence it copies, if any (:mod:`.copied`).
    Analysed sentences (:mod:`.analysed`) on either side are read with the words they carry."""
    sentences: Sequence[str] | Sequence[TextSpan] = ctx.sentences or ctx.sentence_texts
    words = ctx.indexes.get("copied")
    if words is None:
        words = ctx.indexes["copied"] = sentence_words(sentences)
    return [find_copy(span, sentences, words) for span in response_spans]  # type: ignore[arg-type]


def _finding(c: _Clause, kind: str, status: str, source: str | None) -> FactFinding:
    return FactFinding(text=c.text, kind=kind, start=c.start, end=c.end, sentence=c.sentence, status=status,
                       source=source)  # fmt: skip


def check_claims(
    response_spans: Sequence[TextSpan],
    ctx: ContextClaims,
    facts: Sequence[FactFinding] = (),
    question: str | None = None,
    copies: Sequence[Copy | None] | None = None,
) -> tuple[FactFinding, ...]:
    """The claim findings of a response (``sentence`` indexes ``response_spans``); ``facts`` are its
    value facts already checked (a clause holding a supported one is no added claim); ``copies``
    each sentence's copied context sentence (:func:`copies_of`, computed when not given)."""
    asked = _stems_of(question or "")
    clauses = [c for i, span in enumerate(response_spans) for c in _clauses(span, i)]
    out = _clause_findings(clauses, response_spans, ctx, facts, asked)
    if copies is None:
        copies = copies_of(response_spans, ctx)
    out += _copy_findings(response_spans, copies, ctx, [*facts, *out], asked)
    out += _condition_findings(clauses, response_spans, ctx)
    return tuple(out)


def _clause_findings(
    clauses: Sequence[_Clause],
    response_spans: Sequence[TextSpan],
    ctx: ContextClaims,
    facts: Sequence[FactFinding],
    asked: set[str],
) -> list[FactFinding]:
    """Each clause's polarity contradiction, else its added claim."""
    supported = [(f.start, f.end) for f in facts if f.status in ("supported", "question")]
    topical = Counter(c.sentence for c in clauses if c.topic)  # each sentence's clauses with a topic
    out: list[FactFinding] = []
    for c in clauses:
        k = _polarity(c, ctx)
        if k is not None:
            out.append(_finding(c, "polarity", "contradicted", k.text))
        elif _adds_claim(c, response_spans[c.sentence], ctx, asked, supported, topical[c.sentence] == 1):
            out.append(_finding(c, "claim", "unsupported", None))
    return out


def _adds_claim(
    c: _Clause, span: TextSpan, ctx: ContextClaims, asked: set[str], supported: list[tuple[int, int]], alone: bool
) -> bool:
    """Whether ``c`` claims what neither the context nor the question mentions: all its stems new in a
    sentence of its own, a majority of new stems in a sentence holding no supported fact, or new stems
    in a clause that says it adds something. ``alone``: its sentence's only clause with a topic."""
    new = {s for s in c.topic - ctx.stems - asked if s not in c.capitalised}
    if not new or any(c.start <= a and b <= c.end for a, b in supported) or _COURTESY.match(c.text):
        return False
    sentence_holds = any(span.start <= a and b <= span.end for a, b in supported)
    return (
        (alone and new == c.topic)
        or (not sentence_holds and len(new) >= CLAIM_MIN_NEW and 2 * len(new) > len(c.topic))
        or (c.adds and len(new) >= CLAIM_MIN_NEW_ADDED)
    )


def _copy_findings(
    response_spans: Sequence[TextSpan],
    copies: Sequence[Copy | None],
    ctx: ContextClaims,
    found: Sequence[FactFinding],
    asked: set[str],
) -> list[FactFinding]:
    """A sentence copied from the context with its scope changed, or an item added to its list;
    words a failed finding of ``found`` already covers are not reported twice."""
    failed_in: dict[int, list[tuple[int, int]]] = {}  # each sentence's failed findings
    for f in found:
        if f.failed:
            failed_in.setdefault(f.sentence, []).append((f.start, f.end))
    known = set(ctx.stems) | asked
    out: list[FactFinding] = []
    for i, (span, copy) in enumerate(zip(response_spans, copies)):
        if copy is None:
            continue
        failed = failed_in.get(i, [])
        quoted = copy.source.strip().rstrip(" .!?")
        for x, y, _theirs in scope_changes(copy):
            if not any(a < span.start + y and span.start + x < b for a, b in failed):
                out.append(FactFinding(text=span.text[x:y], kind="scope", start=span.start + x, end=span.start + y,
                                       sentence=i, status="contradicted", source=quoted))  # fmt: skip
        for x, y in added_items(copy, span.text, known, _stems_of):
            if not any(a < span.start + y and span.start + x < b for a, b in failed):
                out.append(FactFinding(text=span.text[x:y], kind="claim", start=span.start + x, end=span.start + y,
                                       sentence=i, status="unsupported", source=None))  # fmt: skip
    return out


def _condition_findings(
    clauses: Sequence[_Clause], response_spans: Sequence[TextSpan], ctx: ContextClaims
) -> list[FactFinding]:
    """Each context condition the response leaves out while asserting what it restricts; one such
    finding a response sentence at most."""
    said = set().union(*(c.topic for c in clauses)) if clauses else set()
    said |= {n for span in response_spans for n in _numbers_of(span.text)}
    by_sentence: list[list[_Clause]] = [[] for _ in response_spans]
    for c in clauses:
        by_sentence[c.sentence].append(c)
    closest = _closest_sentences(by_sentence, ctx)
    flagged: set[int] = set()
    out: list[FactFinding] = []
    for cond in ctx.conditions:
        if cond.own & said:
            continue
        hit = _asserts_restricted(cond, by_sentence, closest, flagged)
        if hit is not None:
            i, c = hit
            out.append(_finding(c, "condition", "unsupported", cond.text))
            flagged.add(i)
    return out


def _closest_sentences(by_sentence: Sequence[Sequence[_Clause]], ctx: ContextClaims) -> dict[int, tuple[float, int]]:
    """What each response sentence is about: the overlap with the context clause sharing the most with
    it, and that clause's sentence. When it is another sentence than a condition's, the condition
    restricts something else."""
    closest: dict[int, tuple[float, int]] = {}
    for i, mine in enumerate(by_sentence):
        topic = set().union(*(c.topic for c in mine)) if mine else set()
        if topic and ctx.clauses:
            top = ctx.by_topic().top(dict.fromkeys(topic, 1.0))
            closest[i] = (top.best, ctx.clauses[top.first()].sentence)
    return closest


def _asserts_restricted(
    cond: _Condition,
    by_sentence: Sequence[Sequence[_Clause]],
    closest: dict[int, tuple[float, int]],
    flagged: set[int],
) -> tuple[int, _Clause] | None:
    """The first response sentence not yet flagged that asserts what ``cond`` restricts (half its
    main stems, in a clause not negated), with that clause; None when there is none."""
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
        return i, asserting[0]
    return None
