"""Traces of agent runs: the data model, the recorder, and the JSON / OpenTelemetry / HTML exports.

Knows the scoring core, never a framework. ``recorder/`` turns call records into steps off the
agent's thread; ``html/`` and ``otel/`` are the exports; ``sources/`` reads spans a tracing backend
already stores. The adapters (``groundlens_core.plugins``) stand on the recorder.
"""

from typing import Any

from groundlens_core.trace.model import (
    META_INTERNAL_ERROR,
    META_SINGLE_AGENT,
    META_TOOL,
    SCHEMA_VERSION,
    STEP_KINDS,
    STEP_METHODS,
    ContextPiece,
    Step,
    Trace,
    Usage,
    set_html_report,
)
from groundlens_core.trace.recorder import CallRecord, Recorder, TraceListener, context_pieces

__all__ = [
    "META_INTERNAL_ERROR",
    "META_SINGLE_AGENT",
    "META_TOOL",
    "SCHEMA_VERSION",
    "STEP_KINDS",
    "STEP_METHODS",
    "CallRecord",
    "ContextPiece",
    "Recorder",
    "Step",
    "Trace",
    "TraceListener",
    "Usage",
    "context_pieces",
]


def _to_html(trace: Trace, path: Any = None, **kwargs: Any) -> str:
    """:meth:`Trace.to_html`, imported on use: importing the package stays free of the report's templates."""
    from groundlens_core.trace.html import trace_to_html

    return trace_to_html(trace, path, **kwargs)


set_html_report(_to_html)
