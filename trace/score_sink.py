"""The base of every score sink: a trace listener that sends each scored step to a review tool.

A sink (Phoenix span annotations, Langfuse scores, LangSmith feedback: ``plugins/phoenix.py``,
``plugins/langfuse.py``, ``plugins/langsmith.py``) is a recorder listener like the OpenTelemetry
exporter and the ledger. On the recorder's worker thread it only turns a scored step into a
:class:`ScoreItem` (``on_step``) and hands the batch's items to its own sender thread
(``on_batch_end``); the sender calls the vendor's client. So neither the agent nor the scoring ever
waits on a slow or dead backend. The queue between them is bounded: when the backend falls behind,
whole batches are dropped and counted, never the agent blocked.

Failures (a refused request, a dead server, a step the vendor cannot address) cost one warning at
once and then at most one every :attr:`ScoreSink.warn_interval` seconds, with the counts since.

Every wait is bounded: ``flush(timeout)`` returns by its timeout whatever the backend does (a
server that accepts and never answers included), and so does the exit (``EXIT_FLUSH_SECONDS`` per
sink). A sink sends on its own daemon thread and answers for what the backend confirmed: ``sent``
counts the items the backend accepted, never items merely handed to a vendor client's background
queue (which would also keep the process from exiting while that queue drains).

Every sink sends the same three things: the step's one ranked score (:func:`ranked_score`) as the
value, its band (trusted / review / flagged) as the label, and the score's explanation as the
comment; what else it sends is in ``ScoreItem.metadata``, where the failed findings and the weakest
sentence carry their ``[start, end)`` offsets in the response (:func:`span_metadata`).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

from groundlens_core.scoring.bands import SCORED_METHODS
from groundlens_core.trace.model import META_ROOT_RUN_ID, Step, Trace
from groundlens_core.trace.otel import exported_spans
from groundlens_core.trace.otel.finding_spans import cut_text, finding_records, weakest_span
from groundlens_core.trace.otel.semconv import EVIDENCE_ATTR_MAX_CHARS
from groundlens_core.trace.recorder import app_span, lifecycle

log = logging.getLogger("groundlens.sinks")

#: the name every sink gives its score unless told otherwise
DEFAULT_NAME = "groundlens"
#: batches waiting for the sender at most; past that a batch is dropped and counted
MAX_QUEUED_BATCHES = 256
#: how long the interpreter's exit waits for each sink to send what is queued
EXIT_FLUSH_SECONDS = 10.0


def ranked_score(step: Step) -> float | None:
    """The step's one ranked score, the value every sink sends (the number reports show and sort by)."""
    return None if step.score is None else float(step.score)  # a plain float: any serialiser takes it


@dataclass(frozen=True)
class SpanIds:
    """An OpenTelemetry span as hex ids (32 and 16 digits), and whether it is the LLM call's own span."""

    trace_id: str
    span_id: str
    llm: bool = False


@dataclass(frozen=True)
class ScoreItem:
    """One scored step, as every sink sends it."""

    step_id: str
    trace_id: str  # the groundlens trace id
    framework: str  # the trace's (``langgraph``, ``openai``, ...)
    name: str
    score: float
    label: str  # the band: trusted / review / flagged
    comment: str  # the score's explanation
    #: the span to attach the score to: the LLM call's span an instrumentor made, else the span the
    #: OpenTelemetry exporter made for the step, else the application span the call was made in
    span: SpanIds | None
    #: the ids the framework gave the call and its root run (LangChain run ids), when known
    run_id: str | None
    root_run_id: str | None
    metadata: dict[str, Any] = field(default_factory=dict)


def score_item(trace: Trace, step: Step, name: str = DEFAULT_NAME) -> ScoreItem | None:
    """The item of a scored step (None for a step that has no score: skipped, error)."""
    score = ranked_score(step)
    if step.method not in SCORED_METHODS or step.result is None or score is None:
        return None
    root_run = trace.metadata.get(META_ROOT_RUN_ID)
    return ScoreItem(
        step_id=step.id,
        trace_id=trace.id,
        framework=trace.framework,
        name=name,
        score=float(score),
        label=step.band,
        comment=step.explanation or "",
        span=step_span(step),
        run_id=step.id,
        root_run_id=str(root_run) if root_run else None,
        metadata={
            "method": step.method,
            "value": step.value,
            "node": step.node,
            "groundlens_trace_id": trace.id,
            "groundlens_step_id": step.id,
            "fingerprint": step.result.fingerprint,
            "version": step.result.version,
            **span_metadata(step),
        },
    )


def span_metadata(step: Step) -> dict[str, Any]:
    """Where the step's failed findings and weakest sentence stand in its response: ``findings``, a
    list of ``{"text", "kind", "status", "source", "start", "end"}`` (``[start, end)`` offsets in the
    response; texts cut as the OpenTelemetry attributes cut them, the list too) with
    ``findings_count``, and ``weakest_sentence``: ``{"text", "start", "end"}`` or None."""
    records, total = finding_records(step.result, EVIDENCE_ATTR_MAX_CHARS)
    span = weakest_span(step.result)
    weakest = None
    if span is not None:
        sentence = step.result.evidence.weakest_sentence  # type: ignore[union-attr]
        weakest = {"text": cut_text(str(sentence.text), EVIDENCE_ATTR_MAX_CHARS), "start": span[0], "end": span[1]}
    return {"findings": records, "findings_count": total, "weakest_sentence": weakest}


def step_span(step: Step) -> SpanIds | None:
    """The span a step's score belongs on (see :attr:`ScoreItem.span`), or None when there is none."""
    parent = app_span.parent_of(step.metadata)
    if parent is not None and parent.get("llm"):
        return SpanIds(parent["trace_id"], parent["span_id"], llm=True)
    exported = exported_spans.lookup(step.id)
    if exported is not None:
        return SpanIds(*exported)
    if parent is not None:
        return SpanIds(parent["trace_id"], parent["span_id"])
    return None


class PartlySent(Exception):
    """Raised by :meth:`ScoreSink.send` when the backend accepted only ``delivered`` of the items."""

    def __init__(self, delivered: int, why: str):
        super().__init__(why)
        self.delivered = delivered


class ScoreSink:
    """Base class of the sinks: collects scored steps per batch and sends them off the worker.

    Subclasses implement :meth:`send` (one vendor call, or a few, for a list of items; raise on
    failure) and may refuse an item they cannot address with :meth:`accepts` (counted as skipped).
    """

    #: the vendor, for messages (``"Phoenix"``)
    vendor: str = "the backend"
    #: seconds between two warnings about failures (the first is at once)
    warn_interval: float = 60.0

    def __init__(self, *, name: str = DEFAULT_NAME, max_queued_batches: int = MAX_QUEUED_BATCHES):
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"name must be a non-empty string, got {name!r}")
        self.name = name
        self._items: list[ScoreItem] = []
        self._queue: queue.Queue[list[ScoreItem] | None] = queue.Queue(maxsize=max(1, int(max_queued_batches)))
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._unfinished = 0  # batches queued and not yet sent (flush waits for 0)
        self._idle = threading.Condition(self._lock)
        #: items sent, failed (the vendor refused or could not be reached), skipped (nothing to
        #: address them to) and dropped (the queue was full), since this sink started
        self.stats = {"sent": 0, "failed": 0, "skipped": 0, "dropped": 0}
        self._last_warning: float | None = None
        self._unwarned = 0
        self._client_flush: threading.Thread | None = None  # a vendor flush in progress (see flush)
        _SINKS.add(self)

    # ------------------------------------------------------------ TraceListener (the worker's thread)

    def on_trace_start(self, trace: Trace) -> None:
        pass

    def on_step(self, trace: Trace, step: Step) -> None:
        item = score_item(trace, step, self.name)
        if item is not None:
            with self._lock:  # one sink may listen to several recorders, each with its own worker
                self._items.append(item)

    def on_trace_end(self, trace: Trace) -> None:
        pass

    def on_batch_end(self) -> None:
        with self._lock:
            items, self._items = self._items, []
        if not items:
            return
        # the spans the exporter made are known now (it saw every step of the batch): resolve again
        items = [_with_exported_span(it) for it in items]
        with self._lock:
            self._unfinished += 1
        try:
            self._queue.put_nowait(items)
        except queue.Full:
            with self._lock:
                self._unfinished -= 1
                self.stats["dropped"] += len(items)
                self._idle.notify_all()
            self._failed(len(items), "the sender is behind (queue full); these scores were dropped", count=False)
            return
        self._start()

    # ------------------------------------------------------------ the user's side

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Wait until every batch handed over so far is sent (or failed); False on timeout. Call it
        after the recorder's own flush (``cb.flush()``), which hands the last batch over. Returns by
        ``timeout`` whatever the backend or the vendor's client does."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._idle:
            while self._unfinished > 0:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._idle.wait(left)
        return self._bounded_client_flush(None if deadline is None else max(0.0, deadline - time.monotonic()))

    def _bounded_client_flush(self, timeout: float | None) -> bool:
        """:meth:`_flush_client` on a daemon thread, waited for ``timeout`` at most: a vendor's flush
        may block on its own threads for as long as its retries last. One runs at a time; a flush
        that finds one still running waits for that one."""
        if type(self)._flush_client is ScoreSink._flush_client:
            return True
        with self._lock:
            helper = self._client_flush
            if helper is None or not helper.is_alive():
                result: list[bool] = []

                def run() -> None:
                    try:
                        result.append(bool(self._flush_client(timeout)))
                    except Exception as exc:  # the agent goes on; the owner is told
                        result.append(False)
                        self._failed(0, f"{type(exc).__name__} flushing the client: {exc}", count=False)

                helper = threading.Thread(target=run, name=f"groundlens-sink-flush-{type(self).__name__}", daemon=True)
                helper.result = result  # type: ignore[attr-defined]
                self._client_flush = helper
                helper.start()
        helper.join(timeout)
        return not helper.is_alive() and all(helper.result)  # type: ignore[attr-defined]

    # ------------------------------------------------------------ subclasses

    def accepts(self, item: ScoreItem) -> str | None:
        """None when :meth:`send` can address ``item``, else why not (the item is skipped)."""
        return None

    def send(self, items: list[ScoreItem]) -> None:
        """Send ``items`` with the vendor's client and return once the backend accepted them; raise
        on failure, :class:`PartlySent` when it accepted only some. Runs on the sink's sender thread."""
        raise NotImplementedError

    def _flush_client(self, timeout: float | None) -> bool:
        """After the queue is empty: flush the vendor client's own buffer, when it has one (run on a
        thread of its own and waited for ``timeout`` at most: :meth:`_bounded_client_flush`)."""
        return True

    # ------------------------------------------------------------ the sender thread

    def _start(self) -> None:
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._thread = threading.Thread(
                target=self._run, name=f"groundlens-sink-{type(self).__name__}", daemon=True
            )
            self._thread.start()

    def _run(self) -> None:
        while True:
            items = self._queue.get()
            if items is None:
                return
            try:
                self._deliver(items)
            finally:
                with self._lock:
                    self._unfinished -= 1
                    self._idle.notify_all()

    def _deliver(self, items: list[ScoreItem]) -> None:
        ready: list[ScoreItem] = []
        reasons: list[str] = []
        for item in items:
            reason = self.accepts(item)
            if reason is None:
                ready.append(item)
            else:
                reasons.append(reason)
        if reasons:
            with self._lock:
                self.stats["skipped"] += len(reasons)
            self._failed(len(reasons), reasons[0], count=False)
        if not ready:
            return
        try:
            self.send(ready)
        except PartlySent as part:
            delivered = max(0, min(len(ready), part.delivered))
            with self._lock:
                self.stats["sent"] += delivered
                self.stats["failed"] += len(ready) - delivered
            self._failed(len(ready) - delivered, str(part), count=False)
            return
        except Exception as exc:  # the agent goes on; the sink's owner is told, never silently
            with self._lock:
                self.stats["failed"] += len(ready)
            self._failed(len(ready), f"{type(exc).__name__}: {exc}", count=False)
            return
        with self._lock:
            self.stats["sent"] += len(ready)

    def _failed(self, n: int, why: str, *, count: bool = True) -> None:
        """One warning now, then at most one per ``warn_interval``, with the scores lost since the last."""
        with self._lock:
            if count:
                self.stats["failed"] += n
            self._unwarned += n
            now = time.monotonic()
            due = self._last_warning is None or now - self._last_warning >= self.warn_interval
            if not due:
                return
            self._last_warning, unwarned, self._unwarned = now, self._unwarned, 0
            totals = dict(self.stats)
        log.warning(
            "groundlens: %d score(s) not sent to %s by %s (%s): %s",
            unwarned,
            self.vendor,
            type(self).__name__,
            ", ".join(f"{k} {v}" for k, v in totals.items()),
            why,
        )

    def _reset_after_fork(self) -> None:
        """In a forked child: no sender thread, nothing queued (the parent sends its own batches)."""
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._queue = queue.Queue(maxsize=self._queue.maxsize)
        self._thread = None
        self._client_flush = None
        self._unfinished = 0
        self._items = []


def _with_exported_span(item: ScoreItem) -> ScoreItem:
    if item.span is not None and item.span.llm:
        return item
    exported = exported_spans.lookup(item.step_id)
    if exported is None or (item.span is not None and (item.span.trace_id, item.span.span_id) == exported):
        return item
    return ScoreItem(**{**item.__dict__, "span": SpanIds(*exported)})


_SINKS: weakref.WeakSet[ScoreSink] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for sink in list(_SINKS):
        sink._reset_after_fork()


def _flush_at_exit() -> None:
    """At exit, once the recorders' workers are done: each sink sends what it was handed, for a while."""
    for sink in list(_SINKS):
        try:
            sink.flush(EXIT_FLUSH_SECONDS)
        except Exception:  # pragma: no cover - never fail the exit
            pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
lifecycle.after_exit_flush(_flush_at_exit)
