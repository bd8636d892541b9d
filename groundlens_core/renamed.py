"""Older public names kept as read-only aliases that warn: one helper, so every rename reads and
warns the same way (``DeprecationWarning``, naming the new attribute)."""

from __future__ import annotations

from typing import Any
from warnings import warn

__all__ = ["renamed"]


def renamed(new: str, old: str) -> Any:
    """A property for the older name ``old`` (as the warning names it, e.g. ``"Step.rank"``) of
    attribute ``new``: it returns ``new``'s value and warns that ``old`` is deprecated."""

    def read(self: Any) -> Any:
        warn(f"{old} is deprecated: use .{new}", DeprecationWarning, stacklevel=2)
        return getattr(self, new)

    return property(read, doc=f"Deprecated name of :attr:`{new}`.")
