"""``groundlens traces``: score the LLM spans a tracing backend already stores, page by page.

A source (a Phoenix project, Langfuse, OTLP JSON files) yields :class:`Page` s of traces: the spans
to score (the filters' kinds, names and time window, sampled by trace id) and the other spans of
their traces, which give the context. Each page is scored as the recorder's worker scores a batch
(:func:`~groundlens_core.trace.recorder.calls.score_calls`, each span decided with the unverified
outputs of its trace that its context carries, :func:`~groundlens_core.trace.recorder.calls.make_step`
and ``Trace.add_step``), its results written (review tool, JSONL file) and
then the state file (``--state``) updated, so an interrupted run resumes after the last page done
and a rerun with the same state scores only what was stored since. Only one page is held at a
time (plus the last :data:`LINEAGE_TRACES` traces' steps, for the lineage of a trace split over
pages): memory does not grow with the project.

Nothing is dropped silently: a span that cannot be read or scored is an error step, a span left
out (not sampled, no response, a groundlens span, context cut) is counted with its reason.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any, Protocol

from groundlens_core.errors import GroundlensInputError
from groundlens_core.trace.model import META_INTERNAL_ERROR, META_OTEL_PARENT, Step, Trace, atomic_write_text, to_iso
from groundlens_core.trace.recorder.calls import CallRecord, score_calls
from groundlens_core.trace.recorder.calls import make_step as _make_step
from groundlens_core.trace.score_sink import DEFAULT_NAME, PartlySent, ScoreItem, SpanIds, score_item
from groundlens_core.trace.sources.spans import StoredSpan, ours, read_call, span_ref

__all__ = ["Filters", "Page", "Summary", "TraceGroup", "parse_time", "run", "trace_fraction"]

#: traces whose steps are kept after their page, so a later page's spans of the same trace are
#: linked to them (cascade lineage); the oldest is let go first
LINEAGE_TRACES = 256
STATE_VERSION = 1


def trace_fraction(trace_id: str) -> float:
    """Where a trace falls in [0, 1): the first 8 bytes of the SHA-256 of its id (lower-case hex),
    as a fraction. ``--sample r`` keeps the traces below ``r``: the same traces on every run and
    machine, and every span of a trace kept or left out together."""
    digest = hashlib.sha256(trace_id.lower().encode("ascii", "replace")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


@dataclass(frozen=True)
class Filters:
    """Which stored spans are scored: kinds (OpenInference's, upper case), names (None: any), the
    start-time window ``[since, until)`` (Unix seconds) and the share of traces sampled."""

    kinds: tuple[str, ...] = ("LLM",)
    names: frozenset[str] | None = None
    since: float | None = None
    until: float | None = None
    sample: float = 1.0

    def keeps_trace(self, trace_id: str) -> bool:
        return self.sample >= 1.0 or (self.sample > 0.0 and trace_fraction(trace_id) < self.sample)

    def is_target(self, span: StoredSpan) -> bool:
        """Whether ``span`` is one to score (its trace's sampling aside)."""
        if span.kind not in self.kinds or (self.names is not None and span.name not in self.names):
            return False
        if self.since is not None and (span.start is None or span.start < self.since):
            return False
        return not (self.until is not None and (span.start is None or span.start >= self.until))


@dataclass
class TraceGroup:
    """Spans of one trace in a page: those to score and the rest of the trace (their context)."""

    trace_id: str
    targets: list[StoredSpan]
    others: list[StoredSpan] = field(default_factory=list)


@dataclass
class Page:
    """One page of a source: its traces, the position a resumed run continues from after it, the
    spans the source held for it, and the spans it left out (reason -> count)."""

    groups: list[TraceGroup]
    position: dict[str, Any]
    rows: int = 0
    skipped: Counter[str] = field(default_factory=Counter)


class Source(Protocol):
    """Where stored spans come from. ``key`` names it in the state file (a state is refused for
    another source); ``stats`` counts ``pages`` and ``max_rows`` (spans held at once at most)."""

    key: str
    name: str
    stats: dict[str, int]

    def pages(self, filters: Filters, resume: Mapping[str, Any] | None) -> Iterator[Page]: ...


class Writer:
    """Sends score items with a score sink's ``send`` (Phoenix annotations, Langfuse scores), one
    request per page, synchronously, counting what the backend accepted and what failed (with the
    first reason), never raising."""

    def __init__(self, sink: Any, vendor: str):
        self.sink = sink
        self.vendor = vendor
        self.stats: Counter[str] = Counter()
        self.reasons: Counter[str] = Counter()

    def write(self, items: list[ScoreItem]) -> None:
        ready = []
        for item in items:
            why = self.sink.accepts(item)
            if why is None:
                ready.append(item)
            else:
                self.stats["skipped"] += 1
                self.reasons[why] += 1
        if not ready:
            return
        try:
            self.sink.send(ready)
        except PartlySent as part:
            delivered = max(0, min(len(ready), part.delivered))
            self.stats["sent"] += delivered
            self.stats["failed"] += len(ready) - delivered
            self.reasons[str(part)[:300]] += len(ready) - delivered
        except Exception as exc:  # the batch goes on; the summary says what was not written and why
            self.stats["failed"] += len(ready)
            self.reasons[f"{type(exc).__name__}: {exc}"[:300]] += len(ready)
        else:
            self.stats["sent"] += len(ready)


@dataclass
class Summary:
    """What a run did: spans scored (by band), skipped (by reason), errors, what each writer sent."""

    spans: int = 0  # spans to score the sources gave (after the filters and sampling)
    bands: Counter[str] = field(default_factory=Counter)  # trusted / review / flagged / error / skipped
    skipped: Counter[str] = field(default_factory=Counter)  # why spans were left out or skipped
    errors: Counter[str] = field(default_factory=Counter)  # why spans became error steps
    traces: int = 0
    pages: int = 0
    max_rows: int = 0
    lines: int = 0  # lines written to the output file
    writers: dict[str, dict[str, Any]] = field(default_factory=dict)
    stopped: str | None = None  # the source failed: why (the state keeps the pages done)

    def to_dict(self) -> dict[str, Any]:
        return {
            "spans": self.spans,
            "traces": self.traces,
            "bands": dict(self.bands),
            "skipped": dict(self.skipped),
            "errors": dict(self.errors),
            "pages": self.pages,
            "max_rows": self.max_rows,
            "lines": self.lines,
            "writers": self.writers,
            "stopped": self.stopped,
        }

    def text(self) -> str:
        scored = sum(v for k, v in self.bands.items() if k in ("trusted", "review", "flagged"))
        bands = ", ".join(f"{k} {self.bands[k]}" for k in ("trusted", "review", "flagged") if self.bands[k])
        lines = [f"scored {scored} span(s){f' ({bands})' if bands else ''} of {self.spans} from {self.traces} trace(s)"]
        if self.skipped:
            lines.append(f"skipped {sum(self.skipped.values())}: " + _reasons(self.skipped))
        if self.errors:
            lines.append(f"errors {sum(self.errors.values())}: " + _reasons(self.errors))
        for name, w in self.writers.items():
            line = f"{name}: {w.get('sent', 0)} written"
            if w.get("failed") or w.get("skipped"):
                line += f", {w.get('failed', 0)} failed, {w.get('skipped', 0)} not addressable"
                if w.get("reasons"):
                    line += f" ({_reasons(Counter(w['reasons']))})"
            lines.append(line)
        if self.stopped:
            lines.append(f"stopped early: {self.stopped}")
        return "\n".join(lines)


def _reasons(counts: Mapping[str, int]) -> str:
    return "; ".join(f"{n} {why}" for why, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


# ---------------------------------------------------------------- times and the state file

_RELATIVE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$", re.IGNORECASE)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_time(text: str, *, now: float | None = None) -> float:
    """Unix seconds of ``--since`` / ``--until``: ISO 8601 (a time without a zone is UTC) or a span
    of time ago (``90m``, ``24h``, ``7d``)."""
    m = _RELATIVE.match(text)
    if m:
        return (time.time() if now is None else now) - float(m.group(1)) * _UNITS[m.group(2).lower()]
    try:
        dt = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise GroundlensInputError(
            f"not a time: {text!r}; give ISO 8601 (2025-05-01T12:00:00Z) or a time ago (90m, 24h, 7d)"
        ) from None
    return (dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)).timestamp()


def load_state(path: Path | None, key: str) -> dict[str, Any] | None:
    """The saved position of source ``key`` (None when there is no state file yet)."""
    if path is None or not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise GroundlensInputError(f"cannot read the state file {path}: {exc}") from None
    if not isinstance(data, dict) or data.get("version") != STATE_VERSION or not isinstance(data.get("position"), dict):
        raise GroundlensInputError(f"{path} is not a groundlens traces state file")
    if data.get("source") != key:
        raise GroundlensInputError(
            f"the state file {path} is for {data.get('source')!r}, not {key!r}: give another --state file"
        )
    return data["position"]


def save_state(path: Path, key: str, position: Mapping[str, Any], last: StoredSpan | None) -> None:
    data: dict[str, Any] = {"version": STATE_VERSION, "source": key, "position": dict(position)}
    data["saved_at"] = to_iso(time.time())
    if last is not None:
        data["last_span"] = {"trace_id": last.trace_id, "span_id": last.span_id, "start": to_iso(last.start)}
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


# ---------------------------------------------------------------- scoring a page


def step_id_of(span: StoredSpan) -> str:
    """A stable step id for a stored span (32 hex digits): a rerun names the same step the same way,
    so a review tool updates its score instead of adding a second (Phoenix's annotation identifier,
    Langfuse's score id)."""
    return hashlib.sha256(f"{span.trace_id}:{span.span_id}".encode("utf-8", "replace")).hexdigest()[:32]


class _Traces:
    """The traces scored lately, by trace id, at most ``limit`` (the oldest let go first)."""

    def __init__(self, limit: int, framework: str):
        self.limit = max(1, limit)
        self.framework = framework
        self._traces: OrderedDict[str, Trace] = OrderedDict()

    def get(self, trace_id: str, first: StoredSpan) -> tuple[Trace, bool]:
        trace = self._traces.get(trace_id)
        if trace is not None:
            self._traces.move_to_end(trace_id)
            return trace, False
        trace = Trace(
            id=trace_id,
            name=first.name or trace_id,
            framework=self.framework,
            started_at=to_iso(first.start) or to_iso(time.time()) or "",
        )
        self._traces[trace_id] = trace
        while len(self._traces) > self.limit:
            self._traces.popitem(last=False)
        return trace, True


def _unreadable(span: StoredSpan, step_id: str, source: str, exc: Exception) -> CallRecord:
    """An error call for a span that could not be read: recorded, never lost."""
    return CallRecord(
        trace_key=span.trace_id,
        node=span.name or "llm",
        started_at=span.start,
        ended_at=span.end,
        step_id=step_id,
        error=f"groundlens could not read the span: {type(exc).__name__}: {exc}",
        metadata={
            "source": source,
            "span_id": span.span_id,
            "span_name": span.name,
            META_INTERNAL_ERROR: True,
            META_OTEL_PARENT: span_ref(span),
        },
    )


def score_group(
    group: TraceGroup, trace: Trace, options: Callable[[], dict[str, Any]], source: str
) -> list[tuple[StoredSpan, Step]]:
    """Score the group's spans in trace order and add them to ``trace``, each decided with the
    unverified outputs of the trace its context carries (cascade lineage)."""
    spans = sorted(group.targets, key=lambda s: (s.start if s.start is not None else math.inf, s.span_id))
    calls = []
    for span in spans:
        step_id = step_id_of(span)
        try:
            calls.append(read_call(span, group.others, step_id=step_id, source=source))
        except Exception as exc:
            calls.append(_unreadable(span, step_id, source, exc))
    first = len(trace.steps)
    # where each step goes: the trace's unverified outputs (and the group's earlier spans') that a
    # span's context carries are inputs of its decision
    placed = [(trace, first + k, call.step_id or step_id_of(span)) for k, (span, call) in enumerate(zip(spans, calls))]
    out = []
    for span, call, outcome, (_, index, step_id) in zip(spans, calls, score_calls(calls, options, placed), placed):
        out.append((span, trace.add_step(_make_step(call, index, step_id, *outcome))))
    return out


def _line(span: StoredSpan, step: Step, source: str) -> dict[str, Any]:
    """The JSONL record of one scored span: its ids, the band and score, why, and the step."""
    return {
        "id": step.id,
        "source": source,
        "trace_id": span.trace_id,
        "span_id": span.span_id,
        "span_name": span.name,
        "node": step.node,
        "method": step.method,
        "band": step.band,
        "score": step.score,
        "explanation": step.explanation,
        "error": step.error,
        "skip_reason": step.skip_reason,
        "cascade_from": list(step.cascade_from),
        "step": step.to_dict(),
    }


def _item(trace: Trace, span: StoredSpan, step: Step, name: str) -> ScoreItem | None:
    """The sinks' item of a scored step, addressed to the stored span itself."""
    item = score_item(trace, step, name)
    if item is None:
        return None
    meta = {**item.metadata, "span_id": span.span_id, "otel_trace_id": span.trace_id}
    return dataclasses.replace(item, span=SpanIds(span.trace_id, span.span_id, llm=True), metadata=meta)


@dataclass(frozen=True)
class _PageScorer:
    """Scores the pages of one run: what each page adds to goes here (the summary, the traces kept
    for lineage, the trace ids counted once per run, the JSONL file)."""

    summary: Summary
    traces: _Traces
    source: str
    score_name: str
    options: dict[str, Any]
    out: IO[str] | None
    seen_traces: set[str] = field(default_factory=set)  # ids only: small beside the spans

    def score(self, page: Page) -> tuple[list[ScoreItem], StoredSpan | None]:
        """Score a page: the items for the writers and the latest span scored (the state records it)."""
        self.summary.skipped.update(page.skipped)
        items: list[ScoreItem] = []
        last: StoredSpan | None = None
        for group in page.groups:
            scored = self._score_group(group)
            if scored is None:
                continue
            trace, steps = scored
            for span, step in steps:
                item = self._record(trace, span, step)
                if item is not None:
                    items.append(item)
                if last is None or (span.start or 0.0) >= (last.start or 0.0):
                    last = span
        return items, last

    def _score_group(self, group: TraceGroup) -> tuple[Trace, list[tuple[StoredSpan, Step]]] | None:
        """Score one trace's spans, leaving out our own score spans; None when none is left to score."""
        if not group.targets:
            return None
        if group.trace_id not in self.seen_traces:
            self.seen_traces.add(group.trace_id)
            self.summary.traces += 1
        mine = [s for s in group.targets if ours(s)]
        if mine:
            self.summary.skipped["a groundlens span (a score, not a model call)"] += len(mine)
            group = TraceGroup(group.trace_id, [s for s in group.targets if not ours(s)], group.others)
        if not group.targets:
            return None
        trace, _ = self.traces.get(group.trace_id, group.targets[0])
        self.summary.spans += len(group.targets)
        return trace, score_group(group, trace, lambda: self.options, self.source)

    def _record(self, trace: Trace, span: StoredSpan, step: Step) -> ScoreItem | None:
        """Count a scored span, write its JSONL line, and return the writers' item for it, if any."""
        summary = self.summary
        summary.bands[step.band] += 1
        if step.method == "skipped":
            summary.skipped[step.skip_reason or "skipped"] += 1
        elif step.method == "error":
            summary.errors[(step.error or "error")[:200]] += 1
        if self.out is not None:
            self.out.write(json.dumps(_line(span, step, self.source), ensure_ascii=False, default=str) + "\n")
            summary.lines += 1
        return _item(trace, span, step, self.score_name)


def _pages_until_failure(pages: Iterator[Page], summary: Summary) -> Iterator[Page]:
    """The source's pages; a backend that goes away or refuses ends them, its reason in
    ``summary.stopped``, so the pages done stay written. A :class:`GroundlensInputError` is the
    caller's to fix and propagates."""
    while True:
        try:
            page = next(pages)
        except StopIteration:
            return
        except GroundlensInputError:
            raise
        except Exception as exc:
            summary.stopped = f"{type(exc).__name__}: {exc}"[:500]
            return
        yield page


def _close_summary(summary: Summary, source: Source, writers: Sequence[Writer]) -> None:
    """Copy what the source and the writers counted into the summary, also when the run failed."""
    summary.pages = source.stats.get("pages", 0)
    summary.max_rows = source.stats.get("max_rows", 0)
    for writer in writers:
        counts = {k: writer.stats[k] for k in ("sent", "failed", "skipped")}
        summary.writers[writer.vendor] = {**counts, "reasons": dict(writer.reasons)}


def run(
    source: Source,
    filters: Filters,
    *,
    writers: Sequence[Writer] = (),
    output: Path | None = None,
    state: Path | None = None,
    score_name: str = DEFAULT_NAME,
    options: Mapping[str, Any] | None = None,
    limit: int | None = None,
    lineage_traces: int = LINEAGE_TRACES,
) -> Summary:
    """Score what ``source`` stores, write the results, keep the position in ``state``.

    ``output``: a JSONL file, one line per span (appended to when the run resumes from a state,
    else written new). ``limit``: stop after the page that reaches this many spans. A source that
    fails mid-run stops the run (``Summary.stopped``); the pages done are written and in the state."""
    summary = Summary()
    resume = load_state(state, source.key)
    opts = dict(options or {})
    traces = _Traces(lineage_traces, source.name)
    out: IO[str] | None = None
    if output is not None:
        out = open(output, "a" if resume is not None else "w", encoding="utf-8")  # noqa: SIM115 (closed below)
    scorer = _PageScorer(summary, traces, source.name, score_name, opts, out)
    try:
        pages = source.pages(filters, resume)
        for page in _pages_until_failure(pages, summary):
            items, last = scorer.score(page)
            for writer in writers:
                if items:
                    writer.write(items)
            if out is not None:
                out.flush()
            if state is not None:
                save_state(state, source.key, page.position, last)
            if limit is not None and summary.spans >= limit:
                break
    finally:
        if out is not None:
            out.close()
        _close_summary(summary, source, writers)
    return summary
