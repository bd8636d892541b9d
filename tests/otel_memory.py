"""OpenTelemetry SDK providers that keep what they export in memory, for the tests that read back
the spans and evaluation events groundlens exports. Import it after
``pytest.importorskip("opentelemetry.sdk")``."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


class MemoryTelemetry:
    """A tracer provider and a logger provider, each exporting to memory as soon as a span ends or
    a record is emitted (simple processors: nothing waits in a batch when a test reads them)."""

    def __init__(self) -> None:
        self.spans_out = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans_out))
        self.logs_out = InMemoryLogRecordExporter()
        self.logger_provider = LoggerProvider()
        self.logger_provider.add_log_record_processor(SimpleLogRecordProcessor(self.logs_out))

    def spans(self) -> list[Any]:
        return list(self.spans_out.get_finished_spans())

    def logs(self) -> list[Any]:
        return [r.log_record for r in self.logs_out.get_finished_logs()]
