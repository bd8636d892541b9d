"""Stored observations of a Langfuse project, for ``groundlens traces langfuse`` (the Langfuse SDK,
``langfuse``), and its scores as the writer.

The observations to score are read with the SDK's REST client (``api.observations.get_many``,
Langfuse's cursor-paginated observations API), filtered on the server by type (LLM spans are
``GENERATION`` observations), name and start time; for each page, the other observations of its
(sampled) traces are read too, as their context (retrievers' and tools' outputs). Langfuse keeps an
observation's input and output as text (JSON as text): they are read as OpenInference's
``input.value`` / ``output.value``. The client comes from the ``LANGFUSE_*`` environment variables
(``LANGFUSE_PUBLIC_KEY``, ``LANGFUSE_SECRET_KEY``, ``LANGFUSE_HOST``); ``--url`` sets the host.

The position kept for a resumed run is the page cursor within the run's time window; when a run
ends, the end of its window, where the next run starts.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
from typing import Any

from groundlens_core.plugins.kit.shell import require
from groundlens_core.plugins.sources.pages import sampled_by_trace
from groundlens_core.trace.sources.job import Filters, Page, TraceGroup, Writer
from groundlens_core.trace.sources.spans import CONTEXT_KINDS, StoredSpan, flatten, kind_of, to_unix

__all__ = ["LangfuseSpans", "open_source", "open_writer"]

EXTRA = "langfuse"
#: OpenInference's span kinds as Langfuse's observation types
TYPES = {
    "LLM": "GENERATION",
    "TOOL": "TOOL",
    "RETRIEVER": "RETRIEVER",
    "AGENT": "AGENT",
    "CHAIN": "CHAIN",
    "EMBEDDING": "EMBEDDING",
    "GUARDRAIL": "GUARDRAIL",
    "EVALUATOR": "EVALUATOR",
}
KINDS = {v: k for k, v in TYPES.items()}
FIELDS = "core,basic,io,model,usage"
#: observations of one trace read as its context at most (the rest is not read, counted)
MAX_CONTEXT_PER_TRACE = 2_000
REQUEST_TIMEOUT = 60


def _client(url: str | None) -> Any:
    langfuse = require("langfuse", EXTRA, "the Langfuse SDK")
    # tracing off: this command reads and scores, it sends no spans of its own
    return langfuse.Langfuse(base_url=url or None, tracing_enabled=False)


def open_source(args: argparse.Namespace) -> LangfuseSpans:
    return LangfuseSpans(_client(args.url), page_size=args.page_size)


def open_writer(args: argparse.Namespace, name: str) -> Writer:
    from groundlens_core.plugins.langfuse import LangfuseScores

    return Writer(LangfuseScores(_client(args.url), name=name), "Langfuse")


def _dt(t: float | None) -> datetime | None:
    return None if t is None else datetime.fromtimestamp(t, tz=timezone.utc)


def stored_span(obs: Any) -> StoredSpan:
    """A Langfuse observation (the SDK's ``ObservationV2``) as a :class:`StoredSpan`."""
    attributes: dict[str, Any] = {}
    for key, value in (("input.value", obs.input), ("output.value", obs.output), ("llm.model_name", obs.model)):
        if value is not None:
            attributes[key] = value
    usage = getattr(obs, "usage_details", None) or {}
    for ours, theirs in (("prompt", "input"), ("completion", "output"), ("total", "total")):
        if isinstance(usage.get(theirs), int):
            attributes[f"llm.token_count.{ours}"] = usage[theirs]
    if isinstance(getattr(obs, "metadata", None), Mapping):
        attributes.update(flatten({"metadata": obs.metadata}))
    level = getattr(obs, "level", None)
    return StoredSpan(
        trace_id=str(obs.trace_id or ""),
        span_id=str(obs.id),
        name=str(obs.name or ""),
        kind=kind_of(attributes, KINDS.get(str(obs.type).upper(), str(obs.type).upper())),
        parent_id=obs.parent_observation_id or None,
        start=to_unix(obs.start_time),
        end=to_unix(obs.end_time),
        attributes=attributes,
        error=(obs.status_message or "") if str(level) in ("ERROR", "ObservationLevel.ERROR") else None,
    )


class LangfuseSpans:
    """A source (``groundlens_core.trace.sources.job.Source``) reading a Langfuse project's observations."""

    name = "langfuse"

    def __init__(self, client: Any, *, page_size: int = 200, max_context: int = MAX_CONTEXT_PER_TRACE):
        self.client = client
        self.page_size = max(1, min(1000, page_size))  # Langfuse answers 1000 observations a request at most
        self.max_context = max(1, max_context)
        self.key = f"langfuse:{getattr(client, '_base_url', '')}"
        self.stats = {"pages": 0, "max_rows": 0, "requests": 0}

    def _get(self, **params: Any) -> Any:
        self.stats["requests"] += 1
        return self.client.api.observations.get_many(
            fields=FIELDS, request_options={"timeout_in_seconds": REQUEST_TIMEOUT}, **params
        )

    def pages(self, filters: Filters, resume: Mapping[str, Any] | None) -> Iterator[Page]:
        resume = dict(resume or {})
        cursor = resume.get("cursor")
        if cursor is not None:  # a run that stopped: its window again, from its next page
            since, until = resume.get("since"), resume.get("until")
        else:
            since = filters.since
            if resume.get("done_until") is not None:
                since = max(since or 0.0, float(resume["done_until"]))
            until = filters.until if filters.until is not None else time.time()
        params: dict[str, Any] = {"limit": self.page_size}
        if len(filters.kinds) == 1:
            params["type"] = TYPES.get(filters.kinds[0], filters.kinds[0])
        if filters.names is not None and len(filters.names) == 1:
            params["name"] = next(iter(filters.names))
        if since is not None:
            params["from_start_time"] = _dt(since)
        if until is not None:
            params["to_start_time"] = _dt(until)
        while True:
            answer = self._get(**params, **({"cursor": cursor} if cursor else {}))
            data = [stored_span(o) for o in answer.data]
            cursor = getattr(answer.meta, "cursor", None)
            if cursor:
                position = {"cursor": cursor, "since": since, "until": until}
            else:
                position = {"done_until": until}
            yield self._page(data, filters, position)
            if not cursor or not answer.data:
                return

    def _page(self, spans: list[StoredSpan], filters: Filters, position: dict[str, Any]) -> Page:
        self.stats["pages"] += 1
        skipped: Counter[str] = Counter()
        # kinds and names the server could not filter (several of either) are left out here
        by_trace = sampled_by_trace((s for s in spans if filters.is_target(s)), filters, skipped)
        rows = len(spans)
        groups = []
        for trace_id, targets in by_trace.items():
            others = self._context(trace_id, skipped)
            rows += len(others)
            groups.append(TraceGroup(trace_id, targets, others))
        self.stats["max_rows"] = max(self.stats["max_rows"], rows)
        return Page(groups, position, rows, skipped)

    def _context(self, trace_id: str, skipped: Counter[str]) -> list[StoredSpan]:
        out: list[StoredSpan] = []
        cursor = None
        read = 0
        while read < self.max_context:
            answer = self._get(
                trace_id=trace_id, limit=min(1000, self.max_context), **({"cursor": cursor} if cursor else {})
            )
            read += len(answer.data)
            out.extend(s for s in map(stored_span, answer.data) if s.kind in (*CONTEXT_KINDS, "LLM"))
            cursor = getattr(answer.meta, "cursor", None)
            if not cursor or not answer.data:
                return out
        skipped["traces whose context was cut (too many observations)"] += 1
        return out
