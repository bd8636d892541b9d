"""LangChain: an evaluator for LangSmith / openevals-style experiments (needs no LangChain), a
callback for runnables and a runnable that revises a flagged answer. Usage:
docs/integrations/langchain.md, docs/revise.md."""

from __future__ import annotations

import logging
from typing import Any, Mapping, Sequence

from groundlens_core.errors import describe_exception
from groundlens_core.internal_errors import internal_error
from groundlens_core.plugins.kit.revise import REVISION_KEY
from groundlens_core.plugins.kit.shell import lazy_classes
from groundlens_core.plugins.langchain.common import (
    CONTEXT_OVERRIDE_KEY,
    DEFAULT_CONTEXT_KEYS,
    QUESTION_KEYS,
    QUESTION_OVERRIDE_KEY,
    RESPONSE_KEYS,
    GroundlensCallbackBase,
)
from groundlens_core.plugins.langchain.revise import DEFAULT_FEEDBACK_KEY, build_revising_runnable
from groundlens_core.scoring.fields import score_fields
from groundlens_core.trace.recorder.inputs import as_text, context_from, last_ai_text, last_user_question, message_role

__getattr__ = lazy_classes(__name__, {"GroundlensRevisingRunnable": build_revising_runnable})

__all__ = [
    "CONTEXT_OVERRIDE_KEY",
    "DEFAULT_CONTEXT_KEYS",
    "DEFAULT_FEEDBACK_KEY",
    "QUESTION_OVERRIDE_KEY",
    "REVISION_KEY",
    "GroundlensCallback",
    "GroundlensEvaluator",
    "GroundlensRevisingRunnable",  # noqa: F822 - built on first access (lazy_classes)
]

log = logging.getLogger("groundlens.langchain")


class GroundlensCallback(GroundlensCallbackBase):
    """The LangChain callback handler for plain runnables and ``create_agent`` agents."""


def _stripped(text: Any) -> str | None:
    return (text.strip() or None) if isinstance(text, str) else None


def _question_from(value: Any) -> str | None:
    if isinstance(value, (list, tuple)):
        return last_user_question(list(value))
    return _stripped(as_text(value))


def _response_from(value: Any) -> str | None:
    if isinstance(value, (list, tuple)) and value and all(message_role(m) for m in value if not isinstance(m, str)):
        return last_ai_text(list(value))
    if isinstance(value, Mapping) and "messages" in value:
        return _response_from(value["messages"])
    return _stripped(as_text(value))


def _find(mapping: Any, keys: Sequence[str], read) -> tuple[str | None, str | None]:
    """(key, text) of the first of ``keys`` in ``mapping`` that ``read`` turns into text."""
    if isinstance(mapping, str):
        return None, read(mapping)
    if not isinstance(mapping, Mapping):
        return None, None
    for key in keys:
        if key in mapping:
            text = read(mapping[key])
            if text:
                return key, text
    return None, None


class GroundlensEvaluator:
    """Scores a run's answer for grounding (SGI against the context when one is found, else DGI),
    called LangSmith/openevals style, with :meth:`evaluate_run`, or as a string evaluator. The score
    is the result's ``score`` in [0, 1], the value every report ranks by (a wrong fact scores below a
    correct paraphrase): a triage signal for review order, not a verdict of truth."""

    def __init__(
        self,
        *,
        key: str = "groundlens",
        calibration: Any = None,
        embedder: Any = None,
        context_keys: Sequence[str] = DEFAULT_CONTEXT_KEYS,
        question_keys: Sequence[str] = QUESTION_KEYS,
        response_keys: Sequence[str] = RESPONSE_KEYS,
    ):
        self.key = key
        self.calibration = calibration
        self.embedder = embedder
        self.context_keys = tuple(context_keys)
        self.question_keys = tuple(question_keys)
        self.response_keys = tuple(response_keys)

    def _context(self, *sources: Any) -> tuple[list[str], str | None]:
        for where, source in zip(("inputs", "outputs", "reference_outputs"), sources):
            if not isinstance(source, Mapping):
                continue
            for key in self.context_keys:
                texts = [p.text for p in context_from(source.get(key), source=key)]
                if texts:
                    return texts, f"{where}.{key}"
        return [], None

    def _score(
        self, question: str | None, response: str | None, context: list[str], found: dict[str, Any]
    ) -> dict[str, Any]:
        """``(score dict or None, comment, metadata)`` for the texts found; never raises."""
        # no question is fine with a context (a summarisation chain): the response is checked against it alone
        missing = [
            name
            for name, value in (("question", question or (context and "context")), ("response", response))
            if not value
        ]
        if missing:
            return {
                "score": None,
                "comment": f"groundlens: no {' or '.join(missing)} found "
                f"(looked for question keys {list(self.question_keys)} in inputs and response keys "
                f"{list(self.response_keys)} in outputs)",
                "metadata": {"method": None, **found},
            }
        assert response is not None  # checked just above (a question may be absent when there is context)
        try:
            from groundlens_core.scoring import evaluate

            res = evaluate(
                question, response, context=context or None, calibration=self.calibration, embedder=self.embedder
            )
        except Exception as exc:
            internal_error(exc, "the LangChain evaluator", None)
            log.warning("groundlens: evaluator could not score: %s", describe_exception(exc))
            return {
                "score": None,
                "comment": f"groundlens: could not score: {describe_exception(exc)}",
                "metadata": {"method": "error", **found},
            }
        fields = score_fields(res)  # the one projection of a score: the same names as the CSV and OTel
        meta = {k: list(v) if isinstance(v, tuple) else v for k, v in fields.items() if v is not None}
        meta.update(found)
        return {"score": res.score, "comment": res.explanation, "metadata": meta}

    def __call__(
        self, *, inputs: Any = None, outputs: Any = None, reference_outputs: Any = None, **kwargs: Any
    ) -> dict[str, Any]:
        """openevals / LangSmith evaluator shape: ``{"key", "score", "comment", "metadata"}``."""
        try:
            q_key, question = _find(inputs, self.question_keys, _question_from)
            r_key, response = _find(outputs, self.response_keys, _response_from)
            context, c_from = self._context(inputs, outputs, reference_outputs)
            found = {
                "question_key": q_key,
                "response_key": r_key,
                "context_from": c_from,
                "context_pieces": len(context),
            }
            out = self._score(question, response, context, found)
        except Exception as exc:  # odd inputs must not break an experiment
            internal_error(exc, "the LangChain evaluator", None)
            log.warning("groundlens: evaluator failed: %s", describe_exception(exc))
            out = {
                "score": None,
                "comment": f"groundlens: could not read the run: {describe_exception(exc)}",
                "metadata": {},
            }
        return {"key": self.key, **out}

    def evaluate_run(self, run: Any, example: Any = None) -> dict[str, Any]:
        """LangSmith ``RunEvaluator`` style: ``run.inputs``/``run.outputs``; ``example.outputs`` are the reference."""
        return self(
            inputs=getattr(run, "inputs", None),
            outputs=getattr(run, "outputs", None),
            reference_outputs=getattr(example, "outputs", None) if example is not None else None,
        )

    def evaluate_strings(
        self, *, prediction: str, input: str | None = None, reference: Any = None, **kwargs: Any
    ) -> dict[str, Any]:
        """LangChain string-evaluator style; ``reference`` is the context (text or list of texts)."""
        try:
            context = [p.text for p in context_from(reference, source="reference")]
            out = self._score(_stripped(input), _stripped(prediction), context, {"context_pieces": len(context)})
        except Exception as exc:
            internal_error(exc, "the LangChain evaluator", None)
            out = {"score": None, "comment": f"groundlens: could not score: {describe_exception(exc)}", "metadata": {}}
        meta = out.get("metadata") or {}
        return {
            "score": out["score"],
            "value": meta.get("value"),
            "reasoning": out["comment"],
            "method": meta.get("method"),
            "triage": meta.get("triage"),
            "flagged": meta.get("flagged"),
        }

    async def aevaluate_strings(self, **kwargs: Any) -> dict[str, Any]:
        import asyncio

        return await asyncio.to_thread(lambda: self.evaluate_strings(**kwargs))
