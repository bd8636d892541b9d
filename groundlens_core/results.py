"""Frozen result types. Their JSON is canonical: the same input gives the same bytes."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any


def canonical_json(data: Any) -> str:
    """Sorted keys, fixed separators, no NaN: byte-stable across runs and processes."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


@dataclass(frozen=True)
class GroundlensScore:
    """A triage signal for one (question, response[, context]); never a verdict of truth."""

    method: str  # "sgi" | "dgi"
    value: float  # raw SGI or DGI
    normalized: float  # in [0, 1], higher = better grounded
    flagged: bool  # triage == "flagged"
    triage: str  # "trusted" | "review" | "flagged"
    explanation: str
    fingerprint: str  # embedder model id + SHA-256 of its weights
    backend: str  # embedding backend that produced the vectors
    version: str  # groundlens-core version

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return canonical_json(self.to_dict())


@dataclass(frozen=True)
class SGIResult(GroundlensScore):
    d_response_question: float
    d_response_context: float
    context_mode: str  # "whole" | "mean" | "nearest" (how phi(ctx) was formed)
    context_chunks: int


@dataclass(frozen=True)
class DGIResult(GroundlensScore):
    displacement_norm: float
    direction: str  # which direction: "bundled:<name>" or "calibration:<sha>"


@dataclass(frozen=True)
class ScoreError:
    """A row of a batch that could not be scored; the rest of the batch still is."""

    index: int
    error: str
    method: str = "error"
    triage: str = "error"
    flagged: bool = False

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return canonical_json(self.to_dict())


def score_from_dict(data: dict[str, Any]) -> GroundlensScore | ScoreError:
    kind = {"sgi": SGIResult, "dgi": DGIResult, "error": ScoreError}.get(data.get("method", ""))
    if kind is None:
        raise ValueError(f"not a groundlens score: method={data.get('method')!r}")
    names = {f.name for f in dataclasses.fields(kind)}
    return kind(**{k: v for k, v in data.items() if k in names})


def as_score(data: Any) -> GroundlensScore | None:
    """The score object for a trace step: a score as it is, or one rebuilt from its JSON dict.

    Lenient on purpose, because it reads saved traces: keys it does not know are dropped, and a
    field the dict lacks (a hand-built or older trace) is None unless the field has a default.
    ``None`` stays None; anything else that is not an SGI/DGI score is a ``ValueError``.
    """
    if data is None or isinstance(data, GroundlensScore):
        return data
    if not isinstance(data, dict):
        raise ValueError(f"a step score must be a score object or its dict, got {type(data).__name__}")
    kind = {"sgi": SGIResult, "dgi": DGIResult}.get(data.get("method", ""))
    if kind is None:
        raise ValueError(f"not a groundlens score: method={data.get('method')!r}")
    values: dict[str, Any] = {}
    for f in dataclasses.fields(kind):
        if f.name in data:
            values[f.name] = data[f.name]
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            values[f.name] = None
    return kind(**values)
