"""The units, currencies, scale words and month names that facts are normalised with.

Every equivalence the fact checks know is listed here, so that a reviewer can see it: "two weeks" =
"14 days" because a week is 10,080 minutes; a month is not a fixed number of days, so months and
years are a dimension of their own; business days, school days and nights are their own units.
"""

from __future__ import annotations

__all__ = ["UNITS", "CURRENCIES", "SCALES", "MONTHS"]

#: unit word (lower case) -> (dimension, factor to the dimension's base unit)
UNITS: dict[str, tuple[str, float]] = {}


def _units(dim: str, factor: float, *words: str) -> None:
    for w in words:
        UNITS[w] = (dim, factor)


# durations: minutes, with calendar months and years apart (a month is not a fixed number of days)
_units("duration", 1 / 60000, "ms", "msec", "millisecond", "milliseconds")
_units("duration", 1 / 60, "second", "seconds", "sec", "secs", "s")
_units("duration", 1, "minute", "minutes", "min", "mins")
_units("duration", 60, "hour", "hours", "hr", "hrs", "h")
_units("duration", 1440, "day", "days", "calendar day", "calendar days")
_units("duration", 10080, "week", "weeks", "wk", "wks")
_units("duration", 20160, "fortnight", "fortnights")
_units("month", 1, "month", "months", "calendar month", "calendar months")
_units("month", 12, "year", "years", "yr", "yrs")
_units("month", 120, "decade", "decades")
_units("business day", 1, "business day", "business days", "working day", "working days", "workday", "workdays")
_units("school day", 1, "school day", "school days")
_units("night", 1, "night", "nights")
_units("mass", 0.001, "mg", "milligram", "milligrams")
_units("mass", 1, "g", "gram", "grams", "gramme", "grammes")
_units("mass", 1000, "kg", "kgs", "kilo", "kilos", "kilogram", "kilograms", "kilogramme", "kilogrammes", "kilogram")
_units("mass", 1e6, "tonne", "tonnes", "ton", "tons")
_units("mass", 453.59237, "lb", "lbs")
_units("mass", 28.349523125, "oz", "ounce", "ounces")
_units("length", 0.001, "mm", "millimetre", "millimetres", "millimeter", "millimeters")
_units("length", 0.01, "cm", "centimetre", "centimetres", "centimeter", "centimeters")
_units("length", 1, "m", "metre", "metres", "meter", "meters")
_units("length", 1000, "km", "kilometre", "kilometres", "kilometer", "kilometers")
_units("length", 1609.344, "mile", "miles", "mi")
_units("length", 0.3048, "ft", "foot", "feet")
_units("volume", 0.001, "ml", "millilitre", "millilitres", "milliliter", "milliliters")
_units("volume", 1, "l", "litre", "litres", "liter", "liters")
_units("data", 1e3, "kb", "kilobyte", "kilobytes")
_units("data", 1e6, "mb", "megabyte", "megabytes")
_units("data", 1e9, "gb", "gigabyte", "gigabytes")
_units("data", 1e12, "tb", "terabyte", "terabytes")
_units("bitrate", 1e3, "kbps")
_units("bitrate", 1e6, "mbps")
_units("bitrate", 1e9, "gbps")
_units("energy", 1, "kwh")
_units("energy", 0.001, "wh")
_units("power", 1, "kw")
_units("temperature", 1, "degree", "degrees", "°c")
_units("temperature °F", 1, "°f")
_units("percent", 1, "%", "percent", "per cent", "pc", "percentage points")

#: currency sign, code or word -> (ISO code, factor to the main unit)
CURRENCIES: dict[str, tuple[str, float]] = {
    "$": ("USD", 1),
    "us$": ("USD", 1),
    "usd": ("USD", 1),
    "dollar": ("USD", 1),
    "dollars": ("USD", 1),
    "buck": ("USD", 1),
    "bucks": ("USD", 1),
    "cent": ("USD", 0.01),
    "cents": ("USD", 0.01),
    "€": ("EUR", 1),
    "eur": ("EUR", 1),
    "euro": ("EUR", 1),
    "euros": ("EUR", 1),
    "£": ("GBP", 1),
    "gbp": ("GBP", 1),
    "pound": ("GBP", 1),
    "pounds": ("GBP", 1),
    "quid": ("GBP", 1),
    "p": ("GBP", 0.01),
    "pence": ("GBP", 0.01),
    "penny": ("GBP", 0.01),
    "¥": ("JPY", 1),
    "jpy": ("JPY", 1),
    "yen": ("JPY", 1),
    "₹": ("INR", 1),
    "inr": ("INR", 1),
    "rupee": ("INR", 1),
    "rupees": ("INR", 1),
    "chf": ("CHF", 1),
    "franc": ("CHF", 1),
    "francs": ("CHF", 1),
}
SCALES = {"thousand": 1e3, "k": 1e3, "million": 1e6, "m": 1e6, "mn": 1e6, "billion": 1e9, "bn": 1e9, "b": 1e9}

MONTHS = {
    m: i
    for i, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        1,
    )
    for m in names
}
