"""Which input columns hold a row's question, context, response and id.

Why a mapping rather than fixed names: files arrive with their own headers (``query,passage,answer``),
and renaming the columns of a file of millions of rows only to score it is a pass too many. The
file's own columns are written back unchanged; only the reading of a row goes through these names.
A missing column is one line that names the closest column the file does have, so a typo or a
different naming is fixed in one go.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, fields
from typing import Any, Mapping, Sequence

from groundlens_core.errors import GroundlensInputError

#: the roles a column can play, with the command line option that names each
ROLES: dict[str, str] = {
    "question": "--question-col",
    "context": "--context-col",
    "response": "--response-col",
    "id": "--id-col",
}

#: how close (difflib ratio, case-insensitive) a found column must be to be offered as the one meant
_CLOSE = 0.4

#: names a file's source text often goes by; offered as the context column when no name is close
#: in spelling (``passage`` is nothing like ``context`` letter by letter)
CONTEXT_NAMES: tuple[str, ...] = (
    "passage",
    "passages",
    "document",
    "documents",
    "docs",
    "source",
    "sources",
    "source_text",
    "reference",
    "references",
    "evidence",
    "knowledge",
    "retrieved",
    "retrieved_context",
    "chunks",
    "article",
)


@dataclass(frozen=True)
class InputColumns:
    """The column names of the four roles; each defaults to the role's own name."""

    question: str = "question"
    context: str = "context"
    response: str = "response"
    id: str = "id"

    def __post_init__(self) -> None:
        for role in ROLES:
            value = getattr(self, role)
            if not isinstance(value, str) or not value.strip():
                raise GroundlensInputError(f"the {role} column name must be a non-empty string, got {value!r}")
        names = [getattr(self, role) for role in ROLES if role != "id"]  # an id may be any column
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            roles = [r for r in ROLES if r != "id" and getattr(self, r) in dupes]
            raise GroundlensInputError(
                f"column {dupes[0]!r} is given for more than one of {', '.join(roles)}; each role needs its own column"
            )

    @classmethod
    def of(cls, value: InputColumns | Mapping[str, str | None] | None) -> InputColumns:
        """``value`` as InputColumns: None is the default names; a mapping ``{role: column}`` (a None
        column keeps the role's default) names some roles and leaves the others as they are."""
        if value is None:
            return cls()
        if isinstance(value, InputColumns):
            return value
        if not isinstance(value, Mapping):
            raise GroundlensInputError(
                f"columns must be a mapping of role to column name, e.g. {{'question': 'query'}}, got {value!r}"
            )
        unknown = [k for k in value if k not in ROLES]
        if unknown:
            raise GroundlensInputError(
                f"unknown column role(s) {', '.join(map(repr, unknown))}; use {', '.join(ROLES)}"
            )
        return cls(**{k: v for k, v in value.items() if v is not None})

    def as_dict(self) -> dict[str, str]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def has_context(self, found: Sequence[str]) -> bool:
        return self.context in found

    def require(self, found: Sequence[str], where: str, *, python: bool = False) -> None:
        """Raise one line when ``found`` lacks a needed column: the response always, the question
        unless there is a context (rows are then scored against the context alone). The fix is
        offered as the command line option, or with ``python=True`` as the ``columns=`` entry."""
        needed = ["response"] if self.has_context(found) else ["question", "response"]
        missing = [role for role in needed if getattr(self, role) not in found]
        if not missing:
            return
        claimed = {getattr(self, role) for role in ROLES}
        spare = [c for c in found if c not in claimed]  # a column another role reads is not offered
        parts = []
        for role in missing:
            name = getattr(self, role)
            label = role if name == role else f"{name!r} (the {role} column)"
            close = closest_column(name, spare)
            fix = f"columns={{{role!r}: {close!r}}}" if python else f"{ROLES[role]} {close}"
            parts.append(f"{label}, closest found: {close!r} ({fix})" if close else label)
        raise GroundlensInputError(
            f"{where}: missing column(s) {'; '.join(parts)}; found: {', '.join(found) or 'none'}"
        )

    def context_warning(self, found: Sequence[str], where: str, *, python: bool = False) -> str | None:
        """One line to show when ``found`` has no context column (None when it has one): every row is
        then scored without a source (DGI, a weak signal), which a file whose source sits in a column
        of another name does not want. Names the closest found column and the fix, as :meth:`require`."""
        if self.has_context(found):
            return None
        name = self.context
        label = "context" if name == "context" else f"{name!r} (the context column)"
        claimed = {getattr(self, role) for role in ROLES}
        spare = [c for c in found if c not in claimed]
        close = closest_column(name, spare) or next((c for c in spare if c.lower() in CONTEXT_NAMES), None)
        line = f"warning: {where}: no column {label}; every row is scored without a source (DGI, a weak signal)"
        if close:
            fix = f"columns={{'context': {close!r}}}" if python else f"{ROLES['context']} {close}"
            line += f"; closest found: {close!r} ({fix})"
        return line

    def item(self, row: Mapping[str, Any], has_context: bool) -> dict[str, Any]:
        """The (question, response, context) of a row; an empty context cell means "no context"."""
        ctx = row.get(self.context) if has_context else None
        return {
            "question": row.get(self.question),
            "response": row.get(self.response),
            "context": ctx if ctx != "" else None,
        }


DEFAULT = InputColumns()


def closest_column(name: str, candidates: Sequence[str]) -> str | None:
    """The candidate most like ``name`` (case-insensitive), if any is close enough to be meant."""
    lowered = {c.lower(): c for c in reversed(candidates)}  # the first of equal spellings wins
    match = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=_CLOSE)
    return lowered[match[0]] if match else None
