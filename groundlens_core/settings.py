"""Every ``GROUNDLENS_*`` environment setting is read here, with one typed reader per kind of value.

Why one place: several of these are read when a module is imported (the recorder's bounds, the
text limit of the scorer), and a tracer's setting must never stop the user's program from
importing. A value that is not what the setting takes (a typo, an empty ``VAR=`` in a CI file, a
negative limit) gets one one-line warning and the default, the same way for every setting. An
empty value counts as unset. The full table is in docs/settings.md.

The exceptions are a choice that changes the scores themselves (the embedding backend) and one
that changes what a signed ledger keeps (``GROUNDLENS_LEDGER_TEXT``): a value not taken there is a
one-line error when scoring or recording starts, since silently scoring with another embedding
function would give numbers the user did not ask for, and signed records cannot take their texts
back or be given them later.
"""

from __future__ import annotations

import logging
import math
import os
import threading
from pathlib import Path
from typing import Sequence

from groundlens_core.errors import GroundlensInputError

log = logging.getLogger("groundlens.settings")

_warned: set[tuple[str, str]] = set()  # (name, value) pairs already warned about: one line each
_warned_lock = threading.Lock()


def raw(name: str) -> str | None:
    """The variable's value with surrounding blanks removed; None when it is unset or empty."""
    value = os.environ.get(name, "").strip()
    return value or None


def _bad(name: str, value: str, what: str, default: object) -> None:
    with _warned_lock:
        if (name, value) in _warned:
            return
        _warned.add((name, value))
    log.warning("groundlens: %s=%r is not %s; using %s", name, value, what, default)


def whole_number(name: str, default: int, *, minimum: int = 1) -> int:
    """A whole number of at least ``minimum`` (limits and counts: ``0`` or ``-1`` is refused, not
    taken to mean "no limit", which would quietly fail every row or hold unbounded memory)."""
    value = raw(name)
    if value is None:
        return default
    what = f"a whole number of at least {minimum}"
    try:
        n = int(value.replace("_", ""))
    except ValueError:
        _bad(name, value, what, default)
        return default
    if n < minimum:
        _bad(name, value, what, default)
        return default
    return n


def seconds(name: str, default: float, *, minimum: float = 0.0) -> float:
    """A finite number of seconds, at least ``minimum``."""
    value = raw(name)
    if value is None:
        return default
    what = f"a number of seconds (at least {minimum:g})"
    try:
        s = float(value)
    except ValueError:
        _bad(name, value, what, default)
        return default
    if not math.isfinite(s) or s < minimum:
        _bad(name, value, what, default)
        return default
    return s


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def flag(name: str, default: bool = False, *, strict: bool = False) -> bool:
    """On or off: ``1`` / ``true`` / ``yes`` / ``on`` or ``0`` / ``false`` / ``no`` / ``off`` (any case).

    ``strict``: any other value is a one-line :class:`GroundlensInputError` instead of a warning,
    for a switch whose wrong guess cannot be undone (whether a signed ledger keeps the texts)."""
    value = raw(name)
    if value is None:
        return default
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    what = "1 or 0 (true/false, yes/no, on/off)"
    if strict:
        raise GroundlensInputError(f"{name}={value!r} is not {what}")
    _bad(name, value, what, default)
    return default


def choice(name: str, choices: Sequence[str], what: str) -> str | None:
    """One of ``choices``, or None when unset; any other value is a one-line
    :class:`GroundlensInputError` (for choices that change the scores, see the module docstring)."""
    value = raw(name)
    if value is None or value in choices:
        return value
    raise GroundlensInputError(f"unknown {what} {value!r} (from {name}); choose one of {', '.join(choices)}")


def path(name: str) -> Path | None:
    """A file or folder (``~`` expanded), or None when unset; whether it exists is for the caller to say."""
    value = raw(name)
    return Path(value).expanduser() if value is not None else None
