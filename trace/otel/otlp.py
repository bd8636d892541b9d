"""OTLP/HTTP setup: a TracerProvider (and the LoggerProvider beside it) whose exporters a dead
backend cannot break.

:func:`configure_otlp` wraps the OTLP span and log exporters so a backend that is down costs one
warning per endpoint (their own retry lines muted), never an exception or the agent's time;
:func:`export_failures` says how many spans did not arrive. The ``gen_ai.evaluation.result`` log
records go over OTLP logs to the same backend, through the provider's :attr:`logger_provider`, which
every exporter given the TracerProvider uses.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Any, Mapping

from groundlens_core._imports import require
from groundlens_core.trace.otel import semconv as sc

log = logging.getLogger("groundlens.otel")

_INSTALL = ("otel", "OpenTelemetry (opentelemetry-api, opentelemetry-sdk)")


def require_otel(module: str):
    """``module`` imported, or an ImportError naming the ``[otel]`` extra."""
    return require(module, *_INSTALL)


class _GuardedExporter:
    """Wraps a span or log record exporter so a dead backend costs one warning per endpoint, never an
    exception.

    What could not be sent is dropped from the export only; the trace stays in the recorder
    (``recorder.get_trace()``) and can be saved as JSON and exported again later. The span and log
    exporters of one :func:`configure_otlp` share ``warn_key``: a backend that is down is one
    warning, not one per signal. A backend that answers 404 to logs only (it takes no OTLP logs,
    as Phoenix) is one info line, and no further log export is tried.
    """

    _warned: set[str] = set()
    _warned_lock = threading.Lock()

    def __init__(self, inner: Any, endpoint: str, *, what: str = "spans", warn_key: str | None = None):
        self._inner = inner
        self.endpoint = endpoint
        self.what = what
        self.warn_key = warn_key or endpoint
        self.failed_batches = 0
        self.dropped_spans = 0  # spans, or log records for a log exporter
        self.unsupported = False  # the backend answered 404: it has no such OTLP endpoint

    def _result_type(self) -> Any:
        if self.what == "spans":
            return require_otel("opentelemetry.sdk.trace.export").SpanExportResult
        export = require_otel("opentelemetry.sdk._logs.export")
        return getattr(export, "LogRecordExportResult", None) or export.LogExportResult

    def export(self, batch):
        result_type = self._result_type()
        if self.unsupported:
            self.dropped_spans += len(batch)
            return result_type.SUCCESS  # nothing to retry: the backend has no endpoint for them
        _IN_GUARDED_EXPORT.active = True  # the OTLP exporter's own retry/failure lines are muted: ours speaks
        _IN_GUARDED_EXPORT.muted = []
        try:
            result = self._inner.export(batch)
        except Exception as exc:
            result, reason = result_type.FAILURE, f"{type(exc).__name__}: {exc}"
        else:
            reason = f"the backend did not accept the {self.what}"
        finally:
            _IN_GUARDED_EXPORT.active = False
            muted, _IN_GUARDED_EXPORT.muted = _IN_GUARDED_EXPORT.muted, []
        if result == result_type.SUCCESS:
            return result
        self.failed_batches += 1
        self.dropped_spans += len(batch)
        if self.what != "spans" and any("code: 404" in m for m in muted):
            self.unsupported = True
            log.info(
                "groundlens: %s takes no OTLP logs (HTTP 404); the gen_ai.evaluation.result records are not "
                "sent there (the scores are on the spans too). configure_otlp(..., logs=False) skips them.",
                self.endpoint,
            )
            return result
        with self._warned_lock:
            first = self.warn_key not in self._warned
            self._warned.add(self.warn_key)
        if first:
            log.warning(
                "groundlens: could not export %s to %s (%s); the traces are kept in the recorder "
                "(recorder.get_trace(), trace.save()) and can be exported later with export_trace(). "
                "Further failures for this endpoint are not logged.",
                self.what,
                self.endpoint,
                reason,
            )
        return result

    def shutdown(self) -> None:
        try:
            self._inner.shutdown()
        except Exception as exc:  # pragma: no cover - defensive
            log.debug("groundlens: %s exporter shutdown failed: %s", self.what, exc)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        fn = getattr(self._inner, "force_flush", None)
        return True if fn is None else bool(fn(timeout_millis))


_GuardedSpanExporter = _GuardedExporter  # the name older code and tests know


_IN_GUARDED_EXPORT = threading.local()


class _MuteGuardedExports(logging.Filter):
    """Drops the OTLP exporter's own records (a warning per retry, an error per failed batch)
    while one of our guarded exports runs on this thread: its one warning per endpoint stands for
    them, as documented. The user's other OTLP exporters keep their logs."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(_IN_GUARDED_EXPORT, "active", False):
            return True
        try:  # kept for the guarded exporter: a 404 to logs means "no logs here", not "backend down"
            _IN_GUARDED_EXPORT.muted.append(record.getMessage())
        except Exception:  # pragma: no cover - a record that cannot render is still muted
            pass
        return False


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


def _logs_endpoint(endpoint: str) -> str:
    endpoint = endpoint.rstrip("/").removesuffix("/v1/traces")
    return endpoint if endpoint.endswith("/v1/logs") else endpoint + "/v1/logs"


def _otlp_tracer_provider_class() -> type:
    """The SDK's TracerProvider with the LoggerProvider of the same backend beside it: flushed and
    shut down with it, and found by :class:`OTelExporter` (and every adapter's ``tracer_provider=``)
    when no logger provider is given. Still a TracerProvider for everything that checks."""
    global _OTLP_PROVIDER
    if _OTLP_PROVIDER is None:
        # imported when first needed (the [otel] extra is optional): a base mypy only sees as Any
        base: Any = require_otel("opentelemetry.sdk.trace").TracerProvider

        class OTLPTracerProvider(base):
            logger_provider: Any = None

            def force_flush(self, timeout_millis: int = 30000) -> bool:
                ok = super().force_flush(timeout_millis)
                if self.logger_provider is not None:
                    ok = bool(self.logger_provider.force_flush(timeout_millis)) and ok
                return ok

            def shutdown(self) -> None:
                super().shutdown()
                if self.logger_provider is not None:
                    self.logger_provider.shutdown()

        _OTLP_PROVIDER = OTLPTracerProvider
    return _OTLP_PROVIDER


_OTLP_PROVIDER: type | None = None


def logger_provider_of(tracer_provider: Any) -> Any:
    """The LoggerProvider :func:`configure_otlp` made beside ``tracer_provider`` (None for any other
    provider, or one made with ``logs=False``)."""
    return getattr(tracer_provider, "logger_provider", None) if tracer_provider is not None else None


def configure_otlp(
    endpoint: str | None = None,
    *,
    project: str | None = None,
    service_name: str = "groundlens",
    timeout: float = 3.0,
    resource_attributes: Mapping[str, Any] | None = None,
    quiet_exporter_logs: bool = True,
    logs: bool = True,
) -> Any:
    """A TracerProvider that ships spans over OTLP/HTTP in the background (BatchSpanProcessor), with
    a LoggerProvider beside it that ships the ``gen_ai.evaluation.result`` log records to the same
    backend (``/v1/logs``; BatchLogRecordProcessor).

    ``endpoint`` is the collector's base URL (``http://127.0.0.1:6006``; ``/v1/traces`` and
    ``/v1/logs`` are added), or None to let the OTLP exporters read ``OTEL_EXPORTER_OTLP_ENDPOINT``
    (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, ``OTEL_EXPORTER_OTLP_LOGS_ENDPOINT``). ``project`` sets
    ``openinference.project.name`` (the Phoenix project). ``timeout`` bounds each export so a dead
    backend cannot hold up shutdown for long; failures cost one warning per endpoint (see
    ``_GuardedExporter``); a backend that takes no OTLP logs (404, as Phoenix) costs one info line.

    The return value is a TracerProvider as before; its ``logger_provider`` attribute holds the
    LoggerProvider (None with ``logs=False``). :class:`OTelExporter`, :func:`export_trace` and every
    adapter's ``tracer_provider=`` use it when no ``logger_provider`` is given, and
    ``provider.force_flush()`` / ``provider.shutdown()`` flush and shut down both. Neither provider
    is made global: ``trace.set_tracer_provider`` / ``_logs.set_logger_provider`` them yourself.
    Call ``provider.shutdown()`` (or ``force_flush()``) before the process exits.
    """
    require_otel("opentelemetry.sdk.trace")  # the [otel] hint before anything else
    sdk_export = require_otel("opentelemetry.sdk.trace.export")
    resources = require_otel("opentelemetry.sdk.resources")
    otlp = require_otel("opentelemetry.exporter.otlp.proto.http.trace_exporter")

    attrs: dict[str, Any] = {"service.name": service_name}
    if project:
        attrs[sc.OPENINFERENCE_PROJECT_NAME] = project
    attrs.update(resource_attributes or {})
    resource = resources.Resource.create(attrs)
    inner = otlp.OTLPSpanExporter(endpoint=_traces_endpoint(endpoint) if endpoint else None, timeout=timeout)
    if quiet_exporter_logs:
        _quiet_otlp_logs()
    span_endpoint = getattr(inner, "_endpoint", None) or str(endpoint)
    exporter = _GuardedExporter(inner, span_endpoint)
    provider = _otlp_tracer_provider_class()(resource=resource)
    provider.add_span_processor(
        sdk_export.BatchSpanProcessor(exporter, export_timeout_millis=int(timeout * 1000) + 500)
    )
    if logs:
        sdk_logs = require_otel("opentelemetry.sdk._logs")
        logs_export = require_otel("opentelemetry.sdk._logs.export")
        otlp_logs = require_otel("opentelemetry.exporter.otlp.proto.http._log_exporter")
        inner_logs = otlp_logs.OTLPLogExporter(endpoint=_logs_endpoint(endpoint) if endpoint else None, timeout=timeout)
        log_exporter = _GuardedExporter(
            inner_logs,
            getattr(inner_logs, "_endpoint", None) or str(endpoint),
            what="evaluation log records",
            warn_key=span_endpoint,  # a dead backend: one warning for both
        )
        logger_provider = sdk_logs.LoggerProvider(resource=resource)
        logger_provider.add_log_record_processor(
            logs_export.BatchLogRecordProcessor(log_exporter, export_timeout_millis=int(timeout * 1000) + 500)
        )
        provider.logger_provider = logger_provider
        _GUARDED_LOGS_BY_PROVIDER[provider] = log_exporter
    _GUARDED_BY_PROVIDER[provider] = exporter
    return provider


_GUARDED_BY_PROVIDER: weakref.WeakKeyDictionary[Any, _GuardedExporter] = weakref.WeakKeyDictionary()
_GUARDED_LOGS_BY_PROVIDER: weakref.WeakKeyDictionary[Any, _GuardedExporter] = weakref.WeakKeyDictionary()


def export_failures(provider: Any) -> int:
    """How many spans a provider made by :func:`configure_otlp` could not deliver so far (0 for
    any other provider). Call it after ``provider.force_flush()`` or ``shutdown()`` to tell a
    user whether the export reached the backend."""
    exporter = _GUARDED_BY_PROVIDER.get(provider)
    return 0 if exporter is None else exporter.dropped_spans
