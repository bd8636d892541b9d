"""Attribute names used by the OpenTelemetry export, in one place.

GenAI names follow the OpenTelemetry GenAI semantic conventions (incubating); OpenInference names
are what Arize Phoenix reads to show LLM/TOOL/RETRIEVER/AGENT/CHAIN spans, inputs and outputs.
Plain strings on purpose: importing this module needs no OpenTelemetry package.
"""

from __future__ import annotations

from groundlens_core.scoring.bands import TRIAGE_NOTE_LONG

# --- OpenTelemetry GenAI semantic conventions
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_AGENT_NAME = "gen_ai.agent.name"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_DATA_SOURCE_ID = "gen_ai.data_source.id"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_EVALUATION_NAME = "gen_ai.evaluation.name"
GEN_AI_EVALUATION_SCORE_VALUE = "gen_ai.evaluation.score.value"
GEN_AI_EVALUATION_SCORE_LABEL = "gen_ai.evaluation.score.label"
GEN_AI_EVALUATION_EXPLANATION = "gen_ai.evaluation.explanation"
GEN_AI_EVALUATION_RESULT_EVENT = "gen_ai.evaluation.result"
EVENT_NAME = "event.name"
ERROR_TYPE = "error.type"

OP_CHAT = "chat"
OP_EXECUTE_TOOL = "execute_tool"
OP_INVOKE_AGENT = "invoke_agent"
OP_INVOKE_WORKFLOW = "invoke_workflow"
OP_RETRIEVAL = "retrieval"

# --- OpenInference (Arize Phoenix)
OPENINFERENCE_SPAN_KIND = "openinference.span.kind"
OPENINFERENCE_PROJECT_NAME = "openinference.project.name"  # a Resource attribute
INPUT_VALUE = "input.value"
INPUT_MIME_TYPE = "input.mime_type"
OUTPUT_VALUE = "output.value"
OUTPUT_MIME_TYPE = "output.mime_type"
LLM_MODEL_NAME = "llm.model_name"
LLM_PROVIDER = "llm.provider"
LLM_TOKEN_COUNT_PROMPT = "llm.token_count.prompt"
LLM_TOKEN_COUNT_COMPLETION = "llm.token_count.completion"
LLM_TOKEN_COUNT_TOTAL = "llm.token_count.total"
TOOL_NAME = "tool.name"
RETRIEVAL_DOCUMENT_CONTENT = "retrieval.documents.{i}.document.content"

# --- ours
GL_METHOD = "groundlens.method"
GL_TRIAGE = "groundlens.triage"
GL_VALUE = "groundlens.value"
GL_NORMALIZED = "groundlens.normalized"
GL_FLAGGED = "groundlens.flagged"
GL_NODE = "groundlens.node"
GL_SCORE = "groundlens.score"  # the score shown and ranked by, in [0, 1]; the band is a function of it
GL_METHOD_VALUE = "groundlens.{method}"  # the method's raw value: groundlens.sgi / groundlens.dgi / groundlens.support
GL_RULE = "groundlens.rule"  # the decision's rule (decision.RULES): why the band
GL_VERIFIER = "groundlens.verifier"  # the trained verifier's calibrated probability that the response is faithful
GL_FACTS = "groundlens.facts"  # the failed facts with what the source says ("; "-joined)
GL_WEAK_SIGNAL = "groundlens.weak_signal"  # true for a step scored without context (DGI)
GL_SUPPORT = "groundlens.support"  # share of the response's content the context contains
GL_WEAKEST_SENTENCE = "groundlens.weakest_sentence"  # the response sentence stating most that the context lacks
GL_UNSUPPORTED = "groundlens.unsupported"  # the absent numbers, dates, names, words ("; "-joined)
# the failed findings with their characters in the response: a JSON list of objects with text, kind,
# status, source (what the source says, or null), start and end ([start, end) offsets in output.value)
GL_FINDINGS = "groundlens.findings"
GL_FINDINGS_COUNT = "groundlens.findings_count"  # how many failed findings (the JSON may hold fewer)
# the weakest sentence's [start, end) offsets in the response (not groundlens.weakest_sentence.start:
# an attribute's name is never also a namespace, as the OpenTelemetry naming rules ask)
GL_WEAKEST_SENTENCE_START = "groundlens.weakest_sentence_start"
GL_WEAKEST_SENTENCE_END = "groundlens.weakest_sentence_end"
EVIDENCE_ATTR_MAX_CHARS = 512  # evidence attributes are cut to this (backends drop over-long attributes)
GL_FINGERPRINT = "groundlens.fingerprint"
GL_SCORING_LATENCY_MS = "groundlens.scoring_latency_ms"
GL_LLM_LATENCY_MS = "groundlens.llm_latency_ms"
GL_STEP_ID = "groundlens.step.id"
GL_STEP_INDEX = "groundlens.step.index"
GL_STEP_KIND = "groundlens.step.kind"
GL_STEP_PARENT_ID = "groundlens.step.parent_id"
GL_SKIP_REASON = "groundlens.skip_reason"
GL_CONTEXT_COUNT = "groundlens.context.count"
GL_CONTEXT_SOURCES = "groundlens.context.sources"
GL_CONTEXT_TEXT = "groundlens.context.{i}.text"
GL_TRACE_ID = "groundlens.trace.id"
GL_TRACE_NAME = "groundlens.trace.name"
GL_FRAMEWORK = "groundlens.framework"
GL_TRACE_STATUS = "groundlens.trace.status"
GL_TRACE_COMPLETE = "groundlens.trace.complete"
GL_COUNT = "groundlens.count.{band}"  # trusted / review / flagged / skipped / error
# of the skipped: steps not scored because the recorder's scoring backlog was full
GL_COUNT_OVERLOAD = "groundlens.count.overload"
GL_STEPS = "groundlens.steps"
GL_NOTE = "groundlens.note"

TRIAGE_NOTE = TRIAGE_NOTE_LONG  # the one sentence, from groundlens_core.scoring.bands

#: step kind -> (gen_ai.operation.name, openinference.span.kind)
STEP_OPERATION = {
    "llm": (OP_CHAT, "LLM"),
    "tool_call": (OP_CHAT, "LLM"),
    "tool": (OP_EXECUTE_TOOL, "TOOL"),
    "retrieval": (OP_RETRIEVAL, "RETRIEVER"),
    "agent": (OP_INVOKE_AGENT, "AGENT"),
}
