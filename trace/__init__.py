"""Traces of agent runs: the data model, the recorder, and the JSON / OpenTelemetry / HTML exports.

Knows the scoring core, never a framework. ``adapter_shell``, ``adapter_helpers`` and
``prompt_context`` are the adapter kit the framework adapters (``groundlens_core.plugins``) stand on.
"""

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
