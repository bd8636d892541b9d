"""LangGraph: the revision loop as a router for a conditional edge and a node that sends a flagged
answer back with its findings named (docs/revise.md). LangChain's message classes are imported
when the node first runs."""

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
    revisions_so_far,
    without_feedback,
)
from groundlens_core.plugins.kit.shell import AdapterShell, get_field, require
from groundlens_core.plugins.langchain.common import DEFAULT_CONTEXT_KEYS
from groundlens_core.plugins.langchain.runs import state_pieces
from groundlens_core.trace.model import ContextPiece
from groundlens_core.trace.recorder.inputs import (
    AI_ROLES,
    as_text,
    context_from,
    last_user_question,
    message_role,
    message_text,
    tool_message_pieces,
)

__all__ = ["GroundlensReviser"]

log = logging.getLogger("groundlens.langgraph")


class GroundlensReviser:
    """The revision loop of a LangGraph graph: :meth:`route` for the conditional edge after the
    answering node (``"revise"`` for a flagged answer while revisions are left, else ``"accept"``)
    and :meth:`revise`, the node that appends the feedback message and goes back to the answering node.
    In an async graph use :meth:`aroute` and :meth:`arevise`: they score in a worker thread, so the
    event loop keeps running.

    The answer is the last AI message of ``messages_key`` (or the text at ``answer_key``); the
    question the last user message (or ``question_key``); the context the state's
    ``context_keys`` and the tool results of the current turn. Scored in line through ``adapter``
    (your ``GroundlensLangGraphCallback``: its settings, and its trace records each new answer with
    ``revision_of``) or a scorer of its own. Neither method raises: a failure accepts the answer.
    """

    def __init__(
        self,
        adapter: AdapterShell | None = None,
        *,
        max_revisions: int = DEFAULT_MAX_REVISIONS,
        messages_key: str = "messages",
        question_key: str | None = None,
        answer_key: str | None = None,
        context_keys: Sequence[str] = DEFAULT_CONTEXT_KEYS,
        embedder: Any = None,
        calibration: Any = None,
    ):
        self.max_revisions = check_max_revisions(max_revisions)
        self.messages_key = messages_key
        self.question_key = question_key
        self.answer_key = answer_key
        self.context_keys = tuple(context_keys)
        self.checker = InlineChecker(adapter, embedder=embedder, calibration=calibration)

    # ------------------------------------------------------------ reading the state

    def _messages(self, state: Any) -> list[Any]:
        value = get_field(state, self.messages_key)
        return list(value) if isinstance(value, (list, tuple)) else []

    def _answer(self, state: Any, messages: Sequence[Any]) -> str | None:
        if self.answer_key is not None:
            text = as_text(get_field(state, self.answer_key))
            return (text.strip() or None) if isinstance(text, str) else None
        last = messages[-1] if messages else None
        if last is None or message_role(last) not in AI_ROLES:
            return None  # the node did not answer with a message (a tool call turn has no text either)
        return message_text(last).strip() or None

    def _question(self, state: Any, messages: Sequence[Any]) -> str | None:
        if self.question_key is not None:
            text = as_text(get_field(state, self.question_key))
            return (text.strip() or None) if isinstance(text, str) else None
        return last_user_question(without_feedback(messages))

    def _context(self, state: Any, messages: Sequence[Any]) -> list[ContextPiece]:
        values = state if isinstance(state, Mapping) else {k: get_field(state, k) for k in self.context_keys}
        return context_from(state_pieces(self.context_keys, values), tool_message_pieces(without_feedback(messages)))

    def check(self, state: Any) -> Check | None:
        """The inline check of the state's latest answer, or None when there is no answer to check."""
        messages = self._messages(state)
        answer = self._answer(state, messages)
        if answer is None:
            return None
        return self.checker.check(
            self._question(state, messages),
            answer,
            self._context(state, messages),
            revisions_so_far(messages),
            self.max_revisions,
        )

    # ------------------------------------------------------------ the graph's parts

    def route(self, state: Any) -> str:
        """``"revise"`` or ``"accept"``: for ``add_conditional_edges(node, reviser.route, {...})``."""
        try:
            found = self.check(state)
        except Exception as exc:
            log.warning("groundlens: the revision router failed, the answer is accepted: %s", exc)
            return ACCEPT
        if found is None:
            return ACCEPT
        if found.flagged and found.decision == ACCEPT:
            log.info("groundlens: the answer is still flagged after %d revision(s); accepted as it is", found.revisions)
        return found.decision

    def revise(self, state: Any) -> dict[str, Any]:
        """The node after ``"revise"``: appends the feedback (and the answer, when it is kept at
        ``answer_key`` rather than in the messages) to ``messages_key``."""
        try:
            found = self.check(state)
            if found is None or found.feedback is None or found.feedback.text is None:
                return {}
            messages = require("langchain_core.messages", "langgraph", "langchain-core")
            update: list[Any] = []
            if self.answer_key is not None:
                answer = self._answer(state, self._messages(state))
                update.append(messages.AIMessage(content=answer))
            update.append(
                messages.HumanMessage(
                    content=found.feedback.text, additional_kwargs={REVISION_KEY: found.revisions + 1}
                )
            )
            return {self.messages_key: update}
        except Exception as exc:
            log.warning("groundlens: the revision node failed, the state is left as it is: %s", exc)
            return {}

    async def aroute(self, state: Any) -> str:
        """:meth:`route` in a worker thread."""
        return await asyncio.to_thread(self.route, state)

    async def arevise(self, state: Any) -> dict[str, Any]:
        """:meth:`revise` in a worker thread."""
        return await asyncio.to_thread(self.revise, state)
