"""Values an answer works out from values its source states: a sum, a difference, a product, a
ratio, a percentage, a rate times a quantity, a time between two clock times.

Why: an assistant answers "€80 captured, €30 already refunded, so €50 is left" or "25 mg/kg × 18 kg
= 450 mg". The source states €80, €30, 25 mg/kg and 18 kg; it never writes €50 or 450 mg, and
neither is a changed value. Such a value is **supported**, with the working named
(``source``: "€80 − €30").

The search is bounded, so that its cost stays a constant per fact: it runs only for a value that
failed the direct check in a sentence that says it works something out (:data:`CUE`: "so", "left",
"in total", "×", "=", "per", "each", "fewer" ...), over at most :data:`POOL` operands (the values the
response itself states nearby, then the source's values of the same dimension, scalars and the
quantities a rate applies to), each pair tried once with one operation of each kind. The two ends
of a range ("5 to 10 business days") are never added.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import combinations
from typing import Iterable, Sequence

from groundlens_core.evidence.facts import Fact
from groundlens_core.evidence.units import UNITS

__all__ = ["CUE", "POOL", "derivation"]

#: words that say a sentence works a value out
CUE = re.compile(
    r"(?:[×x*/=+≈÷]|\s-\s)|\b(?:so|left|remain(?:s|ing)?|remainder|total(?:s|ling|ing)?|altogether|in all|combined|sum"
    r"|plus|minus|less|more|fewer|extra|difference|times|each|per|which is|which means|that is|that's|i\.e"
    r"|comes? to|works? out|becomes?|equals?|means|adds? up|sav(?:e|es|ing|ings)|discount|off|net|overall"
    r"|twice|half|double|triple|out of|of which|after|instead|rather|longer|shorter|cheaper|earlier|later"
    r"|up from|down from|increase[sd]?|decrease[sd]?|rise|drop|or about|in seconds|in minutes|in hours)\b",
    re.I,
)
#: at most this many operands of each kind are tried for one fact
POOL = 16
#: ratios between units of time a rate is written in ("£12 a month" is "£144 a year")
_PER = {("day", "week"): 7, ("day", "year"): 365, ("week", "year"): 52, ("month", "year"): 12, ("hour", "day"): 24,
        ("minute", "hour"): 60, ("second", "minute"): 60, ("night", "week"): 7}  # fmt: skip
_DIMS_DERIVED = frozenset({"percent", "count", "duration", "month", "business day", "school day", "night", "mass",
                           "length", "volume", "data", "energy", "power", "bitrate"})  # fmt: skip


def derivable(fact: Fact) -> bool:
    """A fact a derivation may support: a number in a dimension arithmetic applies to."""
    return type(fact.value) is float and (fact.dim in _DIMS_DERIVED or fact.dim.startswith("money:"))


def _a_range(a: Fact, b: Fact) -> bool:
    """Two facts of one text written as the ends of one range ("5 to 10", "5–10")."""
    x, y = (a, b) if a.start <= b.start else (b, a)
    return a.dim == b.dim and 0 <= y.start - x.end <= 4 and abs(x.start - y.start) < 40


def _rate_dim(rate: str) -> tuple[str, float] | None:
    """The dimension and factor of the unit a rate is per ("kg" -> mass, 1000; "day" -> duration, 1440)."""
    return UNITS.get(rate) or UNITS.get(rate + "s")


def _num(f: Fact) -> float:
    return float(f.value)  # type: ignore[arg-type]


@dataclass(frozen=True)
class _Target:
    """The value a working must reach, within the tolerance its qualifier allows."""

    value: float
    tol: float

    def hit(self, x: float) -> bool:
        return abs(x - self.value) <= self.tol


def _pairs(group: Sequence[Fact]) -> Iterable[tuple[Fact, Fact]]:
    """Each pair of ``group`` once, the two ends of a range left out."""
    return ((a, b) for a, b in combinations(group, 2) if not _a_range(a, b))


def derivation(fact: Fact, operands: Iterable[Fact]) -> str | None:
    """How ``fact``'s value is worked out from ``operands`` ("€80 − €30", "25 mg × 18 kg"), or None."""
    v = _num(fact)
    target = _Target(v, (0.02 if fact.approx == "~" else 0.005) * abs(v) + 1e-9)
    ops = _distinct(operands)
    same = [o for o in ops if o.dim == fact.dim and not (fact.rate and o.rate and fact.rate != o.rate)][:POOL]
    found = _sum_or_difference(target, same)
    if found:
        return found
    found = _scaled(target, fact, ops, same)
    if found is None:
        found = _rate_times(target, fact, ops)
    if found is None and fact.dim == "percent":
        found = _share_or_change(target, ops)
    if found is None and fact.dim == "count":
        found = _ratio_or_product(target, ops)
    if found is None and fact.dim == "duration":
        found = _clock_gap(target, ops)
    return found


def _distinct(operands: Iterable[Fact]) -> list[Fact]:
    """The finite numeric operands, one per value: a value stated twice is no second operand."""
    seen: dict[tuple, Fact] = {}
    for o in operands:
        if type(o.value) is float and o.value == o.value and abs(o.value) != float("inf"):
            seen.setdefault((o.dim, o.value, o.rate), o)
    return list(seen.values())


def _sum_or_difference(target: _Target, same: list[Fact]) -> str | None:
    """A sum or a difference of two values of the fact's dimension, or a list's total."""
    tries = (
        t
        for a, b in _pairs(same)
        for t in (
            (_num(a) + _num(b), lambda a=a, b=b: f"{a.text} + {b.text}"),
            (_num(a) - _num(b), lambda a=a, b=b: f"{a.text} \u2212 {b.text}"),
            (_num(b) - _num(a), lambda a=a, b=b: f"{b.text} \u2212 {a.text}"),
        )
    )
    found = next((say() for x, say in tries if target.hit(x)), None)
    if found:
        return found
    if len(same) >= 3 and target.hit(sum(_num(o) for o in same)):
        return " + ".join(o.text for o in same)
    return None


def _scaled(target: _Target, fact: Fact, ops: list[Fact], same: list[Fact]) -> str | None:
    """A value of the fact's dimension (or a rate in it) times or divided by a count, or a
    percentage of it, less it or plus it."""
    scalars = [o for o in ops if o.dim == "count"][:POOL]
    percents = [o for o in ops if o.dim == "percent" and fact.dim != "percent"][:POOL]
    for a in same + [o for o in ops if o.dim == fact.dim and o.rate and o not in same]:
        for n in scalars:
            if not _num(n):
                continue
            if target.hit(_num(a) * _num(n)):
                return f"{a.text} \u00d7 {n.text}"
            if target.hit(_num(a) / _num(n)):
                return f"{a.text} \u00f7 {n.text}"
        for p in percents:
            share = _num(p) / 100
            tries = ((_num(a) * share, "of"), (_num(a) * (1 - share), "less"), (_num(a) * (1 + share), "plus"))
            for worked, how in tries:
                if target.hit(worked):
                    return f"{p.text} of {a.text}" if how == "of" else f"{a.text} {how} {p.text}"
    return None


def _rate_times(target: _Target, fact: Fact, ops: list[Fact]) -> str | None:
    """A rate times a quantity ("25 mg/kg" × "18 kg", "$18 per day" × "3 days"), or a rate per
    another unit of time ("£12 a month" is "£144 a year")."""
    for a in ops:
        if a.dim != fact.dim or not a.rate:
            continue
        unit = _rate_dim(a.rate)
        if unit is not None:
            for q in ops:
                if q.dim == unit[0] and q is not a and target.hit(_num(a) * _num(q) / unit[1]):
                    return f"{a.text} per {a.rate} \u00d7 {q.text}"
        if fact.rate and fact.rate != a.rate:
            k = _PER.get((a.rate, fact.rate))
            if k and target.hit(_num(a) * k):
                return f"{a.text} per {a.rate} \u00d7 {k}"
            k = _PER.get((fact.rate, a.rate))
            if k and target.hit(_num(a) / k):
                return f"{a.text} per {a.rate} \u00f7 {k}"
    return None


def _share_or_change(target: _Target, ops: list[Fact]) -> str | None:
    """A percentage as a share ("3 of 12 is 25%"), a change ("from €80 to €100 is 25% more"), or the
    difference of two percentages."""
    for a, b in combinations([o for o in ops if o.dim != "percent"][:POOL], 2):
        if a.dim != b.dim or not _num(a) or not _num(b):
            continue
        for x, y in ((a, b), (b, a)):
            if target.hit(100 * _num(x) / _num(y)) or target.hit(100 * abs(_num(x) - _num(y)) / _num(y)):
                return f"{x.text} / {y.text}"
    for a, b in _pairs([o for o in ops if o.dim == "percent"][:POOL]):
        if target.hit(abs(_num(a) - _num(b))):
            return f"{a.text} \u2212 {b.text}"
    return None


def _ratio_or_product(target: _Target, ops: list[Fact]) -> str | None:
    """A count as a ratio of two values ("€120 ÷ €12 = 10") or a product of two counts."""
    for a, b in combinations([o for o in ops if o.dim != "percent"][:POOL], 2):
        if a.dim == b.dim and a.rate == b.rate and _num(a) and _num(b):
            for x, y in ((a, b), (b, a)):
                if target.hit(_num(x) / _num(y)):
                    return f"{x.text} \u00f7 {y.text}"
            if a.dim == "count" and not _a_range(a, b) and target.hit(_num(a) * _num(b)):
                return f"{a.text} \u00d7 {b.text}"
    return None


def _clock_gap(target: _Target, ops: list[Fact]) -> str | None:
    """A duration as the time between two clock times (across midnight, or half a day apart when
    one is written without "am" / "pm")."""
    times = [o for o in ops if o.dim == "time"][:POOL]
    for a, b in combinations(times, 2):
        gap = abs(_num(a) - _num(b))
        if target.hit(gap) or target.hit(1440 - gap) or ("12h" in (a.noun, b.noun) and target.hit(abs(gap - 720))):
            return f"{a.text} to {b.text}"
    return None
