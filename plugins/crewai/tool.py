"""CrewAI: the grounding self-check tool an agent calls before it commits to a final answer; by
default it checks against the tool outputs the agent received in the task. Built on first access."""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any, Sequence

from groundlens_core.errors import describe_exception
from groundlens_core.internal_errors import internal_error
from groundlens_core.plugins.crewai.names import (
    _ACTIVE,
    _CURRENT_CALL,
    EXTRA,
    FRAMEWORK,
    SELF_CHECK_TOOL_NAME,
    _task_context_pieces,
    task_question,
)
from groundlens_core.plugins.kit.shell import AdapterShell, InlineResult, require
from groundlens_core.scoring.results import quote_sentence
from groundlens_core.trace.model import ContextPiece
from groundlens_core.trace.recorder.inputs import context_from

if TYPE_CHECKING:  # pragma: no cover
    from groundlens_core.plugins.crewai.listener import GroundlensCrewListener

log = logging.getLogger("groundlens.crewai")

#: where users import ``GroundlensTool`` from, and so the module the class is named in
_PUBLIC_MODULE = "groundlens_core.plugins.crewai"

SELF_CHECK_DESCRIPTION = (
    "Grounding self-check. Call it BEFORE you commit to a final answer: pass your draft answer as "
    "`answer`, and optionally the `question` you are answering and the source text it is based on as "
    "`context`. If you leave out the context, the tool uses the results of the tools you called in this "
    "task; if you leave out the question, it uses your task. It replies with a grounding score and one "
    "instruction: revise when it says FLAGGED or REVIEW, answer when it says OK to answer."
)


def _never_cache(_args: Any = None, _result: Any = None) -> bool:
    """crewai's tool cache must never serve a stale self-check: the same answer can score
    differently once the agent has read more sources."""
    return False


_NEED_ANSWER = (
    "groundlens self-check: nothing to check. Call this tool again with `answer` set to your draft "
    "final answer as plain text (optional: `question`, and `context` = the source text it is based on)."
)
_NEED_QUESTION = (
    "groundlens self-check: no question known. Call this tool again with `question` set to the "
    "question your answer responds to (and `answer` = your draft answer)."
)
#: the instruction of a (method, band); a trusted answer is always "OK to answer."
_INSTRUCTIONS = {
    "sgi": (
        "FLAGGED: re-read the retrieved source and revise your answer so it is supported by it.",
        "REVIEW: check each claim against the source; fix or drop what it does not support, then answer.",
    ),
    "support": (
        "FLAGGED: your answer states things the source does not; revise it so every claim comes from the source.",
        "REVIEW: check the words the source does not contain; fix or drop them, then answer.",
    ),
    "dgi": (
        "FLAGGED: your answer does not look grounded; look up a source with your tools and revise your answer from it.",
        "REVIEW: no source text was available; if you can, look one up and check your answer against it.",
    ),
}


def _instruction(method: str, triage: str) -> str:
    flagged, review = _INSTRUCTIONS[method]
    return flagged if triage == "flagged" else review if triage == "review" else "OK to answer."


def _answer_text(answer: Any) -> str | None:
    if isinstance(answer, (int, float)) and not isinstance(answer, bool):
        return str(answer)
    return (answer.strip() or None) if isinstance(answer, str) else None


def self_check(
    answer: Any,
    question: Any = None,
    context: Any = None,
    *,
    listener: GroundlensCrewListener | None = None,
    embedder: Any = None,
    calibration: Any = None,
) -> str:
    """The self-check tool's reply: method, score, triage and one instruction. Never raises."""
    try:
        text = _answer_text(answer)
        if text is None:
            return _NEED_ANSWER
        agent, task = _CURRENT_CALL.get() or (None, None)
        listeners = [listener] if listener is not None else list(_ACTIVE)
        q = question.strip() if isinstance(question, str) and question.strip() else None
        if q is None and task is not None:
            q = listeners[0].question_for(task) if listeners else task_question(task)
        sources = context_from(context if isinstance(context, (str, list, tuple)) else None, source="argument:context")
        if not sources and task is not None:
            seen: list[Any] = [lst.context_for(agent, task) for lst in listeners] or [_task_context_pieces(task)]
            sources = context_from(*seen)
        if q is None and not sources:  # with sources, no question is fine: the answer is checked against them
            return _NEED_QUESTION
        scorer: AdapterShell = (
            listener
            if listener is not None and embedder is None and calibration is None
            else _SelfChecker(embedder=embedder, calibration=calibration)
        )
        inline = scorer.score_inline(question=q, response=text, context=sources)
    except Exception as exc:
        internal_error(exc, "the CrewAI self-check", None)
        inline = InlineResult(None, error=describe_exception(exc))
        log.warning("groundlens: self-check failed: %s", inline.error)
    if inline.result is None:
        return (
            f"groundlens self-check could not score this answer ({inline.error or inline.skipped}). "
            "Check your answer against your sources yourself before answering."
        )
    return _format(inline.result, sources)


class _SelfChecker(AdapterShell):
    """Scores a self-check in line when no listener (or other scoring settings) is given."""

    framework = FRAMEWORK
    extra = EXTRA


def _format(result: Any, sources: Sequence[ContextPiece]) -> str:
    method, triage = result.method, result.triage
    if method in ("sgi", "support"):
        names = sorted({p.source for p in sources})
        basis = f"against {len(sources)} source{'s' if len(sources) != 1 else ''} ({', '.join(names)})"
    else:
        basis = "without source text (no tool results or context to compare with)"
    head = (
        f"groundlens self-check: {triage.upper()} (score {result.score:.2f} of 1, scored {basis}; "
        f"{method.upper()}={result.value:.2f})."
    )
    lines = [head, _instruction(method, triage)]
    decision = result.decision
    if decision is not None and decision.findings:  # name each fact to fix and the value the source gives
        lines.append("Facts to fix: " + "; ".join(f.describe() for f in decision.findings) + ".")
    elif decision is not None and triage != "trusted":
        lines.append(f"Why: {decision.reason}.")
    weakest = getattr(getattr(result, "evidence", None), "weakest_sentence", None)
    if weakest is not None:  # name what to fix: the sentence stating most that the source lacks
        missing = ", ".join(dict.fromkeys(u.text for u in weakest.unsupported))
        lines.append(f'Weakest sentence: "{quote_sentence(weakest.text)}" (not in the source: {missing}).')
    lines.append("(A triage signal, not a verdict of truth.)")
    return "\n".join(lines)


@functools.cache
def tool_class() -> type:
    """``GroundlensTool``, built once: ``crewai.GroundlensTool`` and a listener's ``self_check_tool``
    hand out the same class without this module or the listener importing the public module."""
    cls = _build_tool()
    cls.__module__ = _PUBLIC_MODULE
    return cls


def _build_tool() -> type:
    """``GroundlensTool``, built on first access so that importing this module needs no crewai."""
    tools = require("crewai.tools", EXTRA, "CrewAI")
    from pydantic import BaseModel, ConfigDict, Field

    def _require_answer(schema: dict[str, Any]) -> None:
        required = schema.setdefault("required", [])
        if "answer" not in required:
            required.insert(0, "answer")

    class GroundlensSelfCheckArgs(BaseModel):
        """``answer`` is required in the schema the model sees; validation is lenient so that a
        missing, blank or non-text answer gets a plain instruction instead of a validation error."""

        model_config = ConfigDict(json_schema_extra=_require_answer)

        answer: Any = Field(default=None, description="Your draft final answer, as plain text.")
        question: str | None = Field(default=None, description="The question you are answering (default: your task).")
        context: str | None = Field(
            default=None,
            description=(
                "The source text your answer is based on (default: the results of the tools you called in this task)."
            ),
        )

    class GroundlensTool(tools.BaseTool):  # type: ignore[name-defined]
        """Lets an agent check that its draft answer is supported by its sources before answering."""

        name: str = SELF_CHECK_TOOL_NAME
        description: str = SELF_CHECK_DESCRIPTION
        args_schema: type[BaseModel] = GroundlensSelfCheckArgs
        cache_function: Any = _never_cache
        listener: Any = Field(default=None, exclude=True)
        embedder: Any = Field(default=None, exclude=True)
        calibration: Any = Field(default=None, exclude=True)

        def _run(self, answer: Any = None, question: Any = None, context: Any = None, **_: Any) -> str:
            return self_check(
                answer, question, context, listener=self.listener, embedder=self.embedder, calibration=self.calibration
            )

    return GroundlensTool
