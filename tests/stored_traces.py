"""Stored traces for the ``groundlens traces`` tests: RAG runs as OpenInference instrumentation
records them, made with the real OpenTelemetry SDK, and written as an OpenTelemetry Collector's
file exporter writes them (OTLP JSON lines, ids as hex).

Each run is one trace: a CHAIN root, a RETRIEVER span with ``retrieval.documents.*``, and an LLM
span with ``llm.input_messages.*`` / ``llm.output_messages.*`` (``input.value`` / ``output.value``
too). ``answer`` picks the LLM's answer: grounded in the retrieved document, or off topic.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from demo_trace import CONTEXT_SGI, GROUNDED, OFF_TOPIC, QUESTION_SGI

T0_NS = 1_760_000_000_000_000_000
SYSTEM = "You are a helpful assistant."


def rag_run(tracer: Any, answer: str, *, at_ns: int, name: str = "rag", error: str | None = None) -> tuple[str, str]:
    """Record one RAG run on ``tracer``; returns the LLM span's (trace id, span id) as hex."""
    from opentelemetry.trace import Status, StatusCode

    with tracer.start_as_current_span(
        name,
        start_time=at_ns,
        end_on_exit=False,
        attributes={"openinference.span.kind": "CHAIN", "input.value": QUESTION_SGI},
    ) as root:
        with tracer.start_as_current_span(
            "retrieve",
            start_time=at_ns + 1_000_000,
            end_on_exit=False,
            attributes={
                "openinference.span.kind": "RETRIEVER",
                "input.value": QUESTION_SGI,
                "retrieval.documents.0.document.content": CONTEXT_SGI,
                "retrieval.documents.0.document.id": "doc-1",
            },
        ) as retr:
            retr.end(end_time=at_ns + 2_000_000)
        llm = tracer.start_span(
            "ChatOpenAI",
            start_time=at_ns + 3_000_000,
            attributes={
                "openinference.span.kind": "LLM",
                "llm.model_name": "gpt-test",
                "llm.provider": "openai",
                "llm.input_messages.0.message.role": "system",
                "llm.input_messages.0.message.content": SYSTEM,
                "llm.input_messages.1.message.role": "user",
                "llm.input_messages.1.message.content": QUESTION_SGI,
                "llm.output_messages.0.message.role": "assistant",
                "llm.output_messages.0.message.content": answer,
                "input.value": json.dumps({"messages": [{"role": "user", "content": QUESTION_SGI}]}),
                "input.mime_type": "application/json",
                "output.value": answer,
                "llm.token_count.prompt": 42,
                "llm.token_count.completion": 7,
            },
        )
        if error is not None:
            llm.set_status(Status(StatusCode.ERROR, error))
        ids = format(llm.get_span_context().trace_id, "032x"), format(llm.get_span_context().span_id, "016x")
        llm.end(end_time=at_ns + 9_000_000)
        root.end(end_time=at_ns + 10_000_000)
    return ids


def provider_with_memory() -> tuple[Any, Any]:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    return provider, memory


def _ids_to_hex(node: Any) -> Any:
    """protobuf's JSON mapping writes bytes as base64; OTLP JSON (and the Collector) writes ids as hex."""
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if k in ("traceId", "spanId", "parentSpanId") and isinstance(v, str):
                out[k] = base64.b64decode(v).hex()
            else:
                out[k] = _ids_to_hex(v)
        return out
    if isinstance(node, list):
        return [_ids_to_hex(v) for v in node]
    return node


def collector_line(spans: Any) -> str:
    """One line of a Collector file exporter: the spans as an ExportTraceServiceRequest in OTLP JSON,
    encoded by the OpenTelemetry SDK's own OTLP encoder."""
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    return json.dumps(_ids_to_hex(MessageToDict(encode_spans(spans))), separators=(",", ":"))


def write_runs(path: Path, answers: list[str], *, per_line: int = 3) -> list[tuple[str, str]]:
    """Record one run per answer and write their spans to ``path``, ``per_line`` spans a line (as a
    batching exporter sends them: children before their root). Returns the LLM spans' ids."""
    provider, memory = provider_with_memory()
    tracer = provider.get_tracer("stored-traces-test")
    ids = [rag_run(tracer, a, at_ns=T0_NS + i * 1_000_000_000) for i, a in enumerate(answers)]
    spans = list(memory.get_finished_spans())
    with open(path, "w", encoding="utf-8") as f:
        for i in range(0, len(spans), per_line):
            f.write(collector_line(spans[i : i + per_line]) + "\n")
    return ids


ANSWERS = {"grounded": GROUNDED, "off_topic": OFF_TOPIC}
