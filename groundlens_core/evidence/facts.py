"""Specific facts of a sentence: amounts, quantities with their unit, percentages, times, dates, names.

Why: an embedding and a word count both treat "25%" like "like". A response that copies its source
and changes one number keeps nearly every word, so it looks better grounded than a correct answer in
other words. Facts are what a reader acts on, so they are extracted and normalised here and checked
one by one against the context in :mod:`groundlens_core.evidence.factcheck`.

A :class:`Fact` has a *dimension* (what it measures: ``money:GBP``, ``duration``, ``percent``,
``time``, ``date``, ``count``, ``name`` ...) and a value in that dimension's base unit, so that
"two weeks" = "14 days", "24 months" = "2 years", "$12" = "12 dollars", "€5,000" = "5,000 euros",
"15 per cent" = "15%", "3 pm" = "15:00" = "three in the afternoon", "30 April" = "April 30".
Number words ("forty-eight", "a dozen", "twice", "half") are read with ``text2num``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from text_to_num import text2num

from groundlens_core.evidence.lemmas import stem
from groundlens_core.evidence.units import CURRENCIES, MONTHS, UNITS
from groundlens_core.evidence.units import SCALES as _SCALES

__all__ = ["Fact", "extract_facts", "UNITS", "blank_controls"]


@dataclass(frozen=True)
class Fact:
    """One specific fact: ``dim`` and ``value`` compare; ``text`` and ``[start, end)`` locate it."""

    dim: str  # "money:GBP" | "percent" | "duration" | "month" | "business day" | "time" | "date" | "count" | "name" ...
    value: float | str  # numbers in the dimension's base unit; names and labels as folded text
    text: str  # as written
    start: int
    end: int
    noun: str = ""  # the noun a bare count attaches to ("3 attempts" -> "attempt")
    approx: str = ""  # "<=" ("no more than", "up to"), ">=" ("at least"), ">" ("more than"), "<" ("under"), "~"
    rate: str = ""  # the unit an amount is per ("$18 per day" -> "day"), compared when both sides give one


# ---------------------------------------------------------------- tokens

_NUMBER_WORDS = frozenset(
    """zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen
    seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety hundred thousand million
    billion""".split()
)
#: words that stand for a number on their own
_SPECIAL_NUMBERS = {"dozen": 12.0, "twice": 2.0, "half": 0.5, "once": 1.0, "thrice": 3.0, "couple": 2.0}
#: one of a unit: "a week", "an hour", "one month", "per day" is a rate, not a fact
_ONE = frozenset({"a", "an", "one", "single"})
#: words that may stand between a number and its unit ("3 extra working days", "5 unused days")
_BETWEEN = frozenset(
    """extra more further additional full whole consecutive clear unused paid free calendar straight
    complete separate other late early fewer""".split()
)
#: capitalised words before a number that do not name it ("All 3 plans", "Only 2 refunds")
_LABEL_STOP = frozenset(
    "the a an this that these those it in on at by for all only around about some over under up to each every "
    "any no both just nearly almost".split()
)

_TOKEN = re.compile(
    r"""
    (?P<time>\b\d{1,2}[:.]\d{2}(?:\s*[ap]\.?m\.?(?![a-z]))?(?![\d]))            # 9:30, 3.00 pm, 23:59
  | (?P<ampm>\b\d{1,2}\s*[ap]\.?m\.?(?![a-z]))                          # 3 pm, 11am
  | (?P<num>(?:(?:US)?[$€£¥₹]\s?)?\d+(?:,\d{3})*(?:\.\d+)?(?:st|nd|rd|th)?(?:%|p\b)?)  # $1,200.50, 15%, 13.5p, 21st
  | (?P<word>[^\W\d_]+(?:['’][^\W\d_]+)*)
  | (?P<sym>[%°$€£¥₹])
  | (?P<dash>[-–—])
  | (?P<punct>[,;:()!?.\[\]"“”])
    """,
    re.VERBOSE,
)


@dataclass(frozen=True)
class _Tok:
    kind: str
    text: str
    start: int
    end: int

    @property
    def low(self) -> str:
        return self.text.lower().replace("’", "'")


def _tokens(text: str) -> list[_Tok]:
    return [_Tok(m.lastgroup or "", m.group(0), m.start(), m.end()) for m in _TOKEN.finditer(text)]


def _num_value(raw: str) -> tuple[float, str | None, bool, bool]:
    """(value, currency code, percent, pence) of a numeric token such as ``$1,200``, ``15%``, ``13.5p``."""
    cur = None
    m = re.match(r"(?:US)?([$€£¥₹])\s?", raw)
    if m:
        cur = CURRENCIES[m.group(1)][0]
        raw = raw[m.end() :]
    pct = raw.endswith("%")
    pence = raw.endswith("p")
    digits = re.sub(r"(st|nd|rd|th)$", "", raw.rstrip("%p")).replace(",", "")
    return float(digits), cur, pct, pence


def _word_number(words: list[str]) -> float | None:
    try:
        return float(text2num(" ".join(words), "en"))
    except ValueError:
        return None


# ---------------------------------------------------------------- extraction


def _unit_at(toks: list[_Tok], i: int) -> tuple[str, float, int, str] | None:
    """The unit starting at token ``i`` (skipping a few modifiers): (dim, factor, index after, noun)."""
    j = i
    while j < len(toks) and toks[j].kind == "dash":
        j += 1  # "21-day"
    k = j
    while k < len(toks) and toks[k].kind == "word" and toks[k].low in _BETWEEN and k - j < 2:
        k += 1
    for start in (j, k) if k != j else (j,):
        if start >= len(toks):
            continue
        t = toks[start]
        if t.kind == "sym" and t.text == "%":
            return "percent", 1.0, start + 1, ""
        if t.kind != "word":
            continue
        if t.low == "s" and start and toks[start - 1].end == t.start:
            continue  # "1990s", "20s": a plural, not seconds
        if start + 1 < len(toks) and toks[start + 1].kind == "word":
            two = f"{t.low} {toks[start + 1].low}"
            if two in UNITS:
                dim, f = UNITS[two]
                return dim, f, start + 2, ""
        if t.low in UNITS:
            dim, f = UNITS[t.low]
            return dim, f, start + 1, ""
        if t.low in CURRENCIES:
            code, f = CURRENCIES[t.low]
            return f"money:{code}", f, start + 1, ""
    return None


_OF_DETERMINERS = frozenset("the its their his her our your my these those this that".split())


def _noun_after(toks: list[_Tok], i: int) -> str:
    """The first content words after a bare count ("3 graded quizzes" -> "grade quizz"): what it
    counts; after "of" and a determiner, the noun it takes from ("two of the city's churches" ->
    "citi church")."""
    from groundlens_core.evidence.content import STOP_WORDS

    out = []
    if i + 1 < len(toks) and toks[i].low == "of":
        i += 1
        while i < len(toks) and toks[i].low in _OF_DETERMINERS:
            i += 1
    for t in toks[i : i + 4]:
        if t.kind != "word" or t.low in STOP_WORDS:
            break
        out.append(stem(t.low))
    return " ".join(out[:3])


def _time_value(text: str) -> float | None:
    m = re.match(r"(\d{1,2})(?:[:.](\d{2}))?\s*([ap])?", text.lower())
    if not m:
        return None
    h, mins = int(m.group(1)), int(m.group(2) or 0)
    if m.group(3) == "p" and h < 12:
        h += 12
    if m.group(3) == "a" and h == 12:
        h = 0
    if h > 24 or mins > 59:
        return None
    return float(h * 60 + mins)


#: what a terminal reads as a command, not as text: escape sequences (OSC "ESC ] 0;title BEL" sets a
#: title, CSI "ESC [ 2 J" clears the screen; their 8-bit forms), then any other control character
_CONTROLS = re.compile(
    r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC, ended by BEL or ST
    r"|\x1b\][0-9]*;?"  # an OSC never ended: its number
    r"|\x1b[PX^_][^\x1b]*\x1b\\"  # DCS, SOS, PM, APC strings
    r"|\x1b\[[0-?]*[ -/]*[@-~]"  # CSI
    r"|\x1b[ -/]*[0-~]"  # any other escape ("ESC ( B", "ESC c")
    r"|\x9b[0-?]*[ -/]*[@-~]"  # CSI in one byte
    r"|\x9d[^\x07\x9c]*(?:\x07|\x9c)"  # OSC in one byte
    r"|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]"
)


def blank_controls(text: str) -> str:
    """``text`` with every terminal escape sequence and control character (tab and line breaks
    kept) replaced by as many spaces: no number inside one is read as a fact, and every offset into
    the text still points at the same character of the original."""
    if not _CONTROLS.search(text):
        return text
    return _CONTROLS.sub(lambda m: " " * len(m.group(0)), text)


def extract_facts(text: str, offset: int = 0) -> list[Fact]:
    """The facts of ``text`` (one sentence), in order; offsets shifted by ``offset``. A sentence the
    reader cannot parse (a pathological number, say) has no facts rather than failing the score.
    Terminal escape sequences and control characters are no text (:func:`blank_controls`)."""
    try:
        return _extract(blank_controls(text), offset)
    except (ValueError, OverflowError, ArithmeticError, IndexError):
        return []


def _extract(text: str, offset: int = 0) -> list[Fact]:
    reading = _Reading(text, _tokens(text), offset)
    i, n = 0, len(reading.toks)
    while i < n:
        i = _read_at(reading, i)
    facts = _compounds(sorted(reading.facts, key=lambda f: (f.start, f.end)), text, offset)
    facts = [_with_rate(_qualified(f, text, offset), text, offset) if f.dim not in _PLAIN else f for f in facts]
    facts.extend(_names(reading.toks, text, offset, reading.used))
    return sorted(facts, key=lambda f: (f.start, f.end))


@dataclass(frozen=True)
class _Reading:
    """One sentence being read: its tokens, the facts found so far and the tokens they take (a token
    is read into one fact at most)."""

    text: str
    toks: list[_Tok]
    offset: int
    facts: list[Fact] = field(default_factory=list)
    used: set[int] = field(default_factory=set)

    def add(self, dim: str, value: float | str, a: int, b: int, noun: str = "") -> None:
        """Record the fact written in tokens ``[a, b)``."""
        start, end = self.toks[a].start, self.toks[b - 1].end
        self.facts.append(Fact(dim, value, self.text[start:end], start + self.offset, end + self.offset, noun))
        self.used.update(range(a, b))


@dataclass(frozen=True)
class _Number:
    """A number read at a token: its value, the index after it, and how it is written."""

    value: float
    end: int
    cur: str | None = None  # the currency code it is an amount in
    pct: bool = False
    pence: bool = False
    states_fact: bool = True  # False: a number word naming no quantity ("one of the options", "half the fee")


#: a clock time's "am" / "pm"
_AM_PM = re.compile(r"[ap]\.?m")
#: "3.50" in a time token: read as a decimal
_DECIMAL = re.compile(r"\d{1,2}\.\d{2}")
_YEAR = re.compile(r"1[5-9]\d\d|20\d\d")
_FOUR_DIGITS = re.compile(r"\d{4}")
_PM_PARTS = ("in the afternoon", "in the evening")
_DAY_PARTS = (*_PM_PARTS, "in the morning")
#: words that may start a clock time in words ("half past", "quarter to", "noon")
_CLOCK_WORDS = frozenset({"half", "quarter", "noon", "midday", "midnight"})


def _read_at(r: _Reading, i: int) -> int:
    """Read the fact that starts at token ``i``, if any; the index to read on from."""
    if i in r.used:
        return i + 1
    t = r.toks[i]
    low = t.low
    k = None
    if t.kind in ("time", "ampm"):
        k = _clock_time(r, i)
    elif t.kind == "word" and low in _CLOCK_WORDS:
        k = _past_or_to(r, i) if low in ("half", "quarter") else _noon_or_midnight(r, i)
    if k is not None:
        return k
    num = _read_number(r, i, low)
    if num is None:
        _maybe_date_or_name(r.toks, i, r.text, r.add, r.used)
        return i + 1
    if not num.states_fact:
        return num.end
    return _quantity(r, i, num)


# ---- times of day


def _clock_time(r: _Reading, i: int) -> int | None:
    """A clock time in digits ("9:30", "3 pm", "23:59"); in a range whose second end says "am" or
    "pm", the first end takes its half of the day when the range then runs forward, else the other."""
    toks, t = r.toks, r.toks[i]
    if t.kind not in ("time", "ampm"):
        return None
    v = _time_value(t.text)
    if v is None or not (t.kind == "ampm" or ":" in t.text or _AM_PM.search(t.low)):
        return None
    half_day = t.kind == "time" and not _AM_PM.search(t.low) and v < 780
    if (
        half_day
        and i + 2 < len(toks)
        and toks[i + 1].low in ("to", "and", "-", "\u2013")
        and toks[i + 2].kind in ("time", "ampm")
    ):
        # "between 12:30 and 7:30 am", "9:30 to 5:30 pm" (9:30 am)
        later = toks[i + 2].low
        end = _time_value(toks[i + 2].text)
        if _AM_PM.search(later) and end is not None:
            same = _time_value(t.text + (" pm" if "p" in later else " am"))
            other = _time_value(t.text + (" am" if "p" in later else " pm"))
            if same is not None and other is not None:
                v, half_day = (same if same <= end else other), False
    r.add("time", v, i, i + 1, "12h" if half_day else "")
    return i + 1


def _past_or_to(r: _Reading, i: int) -> int | None:
    """A clock time in words: "half past three (in the afternoon)", "a quarter to noon"."""
    toks, low = r.toks, r.toks[i].low
    n = len(toks)
    if not (toks[i].kind == "word" and low in ("half", "quarter") and i + 2 < n and toks[i + 1].low in ("past", "to")):
        return None
    k = i + 2
    base: float | None
    if toks[k].low in ("midnight", "noon", "midday"):
        base, k = (0.0 if toks[k].low == "midnight" else 720.0), k + 1
    else:
        words, k = _number_words(toks, k)
        base = _word_number(words) if words else None
        base = None if base is None or base > 12 else base * 60
        if base is not None and k + 2 < n and " ".join(x.low for x in toks[k : k + 3]) in _PM_PARTS:
            base, k = base + 720, k + 3
        elif base is not None and " ".join(x.low for x in toks[k : k + 3]) == "in the morning":
            k += 3
    if base is None:
        return None
    delta = (30 if low == "half" else 15) * (1 if toks[i + 1].low == "past" else -1)
    r.add("time", (base + delta) % 1440, i, k, "12h" if base == base % 720 and base else "")
    return k


def _noon_or_midnight(r: _Reading, i: int) -> int | None:
    """Noon, midday and midnight as clock times."""
    t = r.toks[i]
    if t.kind == "word" and t.low in ("noon", "midday", "midnight"):
        r.add("time", 0.0 if t.low == "midnight" else 720.0, i, i + 1)
        return i + 1
    return None


# ---- a number, in digits or words


def _read_number(r: _Reading, i: int, low: str) -> _Number | None:
    """The number at token ``i`` (``low`` its folded text) in digits or words ("$1,200", "forty-eight",
    "$ five", "the third of June", "a week"), or None when no number starts there."""
    toks, t = r.toks, r.toks[i]
    n = len(toks)
    value: float | None = None
    cur: str | None = None
    pct = pence = False
    j = i
    if t.kind == "num":
        value, cur, pct, pence = _num_value(t.text)
        j = i + 1
        if cur is None and i > 0 and toks[i - 1].text.isupper() and toks[i - 1].low in CURRENCIES:
            cur = CURRENCIES[toks[i - 1].low][0]  # "USD 1,200", "CHF 100"
            r.used.add(i - 1)
    elif t.kind == "time" and _DECIMAL.fullmatch(t.text):  # "3.50" read as a decimal, not a time
        value, j = float(t.text), i + 1
    elif t.kind == "sym" and t.text in "$€£¥₹" and i + 1 < n and toks[i + 1].kind == "word":
        words, j = _number_words(toks, i + 1)
        if words:
            value, cur = _word_number(words), CURRENCIES[t.text][0]
    elif t.kind == "word" and (day := _ordinal_day(toks, i)) is not None:
        value, j = day
    elif t.kind == "word" and (low in _NUMBER_WORDS or low in _SPECIAL_NUMBERS):
        value, j, states_fact = _spelled_number(toks, i)
        if not states_fact:
            return _Number(0.0, j, states_fact=False)
    elif t.kind == "word" and low in _ONE and i + 1 < n and not _after_amount(toks, i, r.used):
        unit = _unit_at(toks, i + 1)
        if (
            unit is not None
            and unit[0] in ("duration", "month", "business day", "night")
            and unit[2] == i + 2
            and toks[i + 1].low not in ("second", "min")
        ):
            value, j = 1.0, i + 1  # "a week", "an hour"
    if value is None and t.kind == "word" and low in ("a", "one") and i + 1 < n and toks[i + 1].low == "quarter":
        value, j = 1.0, i + 1  # "a quarter of an hour"
    return None if value is None else _Number(value, j, cur, pct, pence)


def _spelled_number(toks: list[_Tok], i: int) -> tuple[float | None, int, bool]:
    """A number in words ("forty-eight", "twice", "half a"): (value, index after, whether it states a
    quantity: "one", "once", "half" and "couple" do only before a unit)."""
    low = toks[i].low
    value: float | None = None
    words, j = _number_words(toks, i)
    if words:
        value = _word_number(words) if words[0] not in _SPECIAL_NUMBERS else None
        if value is None and len(words) == 1 and words[0] in _SPECIAL_NUMBERS:
            value = _SPECIAL_NUMBERS[words[0]]
        if low == "half" and j + 1 < len(toks) and toks[j].low in ("a", "an"):
            j += 1  # "half a year", "half an hour"
        if words == ["one"] or (low in _SPECIAL_NUMBERS and low in ("once", "half", "couple")):
            if _unit_at(toks, _fraction(toks, 1.0, j)[1]) is None:  # "one and a half hours" has one
                return value, j, False
    return value, j, True


# ---- what a number is: a time, a date, an amount, a quantity, a year, a label or a count


def _quantity(r: _Reading, i: int, num: _Number) -> int:
    """Record what the number at ``i`` states, with its fraction and scale words ("$1.5 million",
    "two and a half years"); the index to read on from."""
    toks = r.toks
    value, j = _fraction(toks, num.value, num.end)
    if (
        j < len(toks)
        and toks[j].kind == "word"
        and toks[j].low in _SCALES
        and (num.cur or toks[j].low in _NUMBER_WORDS)
    ):
        value *= _SCALES[toks[j].low]
        j += 1
    q = _Number(value, j, num.cur, num.pct, num.pence)
    for step in (_clock_words, _day_month, _percent_or_money, _with_unit, _year, _label):
        k = step(r, i, q)
        if k is not None:
            return k
    return _count(r, i, q)


def _clock_words(r: _Reading, i: int, q: _Number) -> int | None:
    """A clock time by the hour: "2 o'clock", "three in the afternoon"."""
    toks, value, j = r.toks, q.value, q.end
    if not (value <= 12 and j < len(toks) and toks[j].kind == "word"):
        return None
    nxt = " ".join(x.low for x in toks[j : j + 3])
    if not (toks[j].low == "o'clock" or nxt.startswith(_DAY_PARTS)):
        return None
    pm = "afternoon" in nxt or "evening" in nxt
    k = j + 1 if toks[j].low == "o'clock" else j
    rest = " ".join(x.low for x in toks[k : k + 3])
    if rest.startswith(_DAY_PARTS):
        pm, k = "morning" not in rest, k + 3
    r.add("time", float(((int(value) % 12) + (12 if pm else 0)) * 60), i, k)
    return k


def _day_month(r: _Reading, i: int, q: _Number) -> int | None:
    """Day-first dates: "30 April", "the 3rd of May 2024"; "April 30" is read when the month is met."""
    toks, value, j = r.toks, q.value, q.end
    n = len(toks)
    month_at = j + 1 if j + 1 < n and toks[j].low == "of" else j
    is_day = 1 <= value <= 31 and value == int(value)
    if not (
        is_day
        and month_at < n
        and toks[month_at].kind == "word"
        and toks[month_at].low in MONTHS
        and toks[month_at].text[0].isupper()
    ):
        return None
    k = month_at + 1
    year = ""
    if k < n and toks[k].kind == "num" and _FOUR_DIGITS.fullmatch(toks[k].text):
        year, k = toks[k].text, k + 1
    r.add("date", f"{MONTHS[toks[month_at].low]:02d}-{int(value):02d}" + (f"-{year}" if year else ""), i, k)
    return k


def _percent_or_money(r: _Reading, i: int, q: _Number) -> int | None:
    """A percentage ("15%"), or an amount its number token names the currency of ("£9.50", "13.5p")."""
    if q.pct:
        r.add("percent", q.value, i, q.end)
        return q.end
    if q.cur:
        r.add(f"money:{q.cur}", q.value / 100 if q.pence else q.value, i, q.end)
        return q.end
    if q.pence:
        r.add("money:GBP", q.value / 100, i, q.end)
        return q.end
    return None


def _with_unit(r: _Reading, i: int, q: _Number) -> int | None:
    """A number with its unit ("14 days", "nine pounds fifty"), or the first end of a range that takes
    the second's unit ("5 to 10 days", "3-5 working days", "between 2 and 4 weeks")."""
    toks = r.toks
    unit, rng_end = _unit_or_range(toks, q.end)
    if unit is None:
        return None
    dim, factor, after, _ = unit
    if dim.startswith("money:"):
        minor, after = _minor_amount(toks, after, factor)
        r.add(dim, q.value * factor + minor, i, rng_end if rng_end else after)
    else:
        r.add(dim, q.value * factor, i, rng_end if rng_end else after)
    return rng_end if rng_end else after


def _unit_or_range(toks: list[_Tok], j: int) -> tuple[tuple[str, float, int, str] | None, int | None]:
    """The unit after a number at ``j``, else the unit after the second end of a range starting at
    ``j`` with where the first end stops (None when the unit is the number's own)."""
    unit = _unit_at(toks, j)
    if unit is None and j + 1 < len(toks) and (toks[j].kind == "dash" or toks[j].low in ("to", "and", "or")):
        k = j + 1
        if k < len(toks) and (toks[k].kind == "num" or toks[k].low in _NUMBER_WORDS):
            k2 = _number_words(toks, k)[1] if toks[k].kind == "word" else k + 1
            unit2 = _unit_at(toks, k2)
            if unit2 is not None:
                return unit2, j
    return unit, None


def _minor_amount(toks: list[_Tok], after: int, factor: float) -> tuple[float, int]:
    """The minor unit written after a currency word ("nine pounds fifty", "9 pounds 50"), in the major
    unit, and the index after it; (0, ``after``) when there is none."""
    if after < len(toks) and factor == 1 and (toks[after].kind == "num" or toks[after].low in _NUMBER_WORDS):
        words, k = _number_words(toks, after) if toks[after].kind == "word" else ([], after + 1)
        mv = _word_number(words) if words else _num_value(toks[after].text)[0]
        if mv is not None and mv < 100 and not _unit_at(toks, k):
            return mv / 100, k
    return 0.0, after


def _year(r: _Reading, i: int, q: _Number) -> int | None:
    """A year on its own ("in 1887")."""
    if r.toks[i].kind == "num" and _YEAR.fullmatch(r.toks[i].text):
        r.add("year", q.value, i, q.end)
        return q.end
    return None


def _label(r: _Reading, i: int, q: _Number) -> int | None:
    """A label: "Year 4", "Zone 2", "Go 30" (not after the sentence's first word, which any sentence
    capitalises: "Bring 2 bags")."""
    toks = r.toks
    if (
        i > 1
        and toks[i - 1].kind == "word"
        and toks[i - 1].text[0].isupper()
        and toks[i - 1].low not in _LABEL_STOP
        and toks[i - 1].low not in CURRENCIES
        and toks[i - 2].kind != "punct"
        and toks[i].kind == "num"
        and (i - 1) not in r.used
    ):
        r.add("label", f"{toks[i - 1].low} {toks[i].text}", i - 1, i + 1)
        return q.end
    return None


def _count(r: _Reading, i: int, q: _Number) -> int:
    """A bare count: "3 attempts", "18 or over"; "twice" counts times."""
    if r.toks[i].low in ("once", "twice", "thrice"):
        noun = _noun_after([_Tok("word", "times", 0, 0)], 0)
    else:
        noun = _noun_after(r.toks, q.end)
    r.add("count", q.value, i, q.end, noun)
    return q.end


def _fraction(toks: list[_Tok], value: float, j: int) -> tuple[float, int]:
    """A fraction after a number: "two and a half (years)", "three quarters of (an hour)"."""
    words = [t.low for t in toks[j : j + 3]]
    if words[:3] in (["and", "a", "half"], ["and", "one", "half"]):
        return value + 0.5, j + 3
    if words[:3] in (
        ["quarter", "of", "a"],
        ["quarter", "of", "an"],
        ["quarters", "of", "a"],
        ["quarters", "of", "an"],
    ):
        if _unit_at(toks, j + 3) is not None:  # "three quarters of an hour"; "3 quarters in a row" is a count
            return value * 0.25, j + 3
    return value, j


def _unit_word(text: str) -> str:
    """The unit a quantity is written in, as its last word less a plural "s" ("2 hours" -> "hour")."""
    last = text.split()[-1].lower() if text.split() else ""
    return last[:-1] if last.endswith("s") else last


def _compounds(facts: list[Fact], text: str, offset: int) -> list[Fact]:
    """One quantity written in two units is one fact: "2 hours 15 minutes" = 135 minutes, "1 year
    and 6 months" = 18 months (another unit, smaller than the first, with nothing but "and" between
    them; "24 months, 12 months" is a list)."""
    out: list[Fact] = []
    for f in facts:
        prev = out[-1] if out else None
        if (
            prev is not None
            and f.dim == prev.dim
            and f.dim in ("duration", "month")
            and isinstance(f.value, float)
            and isinstance(prev.value, float)
            and 0 < f.value < prev.value
            and text[prev.end - offset : f.start - offset].strip().lower() in ("", "and")
            and _unit_word(prev.text) != _unit_word(f.text)
        ):
            out[-1] = Fact(
                prev.dim, prev.value + f.value, text[prev.start - offset : f.end - offset], prev.start, f.end
            )
            continue
        out.append(f)
    return out


#: what a qualifier before a value says of it, longest phrases first: a bound that includes the value
#: ("no more than", "at least", "up to"), one that excludes it ("more than", "under"), or "about"
_QUALIFIERS = (
    ("<=", ("no more than", "not more than", "no later than", "not later than", "at most", "up to", "a maximum of",
            "no longer than", "not exceeding", "within")),
    (">=", ("no less than", "not less than", "no fewer than", "not fewer than", "no earlier than", "at least",
            "a minimum of")),
    (">", ("more than", "over", "above", "exceeding", "in excess of", "upwards of", "later than", "longer than")),
    ("<", ("less than", "fewer than", "under", "below", "earlier than", "shorter than")),
    ("~", ("about", "around", "approximately", "roughly", "nearly", "almost", "some", "close to", "circa", "~")),
)  # fmt: skip
#: the same, each qualifier's phrases longest first (sorted once, not for every fact)
_QUALIFIERS_LONGEST_FIRST = tuple((op, tuple(sorted(phrases, key=len, reverse=True))) for op, phrases in _QUALIFIERS)


_PLAIN = frozenset({"name", "label", "date"})  # facts no qualifier or rate applies to
_RATE = re.compile(
    r"\s*(?:(?:(?:per|a|an|each|every|for each|for every)\s+|/\s*)([^\W\d_]+)\b"
    r"|(daily|weekly|monthly|yearly|annually|nightly|hourly)\b)",
    re.I,
)
_TIME_RATES = frozenset({"second", "minute", "hour", "day", "night", "week", "month", "year"})
_RATE_WORDS = {"daily": "day", "weekly": "week", "monthly": "month", "yearly": "year", "annually": "year",
               "annum": "year", "nightly": "night", "hourly": "hour"}  # fmt: skip


def _with_rate(fact: Fact, text: str, offset: int) -> Fact:
    """A value's rate, written just after it: "$18 per day", "£65 a year", "€5 each month", "€25
    monthly", "25 mg/kg", "twice a day", "3 tablets a day" (after a count, past the noun it counts).
    An amount takes any rate word; another value takes "per" / "/" and a word, or "a" / "each" and a
    unit of time ("14 days a year"; "within 14 days a refund is issued" has none)."""
    if fact.dim in ("time", "year"):
        return fact
    at = fact.end - offset
    m = _RATE.match(text, at)
    if m is None and fact.dim == "count" and fact.noun:
        skip = re.match(r"(?:\s+[^\W\d_]+){1,2}?(?=\s+(?:per|a|an|each|every)\s|\s*/)", text[at:])
        if skip:
            m = _RATE.match(text, at + skip.end())
    if not m:
        return fact
    word = (m.group(1) or m.group(2)).lower()
    if m.group(1) and (word in ("few", "lot", "bit", "little") or word in _NUMBER_WORDS):
        return fact
    rate = _RATE_WORDS.get(word) or stem(word.rstrip("s") if word.endswith("s") and len(word) > 3 else word)
    if not fact.dim.startswith("money:") and not (
        m.group(2) or rate in _TIME_RATES or re.match(r"\s*(?:per\b|/)", text[m.start() :], re.I)
    ):
        return fact
    return Fact(fact.dim, fact.value, fact.text, fact.start, fact.end, fact.noun, fact.approx, rate)


def _qualified(fact: Fact, text: str, offset: int) -> Fact:
    """``fact`` with the qualifier written just before it ("more than $160 million", "no more than 23 kg")."""
    before = " " + " ".join(text[: fact.start - offset].lower().split()[-4:])
    for op, phrases in _QUALIFIERS_LONGEST_FIRST:
        for phrase in phrases:
            if before.endswith(" " + phrase) or (phrase == "~" and before.endswith("~")):
                if op in (">", "<") and before.endswith((" no " + phrase, " not " + phrase)):
                    continue  # "no more than" is a "<=" bound, found first
                if op in (">", "<") and _NEGATED_BOUND.search(before[: -len(phrase)]):
                    op = "<=" if op == ">" else ">="  # "do not take more than 4 g": at most 4 g
                if phrase in _DEADLINE_PHRASES and _BEFORE_EVENT.match(text, fact.end - offset):
                    # "up to 48 hours before arrival", "no later than ten days before" leave at least
                    # that long: the bound faces the other way ("no more than 8 weeks before" is still
                    # at most 8 weeks)
                    op = ">="
                return Fact(fact.dim, fact.value, fact.text, fact.start, fact.end, fact.noun, op, fact.rate)
    return fact


#: a negation a word or two before "more than" / "less than" ("do not take more than", "must not exceed")
_NEGATED_BOUND = re.compile(r"(?:\bnot|n't|\bnever)\s+(?:[a-z]+\s+){0,2}$")
#: bounds that, before an event, set a deadline rather than a length
_DEADLINE_PHRASES = frozenset({"up to", "no later than", "not later than"})
_BEFORE_EVENT = re.compile(r"\s*(?:before|ahead|prior|in advance|earlier)\b", re.I)


def _names(toks: list[_Tok], text: str, offset: int, used: set[int]) -> list[Fact]:
    """Runs of capitalised words ("Volta Boost", "Westmere Revenue Office"). The first word of the
    sentence starts a name only in a run of two or more, since any word is capitalised there."""
    from groundlens_core.evidence.content import DISCOURSE_WORDS, STOP_WORDS

    out: list[Fact] = []
    # words any sentence capitalises: the first one, and the first after a full stop, colon or quote
    starts = {next((k for k, t in enumerate(toks) if t.kind == "word"), -1)}
    starts |= {k + 1 for k, t in enumerate(toks) if t.kind == "punct" and t.text in '.!?:"“('}
    k = 0
    while k < len(toks):
        t = toks[k]
        if t.kind != "word" or k in used or not t.text[0].isupper() or len(t.text) < 2:
            k += 1
            continue
        run = [k]
        m = k + 1
        while m < len(toks) and toks[m].kind == "word" and m not in used and toks[m].text[0].isupper():
            run.append(m)
            m += 1
        words = [toks[x] for x in run]
        if run[0] in starts:
            if len(run) < 2 or words[0].low in STOP_WORDS or words[0].low in DISCOURSE_WORDS:
                words = words[1:]
                if len(words) < 1 or (len(run) < 2):
                    k = m
                    continue
        words = [w for w in words if w.low not in MONTHS]
        if words and not (len(words) == 1 and (words[0].low in STOP_WORDS or words[0].low in DISCOURSE_WORDS)):
            start, end = words[0].start, words[-1].end
            value = " ".join(w.low.removesuffix("'s") for w in words)
            out.append(Fact("name", value, text[start:end], start + offset, end + offset))
        k = m
    return out


_ORDINALS = {
    "first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7, "eighth": 8,
    "ninth": 9, "tenth": 10, "eleventh": 11, "twelfth": 12, "thirteenth": 13, "fourteenth": 14,
    "fifteenth": 15, "sixteenth": 16, "seventeenth": 17, "eighteenth": 18, "nineteenth": 19,
    "twentieth": 20, "thirtieth": 30,
}  # fmt: skip


def _ordinal_day(toks: list[_Tok], i: int) -> tuple[float, int] | None:
    """An ordinal in words that is the day of a date ("the twenty-first of May", "third of June"):
    (day, index after it); None otherwise ("the first permit" is no date)."""
    low, j = toks[i].low, i + 1
    if low in ("twenty", "thirty") and j + 1 < len(toks) and toks[j].kind == "dash" and toks[j + 1].low in _ORDINALS:
        day, j = (20 if low == "twenty" else 30) + _ORDINALS[toks[j + 1].low], j + 2
    elif low in _ORDINALS:
        day = _ORDINALS[low]
    else:
        return None
    k = j + 1 if j < len(toks) and toks[j].low == "of" else j
    if day <= 31 and k < len(toks) and toks[k].low in MONTHS and toks[k].text[:1].isupper():
        return float(day), j
    return None


#: words after which "a week", "an hour" is a duration of one unit ("within a week"); after others it is
#: a rate ("£2.60 a day", "twice a week", "2 refunds a year")
_BEFORE_ONE_UNIT = frozenset(
    "for within in after over than about around nearly almost just only least most to up under takes take lasts "
    "last wait waits is are be of half".split()
)


def _after_amount(toks: list[_Tok], i: int, used: set[int]) -> bool:
    """``a`` in "£2.60 a day", "twice a week", "2 refunds a year": a rate, not a duration of one unit."""
    k = i - 1
    return k >= 0 and (k in used or toks[k].kind != "word" or toks[k].low not in _BEFORE_ONE_UNIT)


def _number_words(toks: list[_Tok], i: int) -> tuple[list[str], int]:
    """The longest run of number words from ``i`` ("one hundred and twenty", "forty-eight", "a dozen")."""
    words: list[str] = []
    j = i
    if j < len(toks) and toks[j].low in ("a", "an") and j + 1 < len(toks) and toks[j + 1].low == "dozen":
        return ["dozen"], j + 2
    while j < len(toks):
        t = toks[j]
        if t.kind == "word" and t.low in _NUMBER_WORDS:
            words.append(t.low)
            j += 1
        elif t.kind == "word" and t.low in _SPECIAL_NUMBERS and not words:
            return [t.low], j + 1
        elif t.kind == "dash" and words and j + 1 < len(toks) and toks[j + 1].low in _NUMBER_WORDS:
            j += 1  # "forty-eight"
        elif t.kind == "word" and t.low == "and" and words and j + 1 < len(toks) and toks[j + 1].low in _NUMBER_WORDS:
            if words[-1] not in ("hundred", "thousand", "million", "billion"):
                break
            words.append("and")
            j += 1
        else:
            break
    return words, j


def _maybe_date_or_name(toks: list[_Tok], i: int, text: str, add, used: set[int]) -> None:
    """Month-first dates ("April 30", "April 30th, 2025") and capitalised names."""
    t = toks[i]
    if i in used or t.kind != "word":
        return
    if t.low in MONTHS and t.text[0].isupper() and i + 1 < len(toks) and toks[i + 1].kind == "num":
        raw = re.sub(r"(st|nd|rd|th)$", "", toks[i + 1].text)
        if raw.isdigit() and len(raw) <= 2 and 1 <= int(raw) <= 31:
            k = i + 2
            year = ""
            if k + 1 < len(toks) and toks[k].text == "," and re.fullmatch(r"\d{4}", toks[k + 1].text):
                year, k = toks[k + 1].text, k + 2
            elif k < len(toks) and re.fullmatch(r"\d{4}", toks[k].text):
                year, k = toks[k].text, k + 1
            add("date", f"{MONTHS[t.low]:02d}-{int(raw):02d}" + (f"-{year}" if year else ""), i, k)
            return
