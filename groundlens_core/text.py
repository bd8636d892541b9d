"""What counts as text: one notion of *blank*, used for every input everywhere.

A text is blank when, once invisible characters are removed, it has no letter, digit or symbol.
Invisible: whitespace, control and format characters (zero-width space U+200B, joiners, BOM, soft
hyphen, bidi marks), and combining marks with nothing to combine with (a stray variation selector).
Punctuation alone ("...", "?!") carries no claim either, so it is blank too. Emoji are symbols: "🙂"
is not blank.

Why one notion: the embedder turns a zero-width-space string into the same vector as any other
unknown text, so scoring it produced confident nonsense (SGI 1.66 TRUSTED for an invisible question).
"""

from __future__ import annotations

import unicodedata

__all__ = ["is_blank", "has_words", "visible"]

_INVISIBLE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zs", "Zl", "Zp", "Mn", "Me"})
_CARRIES = ("L", "N", "S")


def visible(text: str) -> str:
    """``text`` without its invisible characters."""
    return "".join(ch for ch in text if unicodedata.category(ch) not in _INVISIBLE)


def has_words(text: str | None) -> bool:
    """True when ``text`` has a letter or a digit. Emoji and symbols alone ("🎉🎉", "→") are not
    blank, but the model reads them as unknown word pieces that all embed to one point, so a score
    of them would be confident nonsense (SGI 10.0 for "🔥" against "🎉🎉"): they are not scored."""
    return bool(text) and any(unicodedata.category(ch)[0] in "LN" for ch in text)  # type: ignore[union-attr]


def is_blank(text: str | None) -> bool:
    """True when ``text`` is None/empty or has no letter, digit or symbol once invisible characters are removed."""
    if not text:
        return True
    for ch in text:
        cat = unicodedata.category(ch)
        if cat[0] in _CARRIES:
            return False
    return True
