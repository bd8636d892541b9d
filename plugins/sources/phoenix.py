"""Stored spans of a Phoenix project, for ``groundlens traces phoenix`` (Phoenix's client,
``arize-phoenix-client``), and its annotations as the writer.

The spans to score are read page by page in the order Phoenix stored them (``sort=id``,
ascending, from Phoenix's span REST API through the client's own HTTP connection: its base URL,
API key and headers), filtered on the server by kind, name and start time. For each page, the
retriever, tool and LLM spans of its (sampled) traces are read too, as their context. The position
kept for a resumed run is the last span done: a later run continues with the spans stored since.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import urllib.parse
from collections import Counter
from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
from typing import Any

from groundlens_core.errors import GroundlensInputError
from groundlens_core.plugins.kit.shell import require
from groundlens_core.plugins.sources.pages import sampled_by_trace
from groundlens_core.trace.sources.job import Filters, Page, TraceGroup, Writer
from groundlens_core.trace.sources.spans import CONTEXT_KINDS, StoredSpan, flatten, kind_of, to_unix

__all__ = ["PhoenixSpans", "open_source", "open_writer"]

EXTRA = "phoenix"
#: trace ids per request for the context spans (each one in the query string)
TRACE_IDS_PER_REQUEST = 50
#: context spans read per page at most; past it the rest of those traces is not read (counted)
MAX_CONTEXT_SPANS = 10_000
REQUEST_TIMEOUT = 60


def _client(url: str | None) -> Any:
    phoenix_client = require("phoenix.client", EXTRA, "the Phoenix client (arize-phoenix-client)")
    return phoenix_client.Client(base_url=url)


def open_source(args: argparse.Namespace) -> PhoenixSpans:
    if not args.project:
        raise GroundlensInputError("groundlens traces phoenix needs --project (the Phoenix project's name)")
    return PhoenixSpans(_client(args.url), args.project, page_size=args.page_size)


def open_writer(args: argparse.Namespace, name: str) -> Writer:
    from groundlens_core.plugins.phoenix import PhoenixAnnotations

    return Writer(PhoenixAnnotations(_client(args.url), name=name, sync=True), "Phoenix")


def _rowid(global_id: str) -> int | None:
    """The row number in Phoenix's span id (a Relay global id, base64 of ``Span:<n>``)."""
    try:
        kind, _, n = base64.b64decode(global_id).decode("ascii").partition(":")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    return int(n) if kind == "Span" and n.isdigit() else None


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).isoformat()


def stored_span(raw: Mapping[str, Any]) -> StoredSpan:
    """A span as Phoenix's REST API gives it, as a :class:`StoredSpan`."""
    attributes = flatten(raw.get("attributes") or {})
    context = raw.get("context") or {}
    return StoredSpan(
        trace_id=str(context.get("trace_id") or ""),
        span_id=str(context.get("span_id") or ""),
        name=str(raw.get("name") or ""),
        kind=kind_of(attributes, raw.get("span_kind")),
        parent_id=raw.get("parent_id") or None,
        start=to_unix(raw.get("start_time")),
        end=to_unix(raw.get("end_time")),
        attributes=attributes,
        error=(raw.get("status_message") or "") if raw.get("status_code") == "ERROR" else None,
    )


class PhoenixSpans:
    """A source (``groundlens_core.trace.sources.job.Source``) reading one Phoenix project."""

    name = "phoenix"

    def __init__(self, client: Any, project: str, *, page_size: int = 200, max_context: int = MAX_CONTEXT_SPANS):
        self.client = client
        self.project = project
        self.page_size = max(1, min(1000, page_size))  # Phoenix answers 1000 spans a request at most
        self.max_context = max(1, max_context)
        self.key = f"phoenix:{project}"
        self.stats = {"pages": 0, "max_rows": 0, "requests": 0}

    def _get(self, params: dict[str, Any]) -> dict[str, Any]:
        self.stats["requests"] += 1
        http = self.client._client  # the client's configured connection (base URL, API key, headers)
        response = http.get(
            f"v1/projects/{urllib.parse.quote(self.project, safe='')}/spans",
            params=params,
            headers={"accept": "application/json"},
            timeout=REQUEST_TIMEOUT,
        )
        if response.status_code == 404:
            raise GroundlensInputError(f"Phoenix has no project {self.project!r} at {http.base_url}")
        response.raise_for_status()
        return response.json()

    def pages(self, filters: Filters, resume: Mapping[str, Any] | None) -> Iterator[Page]:
        after = (resume or {}).get("after")
        base: dict[str, Any] = {"limit": self.page_size, "sort": "id", "order": "asc", "span_kind": list(filters.kinds)}
        if filters.names is not None:
            base["name"] = sorted(filters.names)
        if filters.since is not None:
            base["start_time"] = _iso(filters.since)
        if filters.until is not None:
            base["end_time"] = _iso(filters.until)
        cursor = after
        last_row = _rowid(after) if isinstance(after, str) else None
        while True:
            body = self._get({**base, **({"cursor": cursor} if cursor else {})})
            data = list(body.get("data") or [])
            if after is not None and data and data[0].get("id") == after:
                data = data[1:]  # the cursor is inclusive: the span done last time
            after = None
            for raw in data:
                row = _rowid(str(raw.get("id")))
                if row is not None and last_row is not None and row <= last_row:
                    raise GroundlensInputError(
                        "this Phoenix server does not return span pages in the order asked (sort=id, ascending): "
                        "groundlens traces needs Phoenix 13 or later"
                    )
                last_row = row if row is not None else last_row
            position = {"after": data[-1]["id"]} if data else ({"after": cursor} if cursor else {})
            yield self._page([stored_span(s) for s in data], filters, position)
            cursor = body.get("next_cursor")
            if not cursor or not data:
                return

    def _page(self, targets: list[StoredSpan], filters: Filters, position: dict[str, Any]) -> Page:
        self.stats["pages"] += 1
        skipped: Counter[str] = Counter()
        by_trace = sampled_by_trace(targets, filters, skipped)
        others = self._context(list(by_trace), skipped)
        rows = len(targets) + sum(len(v) for v in others.values())
        self.stats["max_rows"] = max(self.stats["max_rows"], rows)
        groups = [TraceGroup(t, spans, others.get(t, [])) for t, spans in by_trace.items()]
        return Page(groups, position, rows, skipped)

    def _context(self, trace_ids: list[str], skipped: Counter[str]) -> dict[str, list[StoredSpan]]:
        """The retriever, tool and LLM spans of ``trace_ids``, by trace (bounded: :data:`MAX_CONTEXT_SPANS`)."""
        out: dict[str, list[StoredSpan]] = {}
        held = 0
        for i in range(0, len(trace_ids), TRACE_IDS_PER_REQUEST):
            chunk = trace_ids[i : i + TRACE_IDS_PER_REQUEST]
            params: dict[str, Any] = {
                "limit": 1000,
                "sort": "id",
                "order": "asc",
                "trace_id": chunk,
                "span_kind": [*CONTEXT_KINDS, "LLM"],
            }
            cursor = None
            while True:
                if held >= self.max_context:
                    skipped["pages whose traces' context was cut (more context spans than a page holds)"] += 1
                    return out
                body = self._get({**params, **({"cursor": cursor} if cursor else {})})
                for raw in body.get("data") or []:
                    span = stored_span(raw)
                    out.setdefault(span.trace_id, []).append(span)
                    held += 1
                cursor = body.get("next_cursor")
                if not cursor:
                    break
        return out
