"""LangChain: a runnable that re-invokes a chain with the findings of its flagged answer, bounded
(docs/revise.md). The class subclasses LangChain's ``Runnable`` and is built on first access."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from groundlens_core.plugins.kit.revise import (
    ACCEPT,
    DEFAULT_MAX_REVISIONS,
    REVISION_KEY,
    Check,
    InlineChecker,
    check_max_revisions,
    without_feedback,
)
from groundlens_core.plugins.kit.shell import AdapterShell, require
from groundlens_core.plugins.langchain.common import DEFAULT_CONTEXT_KEYS, QUESTION_KEYS, RESPONSE_KEYS
from groundlens_core.trace.model import ContextPiece
from groundlens_core.trace.recorder.inputs import (
    as_text,
    context_from,
    last_ai_text,
    last_user_question,
    message_role,
    tool_message_pieces,
)

__all__ = ["DEFAULT_FEEDBACK_KEY", "RevisionReader", "build_revising_runnable"]

log = logging.getLogger("groundlens.langchain")

#: the input key a dict input gets the feedback messages under (a ``MessagesPlaceholder`` of the prompt)
DEFAULT_FEEDBACK_KEY = "groundlens_feedback"


def _stripped(value: Any) -> str | None:
    text = as_text(value)
    return (text.strip() or None) if isinstance(text, str) else None


def _is_messages(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and bool(value) and all(message_role(m) for m in value)


class RevisionReader:
    """How the wrapper reads a chain's input and output and builds the input of the next attempt."""

    def __init__(
        self,
        *,
        question_keys: Sequence[str],
        response_keys: Sequence[str],
        context_keys: Sequence[str],
        feedback_key: str,
        context: Any,
    ):
        self.question_keys = tuple(question_keys)
        self.response_keys = tuple(response_keys)
        self.context_keys = tuple(context_keys)
        self.feedback_key = feedback_key
        self.context = context_from(context, source="argument:context") if context is not None else None

    def question(self, value: Any) -> str | None:
        if isinstance(value, str):
            return _stripped(value)
        if _is_messages(value):
            return last_user_question(without_feedback(list(value)))
        if isinstance(value, Mapping):
            for key in self.question_keys:
                item: Any = value.get(key)
                text = last_user_question(without_feedback(list(item))) if _is_messages(item) else _stripped(item)
                if text:
                    return text
        return None

    def context_of(self, value: Any) -> list[ContextPiece]:
        if self.context is not None:
            return list(self.context)
        if _is_messages(value):
            return tool_message_pieces(without_feedback(list(value)))
        if isinstance(value, Mapping):
            return context_from(*(context_from(value.get(k), source=f"input:{k}") for k in self.context_keys))
        return []

    def answer(self, output: Any) -> str | None:
        if isinstance(output, str):
            return _stripped(output)
        if _is_messages(output):
            return last_ai_text(list(output))
        if isinstance(output, Mapping):
            for key in self.response_keys:
                if key in output:
                    text = self.answer(output[key])
                    if text:
                        return text
            return None
        if hasattr(output, "content"):
            return _stripped(output.content)
        return None

    def next_input(self, value: Any, answer: str, feedback: str, revision: int) -> Any:
        """The input of the next attempt: the answer and the feedback appended to the conversation."""
        messages = require("langchain_core.messages", "langchain", "langchain-core")
        turn = [
            messages.AIMessage(content=answer),
            messages.HumanMessage(content=feedback, additional_kwargs={REVISION_KEY: revision}),
        ]
        if isinstance(value, str):
            return [messages.HumanMessage(content=value), *turn]
        if _is_messages(value):
            return [*value, *turn]
        if isinstance(value, Mapping):
            earlier = value.get(self.feedback_key)
            return {**value, self.feedback_key: [*(earlier if isinstance(earlier, list) else []), *turn]}
        return None  # an input we cannot add a turn to: the answer is accepted


def _with_revision(config: Any, revision: int) -> Any:
    """The child config of attempt ``revision``: its metadata tells the callback it answers again."""
    out = dict(config)
    out["metadata"] = {**(config.get("metadata") or {}), REVISION_KEY: revision}
    return out


def _attempt_config(config: Any, run_manager: Any, revision: int) -> Any:
    """The config of attempt ``revision``: a child run of the wrapper's run, so that a callback
    records every attempt in one trace, marked as a revision after the first."""
    from langchain_core.runnables.config import patch_config

    child = patch_config(config, callbacks=run_manager.get_child(f"attempt:{revision}"))
    return _with_revision(child, revision) if revision else child


class _RevisingLoop:
    """The attempt loop of ``GroundlensRevisingRunnable``, kept out of the class that subclasses
    LangChain's ``Runnable`` so that it is defined without LangChain installed."""

    runnable: Any
    max_revisions: int
    reader: RevisionReader
    checker: InlineChecker

    def get_name(self, suffix: str | None = None, *, name: str | None = None) -> str:
        return name or f"GroundlensRevise[{self.runnable.get_name()}]" + (suffix or "")

    def _check(self, original: Any, output: Any, revision: int) -> tuple[Check | None, str | None]:
        """(the check of ``output``, its answer text); (None, None) when it cannot be checked."""
        try:
            answer = self.reader.answer(output)
            if answer is None:
                return None, None
            question, context = self.reader.question(original), self.reader.context_of(original)
            found = self.checker.check(question, answer, context, revision, self.max_revisions)
            return found, answer
        except Exception as exc:
            log.warning("groundlens: the revising runnable could not check an answer, accepted: %s", exc)
            return None, None

    def _next(self, original: Any, current: Any, found: Check | None, answer: str | None) -> Any:
        if found is None or answer is None or found.decision == ACCEPT or found.feedback is None:
            return None
        try:
            return self.reader.next_input(current, answer, str(found.feedback.text), found.revisions + 1)
        except Exception as exc:
            log.warning("groundlens: the revising runnable could not build the next attempt: %s", exc)
            return None

    def _invoke(self, value: Any, run_manager: Any, config: Any, **kwargs: Any) -> Any:
        current, revision = value, 0
        while True:
            output = self.runnable.invoke(current, _attempt_config(config, run_manager, revision), **kwargs)
            found, answer = self._check(value, output, revision)
            nxt = self._next(value, current, found, answer)
            if nxt is None:
                return output
            current, revision = nxt, revision + 1

    async def _ainvoke(self, value: Any, run_manager: Any, config: Any, **kwargs: Any) -> Any:
        current, revision = value, 0
        while True:
            output = await self.runnable.ainvoke(current, _attempt_config(config, run_manager, revision), **kwargs)
            found, answer = await asyncio.to_thread(self._check, value, output, revision)
            nxt = self._next(value, current, found, answer)
            if nxt is None:
                return output
            current, revision = nxt, revision + 1


def build_revising_runnable() -> type:
    """``GroundlensRevisingRunnable``, built on first access so that importing this module needs no LangChain."""
    runnables = require("langchain_core.runnables", "langchain", "langchain-core")

    class GroundlensRevisingRunnable(_RevisingLoop, runnables.Runnable):  # type: ignore[name-defined,misc]
        """Runs ``runnable``; when its answer is flagged, runs it again with the answer and the
        feedback appended (a dict input under ``feedback_key``, a message list or a string as
        messages), at most ``max_revisions`` times, and returns the last output. The attempts are
        child runs of this one, so a callback records them in one trace, each revision with
        ``revision_of``. Our failures never fail the chain: the output is returned as it is."""

        def __init__(
            self,
            runnable: Any,
            *,
            adapter: AdapterShell | None = None,
            max_revisions: int = DEFAULT_MAX_REVISIONS,
            context: Any = None,
            context_keys: Sequence[str] = DEFAULT_CONTEXT_KEYS,
            question_keys: Sequence[str] = QUESTION_KEYS,
            response_keys: Sequence[str] = RESPONSE_KEYS,
            feedback_key: str = DEFAULT_FEEDBACK_KEY,
            embedder: Any = None,
            calibration: Any = None,
        ):
            if not isinstance(runnable, runnables.Runnable):
                raise TypeError(f"runnable must be a LangChain Runnable, got {type(runnable).__name__}")
            self.runnable = runnable
            self.max_revisions = check_max_revisions(max_revisions)
            self.reader = RevisionReader(
                question_keys=question_keys,
                response_keys=response_keys,
                context_keys=context_keys,
                feedback_key=feedback_key,
                context=context,
            )
            self.checker = InlineChecker(adapter, embedder=embedder, calibration=calibration)

        def invoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:
            return self._call_with_config(self._invoke, input, config, **kwargs)

        async def ainvoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:
            return await self._acall_with_config(self._ainvoke, input, config, **kwargs)

    return GroundlensRevisingRunnable
