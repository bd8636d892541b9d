"""OpenTelemetry export of groundlens traces: live (a recorder listener) and post-hoc (a saved trace).

Live::

    provider = configure_otlp("http://127.0.0.1:6006")          # or your own TracerProvider
    recorder = Recorder("langgraph", listeners=[OTelExporter(tracer_provider=provider)])

Post-hoc::

    export_trace(Trace.load("trace.json"), tracer_provider=provider)

One root span per trace and one child span per step, with the original times; what each span
carries is in :mod:`groundlens_core.trace.otel.attributes` and docs/otel.md. Nothing the exporter
raises reaches the agent. Requires ``pip install "groundlens-core[otel]"``; importing this module does not.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from typing import Any

from groundlens_core._version import __version__
from groundlens_core.internal_errors import internal_error
from groundlens_core.scoring.bands import SCORED_METHODS
from groundlens_core.trace import lineage
from groundlens_core.trace.model import Step, Trace
from groundlens_core.trace.otel import exported_spans
from groundlens_core.trace.otel import semconv as sc
from groundlens_core.trace.otel.attributes import (
    cut,
    evaluation_event_attributes,
    iso_to_ns,
    render_text,
    root_end_attributes,
    root_span,
    step_span,
    step_times,
)
from groundlens_core.trace.otel.otlp import configure_otlp, export_failures, logger_provider_of, require_otel
from groundlens_core.trace.recorder import app_span

log = logging.getLogger("groundlens.otel")

__all__ = [
    "OTelExporter",
    "export_trace",
    "configure_otlp",
    "export_failures",
    "logger_provider_of",
    "iso_to_ns",
    "render_text",
]


class _Root:
    """An open root span and what its end needs."""

    __slots__ = ("span", "ctx", "last_end_ns", "trace", "flagged_spans")

    def __init__(self, span: Any, ctx: Any, start_ns: int | None, trace: Trace):
        self.span = span
        self.ctx = ctx
        self.last_end_ns = start_ns or 0
        self.trace = trace  # for the counts when close() ends a trace that never ended
        self.flagged_spans = lineage.SpanContexts()  # cascade links point at these


#: every exporter, so a forked child can give each a lock of its own (see ``_reset_locks_in_child``)
_EXPORTERS: weakref.WeakSet[OTelExporter] = weakref.WeakSet()


def _reset_locks_in_child() -> None:
    """A thread (the recorder's worker) can hold an exporter's lock, while it starts a span, at the
    moment another thread forks; in the child nobody would ever release it, and the child's worker
    would block on it for good (flushes time out, exit waits). The child gets new locks."""
    for exporter in list(_EXPORTERS):
        exporter._lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_locks_in_child)


class OTelExporter:
    """A :class:`~groundlens_core.trace.TraceListener` that turns traces into OpenTelemetry spans.

    Give it to a recorder (``Recorder(..., listeners=[OTelExporter()])`` or ``add_listener``). It
    runs on the recorder's worker thread, after scoring, so the agent never waits on it; nothing
    it raises reaches the agent (failures are logged once as warnings).
    """

    def __init__(
        self,
        tracer_provider: Any = None,
        logger_provider: Any = None,
        *,
        redact: bool = False,
        max_text_chars: int | None = None,
        max_open_traces: int = 1000,
    ):
        otel_trace = require_otel("opentelemetry.trace")
        otel_logs = require_otel("opentelemetry._logs")
        self._trace_api = otel_trace
        try:
            if tracer_provider is None:
                self._tracer = otel_trace.get_tracer("groundlens", __version__)  # proxy: follows the global provider
            else:
                self._tracer = tracer_provider.get_tracer("groundlens", __version__)
        except Exception as exc:  # a broken provider must not break the agent that constructs us
            log.warning(
                "groundlens: the tracer provider failed (%s: %s); no spans will be exported", type(exc).__name__, exc
            )
            self._tracer = otel_trace.NoOpTracer()
        if logger_provider is None:  # configure_otlp's provider carries the logs of the same backend
            logger_provider = logger_provider_of(tracer_provider)
        try:
            if logger_provider is None:
                self._logger = otel_logs.get_logger("groundlens", __version__)  # no-op until a global one is set
            else:
                self._logger = logger_provider.get_logger("groundlens", __version__)
        except Exception as exc:
            log.warning(
                "groundlens: the logger provider failed (%s: %s); no evaluation events will be exported",
                type(exc).__name__,
                exc,
            )
            self._logger = otel_logs.NoOpLogger("groundlens")
        self.redact = redact
        self.max_text_chars = max_text_chars
        self._max_open = max_open_traces
        self._roots: dict[str, _Root] = {}  # trace.id -> open root span (insertion order = age)
        self._lock = threading.RLock()
        self._failures = 0
        _EXPORTERS.add(self)

    # ------------------------------------------------------------ TraceListener

    def on_trace_start(self, trace: Trace) -> None:
        self._guard(self._open_root, trace)

    def on_step(self, trace: Trace, step: Step) -> None:
        self._guard(self._emit_step, trace, step, None)

    def on_trace_end(self, trace: Trace) -> None:
        self._guard(self._close_root, self._view(trace))

    def close(self) -> None:
        """End the root spans of traces that never ended (marked ``groundlens.trace.complete=False``)."""
        with self._lock:
            roots, self._roots = list(self._roots.values()), {}
        for root in roots:
            self._guard(self._end_root, root, root.trace, complete=False)

    # ------------------------------------------------------------ post-hoc

    def export(self, trace: Trace) -> str:
        """Export a whole (saved) trace with its original timestamps; returns the OTel trace id (hex)."""
        trace = self._view(trace)
        root = self._open_root(trace)
        fallback = iso_to_ns(trace.started_at)
        for step in trace.steps:
            end = self._emit_step(trace, step, fallback)
            fallback = end if end is not None else fallback
        with self._lock:
            self._roots.pop(trace.id, None)
        self._end_root(root, trace, complete=trace.ended_at is not None)
        return format(root.span.get_span_context().trace_id, "032x")

    # ------------------------------------------------------------ spans

    def _open_root(self, trace: Trace) -> _Root:
        with self._lock:
            root = self._roots.get(trace.id)
            if root is not None:
                return root
            start = iso_to_ns(trace.started_at)
            name, attrs = root_span(trace)
            parent = app_span.parent_of(trace.metadata)  # the application's span the trace started in
            context = self._span_context(parent) if parent is not None else _empty_context()
            span = self._tracer.start_span(name, context=context, start_time=start, attributes=attrs)
            root = _Root(span, self._trace_api.set_span_in_context(span), start, trace)
            self._roots[trace.id] = root
            while len(self._roots) > self._max_open:  # a runaway of never-ended traces: end the oldest
                old_id = next(iter(self._roots))
                old = self._roots.pop(old_id)
                self._end_root(old, old.trace, complete=False)
            return root

    def _close_root(self, trace: Trace) -> None:
        with self._lock:
            root = self._roots.pop(trace.id, None)
        if root is None:  # the exporter joined after the start: still show the trace
            root = self._open_root(trace)
            with self._lock:
                self._roots.pop(trace.id, None)
        self._end_root(root, trace, complete=True)

    def _end_root(self, root: _Root, trace: Trace | None, *, complete: bool) -> None:
        span = root.span
        end = root.last_end_ns or None
        if trace is not None:
            for key, value in root_end_attributes(trace).items():
                span.set_attribute(key, value)
            ended = iso_to_ns(trace.ended_at)
            if ended is not None:
                end = max(ended, end or 0)
            if trace.status == "error":
                status = self._trace_api.Status(
                    self._trace_api.StatusCode.ERROR, cut(trace.error or "the agent raised")
                )
                span.set_status(status)
        span.set_attribute(sc.GL_TRACE_COMPLETE, complete)
        span.end(end_time=end)

    def _emit_step(self, trace: Trace, step: Step, fallback_ns: int | None) -> int | None:
        step = step.view(redact=self.redact, max_text_chars=self.max_text_chars)
        root = self._open_root(trace)
        start, end = step_times(step, fallback_ns if fallback_ns is not None else time.time_ns())
        name, attrs = step_span(step, redact=self.redact, max_text_chars=self.max_text_chars)
        links, cascade = lineage.otel_links(step, root.flagged_spans, self._trace_api.Link)
        parent, llm_span = self._step_parent(root, step)
        span = self._tracer.start_span(
            name, context=parent, start_time=start, attributes={**attrs, **cascade}, links=links
        )
        root.flagged_spans.remember(step, span)
        made = span.get_span_context()
        if made.is_valid:
            exported_spans.remember(step.id, made.trace_id, made.span_id)
        if step.method == "error":
            span.set_status(self._trace_api.Status(self._trace_api.StatusCode.ERROR, cut(step.error or "error")))
        span.end(end_time=end)
        with self._lock:
            root.last_end_ns = max(root.last_end_ns, end)
        if step.method in SCORED_METHODS and step.result is not None:
            # the evaluation belongs to the operation it evaluates: the instrumentor's LLM span when known
            self._emit_evaluation(step, span if llm_span is None else llm_span, end)
        return end

    def _step_parent(self, root: _Root, step: Step) -> tuple[Any, Any]:
        """The context a step's span starts in, and the instrumentor's LLM span when there is one.

        The LLM call's own span (an instrumentor's, captured by the adapter) comes first; then the
        application span the call was made in, when it is not in the trace the root is in (a trace
        that outlived the request that started it); else the root."""
        parent = app_span.parent_of(step.metadata)
        if parent is None:
            return root.ctx, None
        if parent.get("llm"):
            ctx = self._span_context(parent)
            return ctx, self._trace_api.get_current_span(ctx)
        if format(root.span.get_span_context().trace_id, "032x") != parent["trace_id"]:
            return self._span_context(parent), None
        return root.ctx, None

    def _span_context(self, ref: dict[str, Any]) -> Any:
        """A context whose current span is the (remote, non-recording) application span ``ref`` names."""
        api = self._trace_api
        flags = api.TraceFlags(api.TraceFlags.SAMPLED if ref.get("sampled", True) else api.TraceFlags.DEFAULT)
        ctx = api.SpanContext(int(ref["trace_id"], 16), int(ref["span_id"], 16), is_remote=True, trace_flags=flags)
        return api.set_span_in_context(api.NonRecordingSpan(ctx), _empty_context())

    def _emit_evaluation(self, step: Step, span: Any, end_ns: int) -> None:
        attrs = evaluation_event_attributes(step, self.max_text_chars)
        try:
            self._logger.emit(
                timestamp=end_ns,
                context=self._trace_api.set_span_in_context(span),
                event_name=sc.GEN_AI_EVALUATION_RESULT_EVENT,
                attributes=attrs,
            )
        except TypeError:  # an older Logs API without keyword emit: build the record ourselves
            logs = require_otel("opentelemetry._logs")
            ctx = span.get_span_context()
            self._logger.emit(
                logs.LogRecord(
                    timestamp=end_ns,
                    trace_id=ctx.trace_id,
                    span_id=ctx.span_id,
                    trace_flags=ctx.trace_flags,
                    attributes=attrs,
                )
            )

    # ------------------------------------------------------------ helpers

    def _view(self, trace: Trace) -> Trace:
        return trace.view(redact=self.redact, max_text_chars=self.max_text_chars)

    def _guard(self, fn, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # the agent must never see an exporter failure (raised in our tests)
            internal_error(exc, "the OpenTelemetry export", None, deferred=True)
            self._failures += 1
            if self._failures == 1 or self._failures % 100 == 0:
                log.warning(
                    "groundlens: OpenTelemetry export failed (%d so far): %s: %s",
                    self._failures,
                    type(exc).__name__,
                    exc,
                )
            return None


def _empty_context() -> Any:
    """A context without a current span: a root never nests under whatever span is current where the
    export runs (post-hoc export must not inherit one); the application span a trace started in comes
    from the trace's metadata instead (``app_span``)."""
    return require_otel("opentelemetry.context").Context()


def export_trace(
    trace: Trace,
    tracer_provider: Any = None,
    logger_provider: Any = None,
    *,
    redact: bool = False,
    max_text_chars: int | None = None,
    flush: bool = True,
) -> str:
    """Export a finished or saved trace as the same spans (and evaluation events) the live exporter
    makes, with the trace's original timestamps. Returns the OpenTelemetry trace id (32 hex chars).

    ``flush`` force-flushes the providers so a short script's spans leave before it exits.
    """
    exporter = OTelExporter(tracer_provider, logger_provider, redact=redact, max_text_chars=max_text_chars)
    trace_id = exporter.export(trace)
    if flush:
        for provider in (tracer_provider, logger_provider):
            _force_flush(provider)
        if tracer_provider is None:
            _force_flush(exporter._trace_api.get_tracer_provider())
    return trace_id


def _force_flush(provider: Any, timeout_millis: int = 10_000) -> None:
    fn = getattr(provider, "force_flush", None)
    if fn is None:
        return
    try:
        fn(timeout_millis)
    except Exception as exc:
        log.warning("groundlens: flushing OpenTelemetry failed: %s", exc)
