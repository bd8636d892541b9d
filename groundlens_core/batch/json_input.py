"""JSON read from a user's file: a nesting bound, and one-line errors that name where it came from.

Why a bound: Python's JSON parser recurses once per level of nesting, so a line of a few thousand
brackets ends in a ``RecursionError`` traceback instead of a message, and how deep it can go depends
on how deep the caller's stack already is. No file groundlens reads (an input row, a trace, a
calibration, a ledger record) nests more than a dozen levels; :data:`MAX_DEPTH` leaves room for the
user's own nested values and stays far below the interpreter's limit. Why one module: every reader
of a user's JSON says the same thing about the same defect, naming the file (and line).
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

from groundlens_core.errors import GroundlensInputError

#: the deepest nesting of arrays and objects read from a file
MAX_DEPTH = 200

# a JSON string (its brackets do not nest), or one bracket
_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.S)
_TOKENS_B = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.S)


def too_deep(text: str | bytes, limit: int = MAX_DEPTH) -> bool:
    """True when ``text`` nests arrays and objects more than ``limit`` levels deep.

    Cheap for ordinary lines: only a text with more than ``limit`` opening brackets is scanned."""
    if isinstance(text, bytes):
        if text.count(b"[") + text.count(b"{") <= limit:
            return False
        tokens, opening = _TOKENS_B.finditer(text), (b"[", b"{")
    else:
        if text.count("[") + text.count("{") <= limit:
            return False
        tokens, opening = _TOKENS.finditer(text), ("[", "{")  # type: ignore[assignment]
    depth = 0
    for m in tokens:
        tok = m.group()
        if len(tok) != 1:
            continue  # a string
        if tok in opening:
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def loads(text: str | bytes, *, name: str) -> Any:
    """``json.loads(text)``, or a one-line :class:`GroundlensInputError` that starts with ``name``
    (the file, or ``file:line``): invalid JSON, nesting deeper than :data:`MAX_DEPTH`, a number too
    long to convert, or bytes that are not UTF-8."""
    if too_deep(text):
        raise GroundlensInputError(f"{name}: JSON nested too deeply (more than {MAX_DEPTH} levels)")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise GroundlensInputError(
            f"{name}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from None
    except RecursionError:  # the bound above is well below the interpreter's; kept for a very deep caller
        raise GroundlensInputError(f"{name}: JSON nested too deeply") from None
    except UnicodeDecodeError:
        raise GroundlensInputError(f"{name}: not UTF-8 text") from None
    except ValueError:  # an integer of more digits than Python converts
        limit = getattr(sys, "get_int_max_str_digits", lambda: 4300)()
        raise GroundlensInputError(f"{name}: a number has more than {limit} digits") from None
