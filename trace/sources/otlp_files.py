"""Stored spans from OTLP JSON files, as an OpenTelemetry Collector's file exporter writes them.

Each line is one ``ExportTraceServiceRequest`` in OTLP's JSON encoding: ``resourceSpans`` >
``scopeSpans`` > ``spans``, ids as hex, times as nanosecond strings, attributes as
``[{"key": ..., "value": {"stringValue": ...}}]``. Lines are read one at a time; spans wait per
trace until the trace's root span arrives (a batching exporter sends a root after its children),
the file ends, or more than ``max_buffered`` spans wait (then the oldest trace goes as it is,
counted). The position kept for a resumed run is, per file, the number of lines after which no
span was waiting: a rerun reads only lines added since (a Collector appends).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections import Counter, OrderedDict
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from groundlens_core.trace.sources.job import Filters, Page, TraceGroup
from groundlens_core.trace.sources.spans import CONTEXT_KINDS, StoredSpan, flatten, kind_of, to_unix

__all__ = ["OtlpFiles", "any_value", "spans_of_request"]

#: spans waiting for their trace's root at most; past it the oldest trace is scored as it is
MAX_BUFFERED = 20_000
_STATUS_ERROR = (2, "STATUS_CODE_ERROR")


def any_value(value: Any) -> Any:
    """A Python value of an OTLP JSON ``AnyValue`` (``{"stringValue": ...}``, arrays, key-value lists)."""
    if not isinstance(value, Mapping):
        return value
    if "stringValue" in value:
        return value["stringValue"]
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "intValue" in value:
        try:
            return int(value["intValue"])
        except (TypeError, ValueError):
            return value["intValue"]
    if "doubleValue" in value:
        try:
            return float(value["doubleValue"])
        except (TypeError, ValueError):
            return value["doubleValue"]
    if "arrayValue" in value:
        return [any_value(v) for v in (value["arrayValue"] or {}).get("values") or []]
    if "kvlistValue" in value:
        return attributes_of((value["kvlistValue"] or {}).get("values") or [])
    if "bytesValue" in value:
        return value["bytesValue"]
    return None


def attributes_of(items: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in items or []:
        if isinstance(kv, Mapping) and isinstance(kv.get("key"), str):
            out[kv["key"]] = any_value(kv.get("value"))
    return out


def _hex_id(value: Any, size: int) -> str | None:
    """An id as lower-case hex: OTLP JSON writes hex; protobuf's own JSON mapping writes base64."""
    if not isinstance(value, str) or not value:
        return None
    text = value.strip()
    if len(text) == size * 2:
        try:
            bytes.fromhex(text)
            return text.lower()
        except ValueError:
            pass
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw.hex() if len(raw) == size else None


def spans_of_request(request: Any) -> Iterator[StoredSpan]:
    """The spans of one ``ExportTraceServiceRequest`` (parsed JSON); malformed spans raise ValueError."""
    if not isinstance(request, Mapping):
        raise ValueError("a line is not a JSON object (an ExportTraceServiceRequest)")
    for rs in request.get("resourceSpans") or []:
        for ss in (rs or {}).get("scopeSpans") or (rs or {}).get("instrumentationLibrarySpans") or []:
            for raw in (ss or {}).get("spans") or []:
                trace_id, span_id = _hex_id(raw.get("traceId"), 16), _hex_id(raw.get("spanId"), 8)
                if trace_id is None or span_id is None:
                    raise ValueError("a span without a valid traceId or spanId")
                attributes = flatten(attributes_of(raw.get("attributes")))
                status = raw.get("status") or {}
                error = status.get("message") or "" if status.get("code") in _STATUS_ERROR else None
                yield StoredSpan(
                    trace_id=trace_id,
                    span_id=span_id,
                    name=str(raw.get("name") or ""),
                    kind=kind_of(attributes),
                    parent_id=_hex_id(raw.get("parentSpanId"), 8),
                    start=to_unix(raw.get("startTimeUnixNano")),
                    end=to_unix(raw.get("endTimeUnixNano")),
                    attributes=attributes,
                    error=error,
                )


class OtlpFiles:
    """A source (``groundlens_core.trace.sources.job.Source``) reading OTLP JSON lines files in the order given."""

    name = "otlp"

    def __init__(self, paths: list[Path], *, page_size: int = 200, max_buffered: int = MAX_BUFFERED):
        self.paths = [Path(p) for p in paths]
        self.page_size = max(1, page_size)
        self.max_buffered = max(1, max_buffered)
        self.key = "otlp"
        self.stats = {"pages": 0, "max_rows": 0, "lines": 0, "cut_traces": 0}

    def pages(self, filters: Filters, resume: Mapping[str, Any] | None) -> Iterator[Page]:
        done: dict[str, Any] = dict((resume or {}).get("files") or {})
        for path in self.paths:
            if not path.is_file():
                raise FileNotFoundError(f"OTLP file not found: {path}")
            yield from self._file(path, filters, done)

    def _file(self, path: Path, filters: Filters, done: dict[str, Any]) -> Iterator[Page]:
        key = str(path.resolve())
        start = int((done.get(key) or {}).get("lines", 0))
        buffered: OrderedDict[str, list[StoredSpan]] = OrderedDict()
        ready: list[list[StoredSpan]] = []
        held = 0
        skipped: Counter[str] = Counter()
        safe = start  # lines after which nothing was waiting: where a resumed run starts
        lineno = 0
        with open(path, "rb") as f:
            for lineno, raw in enumerate(f, 1):
                if lineno <= start:
                    continue
                self.stats["lines"] += 1
                if raw.strip():
                    try:
                        spans = list(spans_of_request(json.loads(raw)))
                    except ValueError as exc:
                        skipped[f"an unreadable line in {path.name} ({exc})"[:200]] += 1
                        spans = []
                    for span in spans:
                        buffered.setdefault(span.trace_id, []).append(span)
                        held += 1
                        if span.parent_id is None:  # the root: its trace is complete
                            ready.append(buffered.pop(span.trace_id))
                    while held > self.max_buffered and buffered:
                        _, spans_left = buffered.popitem(last=False)
                        ready.append(spans_left)
                        self.stats["cut_traces"] += 1  # scored without waiting for the rest of the trace
                self.stats["max_rows"] = max(self.stats["max_rows"], held)
                if not buffered:
                    safe = lineno
                if sum(len(t) for t in ready) >= self.page_size:
                    done[key] = {"lines": safe}
                    yield self._page(ready, filters, {"files": dict(done)}, held, skipped)
                    held -= sum(len(t) for t in ready)
                    ready, skipped = [], Counter()
        ready.extend(buffered.values())
        done[key] = {"lines": lineno if lineno > start else start}
        if ready or skipped:
            yield self._page(ready, filters, {"files": dict(done)}, sum(len(t) for t in ready), skipped)
        else:
            yield Page([], {"files": dict(done)})

    def _page(
        self,
        traces: list[list[StoredSpan]],
        filters: Filters,
        position: dict[str, Any],
        rows: int,
        skipped: Counter[str],
    ) -> Page:
        self.stats["pages"] += 1
        self.stats["max_rows"] = max(self.stats["max_rows"], rows)
        groups = []
        for spans in traces:
            trace_id = spans[0].trace_id
            targets = [s for s in spans if filters.is_target(s)]
            if not targets:
                continue
            if not filters.keeps_trace(trace_id):
                skipped["not sampled (--sample)"] += len(targets)
                continue
            others = [s for s in spans if s.kind in (*CONTEXT_KINDS, "LLM")]
            groups.append(TraceGroup(trace_id, targets, others))
        return Page(groups, position, rows, Counter({k: v for k, v in skipped.items() if v}))
