"""Span names and attributes of groundlens traces, as plain functions of a trace or a step's view.

The exporter (:mod:`groundlens_core.trace.otel`) only starts and ends spans; what each span says
is decided here, so the mapping in docs/otel.md can be read in one place. Nothing here imports
OpenTelemetry.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any, Mapping

from groundlens_core.scoring.bands import SCORED_METHODS
from groundlens_core.scoring.fields import score_fields
from groundlens_core.trace.model import META_SINGLE_AGENT, META_TOOL, Step, Trace, redaction_digest
from groundlens_core.trace.otel import semconv as sc
from groundlens_core.trace.otel.finding_spans import finding_records, findings_json, weakest_span

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MAX_CONTEXT_ATTRS = 16
_MAX_ERROR_CHARS = 2000

#: step fields exported as they are when set (not empty)
_TEXT_FIELDS = (
    (sc.GL_STEP_PARENT_ID, "parent_id"),
    (sc.GL_TRIAGE, "triage"),
    (sc.GL_SKIP_REASON, "skip_reason"),
)
#: step fields exported as floats when known
_NUMBER_FIELDS = (
    (sc.GL_LLM_LATENCY_MS, "llm_latency_ms"),
    (sc.GL_SCORING_LATENCY_MS, "scoring_latency_ms"),
)
#: step fields exported under a GenAI and an OpenInference name when set
_ALIASED_FIELDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("provider", (sc.GEN_AI_PROVIDER_NAME, sc.LLM_PROVIDER)),
    ("model", (sc.GEN_AI_REQUEST_MODEL, sc.LLM_MODEL_NAME)),
)
#: token counts: (the usage field, the attributes it is exported as)
_USAGE_FIELDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("input_tokens", (sc.GEN_AI_USAGE_INPUT_TOKENS, sc.LLM_TOKEN_COUNT_PROMPT)),
    ("output_tokens", (sc.GEN_AI_USAGE_OUTPUT_TOKENS, sc.LLM_TOKEN_COUNT_COMPLETION)),
    ("total_tokens", (sc.LLM_TOKEN_COUNT_TOTAL,)),
)


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
            if value.get("sha256"):  # a file written with an unkeyed digest
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


def cut(text: str, limit: int = _MAX_ERROR_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def _plain(value: Any) -> str:
    if isinstance(value, Mapping):
        return str(value.get("text", ""))
    return "" if value is None else str(value)


# ---------------------------------------------------------------- the root span


def root_span(trace: Trace) -> tuple[str, dict[str, Any]]:
    """The root span's name and its attributes at the start: ``invoke_agent`` for a single agent."""
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
    return f"{op} {trace.name}", attrs


def root_end_attributes(trace: Trace) -> dict[str, Any]:
    """What the root span learns when its trace ends: step counts by band, status, fingerprint."""
    attrs: dict[str, Any] = {sc.GL_STEPS: len(trace.steps)}
    for band, n in trace.counts().items():
        attrs[sc.GL_COUNT.format(band=band)] = n
    attrs[sc.GL_COUNT_OVERLOAD] = trace.unscored()["overload"]
    attrs[sc.GL_TRACE_STATUS] = trace.status
    if trace.fingerprint:
        attrs[sc.GL_FINGERPRINT] = trace.fingerprint
    return attrs


# ---------------------------------------------------------------- step spans


def step_times(step: Step, fallback_ns: int) -> tuple[int, int]:
    """The step's own start and end (ns); a step without times takes ``fallback_ns``."""
    start, end = iso_to_ns(step.started_at), iso_to_ns(step.ended_at)
    if start is None and end is None:
        start = end = fallback_ns
    elif start is None:
        start = end
    elif end is None:
        end = start + int((step.llm_latency_ms or 0.0) * 1e6)
    assert start is not None and end is not None
    return start, max(start, end)


def step_span(step: Step, *, redact: bool, max_text_chars: int | None) -> tuple[str, dict[str, Any]]:
    """The span name and attributes of a step's view (its texts already redacted or cut)."""
    name, attrs = _operation(step)
    attrs.update(_model_attributes(step))
    attrs.update(_io_attributes(step, redact))
    attrs.update(_context_attributes(step))
    attrs.update(_groundlens_attributes(step))
    if step.method in SCORED_METHODS and step.result is not None:
        attrs.update(_score_attributes(step, max_text_chars))
    return name, attrs


def _operation(step: Step) -> tuple[str, dict[str, Any]]:
    """The span name, the GenAI operation and OpenInference kind, and the tool or agent named."""
    op, kind = sc.STEP_OPERATION.get(step.kind, (sc.OP_CHAT, "LLM"))
    attrs: dict[str, Any] = {sc.GEN_AI_OPERATION_NAME: op, sc.OPENINFERENCE_SPAN_KIND: kind}
    if op == sc.OP_CHAT:
        return (f"chat {step.model}" if step.model else "chat"), attrs
    if op == sc.OP_EXECUTE_TOOL:
        tool = str((step.metadata or {}).get(META_TOOL) or step.node)
        attrs[sc.GEN_AI_TOOL_NAME] = attrs[sc.TOOL_NAME] = tool
        return f"execute_tool {tool}", attrs
    if op == sc.OP_RETRIEVAL:
        attrs[sc.GEN_AI_DATA_SOURCE_ID] = step.node
        return f"retrieval {step.node}", attrs
    attrs[sc.GEN_AI_AGENT_NAME] = step.node
    return f"invoke_agent {step.node}", attrs


def _model_attributes(step: Step) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    for field, names in _ALIASED_FIELDS:
        value = getattr(step, field)
        if value:
            attrs.update(dict.fromkeys(names, value))
    if step.usage is not None:
        for field, names in _USAGE_FIELDS:
            value = getattr(step.usage, field)
            if value is not None:
                attrs.update(dict.fromkeys(names, int(value)))
    return attrs


def _io_attributes(step: Step, redact: bool) -> dict[str, Any]:
    """``input.value`` (the question) and ``output.value`` (the response, or a tool's or retriever's result)."""
    attrs: dict[str, Any] = {}
    question = render_text(step.question)
    if question is not None:
        attrs[sc.INPUT_VALUE] = question
        attrs[sc.INPUT_MIME_TYPE] = "text/plain"
    output = render_text(step.response)
    if output is None and step.kind in ("tool", "retrieval") and step.context:
        joined = step.context[0].text if redact else "\n\n".join(_plain(p.text) for p in step.context)
        output = render_text(joined)
    if output is not None:
        attrs[sc.OUTPUT_VALUE] = output
        attrs[sc.OUTPUT_MIME_TYPE] = "text/plain"
    return attrs


def _context_attributes(step: Step) -> dict[str, Any]:
    """How many context pieces, their sources, and the texts of the first 16."""
    if not step.context:
        return {}
    attrs: dict[str, Any] = {
        sc.GL_CONTEXT_COUNT: len(step.context),
        sc.GL_CONTEXT_SOURCES: [p.source for p in step.context],
    }
    key = sc.RETRIEVAL_DOCUMENT_CONTENT if step.kind == "retrieval" else sc.GL_CONTEXT_TEXT
    for i, piece in enumerate(step.context[:_MAX_CONTEXT_ATTRS]):
        text = render_text(piece.text)
        if text is not None:
            attrs[key.format(i=i)] = text
    return attrs


def _groundlens_attributes(step: Step) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        sc.GL_METHOD: step.method,
        sc.GL_NODE: step.node,
        sc.GL_STEP_ID: step.id,
        sc.GL_STEP_INDEX: step.index,
        sc.GL_STEP_KIND: step.kind,
        sc.GL_NOTE: sc.TRIAGE_NOTE,
    }
    attrs.update({name: getattr(step, field) for name, field in _TEXT_FIELDS if getattr(step, field)})
    attrs.update(
        {name: float(getattr(step, field)) for name, field in _NUMBER_FIELDS if getattr(step, field) is not None}
    )
    if step.method == "error":
        attrs[sc.ERROR_TYPE] = "groundlens.step_error"
    return attrs


def _score_attributes(step: Step, max_text_chars: int | None) -> dict[str, Any]:
    attrs = evaluation_attributes(step, max_text_chars)
    attrs[sc.GL_FLAGGED] = bool(step.result.flagged)  # type: ignore[union-attr]
    if step.normalized is not None:
        attrs[sc.GL_NORMALIZED] = float(step.normalized)
    if step.value is not None:
        attrs[sc.GL_VALUE] = float(step.value)
    if step.result.fingerprint:  # type: ignore[union-attr]
        attrs[sc.GL_FINGERPRINT] = str(step.result.fingerprint)  # type: ignore[union-attr]
    return attrs


def evaluation_attributes(step: Step, max_text_chars: int | None = None) -> dict[str, Any]:
    """gen_ai.evaluation.* plus the decision and the evidence, from the score's one projection
    (:func:`groundlens_core.scoring.fields.score_fields`): ``gen_ai.evaluation.score.value`` is the score (the
    value ranked, = ``groundlens.score``); the method's raw value is ``groundlens.sgi`` /
    ``groundlens.dgi`` / ``groundlens.support`` (and ``groundlens.value``). ``step`` is a view, so
    under redaction its evidence and findings are already ``[redacted]`` and the explanation no longer
    quotes them; evidence texts are cut to ``EVIDENCE_ATTR_MAX_CHARS`` (or ``max_text_chars`` when
    smaller)."""
    out: dict[str, Any] = {sc.GEN_AI_EVALUATION_NAME: f"groundlens.{step.method}"}
    if step.score is not None:
        out[sc.GEN_AI_EVALUATION_SCORE_VALUE] = out[sc.GL_SCORE] = float(step.score)
    if step.triage:
        out[sc.GEN_AI_EVALUATION_SCORE_LABEL] = step.triage
    if step.explanation:
        out[sc.GEN_AI_EVALUATION_EXPLANATION] = step.explanation
    if step.method == "dgi":
        out[sc.GL_WEAK_SIGNAL] = True  # no context: DGI is a weak signal
    if step.result is None:
        return out
    fields = score_fields(step.result)
    if fields["value"] is not None:
        out[sc.GL_METHOD_VALUE.format(method=step.method)] = float(fields["value"])
    if fields["rule"]:
        out[sc.GL_RULE] = fields["rule"]
    verdict = getattr(step.result, "verdict", None)
    if verdict is not None:
        out[sc.GL_VERIFIER] = float(verdict.probability)
    limit = min(max_text_chars or sc.EVIDENCE_ATTR_MAX_CHARS, sc.EVIDENCE_ATTR_MAX_CHARS)
    if fields["facts"]:
        out[sc.GL_FACTS] = render_text("; ".join(fields["facts"]), max_text_chars=limit)
    if fields["support"] is not None:
        out[sc.GL_SUPPORT] = float(fields["support"])
    if fields["weakest_sentence"] is not None:
        out[sc.GL_WEAKEST_SENTENCE] = render_text(fields["weakest_sentence"], max_text_chars=limit)
    if fields["unsupported"]:
        out[sc.GL_UNSUPPORTED] = render_text("; ".join(fields["unsupported"]), max_text_chars=limit)
    out.update(span_attributes(step.result, limit))
    return out


def span_attributes(score: Any, limit: int) -> dict[str, Any]:
    """Where the failed findings and the weakest sentence stand in the response (``[start, end)``
    offsets): ``groundlens.findings`` as a JSON list (texts cut to ``limit``, the list to
    ``finding_spans.FINDINGS_MAX_CHARS``), ``groundlens.findings_count``, and
    ``groundlens.weakest_sentence_start`` / ``_end``. Under redaction the texts are already
    ``[redacted]``; the offsets stay."""
    out: dict[str, Any] = {}
    records, total = finding_records(score, limit)
    if total:
        out[sc.GL_FINDINGS] = findings_json(records)
        out[sc.GL_FINDINGS_COUNT] = total
    weakest = weakest_span(score)
    if weakest is not None:
        out[sc.GL_WEAKEST_SENTENCE_START], out[sc.GL_WEAKEST_SENTENCE_END] = weakest
    return out


def evaluation_event_attributes(step: Step, max_text_chars: int | None) -> dict[str, Any]:
    """The attributes of the ``gen_ai.evaluation.result`` log record of a scored step."""
    attrs = evaluation_attributes(step, max_text_chars)
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
    return attrs
