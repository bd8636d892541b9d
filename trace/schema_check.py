"""A saved trace checked against trace/schema.json before it is read: the first problem, named by its place.

Why here and not by a library: ``report`` reads files anyone may hand it, and a field the schema
requires that is missing, or a score of 7.5 on a scale of 0 to 1, must be one line naming the
field rather than a report that shows it. The schema uses a small part of JSON Schema (2020-12):
``type``, ``required``, ``properties``, ``additionalProperties``, ``enum``, ``const``, ``minimum``,
``maximum``, ``items``, ``oneOf``, ``allOf``, ``if``/``then``/``else``, ``pattern``, ``minProperties`` and
local ``$ref``; this checks exactly those (``format`` and the rest are descriptions).
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping

_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def schema_problem(data: Any, schema: Mapping[str, Any]) -> str | None:
    """The first place where ``data`` does not hold to ``schema`` (``steps[3].score.normalized: 7.5
    is above the maximum 1``), or None when it does."""
    return _check(data, schema, schema, "trace")


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=True, default=str)
    return text if len(text) <= 40 else text[:39] + "\u2026"


def _check(v: Any, s: Mapping[str, Any], root: Mapping[str, Any], at: str) -> str | None:
    if "$ref" in s:
        ref = s["$ref"]
        target: Any = root
        for part in ref.lstrip("#/").split("/"):
            target = target[part]
        problem = _check(v, target, root, at)
        if problem:
            return problem
    if "type" in s:
        kinds = s["type"] if isinstance(s["type"], list) else [s["type"]]
        if not any(_TYPES[k](v) for k in kinds):
            return f"{at}: {_shown(v)} is not {' or '.join(kinds)}"
    if "const" in s and v != s["const"]:
        return f"{at}: {_shown(v)} is not {_shown(s['const'])}"
    if "enum" in s and not any(v == e and type(v) is type(e) for e in s["enum"]):
        return f"{at}: {_shown(v)} is not one of {', '.join(map(_shown, s['enum']))}"
    if _TYPES["number"](v):
        if "minimum" in s and v < s["minimum"]:
            return f"{at}: {_shown(v)} is below the minimum {s['minimum']}"
        if "maximum" in s and v > s["maximum"]:
            return f"{at}: {_shown(v)} is above the maximum {s['maximum']}"
    if isinstance(v, str) and "pattern" in s and not re.search(s["pattern"], v):
        return f"{at}: {_shown(v)} is not in the form {s['pattern']}"
    if isinstance(v, dict):
        problem = _check_object(v, s, root, at)
        if problem:
            return problem
    if isinstance(v, list) and "items" in s:
        for i, item in enumerate(v):
            problem = _check(item, s["items"], root, f"{at}[{i}]")
            if problem:
                return problem
    for sub in s.get("allOf", ()):
        problem = _check(v, sub, root, at)
        if problem:
            return problem
    if "if" in s:
        branch = "then" if _check(v, s["if"], root, at) is None else "else"
        problem = _check(v, s[branch], root, at) if branch in s else None
        if problem:
            return problem
    if "oneOf" in s:
        problems = [_check(v, sub, root, at) for sub in s["oneOf"]]
        matched = problems.count(None)
        if matched == 0:
            return min(problems, key=len)  # type: ignore[arg-type]  # the nearest miss
        if matched > 1:
            return f"{at}: {_shown(v)} matches more than one of its allowed forms"
    return None


def _check_object(v: dict, s: Mapping[str, Any], root: Mapping[str, Any], at: str) -> str | None:
    for name in s.get("required", ()):
        if name not in v:
            return f"{at}: missing the field {name!r}"
    if len(v) < s.get("minProperties", 0):
        return f"{at}: has {len(v)} fields, fewer than {s['minProperties']}"
    props = s.get("properties", {})
    extra = s.get("additionalProperties", True)
    for name, value in v.items():
        where = f"{at}.{name}"
        if name in props:
            problem = _check(value, props[name], root, where)
        elif extra is False:
            problem = f"{at}: has a field {name!r} the format does not have"
        elif isinstance(extra, Mapping):
            problem = _check(value, extra, root, where)
        else:
            problem = None
        if problem:
            return problem
    return None
