"""Spans already stored by a tracing backend, read as the calls the live path records.

A backend (Phoenix, Langfuse, an OpenTelemetry Collector's file) gives spans with attributes; this
module turns an LLM span, with the other spans of its trace, into a :class:`CallRecord` the same
way an adapter would: the question and the context the prompt carries are read by
:mod:`~groundlens_core.trace.recorder.prompt_context`, tool messages after the last user message are
``tool:<name>`` pieces, the documents of retriever spans earlier in the trace are ``retriever``
pieces, the outputs of tool spans run since the previous model call are ``tool:<name>`` pieces,
and the prompt's own text is context only when nothing else was found (docs/context.md).

Attributes read: OpenInference (``input.value``, ``output.value``, ``llm.input_messages.*``,
``llm.output_messages.*``, ``retrieval.documents.*.document.content``, ``tool.name``,
``llm.model_name``, ``llm.token_count.*``) and the OpenTelemetry GenAI conventions
(``gen_ai.input.messages``, ``gen_ai.output.messages``, ``gen_ai.system_instructions``,
``gen_ai.prompt.*``, ``gen_ai.completion.*``, ``gen_ai.request.model``, ``gen_ai.usage.*``).
Nothing here imports a vendor SDK: the sources in ``plugins/`` hand plain dicts over.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from groundlens_core.trace.model import META_OTEL_PARENT, ContextPiece, Usage
from groundlens_core.trace.recorder.calls import CallRecord
from groundlens_core.trace.recorder.inputs import (
    QUESTION_NAMES,
    as_text,
    context_from,
    first_text,
    message_role,
    message_text,
    tool_message_pieces,
)
from groundlens_core.trace.recorder.prompt_context import PromptReading, read_messages, read_prompt

__all__ = ["StoredSpan", "flatten", "kind_of", "read_call", "scorable_kind", "to_unix"]

#: OpenTelemetry GenAI operations that are a model call
_GENAI_MODEL_OPERATIONS = frozenset({"chat", "text_completion", "generate_content", "completion"})
#: span kinds (OpenInference's, upper case) whose output is context for later model calls
CONTEXT_KINDS = ("RETRIEVER", "TOOL")
#: a JSON text longer than this is not parsed (read as plain text): a bound on what one span costs
MAX_JSON_CHARS = 2_000_000


@dataclass
class StoredSpan:
    """One stored span as the sources hand it over: ids as hex, times as Unix seconds, attributes
    with dotted keys (nested values flattened: :func:`flatten`)."""

    trace_id: str
    span_id: str
    name: str
    kind: str  # OpenInference's span kind, upper case: LLM, RETRIEVER, TOOL, CHAIN, ... UNKNOWN
    parent_id: str | None = None
    start: float | None = None
    end: float | None = None
    attributes: dict[str, Any] = field(default_factory=dict)
    error: str | None = None  # the span's status was ERROR: its message

    def get(self, key: str) -> Any:
        return self.attributes.get(key)


def to_unix(value: Any) -> float | None:
    """Unix seconds of a datetime, an ISO 8601 string or a number of nanoseconds (OTLP)."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        dt = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
        return dt.timestamp()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value) / 1e9 if value > 1e12 else float(value)
    if isinstance(value, str):
        text = value.strip()
        if text.isdigit():
            return int(text) / 1e9
        try:
            dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            return None
        return to_unix(dt)
    return None


def flatten(attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    """Attributes with dotted keys: nested mappings and lists (as Phoenix stores OpenInference's
    ``llm.input_messages.0.message.role``) become ``a.b.0.c`` keys; a flat mapping stays as it is."""
    out: dict[str, Any] = {}

    def walk(prefix: str, value: Any, depth: int) -> None:
        if depth < 12 and isinstance(value, Mapping) and value:
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v, depth + 1)
        elif depth < 12 and prefix and isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
            for i, v in enumerate(value):
                walk(f"{prefix}.{i}", v, depth + 1)
        else:
            out[prefix] = value

    for key, value in (attributes or {}).items():
        walk(str(key), value, 0)
    return out


def kind_of(attributes: Mapping[str, Any], given: str | None = None) -> str:
    """The OpenInference span kind (upper case): the source's own, else ``openinference.span.kind``,
    else read from ``gen_ai.operation.name`` (``chat`` -> LLM, ``execute_tool`` -> TOOL)."""
    for value in (given, attributes.get("openinference.span.kind")):
        if isinstance(value, str) and value.strip() and value.strip().upper() != "UNKNOWN":
            return value.strip().upper()
    op = attributes.get("gen_ai.operation.name")
    if op in _GENAI_MODEL_OPERATIONS:
        return "LLM"
    if op == "execute_tool":
        return "TOOL"
    if op == "embeddings":
        return "EMBEDDING"
    if op in ("invoke_agent", "create_agent"):
        return "AGENT"
    return "UNKNOWN"


def scorable_kind(span: StoredSpan) -> bool:
    return span.kind == "LLM"


def ours(span: StoredSpan) -> bool:
    """Whether the span is one groundlens exported itself (a step's score span): never rescored."""
    return any(k.startswith("groundlens.") for k in span.attributes)


# ---------------------------------------------------------------- JSON values inside attributes


def _json(value: Any) -> Any:
    """``value`` parsed when it is a JSON object or array as text, else as it is."""
    if isinstance(value, str) and len(value) <= MAX_JSON_CHARS and value.lstrip()[:1] in ("{", "["):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _indexed(attributes: Mapping[str, Any], prefix: str) -> list[dict[str, Any]]:
    """``prefix.{i}.rest`` keys as a list of ``{rest: value}`` by ``i`` (in index order)."""
    found: dict[int, dict[str, Any]] = {}
    cut = len(prefix) + 1
    for key, value in attributes.items():
        if not key.startswith(prefix + "."):
            continue
        index, _, rest = key[cut:].partition(".")
        if index.isdigit():
            found.setdefault(int(index), {})[rest] = value
    return [found[i] for i in sorted(found)]


def _parts_text(parts: Any) -> str:
    """Text of GenAI message parts (``[{"type": "text", "content": ...}]``) or of a plain value."""
    if isinstance(parts, list):
        texts = []
        for part in parts:
            if isinstance(part, Mapping):
                if part.get("type", "text") == "text":
                    text = part.get("content", part.get("text"))
                    if isinstance(text, str):
                        texts.append(text)
                elif part.get("type") == "tool_call_response":
                    texts.append(as_text(part.get("response")) or _dump(part.get("response")))
            elif isinstance(part, str):
                texts.append(part)
        return "\n\n".join(t for t in texts if t)
    return as_text(parts) or ""


def _dump(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def _message(role: Any, content: Any, name: Any = None) -> dict[str, Any]:
    msg = {"role": str(role or "").lower(), "content": content if isinstance(content, str) else _parts_text(content)}
    if isinstance(name, str) and name:
        msg["name"] = name
    return msg


def _openinference_messages(attributes: Mapping[str, Any], prefix: str) -> list[dict[str, Any]]:
    out = []
    for m in _indexed(attributes, prefix):
        content = m.get("message.content")
        if not isinstance(content, str):
            parts = _indexed({k: v for k, v in m.items()}, "message.contents")
            content = "\n\n".join(
                p["message_content.text"] for p in parts if isinstance(p.get("message_content.text"), str)
            )
        out.append(_message(m.get("message.role"), content, m.get("message.name")))
    return out


def _genai_messages(value: Any) -> list[dict[str, Any]]:
    """GenAI ``gen_ai.input.messages`` / ``gen_ai.output.messages`` (JSON) as role/content dicts."""
    value = _json(value)
    if not isinstance(value, list):
        return []
    out = []
    for m in value:
        if isinstance(m, Mapping):
            content = m.get("parts", m.get("content"))
            out.append(_message(m.get("role"), content, m.get("name")))
    return out


def _lc_message(m: Any) -> Any:
    """A LangChain message as its JSON serialisation writes it (``{"lc": 1, "kwargs": {...}}``), read plain."""
    if isinstance(m, Mapping) and isinstance(m.get("kwargs"), Mapping):
        kwargs = m["kwargs"]
        role = kwargs.get("type") or (m.get("id") or ["", ""])[-1].replace("MessageChunk", "").replace("Message", "")
        return _message(role, kwargs.get("content"), kwargs.get("name"))
    if isinstance(m, Mapping):
        return _message(m.get("role") or m.get("type"), m.get("content"), m.get("name"))
    return m


def _value_messages(value: Any) -> list[Any] | None:
    """Chat messages inside an ``input.value`` JSON (a list, ``{"messages": [...]}``, LangChain's nested lists)."""
    if isinstance(value, Mapping):
        value = value.get("messages")
    if isinstance(value, list) and value and isinstance(value[0], list):
        value = value[0]  # LangChain's batch of message lists: the first
    if isinstance(value, list) and value and all(isinstance(m, Mapping) for m in value):
        msgs = [_lc_message(m) for m in value]
        if any(message_role(m) for m in msgs):
            return msgs
    return None


def input_messages(span: StoredSpan) -> tuple[list[Any] | None, str | None]:
    """``(messages, prompt)``: the chat messages the model was given, else its prompt text."""
    a = span.attributes
    for msgs in (
        _openinference_messages(a, "llm.input_messages"),
        _genai_messages(a.get("gen_ai.input.messages")),
        [_message(m.get("role"), m.get("content")) for m in _indexed(a, "gen_ai.prompt")],
    ):
        if msgs:
            system = (
                _parts_text(_json(a.get("gen_ai.system_instructions"))) if "gen_ai.system_instructions" in a else ""
            )
            if system and not any(message_role(m) == "system" for m in msgs):
                msgs = [_message("system", system), *msgs]
            return msgs, None
    raw = a.get("input.value")
    value = _json(raw)
    found = _value_messages(value)
    if found:
        return found, None
    prompts = value.get("prompts") if isinstance(value, Mapping) else None
    if isinstance(prompts, list) and prompts and isinstance(prompts[0], str):
        return None, prompts[0]
    if isinstance(value, Mapping):
        named = first_text(value, ("prompt", *QUESTION_NAMES))
        return None, named[1] if named else None
    return None, as_text(value) if not isinstance(value, str) else value


def output_text(span: StoredSpan) -> str | None:
    """The model's answer: the last assistant message with text, else ``output.value`` read as text."""
    a = span.attributes
    for msgs in (
        _openinference_messages(a, "llm.output_messages"),
        _genai_messages(a.get("gen_ai.output.messages")),
        [_message(m.get("role") or "assistant", m.get("content")) for m in _indexed(a, "gen_ai.completion")],
    ):
        texts = [message_text(m).strip() for m in msgs if message_role(m) in ("assistant", "ai", "model", "")]
        texts = [t for t in texts if t]
        if texts:
            return texts[-1]
    return _answer_of(_json(a.get("output.value")))


def _answer_of(value: Any) -> str | None:
    """The answer text of an ``output.value``: plain text, OpenAI's ``choices``, LangChain's
    ``generations``, a message, or a mapping with an answer-like key."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        choices = value.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
            first = choices[0]
            return _answer_of(first.get("message")) or (
                first.get("text") if isinstance(first.get("text"), str) else None
            )
        gens = value.get("generations")
        if isinstance(gens, list) and gens:
            gen = gens[0][0] if isinstance(gens[0], list) and gens[0] else gens[0]
            if isinstance(gen, Mapping):
                if isinstance(gen.get("text"), str) and gen["text"].strip():
                    return gen["text"]
                return _answer_of(_lc_message(gen.get("message")))
        if isinstance(value.get("kwargs"), Mapping):
            return _answer_of(_lc_message(value))
        found = first_text(value, ("content", "output", "answer", "text", "response", "result"))
        if found:
            return found[1]
        if "parts" in value:
            return _parts_text(value["parts"]) or None
        return None
    if isinstance(value, list):
        msgs = [_lc_message(m) for m in value]
        texts = [message_text(m).strip() for m in msgs if message_role(m) in ("assistant", "ai", "model")]
        return next((t for t in reversed(texts) if t), None) or as_text(value)
    return None


# ---------------------------------------------------------------- context from the trace


def retrieved_documents(span: StoredSpan) -> list[str]:
    """The documents a retriever span returned: ``retrieval.documents.{i}.document.content``, else
    the texts of a JSON list in ``output.value`` (Langfuse keeps a retriever's output there)."""
    docs = [
        d["document.content"]
        for d in _indexed(span.attributes, "retrieval.documents")
        if isinstance(d.get("document.content"), str)
    ]
    if docs:
        return docs
    value = _json(span.get("output.value"))
    if isinstance(value, Mapping):
        value = value.get("documents", value.get("docs"))
    if isinstance(value, list):
        return [t for t in (as_text(v) for v in value) if t and t.strip()]
    return [value] if isinstance(value, str) and value.strip() else []


def tool_output(span: StoredSpan) -> str | None:
    """What a tool span returned (``output.value``, else GenAI's ``gen_ai.tool.call.result``)."""
    for key in ("output.value", "gen_ai.tool.call.result"):
        value = _json(span.get(key))
        text = value if isinstance(value, str) else (as_text(value) or (_dump(value) if value else None))
        if text and text.strip():
            return text
    return None


def tool_name(span: StoredSpan) -> str:
    for key in ("tool.name", "gen_ai.tool.name"):
        value = span.get(key)
        if isinstance(value, str) and value:
            return value
    return span.name or "tool"


def _before(other: StoredSpan, span: StoredSpan) -> bool:
    """Whether ``other`` finished before ``span`` started (or, without an end, started before it)."""
    if span.start is None:
        return False
    when = other.end if other.end is not None else other.start
    return when is not None and when <= span.start + 1e-6


def trace_context(span: StoredSpan, others: Sequence[StoredSpan]) -> list[ContextPiece]:
    """Context from the rest of the trace: documents of retrievers that finished before the call,
    and outputs of tools that finished since the previous model call of the trace."""
    earlier_llm: list[float] = []
    for o in others:
        if o.kind == "LLM" and o.span_id != span.span_id and o.start is not None and _before_start(o, span):
            earlier_llm.append(o.start)
    since = max(earlier_llm) if earlier_llm else None
    tools: list[ContextPiece] = []
    docs: list[ContextPiece] = []
    for other in sorted(others, key=lambda o: (o.start or 0.0, o.span_id)):
        if other.span_id == span.span_id or not _before(other, span):
            continue
        if other.kind == "RETRIEVER":
            docs.extend(ContextPiece(text=d, source="retriever") for d in retrieved_documents(other))
        elif other.kind == "TOOL" and (since is None or (other.start is not None and other.start >= since)):
            text = tool_output(other)
            if text:
                tools.append(ContextPiece(text=text, source=f"tool:{tool_name(other)}"))
    return [*tools, *docs]


def _before_start(other: StoredSpan, span: StoredSpan) -> bool:
    return other.start is not None and span.start is not None and other.start < span.start


# ---------------------------------------------------------------- the call


def node_of(span: StoredSpan) -> str:
    """The node a call belongs to: LangGraph's node (OpenInference's ``metadata``), else the span name."""
    meta = _json(span.get("metadata"))
    if isinstance(meta, Mapping):
        node = meta.get("langgraph_node")
        if isinstance(node, str) and node:
            return node
    node = span.get("metadata.langgraph_node")
    return node if isinstance(node, str) and node else (span.name or "llm")


def _first(attributes: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        value = attributes.get(key)
        if value is not None and value != "":
            return value
    return None


def _count(value: Any) -> int | None:
    try:
        return int(value) if value is not None and not isinstance(value, bool) else None
    except (TypeError, ValueError):
        return None


def usage_of(span: StoredSpan) -> Usage | None:
    a = span.attributes
    usage = Usage(
        input_tokens=_count(_first(a, "llm.token_count.prompt", "gen_ai.usage.input_tokens")),
        output_tokens=_count(_first(a, "llm.token_count.completion", "gen_ai.usage.output_tokens")),
        total_tokens=_count(_first(a, "llm.token_count.total")),
    )
    return usage if any(v is not None for v in (usage.input_tokens, usage.output_tokens, usage.total_tokens)) else None


def read_call(span: StoredSpan, others: Sequence[StoredSpan], *, step_id: str, source: str) -> CallRecord:
    """The call record of LLM span ``span``; ``others``: the other spans of its trace (context).

    The question and context follow the live path's rules (docs/context.md); a span whose status
    is ERROR is a failed call (an error step), as a failed framework call is live."""
    messages, prompt = input_messages(span)
    reading: PromptReading | None
    if messages:
        reading = read_messages(messages)
        found = context_from(tool_message_pieces(messages), trace_context(span, others))
    else:
        reading = read_prompt(prompt) if isinstance(prompt, str) and prompt.strip() else None
        found = context_from(trace_context(span, others))
    context = found or (list(reading.pieces) if reading is not None else [])
    a = span.attributes
    return CallRecord(
        trace_key=span.trace_id,
        node=node_of(span),
        kind="llm",
        question=reading.question if reading is not None else None,
        context=tuple(context),
        response=output_text(span),
        model=_first(a, "llm.model_name", "gen_ai.response.model", "gen_ai.request.model"),
        provider=_first(a, "llm.provider", "gen_ai.provider.name", "gen_ai.system", "llm.system"),
        usage=usage_of(span),
        started_at=span.start,
        ended_at=span.end,
        step_id=step_id,
        error=f"the model call failed: {span.error}" if span.error is not None else None,
        metadata={"source": source, "span_id": span.span_id, "span_name": span.name, META_OTEL_PARENT: span_ref(span)},
    )


def span_ref(span: StoredSpan) -> dict[str, Any]:
    """The stored span as the step's application span (``META_OTEL_PARENT``): the LLM call's own span."""
    return {"trace_id": span.trace_id, "span_id": span.span_id, "sampled": True, "llm": True}
