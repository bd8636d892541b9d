"""One small recorded agent run shared by the OpenTelemetry tests (in-memory and Phoenix).

Five calls under one trace: a tool call, a grounded and an off-topic answer to a question with
context, an answer with no context (DGI) and a failed call, at fixed times from ``T0``.
"""

from __future__ import annotations

from groundlens_core.trace import CallRecord, ContextPiece, Recorder, Usage
from groundlens_core.trace.model import META_TOOL

QUESTION_SGI = "What is the boiling point of water at sea level in Celsius?"
CONTEXT_SGI = "At sea level, pure water boils at 100 degrees Celsius (212 degrees Fahrenheit)."
GROUNDED = "Water boils at 100 degrees Celsius at sea level."
OFF_TOPIC = "My favourite football team won the cup final last weekend after extra time."
QUESTION_DGI = "Which planet is known as the Red Planet?"
ANSWER_DGI = "Mars is known as the Red Planet because of the iron oxide on its surface."
TOOL_RESULT = "search result: Mars has two moons, Phobos and Deimos."
RAW_TEXTS = (QUESTION_SGI, CONTEXT_SGI, GROUNDED, OFF_TOPIC, QUESTION_DGI, ANSWER_DGI, TOOL_RESULT)
TOOL_NAME = "web_search"  # the search step's tool, as its metadata names it
GROUNDED_USAGE = Usage(42, 7, 49)
ERROR = "RateLimitError: slow down"

T0 = 1_760_000_000.250001  # fixed call times: spans must carry these, not the export time


def record_run(recorder: Recorder, key: str = "run-1", *, name: str = "demo", end: bool = True) -> None:
    """Record the run under ``key`` (left open when not ``end``) and wait until it is scored."""
    recorder.start_trace(key, name=name)
    recorder.record(CallRecord(key, "search", kind="tool", context=[ContextPiece(TOOL_RESULT, "tool:search")],
                               started_at=T0, ended_at=T0 + 0.1, metadata={META_TOOL: TOOL_NAME}))
    recorder.record(CallRecord(key, "grounded", question=QUESTION_SGI, context=[ContextPiece(CONTEXT_SGI, "retriever")],
                               response=GROUNDED, model="gpt-test", provider="openai", usage=GROUNDED_USAGE,
                               started_at=T0 + 0.2, ended_at=T0 + 0.7))
    recorder.record(CallRecord(key, "off_topic", question=QUESTION_SGI, context=[ContextPiece(CONTEXT_SGI, "retriever")],
                               response=OFF_TOPIC, model="gpt-test", provider="openai",
                               started_at=T0 + 0.8, ended_at=T0 + 1.1))
    recorder.record(CallRecord(key, "no_context", question=QUESTION_DGI, response=ANSWER_DGI, model="gpt-test",
                               started_at=T0 + 1.2, ended_at=T0 + 1.5))
    recorder.record(CallRecord(key, "broken", question=QUESTION_DGI, error=ERROR,
                               model="gpt-test", started_at=T0 + 1.6, ended_at=T0 + 1.65))
    if end:
        recorder.end_trace(key)
    assert recorder.flush(timeout=120)


# one answer with failed findings: a changed duration and a flipped policy (the checker reads the
# duration as "at most 60 days" and marks the characters "60 days")
RETURNS_QUESTION = "How long do I have to return the X200, and who pays return shipping?"
RETURNS_CONTEXT = "Returns are accepted within 30 days of delivery. Return shipping is paid by the customer."
RETURNS_ANSWER = "You can return the X200 within 60 days. Return shipping is free."
#: (characters in the answer, status, what the source says) of the findings every export points at
RETURNS_FINDINGS = (
    ("60 days", "contradicted", "at most 30 days"),
    ("Return shipping is free", "contradicted", "Return shipping is paid by the customer"),
)
RETURNS_WEAKEST = "You can return the X200 within 60 days."


def record_returns(recorder: Recorder, key: str = "returns", **call: object) -> None:
    """Record the returns answer as one call of its own trace and wait until it is scored."""
    context = [ContextPiece(RETURNS_CONTEXT, "retriever")]
    call = {"question": RETURNS_QUESTION, "context": context, "response": RETURNS_ANSWER, "model": "gpt-test", **call}
    recorder.record(CallRecord(key, "answer", **call))  # type: ignore[arg-type]
    recorder.end_trace(key)
    assert recorder.flush(timeout=120)
