"""Traces built from ready-made steps, for the report tests and the report benchmarks."""

from __future__ import annotations

from typing import Any, Iterable

from groundlens_core.trace import Step, Trace


def trace_of(steps: Iterable[Step], **fields: Any) -> Trace:
    """A LangGraph ``Trace`` with ``fields`` holding ``steps``, added in order as the recorder adds
    them (so each flagged step's lineage is linked)."""
    trace = Trace(framework="langgraph", started_at="2025-01-01T00:00:00Z", **fields)
    for step in steps:
        trace.add_step(step)
    return trace


def score_of(method: str, triage: str, value: float = 1.0, normalized: float = 0.5, **fields: Any) -> dict[str, Any]:
    """A stored score of ``method`` in band ``triage``, as a trace file holds it; ``fields`` add the
    rest a test needs (rank, explanation, evidence ...)."""
    return {
        "method": method,
        "value": value,
        "normalized": normalized,
        "triage": triage,
        "flagged": triage == "flagged",
        **fields,
    }


def llm_step(i: int, node: str, score: dict[str, Any], **fields: Any) -> Step:
    """Step ``i`` (id ``s{i}`` unless ``fields`` say otherwise): an LLM call at ``node`` scored
    ``score``, whose method and band it takes."""
    return Step(
        **{"id": f"s{i}", "kind": "llm", **fields},
        index=i,
        node=node,
        method=score["method"],
        triage=score["triage"],
        result=score,
    )
