"""Small helpers the framework adapters share: turning framework values into plain text and context.

Append-only: several adapters import from here. Nothing in this module imports a framework.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from groundlens_core.trace.model import ContextPiece

#: argument / state names that usually hold the user's question, in order of preference
QUESTION_NAMES: tuple[str, ...] = ("question", "query", "input", "user_input", "ask", "request", "prompt")
#: argument / state names that usually hold retrieved or supplied context
CONTEXT_NAMES: tuple[str, ...] = ("context", "documents", "docs", "sources", "search_results", "retrieved")

_TEXT_ATTRS = ("text", "page_content", "content")


def as_text(value: Any) -> str | None:
    """Best-effort readable text of a framework value, or None when it holds no text.

    Strings are kept as they are; lists of strings or text parts (``{"type": "text", "text": ...}``,
    objects with ``.text`` / ``.content``) are joined with blank lines; images and other binary parts
    are dropped.
    """
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return None
    if isinstance(value, Mapping):
        for key in _TEXT_ATTRS:
            if isinstance(value.get(key), str):
                return value[key]
        return None
    if isinstance(value, (list, tuple)):
        parts = [as_text(v) for v in value]
        parts = [p for p in parts if p and p.strip()]
        return "\n\n".join(parts) if parts else None
    for attr in _TEXT_ATTRS:
        inner = getattr(value, attr, None)
        if isinstance(inner, str):
            return inner
    return None


def first_text(mapping: Mapping[str, Any] | None, names: Sequence[str]) -> tuple[str, str] | None:
    """``(name, text)`` of the first of ``names`` in ``mapping`` whose value has non-blank text."""
    if not mapping:
        return None
    for name in names:
        try:
            value = mapping.get(name) if hasattr(mapping, "get") else None
        except Exception:  # odd mappings (lazy proxies) must not break an adapter
            value = None
        text = as_text(value)
        if text and text.strip():
            return name, text
    return None


def pieces_from_value(value: Any, source: str) -> list[ContextPiece]:
    """Context pieces from a value that may be one text or a list of documents/texts."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        items: Iterable[Any] = value
    else:
        items = [value]
    out = []
    for item in items:
        text = as_text(item)
        if text is None and item is not None and not isinstance(item, (bytes, bytearray)):
            text = str(item)
        if text and text.strip():
            out.append(ContextPiece(text=text, source=source))
    return out


def merge_pieces(*groups: Iterable[ContextPiece]) -> list[ContextPiece]:
    """Concatenate groups of pieces, keeping the first piece of each distinct text."""
    seen: set[str] = set()
    out: list[ContextPiece] = []
    for group in groups:
        for piece in group:
            if not isinstance(piece.text, str) or not piece.text.strip():
                continue
            key = piece.text.strip()
            if key not in seen:
                seen.add(key)
                out.append(piece)
    return out


def short(value: Any, limit: int = 300) -> str:
    """A short printable form of a value for step metadata (arguments, tool inputs)."""
    try:
        text = value if isinstance(value, str) else repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."
