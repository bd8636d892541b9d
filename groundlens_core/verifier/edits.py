"""Generated training pairs: minimal edits of a source's own sentences, and faithful rewrites.

Labelled sets written by others teach what their authors' errors look like; the errors an assistant
makes with a source in front of it are often smaller: one value, one name, one word of polarity.
This module makes such pairs from any context, deterministically (a seeded ``random.Random``; the
same contexts and seed give the same rows), each with the kind of edit that made it:

unsupported (label 0)
    ``number`` (a value changed), ``number_elsewhere`` (a value the source gives for something
    else), ``entity`` (a name swapped for another the source names), ``polarity`` (negated, or a
    word turned into its opposite), ``scope`` (some/all, may/must, at least/at most), ``condition``
    (an ``unless``/``if``/``except`` clause dropped), ``list_added`` (an item the list does not
    have), ``added_claim`` (a sentence of another source appended), ``conversion_wrong`` (a unit
    converted with the wrong factor)
supported (label 1)
    ``copy`` (the sentence as the source says it), ``conversion`` (a value in other units: 500 ms
    as 0.5 seconds, 2 hours as 120 minutes), ``derived`` (a sum or difference of two values the
    source gives in the same unit, stated as such), ``abstention`` (the source does not say what
    a question from another source asks), ``shortened`` (a list sentence with an item left out,
    worded as "among them")

Contexts are split with the product's sentence splitter; edits that find nothing to change in a
sentence are skipped, never forced.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Iterable, Sequence

from groundlens_core.evidence.sentences import split_sentences

SEED = 20261207


@dataclass(frozen=True)
class EditedPair:
    question: str
    context: str
    response: str
    label: int  # 1 = supported by the context
    kind: str
    origin: str  # which pool file the context came from (so leave-one-file-out can leave it out)


_NUMBER = re.compile(r"(?<![\w.])(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)(?![\w])")
_NAME = re.compile(r"\b([A-Z][a-z]+(?:\s+[A-Z][a-z]+){0,2})\b")
_FLIPS = [
    (r"\bis not\b", "is"),
    (r"\bare not\b", "are"),
    (r"\bcannot\b", "can"),
    (r"\bdoes not\b", "does"),
    (r"\bis\b", "is not"),
    (r"\bare\b", "are not"),
    (r"\bwas\b", "was not"),
    (r"\bwere\b", "were not"),
    (r"\bcan\b", "cannot"),
    (r"\bwill\b", "will not"),
    (r"\bhas\b", "does not have"),
    (r"\balways\b", "never"),
    (r"\bnever\b", "always"),
    (r"\ballowed\b", "prohibited"),
    (r"\bpermitted\b", "forbidden"),
    (r"\bopen\b", "closed"),
    (r"\bclosed\b", "open"),
    (r"\bincluded\b", "excluded"),
    (r"\bincreased\b", "decreased"),
    (r"\bdecreased\b", "increased"),
    (r"\bbefore\b", "after"),
    (r"\bafter\b", "before"),
    (r"\bmore\b", "less"),
    (r"\bhigher\b", "lower"),
    (r"\blower\b", "higher"),
    (r"\bfree\b", "charged"),
    (r"\brequired\b", "optional"),
    (r"\bwon\b", "lost"),
    (r"\bfirst\b", "last"),
    (r"\blargest\b", "smallest"),
    (r"\bnorth\b", "south"),
    (r"\beast\b", "west"),
]
_SCOPES = [
    (r"\bsome\b", "all"),
    (r"\bmost\b", "all"),
    (r"\bmay\b", "must"),
    (r"\bcan\b", "must"),
    (r"\bat least\b", "at most"),
    (r"\bat most\b", "at least"),
    (r"\bup to\b", "at least"),
    (r"\bonly\b", "also"),
    (r"\busually\b", "always"),
    (r"\boften\b", "always"),
]
_CONDITION = re.compile(r",?\s+\b(unless|except|provided that|as long as|only if|if|when|but only)\b[^.;]*", re.I)
_LIST = re.compile(r"\b(\w+(?: \w+)?), (\w+(?: \w+)?),? (and|or) (\w+(?: \w+)?)\b")
#: (pattern of a value with its unit, factor, the other unit): 500 ms -> 0.5 seconds
_CONVERSIONS = [
    (r"(\d+(?:\.\d+)?) ?(?:ms|milliseconds)\b", 0.001, "seconds"),
    (r"(\d+(?:\.\d+)?) ?(?:seconds|secs)\b", 1000.0, "milliseconds"),
    (r"(\d+(?:\.\d+)?) ?(?:minutes|mins)\b", 60.0, "seconds"),
    (r"(\d+(?:\.\d+)?) ?hours?\b", 60.0, "minutes"),
    (r"(\d+(?:\.\d+)?) ?days?\b", 24.0, "hours"),
    (r"(\d+(?:\.\d+)?) ?weeks?\b", 7.0, "days"),
    (r"(\d+(?:\.\d+)?) ?years?\b", 12.0, "months"),
    (r"(\d+(?:\.\d+)?) ?(?:km|kilometres|kilometers)\b", 1000.0, "metres"),
    (r"(\d+(?:\.\d+)?) ?(?:kg|kilograms)\b", 1000.0, "grams"),
    (r"(\d+(?:\.\d+)?) ?(?:m|metres|meters)\b", 100.0, "centimetres"),
    (r"(\d+(?:\.\d+)?) ?(?:l|litres|liters)\b", 1000.0, "millilitres"),
    (r"(\d+(?:\.\d+)?) ?(?:GB|gigabytes)\b", 1000.0, "megabytes"),
    (r"(\d+(?:\.\d+)?) ?(?:%|percent|per cent)", 0.01, "as a fraction"),
]
#: rewordings that keep the meaning (a polarity or a bound said in other words is still the same claim)
_SAME_MEANING = [
    (r"\bcannot\b", "is not able to"),
    (r"\bcan not\b", "cannot"),
    (r"\bmust\b", "has to"),
    (r"\bis required to\b", "must"),
    (r"\bprohibited\b", "not allowed"),
    (r"\bnot allowed\b", "prohibited"),
    (r"\bforbidden\b", "not permitted"),
    (r"\bfree of charge\b", "at no cost"),
    (r"\bfor free\b", "at no charge"),
    (r"\bis closed\b", "is not open"),
    (r"\bmore than\b", "over"),
    (r"\bless than\b", "under"),
    (r"\bat least\b", "no fewer than"),
    (r"\bup to\b", "a maximum of"),
    (r"\bat most\b", "no more than"),
    (r"\bbefore\b", "prior to"),
    (r"\bafter\b", "following"),
    (r"\bapproximately\b", "about"),
    (r"\baround\b", "roughly"),
    (r"\bpurchase\b", "buy"),
    (r"\breceive\b", "get"),
    (r"\brequires\b", "needs"),
    (r"\brequire\b", "need"),
    (r"\bbegins\b", "starts"),
    (r"\bbegan\b", "started"),
    (r"\bends\b", "finishes"),
    (r"\bhowever\b", "but"),
    (r"\bbecause\b", "since"),
    (r"\badditional\b", "extra"),
    (r"\blarge\b", "big"),
    (r"\bsmall\b", "little"),
    (r"\bquickly\b", "fast"),
    (r"\bhelp\b", "assist"),
    (r"\bshows\b", "indicates"),
    (r"\bsaid\b", "stated"),
    (r"\bpercent\b", "%"),
    (r"\bper cent\b", "%"),
    (r"\b50 ?%", "half"),
    (r"\b25 ?%", "a quarter"),
    (r"\b14 days\b", "two weeks"),
    (r"\b7 days\b", "one week"),
    (r"\b12 months\b", "one year"),
    (r"\b24 hours\b", "one day"),
    (r"\b60 minutes\b", "one hour"),
    (r"\b2\b", "two"),
    (r"\b3\b", "three"),
    (r"\b4\b", "four"),
    (r"\b5\b", "five"),
    (r"\btwo\b", "2"),
    (r"\bthree\b", "3"),
    (r"\bten\b", "10"),
    (r"\bdoes not\b", "doesn't"),
    (r"\bis not\b", "isn't"),
    (r"\bwill not\b", "won't"),
    (r"\bchildren\b", "kids"),
    (r"\bcustomers\b", "clients"),
    (r"\bemployees\b", "staff"),
    (r"\bapproved\b", "accepted"),
    (r"\bcompleted\b", "finished"),
    (r"\bobtain\b", "get"),
    (r"\bprovide\b", "give"),
    (r"\bprovides\b", "gives"),
]
_FRAMES = (
    "According to the document, {s}",
    "The source says that {s}",
    "Yes: {s}",
    "In short, {s}",
    "{s} That is what the text states.",
    "Based on the provided information, {s}",
)
_ABSTAIN = (
    "The document does not say {q}",
    "The provided text does not mention this.",
    "The source does not give that information.",
    "I can't find that in the document; it does not say {q}",
)


def _reword(rng: random.Random, s: str, most: int = 3) -> str | None:
    """``s`` with up to ``most`` same-meaning rewordings applied; None when none applies."""
    options = [(p, r) for p, r in _SAME_MEANING if re.search(p, s)]
    if not options:
        return None
    rng.shuffle(options)
    out = s
    for p, r in options[: rng.randint(1, most)]:
        out = _sub_once(p, r, out, rng) or out
    return out if out != s else None


def _frame(rng: random.Random, s: str) -> str:
    """``s`` framed as an assistant would say it (the claim unchanged)."""
    frame = rng.choice(_FRAMES)
    first = s.split(" ", 1)[0]
    if frame.startswith("{s}") or first not in _LOWER_FIRST:
        return frame.format(s=s)
    return frame.format(s=s[0].lower() + s[1:])


_LOWER_FIRST = frozenset(
    "The A An It This That These Those There Its Their Our Your We You They He She Each Every All".split()
)


def _fmt(x: float) -> str:
    if abs(x - round(x)) < 1e-9:
        return f"{int(round(x)):,}" if abs(x) >= 10000 else str(int(round(x)))
    return f"{x:.3f}".rstrip("0").rstrip(".")


def _num(s: str) -> float:
    return float(s.replace(",", ""))


def _other_number(rng: random.Random, value: str) -> str:
    x = _num(value)
    if "." in value and "," not in value:
        y = round(x * rng.choice([0.5, 1.5, 2.0, 0.8, 1.25]), len(value.split(".")[1]))
        return f"{y:.{len(value.split('.')[1])}f}" if y != x else f"{x + 1:.{len(value.split('.')[1])}f}"
    if 1900 <= x <= 2100:
        return str(int(x) + rng.choice([-3, -2, -1, 1, 2, 3]))
    choices = [x + 1, x - 1, x * 2, x + 10, x * 3, x + 5] if x > 2 else [x + 1, x + 2, x + 3]
    y = rng.choice([c for c in choices if c > 0 and c != x] or [x + 1])
    return f"{int(y):,}" if "," in value else _fmt(y)


def _sub_once(pattern: str, repl: str, text: str, rng: random.Random) -> str | None:
    hits = list(re.finditer(pattern, text))
    if not hits:
        return None
    m = rng.choice(hits)
    return text[: m.start()] + repl + text[m.end() :]


def _usable(sentence: str) -> bool:
    words = sentence.split()
    return 5 <= len(words) <= 45


def _negatives(rng: random.Random, s: str, context: str, others: Sequence[str]) -> list[tuple[str, str]]:
    """(edited sentence, kind) for each edit that applies to ``s``."""
    out: list[tuple[str, str]] = []
    nums = list(_NUMBER.finditer(s))
    if nums:
        m = rng.choice(nums)
        out.append((s[: m.start()] + _other_number(rng, m.group(1)) + s[m.end() :], "number"))
        elsewhere = [v.group(1) for v in _NUMBER.finditer(context) if v.group(1) not in {n.group(1) for n in nums}]
        if elsewhere:
            out.append((s[: m.start()] + rng.choice(elsewhere) + s[m.end() :], "number_elsewhere"))
    names = {m.group(1) for m in _NAME.finditer(s) if m.start() > 0}
    pool = sorted({m.group(1) for m in _NAME.finditer(context)} - names - {w for n in names for w in n.split()})
    if names and pool:
        name = rng.choice(sorted(names))
        out.append((s.replace(name, rng.choice(pool), 1), "entity"))
    flips = [(p, r) for p, r in _FLIPS if re.search(p, s)]
    if flips:
        p, r = flips[0] if rng.random() < 0.5 else rng.choice(flips)
        edited = _sub_once(p, r, s, rng)
        if edited:
            out.append((edited, "polarity"))
    scopes = [(p, r) for p, r in _SCOPES if re.search(p, s)]
    if scopes:
        p, r = rng.choice(scopes)
        edited = _sub_once(p, r, s, rng)
        if edited:
            out.append((edited, "scope"))
    cond = _CONDITION.search(s)
    if cond and len(cond.group(0).split()) >= 3 and len(s[: cond.start()].split()) >= 4:
        out.append((s[: cond.start()] + s[cond.end() :], "condition"))
    lst = _LIST.search(s)
    if lst:
        extra = [w for w in re.findall(r"\b[a-z]{5,}\b", rng.choice(others)) if w not in s]
        if extra:
            item = rng.choice(extra)
            out.append(
                (s[: lst.end(2)] + f", {lst.group(4)}" + f" {lst.group(3)} {item}" + s[lst.end() :], "list_added")
            )
    other = [x.text for x in split_sentences(rng.choice(others)) if _usable(x.text)]
    if other:
        out.append((s.rstrip() + " " + rng.choice(other), "added_claim"))
    conv = _conversion(rng, s, wrong=True)
    if conv:
        out.append((conv, "conversion_wrong"))
    # an edit in reworded text: rewording is no sign of an error, nor of its absence
    reworded = []
    for text, kind in out:
        if kind != "added_claim" and rng.random() < 0.35:
            rewritten = _reword(rng, text, most=2)
            if rewritten:
                reworded.append((rewritten, kind))
    return out + reworded


def _conversion(rng: random.Random, s: str, wrong: bool = False) -> str | None:
    for pattern, factor, unit in _CONVERSIONS:
        m = re.search(pattern, s)
        if not m:
            continue
        x = _num(m.group(1))
        f = factor * rng.choice([10.0, 0.1]) if wrong else factor
        return s[: m.start()] + f"{_fmt(x * f)} {unit}" + s[m.end() :]
    return None


def _derived(rng: random.Random, s: str) -> str | None:
    """Two values of the same unit in one sentence: their sum or difference, said as such."""
    m = re.findall(r"(\d+(?:\.\d+)?) ?(%|percent|euros?|dollars?|days|hours|minutes|km|kg|mg|ml|people|items)\b", s)
    pairs = [(a, b) for a in m for b in m if a[1] == b[1] and a[0] != b[0]]
    if not pairs:
        return None
    (x, unit), (y, _) = pairs[0]
    a, b = _num(x), _num(y)
    if rng.random() < 0.5:
        return s.rstrip(". ") + f", a difference of {_fmt(abs(a - b))} {unit}."
    return s.rstrip(". ") + f", {_fmt(a + b)} {unit} in total."


def _positives(rng: random.Random, s: str, questions: Sequence[str]) -> list[tuple[str, str, str | None]]:
    """(text, kind, the question it answers when not the row's own)."""
    out: list[tuple[str, str, str | None]] = [(s, "copy", None)]
    conv = _conversion(rng, s)
    if conv:
        out.append((conv, "conversion", None))
    der = _derived(rng, s)
    if der:
        out.append((der, "derived", None))
    for _ in range(2):
        re_s = _reword(rng, s)
        if re_s:
            out.append((re_s, "reworded", None))
    lst = _LIST.search(s)
    if lst and not re.search(r"\b(only|all|both|three|four|two)\b", s, re.I):
        out.append(
            (s[: lst.start()] + f"{lst.group(1)} and {lst.group(4)}, among others" + s[lst.end() :], "shortened", None)
        )
    if questions:
        asked = rng.choice(questions).strip()
        q = asked.rstrip("?").strip()
        if q:
            q = q[0].lower() + q[1:]
            out.append((rng.choice(_ABSTAIN).format(q=q + "."), "abstention", asked))
    return out


def generate(rows: Iterable[tuple[str, str, str]], seed: int = SEED, per_context: int = 2) -> list[EditedPair]:
    """Edited pairs from ``rows`` of (question, context, origin): for each distinct context, up to
    ``per_context`` supported and as many unsupported pairs, each from another of its sentences.
    An abstention answers a question taken from another context of the same origin."""
    rng = random.Random(seed)
    seen: dict[str, tuple[str, str]] = {}
    for question, context, origin in rows:
        if context and context not in seen:
            seen[context] = (question, origin)
    contexts = list(seen)
    by_origin: dict[str, list[str]] = {}
    for q, o in seen.values():
        if q:
            by_origin.setdefault(o, []).append(q)
    out: list[EditedPair] = []
    for c in contexts:
        question, origin = seen[c]
        sentences = [x.text for x in split_sentences(c) if _usable(x.text)]
        if not sentences:
            continue
        rng.shuffle(sentences)
        others = [rng.choice(contexts) for _ in range(3)]
        others = [o for o in others if o != c] or [c]
        asked = question if rng.random() < 0.5 else ""
        other_qs = [q for q in by_origin.get(origin, []) if q != question][:50]
        for s in sentences[:per_context]:
            pos = _positives(rng, s, rng.sample(other_qs, min(3, len(other_qs))))
            # verbatim copies are common in the pool already: prefer the rewrites, and abstain
            # now and then (an abstention fits any context, so it would otherwise crowd the rest)
            rewrites = [p for p in pos if p[1] not in ("copy", "abstention")]
            abstain = [p for p in pos if p[1] == "abstention"]
            if rewrites:
                text, kind, other_q = rng.choice(rewrites)
            elif abstain and rng.random() < 0.2:
                text, kind, other_q = abstain[0]
            else:
                text, kind, other_q = pos[0]
            framed = kind != "abstention" and rng.random() < 0.25
            out.append(
                EditedPair(
                    other_q if other_q is not None else asked, c, _frame(rng, text) if framed else text, 1, kind, origin
                )
            )
            if rng.random() < 0.3:
                out.append(EditedPair(asked, c, s, 1, "copy", origin))
            neg = _negatives(rng, s, c, others)
            if neg:
                # a value or a word changed, more often than a sentence added: the hard cases
                text, kind = (
                    rng.choice([n for n in neg if n[1] != "added_claim"] or neg)
                    if rng.random() < 0.8
                    else rng.choice(neg)
                )
                framed = rng.random() < 0.25
                out.append(EditedPair(asked, c, _frame(rng, text) if framed else text, 0, kind, origin))
    return out
