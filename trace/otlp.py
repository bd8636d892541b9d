"""OTLP/HTTP setup: a TracerProvider whose exporter a dead backend cannot break.

:func:`configure_otlp` wraps the OTLP span exporter so a backend that is down costs one warning per
endpoint (its own retry lines muted), never an exception or the agent's time; :func:`export_failures`
says how many spans did not arrive.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Any, Mapping

from groundlens_core._imports import require
from groundlens_core.trace import semconv as sc

log = logging.getLogger("groundlens.otel")

_INSTALL = ("otel", "OpenTelemetry (opentelemetry-api, opentelemetry-sdk)")


def require_otel(module: str):
    """``module`` imported, or an ImportError naming the ``[otel]`` extra."""
    return require(module, *_INSTALL)


class _GuardedSpanExporter:
    """Wraps a span exporter so a dead backend costs one warning per endpoint, never an exception.

    The spans that could not be sent are dropped from the export only; the trace stays in the
    recorder (``recorder.get_trace()``) and can be saved as JSON and exported again later.
    """

    _warned: set[str] = set()
    _warned_lock = threading.Lock()

    def __init__(self, inner: Any, endpoint: str):
        self._inner = inner
        self.endpoint = endpoint
        self.failed_batches = 0
        self.dropped_spans = 0

    def export(self, spans):
        from opentelemetry.sdk.trace.export import SpanExportResult

        _IN_GUARDED_EXPORT.active = True  # the OTLP exporter's own retry/failure lines are muted: ours speaks
        try:
            result = self._inner.export(spans)
        except Exception as exc:
            result, reason = SpanExportResult.FAILURE, f"{type(exc).__name__}: {exc}"
        else:
            reason = "the backend did not accept the spans"
        finally:
            _IN_GUARDED_EXPORT.active = False
        if result != SpanExportResult.SUCCESS:
            self.failed_batches += 1
            self.dropped_spans += len(spans)
            with self._warned_lock:
                first = self.endpoint not in self._warned
                self._warned.add(self.endpoint)
            if first:
                log.warning(
                    "groundlens: could not export spans to %s (%s); the traces are kept in the recorder "
                    "(recorder.get_trace(), trace.save()) and can be exported later with export_trace(). "
                    "Further failures for this endpoint are not logged.",
                    self.endpoint,
                    reason,
                )
        return result

    def shutdown(self) -> None:
        try:
            self._inner.shutdown()
        except Exception as exc:  # pragma: no cover - defensive
            log.debug("groundlens: span exporter shutdown failed: %s", exc)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        fn = getattr(self._inner, "force_flush", None)
        return True if fn is None else bool(fn(timeout_millis))


_IN_GUARDED_EXPORT = threading.local()


class _MuteGuardedExports(logging.Filter):
    """Drops the OTLP exporter's own records (a warning per retry, an error per failed batch)
    while one of our guarded exports runs on this thread: its one warning per endpoint stands for
    them, as documented. The user's other OTLP exporters keep their logs."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(_IN_GUARDED_EXPORT, "active", False)


_QUIET_LOGGERS = (
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.proto.http._log_exporter",
)
_quiet_installed = False


def _quiet_otlp_logs() -> None:
    global _quiet_installed
    if _quiet_installed:
        return
    _quiet_installed = True
    for name in _QUIET_LOGGERS:
        logging.getLogger(name).addFilter(_MuteGuardedExports())


def _traces_endpoint(endpoint: str) -> str:
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith("/v1/traces") else endpoint + "/v1/traces"


def configure_otlp(
    endpoint: str | None = None,
    *,
    project: str | None = None,
    service_name: str = "groundlens",
    timeout: float = 3.0,
    resource_attributes: Mapping[str, Any] | None = None,
    quiet_exporter_logs: bool = True,
) -> Any:
    """A TracerProvider that ships spans over OTLP/HTTP in the background (BatchSpanProcessor).

    ``endpoint`` is the collector's base URL (``http://127.0.0.1:6006``; ``/v1/traces`` is added),
    or None to let the OTLP exporter read ``OTEL_EXPORTER_OTLP_ENDPOINT`` /
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``. ``project`` sets ``openinference.project.name`` (the
    Phoenix project). ``timeout`` bounds each export so a dead backend cannot hold up shutdown for
    long; failures cost one warning per endpoint (see ``_GuardedSpanExporter``). The provider is
    not made global: pass it to :class:`OTelExporter`, or ``trace.set_tracer_provider`` it yourself.
    Call ``provider.shutdown()`` (or ``force_flush()``) before the process exits.
    """
    sdk_trace = require_otel("opentelemetry.sdk.trace")
    sdk_export = require_otel("opentelemetry.sdk.trace.export")
    resources = require_otel("opentelemetry.sdk.resources")
    otlp = require_otel("opentelemetry.exporter.otlp.proto.http.trace_exporter")

    attrs: dict[str, Any] = {"service.name": service_name}
    if project:
        attrs[sc.OPENINFERENCE_PROJECT_NAME] = project
    attrs.update(resource_attributes or {})
    inner = otlp.OTLPSpanExporter(endpoint=_traces_endpoint(endpoint) if endpoint else None, timeout=timeout)
    if quiet_exporter_logs:
        _quiet_otlp_logs()
    exporter = _GuardedSpanExporter(inner, getattr(inner, "_endpoint", None) or str(endpoint))
    provider = sdk_trace.TracerProvider(resource=resources.Resource.create(attrs))
    provider.add_span_processor(
        sdk_export.BatchSpanProcessor(exporter, export_timeout_millis=int(timeout * 1000) + 500)
    )
    _GUARDED_BY_PROVIDER[provider] = exporter
    return provider


_GUARDED_BY_PROVIDER: weakref.WeakKeyDictionary[Any, _GuardedSpanExporter] = weakref.WeakKeyDictionary()


def export_failures(provider: Any) -> int:
    """How many spans a provider made by :func:`configure_otlp` could not deliver so far (0 for
    any other provider). Call it after ``provider.force_flush()`` or ``shutdown()`` to tell a
    user whether the export reached the backend."""
    exporter = _GUARDED_BY_PROVIDER.get(provider)
    return 0 if exporter is None else exporter.dropped_spans
