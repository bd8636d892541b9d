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
