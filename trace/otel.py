"""OpenTelemetry export of groundlens traces: live (a recorder listener) and post-hoc (a saved trace).

Scores are triage signals for ranking what a human reviews first, never verdicts of truth; the
exported attributes say so (``groundlens.note``).

Live::

    provider = configure_otlp("http://127.0.0.1:6006")          # or your own TracerProvider
    recorder = Recorder("langgraph", listeners=[OTelExporter(tracer_provider=provider)])

Post-hoc::

    export_trace(Trace.load("trace.json"), tracer_provider=provider)

Span mapping
------------
One root span per trace, and one child span per step (all steps are children of the root; a
step's framework parent is kept as ``groundlens.step.parent_id``).

=================  ==============================  ======================  =========================
what               span name                        gen_ai.operation.name   openinference.span.kind
=================  ==============================  ======================  =========================
trace (default)    ``invoke_workflow <trace name>``  invoke_workflow       CHAIN
trace, 1 agent     ``invoke_agent <trace name>``     invoke_agent          AGENT
step ``llm``       ``chat <model>`` (``chat``)       chat                  LLM
step ``tool_call`` ``chat <model>``                  chat                  LLM
step ``tool``      ``execute_tool <tool>``           execute_tool          TOOL
step ``retrieval`` ``retrieval <node>``              retrieval             RETRIEVER
step ``agent``     ``invoke_agent <node>``           invoke_agent          AGENT
=================  ==============================  ======================  =========================

Rule for the root: ``invoke_agent`` when the trace's metadata has ``META_SINGLE_AGENT``
(``"single_agent": True``; the CrewAI listener sets it for a standalone ``Agent.kickoff()``), else
``invoke_workflow``. The tool name is ``step.metadata[META_TOOL]`` (``"tool"``, written by the
LangChain/LangGraph and CrewAI adapters) when set, else the step's node. Both keys are constants in
``groundlens_core.trace.model``; a test checks every key read here is written by an adapter.

Step span attributes (when known):

* GenAI: ``gen_ai.operation.name``, ``gen_ai.provider.name``, ``gen_ai.request.model``,
  ``gen_ai.usage.input_tokens``, ``gen_ai.usage.output_tokens``, ``gen_ai.tool.name``,
  ``gen_ai.data_source.id`` (retrieval), ``error.type`` (error steps).
* OpenInference: ``openinference.span.kind``, ``input.value`` (the question), ``output.value``
  (the response; for a tool/retriever step without a response, its result text),
  ``llm.model_name``, ``llm.provider``, ``llm.token_count.*``, ``tool.name``,
  ``retrieval.documents.<i>.document.content``.
* Evaluation (scored steps only): ``gen_ai.evaluation.name`` = ``groundlens.sgi`` /
  ``groundlens.dgi`` / ``groundlens.support``, ``gen_ai.evaluation.score.value`` (the raw value),
  ``gen_ai.evaluation.score.label`` (triage: trusted / review / flagged),
  ``gen_ai.evaluation.explanation``.
* groundlens: ``groundlens.method`` (sgi/dgi/skipped/error), ``groundlens.triage``,
  ``groundlens.value``, ``groundlens.normalized``, ``groundlens.flagged``, ``groundlens.node``,
  ``groundlens.fingerprint``, ``groundlens.scoring_latency_ms``, ``groundlens.llm_latency_ms``,
  ``groundlens.step.id`` / ``.index`` / ``.kind`` / ``.parent_id``, ``groundlens.skip_reason``,
  ``groundlens.context.count``, ``groundlens.context.sources``, ``groundlens.context.<i>.text``
  (first 16 pieces), ``groundlens.note``.

Root span attributes: ``gen_ai.operation.name``, ``gen_ai.agent.name`` (single agent),
``openinference.span.kind``, ``groundlens.trace.id``, ``groundlens.trace.name``,
``groundlens.framework``, ``groundlens.fingerprint``, and at the end ``groundlens.steps``,
``groundlens.count.<trusted|review|flagged|skipped|error>``, ``groundlens.count.overload`` (of the
skipped, the steps not scored because the scoring backlog was full), ``groundlens.trace.status``,
``groundlens.trace.complete`` (False when the agent never ended the trace).

Status: an error step's span, and the root span of a trace whose agent raised, get status ERROR
with the message.

Times: spans carry the original times, never the export time: the root starts at the trace's
``started_at`` and ends at its ``ended_at``; a step span starts and ends at the LLM call's times
(a step without times takes the previous step's end, or in live mode the time it was scored).
Live, step spans are ended as soon as the step is scored, so a trace whose agent crashed
without ending it still exports its steps; :meth:`OTelExporter.close` ends such open roots.

Evaluation event: for each scored step a log record with ``event_name`` (and attribute
``event.name``) ``gen_ai.evaluation.result``, the four ``gen_ai.evaluation.*`` attributes and
``groundlens.*`` ones, emitted in the step span's context (it carries its trace and span ids),
through the LoggerProvider passed in, else the global one (a no-op when none is set).

Redaction: spans are made from the same redacted view of a step as the JSON and the HTML
(:meth:`Step.view`): ``redact=True`` replaces every question, response and context text by
``[redacted hmac-sha256=<hex> length=<n>]`` (a digest keyed once per process, so a guess of a short
text cannot be confirmed; see :func:`~groundlens_core.trace.model.redaction_digest`) and error
messages by their length; ``max_text_chars=N`` cuts texts to N characters and appends
``… [cut: <n> chars]``. Node, model and tool names are kept.

A tracer or logger provider that fails (``get_tracer`` / ``get_logger`` raises) costs one warning
and falls back to OpenTelemetry's no-op tracer / logger: constructing the exporter never raises.

Requires ``pip install "groundlens-core[otel]"``; importing this module does not.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from datetime import datetime, timedelta, timezone
from typing import Any, Mapping

from groundlens_core._imports import require
from groundlens_core._version import __version__
from groundlens_core.bands import SCORED_METHODS
from groundlens_core.trace import lineage
from groundlens_core.trace import semconv as sc
from groundlens_core.trace.model import META_SINGLE_AGENT, META_TOOL, Step, Trace, redaction_digest

log = logging.getLogger("groundlens.otel")

_INSTALL = ("otel", "OpenTelemetry (opentelemetry-api, opentelemetry-sdk)")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MAX_CONTEXT_ATTRS = 16
_MAX_ERROR_CHARS = 2000

__all__ = ["OTelExporter", "export_trace", "configure_otlp", "export_failures", "iso_to_ns", "render_text"]


def _require(module: str):
    return require(module, *_INSTALL)


def iso_to_ns(value: str | None) -> int | None:
    """UTC ISO 8601 (``...Z``) to integer nanoseconds since the epoch, exactly (no float rounding)."""
    if not value:
        return None
    try:
        dt = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return (dt - _EPOCH) // timedelta(microseconds=1) * 1000


def render_text(value: Any, *, redact: bool = False, max_text_chars: int | None = None) -> str | None:
    """A text field as a span attribute: itself, cut, or a keyed digest + length marker (never raw when redacting).

    Accepts the trace model's already-redacted/cut dicts too (a trace loaded from a redacted JSON).
    """
    if value is None:
        return None
    suffix = ""
    if isinstance(value, Mapping):
        if value.get("redacted"):
            if value.get("sha256"):  # a file from an older version
                return f"[redacted sha256={value.get('sha256')} length={value.get('length', 0)}]"
            return f"[redacted hmac-sha256={value.get('hmac_sha256', '')} length={value.get('length', 0)}]"
        full = value.get("length")
        value = str(value.get("text", ""))
        if value and full is not None and int(full) > len(value):
            suffix = f"… [cut: {int(full)} chars]"
    text = str(value)
    if redact:
        return f"[redacted hmac-sha256={redaction_digest(text)} length={len(text)}]"
    if max_text_chars is not None and len(text) > max_text_chars:
        return text[:max_text_chars] + f"… [cut: {len(text)} chars]"
    return text + suffix


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
    blocked on it for good (its flushes timed out, its exit waited 70 s). The child gets new locks."""
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
        otel_trace = _require("opentelemetry.trace")
        otel_logs = _require("opentelemetry._logs")
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
            single = (trace.metadata or {}).get(META_SINGLE_AGENT) is True
            op, kind = (sc.OP_INVOKE_AGENT, "AGENT") if single else (sc.OP_INVOKE_WORKFLOW, "CHAIN")
            attrs: dict[str, Any] = {
                sc.GEN_AI_OPERATION_NAME: op,
                sc.OPENINFERENCE_SPAN_KIND: kind,
                sc.GL_TRACE_ID: trace.id,
                sc.GL_TRACE_NAME: trace.name,
                sc.GL_FRAMEWORK: trace.framework,
                sc.GL_NOTE: sc.TRIAGE_NOTE,
            }
            if single:
                attrs[sc.GEN_AI_AGENT_NAME] = trace.name
            span = self._tracer.start_span(
                f"{op} {trace.name}", context=_empty_context(), start_time=start, attributes=attrs
            )
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
            counts = trace.counts()
            span.set_attribute(sc.GL_STEPS, len(trace.steps))
            for band, n in counts.items():
                span.set_attribute(sc.GL_COUNT.format(band=band), n)
            span.set_attribute(sc.GL_COUNT_OVERLOAD, trace.unscored()["overload"])
            span.set_attribute(sc.GL_TRACE_STATUS, trace.status)
            if trace.fingerprint:
                span.set_attribute(sc.GL_FINGERPRINT, trace.fingerprint)
            ended = iso_to_ns(trace.ended_at)
            if ended is not None:
                end = max(ended, end or 0)
            if trace.status == "error":
                status = self._trace_api.Status(
                    self._trace_api.StatusCode.ERROR, _cut(trace.error or "the agent raised")
                )
                span.set_status(status)
        span.set_attribute(sc.GL_TRACE_COMPLETE, complete)
        span.end(end_time=end)

    def _emit_step(self, trace: Trace, step: Step, fallback_ns: int | None) -> int | None:
        step = step.view(redact=self.redact, max_text_chars=self.max_text_chars)
        root = self._open_root(trace)
        start, end = _step_times(step, fallback_ns if fallback_ns is not None else time.time_ns())
        name, attrs = self._step_attributes(step)
        links, cascade = lineage.otel_links(step, root.flagged_spans, self._trace_api.Link)
        span = self._tracer.start_span(
            name, context=root.ctx, start_time=start, attributes={**attrs, **cascade}, links=links
        )
        root.flagged_spans.remember(step, span)
        if step.method == "error":
            span.set_status(self._trace_api.Status(self._trace_api.StatusCode.ERROR, _cut(step.error or "error")))
        span.end(end_time=end)
        with self._lock:
            root.last_end_ns = max(root.last_end_ns, end)
        if step.method in SCORED_METHODS and step.score is not None:
            self._emit_evaluation(step, span, end)
        return end

    def _step_attributes(self, step: Step) -> tuple[str, dict[str, Any]]:
        op, kind = sc.STEP_OPERATION.get(step.kind, (sc.OP_CHAT, "LLM"))
        a: dict[str, Any] = {sc.GEN_AI_OPERATION_NAME: op, sc.OPENINFERENCE_SPAN_KIND: kind}
        tool = str((step.metadata or {}).get(META_TOOL) or step.node)
        if op == sc.OP_CHAT:
            name = f"chat {step.model}" if step.model else "chat"
        elif op == sc.OP_EXECUTE_TOOL:
            name = f"execute_tool {tool}"
            a[sc.GEN_AI_TOOL_NAME] = tool
            a[sc.TOOL_NAME] = tool
        elif op == sc.OP_RETRIEVAL:
            name = f"retrieval {step.node}"
            a[sc.GEN_AI_DATA_SOURCE_ID] = step.node
        else:
            name = f"invoke_agent {step.node}"
            a[sc.GEN_AI_AGENT_NAME] = step.node
        if step.provider:
            a[sc.GEN_AI_PROVIDER_NAME] = step.provider
            a[sc.LLM_PROVIDER] = step.provider
        if step.model:
            a[sc.GEN_AI_REQUEST_MODEL] = step.model
            a[sc.LLM_MODEL_NAME] = step.model
        usage = step.usage
        if usage is not None:
            for keys, val in (
                ((sc.GEN_AI_USAGE_INPUT_TOKENS, sc.LLM_TOKEN_COUNT_PROMPT), usage.input_tokens),
                ((sc.GEN_AI_USAGE_OUTPUT_TOKENS, sc.LLM_TOKEN_COUNT_COMPLETION), usage.output_tokens),
                ((sc.LLM_TOKEN_COUNT_TOTAL,), usage.total_tokens),
            ):
                if val is not None:
                    for k in keys:
                        a[k] = int(val)

        question = self._text(step.question)
        if question is not None:
            a[sc.INPUT_VALUE] = question
            a[sc.INPUT_MIME_TYPE] = "text/plain"
        output = self._text(step.response)
        if output is None and step.kind in ("tool", "retrieval") and step.context:
            output = (
                self._text(step.context[0].text)
                if self.redact
                else self._text("\n\n".join(_plain(p.text) for p in step.context))
            )
        if output is not None:
            a[sc.OUTPUT_VALUE] = output
            a[sc.OUTPUT_MIME_TYPE] = "text/plain"
        if step.context:
            a[sc.GL_CONTEXT_COUNT] = len(step.context)
            a[sc.GL_CONTEXT_SOURCES] = [p.source for p in step.context]
            key = sc.RETRIEVAL_DOCUMENT_CONTENT if step.kind == "retrieval" else sc.GL_CONTEXT_TEXT
            for i, piece in enumerate(step.context[:_MAX_CONTEXT_ATTRS]):
                text = self._text(piece.text)
                if text is not None:
                    a[key.format(i=i)] = text

        a.update(
            {
                sc.GL_METHOD: step.method,
                sc.GL_NODE: step.node,
                sc.GL_STEP_ID: step.id,
                sc.GL_STEP_INDEX: step.index,
                sc.GL_STEP_KIND: step.kind,
                sc.GL_NOTE: sc.TRIAGE_NOTE,
            }
        )
        if step.parent_id:
            a[sc.GL_STEP_PARENT_ID] = step.parent_id
        if step.triage:
            a[sc.GL_TRIAGE] = step.triage
        if step.skip_reason:
            a[sc.GL_SKIP_REASON] = step.skip_reason
        if step.llm_latency_ms is not None:
            a[sc.GL_LLM_LATENCY_MS] = float(step.llm_latency_ms)
        if step.scoring_latency_ms is not None:
            a[sc.GL_SCORING_LATENCY_MS] = float(step.scoring_latency_ms)
        if step.method == "error":
            a[sc.ERROR_TYPE] = "groundlens.step_error"
        if step.method in SCORED_METHODS and step.score is not None:
            a.update(_evaluation_attributes(step, self.max_text_chars))
            a[sc.GL_FLAGGED] = bool(step.score.flagged)
            if step.normalized is not None:
                a[sc.GL_NORMALIZED] = float(step.normalized)
            if step.value is not None:
                a[sc.GL_VALUE] = float(step.value)
            if step.score.fingerprint:
                a[sc.GL_FINGERPRINT] = str(step.score.fingerprint)
        return name, a

    def _emit_evaluation(self, step: Step, span: Any, end_ns: int) -> None:
        attrs = _evaluation_attributes(step, self.max_text_chars)
        attrs.update(
            {
                sc.EVENT_NAME: sc.GEN_AI_EVALUATION_RESULT_EVENT,
                sc.GL_STEP_ID: step.id,
                sc.GL_NODE: step.node,
                sc.GL_METHOD: step.method,
                sc.GL_FLAGGED: step.flagged,
            }
        )
        if step.normalized is not None:
            attrs[sc.GL_NORMALIZED] = float(step.normalized)
        try:
            self._logger.emit(
                timestamp=end_ns,
                context=self._trace_api.set_span_in_context(span),
                event_name=sc.GEN_AI_EVALUATION_RESULT_EVENT,
                attributes=attrs,
            )
        except TypeError:  # an older Logs API without keyword emit: build the record ourselves
            logs = _require("opentelemetry._logs")
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

    def _text(self, value: Any) -> str | None:
        """A text of a step's view (already redacted or cut) as an attribute value."""
        return render_text(value)

    def _guard(self, fn, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # the agent must never see an exporter failure
            self._failures += 1
            if self._failures == 1 or self._failures % 100 == 0:
                log.warning(
                    "groundlens: OpenTelemetry export failed (%d so far): %s: %s",
                    self._failures,
                    type(exc).__name__,
                    exc,
                )
            return None


def _evaluation_attributes(step: Step, max_text_chars: int | None = None) -> dict[str, Any]:
    """gen_ai.evaluation.* plus the evidence: the ranking value, support, the weakest sentence and
    the unsupported tokens. ``step`` is a view, so under redaction its evidence texts are already
    ``[redacted]`` and the explanation no longer quotes the weakest sentence; evidence texts are
    cut to ``EVIDENCE_ATTR_MAX_CHARS`` (or ``max_text_chars`` when smaller)."""
    out: dict[str, Any] = {sc.GEN_AI_EVALUATION_NAME: f"groundlens.{step.method}"}
    if step.value is not None:
        out[sc.GEN_AI_EVALUATION_SCORE_VALUE] = float(step.value)
    if step.triage:
        out[sc.GEN_AI_EVALUATION_SCORE_LABEL] = step.triage
    if step.explanation:
        out[sc.GEN_AI_EVALUATION_EXPLANATION] = step.explanation
    if step.rank is not None:
        out[sc.GL_RANK] = out[sc.GL_SCORE] = float(step.rank)
    if step.method == "dgi":
        out[sc.GL_WEAK_SIGNAL] = True  # no context: DGI is a weak signal
    ev = getattr(step.score, "evidence", None)
    if ev is not None:
        limit = min(max_text_chars or sc.EVIDENCE_ATTR_MAX_CHARS, sc.EVIDENCE_ATTR_MAX_CHARS)
        out[sc.GL_SUPPORT] = float(ev.support)
        if ev.weakest_sentence is not None:
            out[sc.GL_WEAKEST_SENTENCE] = render_text(ev.weakest_sentence.text, max_text_chars=limit)
        words = list(dict.fromkeys(u.text for u in ev.unsupported()))
        if words:
            out[sc.GL_UNSUPPORTED] = render_text("; ".join(words), max_text_chars=limit)
    return out


def _step_times(step: Step, fallback_ns: int) -> tuple[int, int]:
    start, end = iso_to_ns(step.started_at), iso_to_ns(step.ended_at)
    if start is None and end is None:
        start = end = fallback_ns
    elif start is None:
        start = end
    elif end is None:
        end = start + int((step.llm_latency_ms or 0.0) * 1e6)
    assert start is not None and end is not None
    return start, max(start, end)


def _plain(value: Any) -> str:
    if isinstance(value, Mapping):
        return str(value.get("text", ""))
    return "" if value is None else str(value)


def _cut(text: str, limit: int = _MAX_ERROR_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def _empty_context() -> Any:
    """A context without a current span: our root spans never nest under the caller's active span
    (the recorder's worker thread has none anyway; post-hoc export must not inherit one)."""
    return _require("opentelemetry.context").Context()


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


# ---------------------------------------------------------------- OTLP setup


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
    sdk_trace = _require("opentelemetry.sdk.trace")
    sdk_export = _require("opentelemetry.sdk.trace.export")
    resources = _require("opentelemetry.sdk.resources")
    otlp = _require("opentelemetry.exporter.otlp.proto.http.trace_exporter")

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
