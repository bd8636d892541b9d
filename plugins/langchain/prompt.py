"""What a LangChain model call's prompt says, read in the call's translation, off the agent's thread.

At a model call's start the callback keeps the messages (or prompt strings) and what it collected
around the call (retriever and state context, overrides); the question and context are worked out
from them when the call's end is translated (:class:`PromptRead`), so its call record reaches the
recorder with them. Reading a prompt (splitting the question from the context a human message
carries, judging whether a system message is a source) costs several times the rest of the
callback, and nothing on the agent's thread needs the result.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from groundlens_core.plugins.kit.revise import without_feedback
from groundlens_core.plugins.langchain.runs import StateValue, expand_state
from groundlens_core.trace.model import ContextPiece
from groundlens_core.trace.recorder.inputs import context_from, tool_message_pieces
from groundlens_core.trace.recorder.prompt_context import LONG_PROMPT_WORDS, read_messages, read_prompt

#: (question, context) of one prompt of a model call
Reading = tuple[str | None, tuple[ContextPiece, ...]]


def _no_hints() -> tuple[str, ...]:
    return ()


class _Warns(Protocol):
    def _warn_no_context(self, node: str, hints: Callable[[], tuple[str, ...]], words: int) -> None: ...


class PromptRead:
    """The question and context of each prompt of one model run, read once, when first asked for.

    ``messages``: the chat model's message lists (copied, so a list the application changes later
    does not change what is read), or None for a completion model's ``prompts``. ``question`` and
    ``override`` are the run's explicit question and context (config metadata); ``collected`` the
    context found around the call; ``hints`` gives the long state keys the call's node received,
    which the no-context warning names (read only when it is due)."""

    def __init__(
        self,
        adapter: _Warns,
        node: str,
        messages: list[list[Any]] | None,
        prompts: list[str],
        question: str | None,
        override: Any,
        collected: Sequence[ContextPiece | StateValue],
        hints: Callable[[], tuple[str, ...]],
        tool_steps: Mapping[str, str] | None = None,
    ) -> None:
        self._adapter = adapter
        self._node = node
        self._messages = messages
        self._prompts = prompts
        self._question = question
        self._override = override
        self._collected = list(collected)
        self._hints = hints
        #: tool_call_id -> the tool step that ran it (the root's, filled as tool steps are translated):
        #: a tool message's piece names its producer
        self._tool_steps = tool_steps if tool_steps is not None else {}
        self._readings: list[Reading] | None = None

    def reading(self, i: int) -> Reading:
        """The (question, context) of prompt ``i`` (the first one when the run has fewer)."""
        readings = self.readings()
        if not readings:
            return None, ()
        return readings[i] if i < len(readings) else readings[0]

    def readings(self) -> list[Reading]:
        """Every prompt's (question, context); the first call reads them (and warns once per node
        about a long prompt left without context), later calls return the same list. Called in the
        run's translations only, which the recorder runs one at a time, under its lock."""
        if self._readings is None:
            self._readings = self._read()
        return self._readings

    def _read(self) -> list[Reading]:
        override = context_from(self._override, source="override")
        collected = context_from(expand_state(self._collected))  # the state values are read here
        if self._messages is not None:
            # the loops' feedback messages are neither the question nor the end of the user's turn
            lists = [without_feedback(messages) for messages in self._messages]
            calls = [
                (read_messages(m), context_from(override, tool_message_pieces(m, self._tool_steps.get), collected))
                for m in lists
            ]
        else:
            calls = [(read_prompt(text), context_from(override, collected)) for text in self._prompts]
        out: list[Reading] = []
        bare_words = 0  # the longest prompt among this run's calls left without any context
        for reading, found in calls:
            context = found or list(reading.pieces)  # the prompt's own text only when nothing else was found
            out.append((self._question or reading.question, tuple(context)))
            if not context:
                bare_words = max(bare_words, reading.words)
        if bare_words >= LONG_PROMPT_WORDS:
            self._adapter._warn_no_context(self._node, self._hints, bare_words)
        self._hints = _no_hints  # read once: the states it holds are let go
        return out
