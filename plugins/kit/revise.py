"""What the revision loops share (LangGraph router and node, CrewAI guardrail, LangChain wrapper):
the mark on a feedback message, the inline scorer and the decision to revise or accept. Imports no
framework. How the loop works: docs/revise.md.

A loop scores the answer on the caller's thread (the decision is needed before the next edge or
retry) with :meth:`AdapterShell.score_inline`, the adapters' one inline path, and sends a flagged
answer back with :func:`groundlens_core.scoring.feedback.feedback_for`'s message. The feedback message
carries :data:`REVISION_KEY` (in a LangChain message's ``additional_kwargs``, which the chat model
integrations do not send to the provider) so that the callback recording the run knows the next
call answers again: it sets that step's ``revision_of`` and does not read the feedback as the
call's question.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from groundlens_core.plugins.kit.shell import AdapterShell, InlineResult
from groundlens_core.scoring.feedback import Feedback, feedback_for
from groundlens_core.trace.model import ContextPiece

__all__ = [
    "ACCEPT",
    "DEFAULT_MAX_REVISIONS",
    "REVISE",
    "REVISION_KEY",
    "Check",
    "InlineChecker",
    "check_max_revisions",
    "is_feedback",
    "revision_mark",
    "without_feedback",
]

log = logging.getLogger("groundlens.revise")

#: the key of the feedback mark: in a message's ``additional_kwargs`` and in a run's config metadata
REVISION_KEY = "groundlens_revision"
#: revisions a loop asks for at most before it accepts the answer as it is (it stays flagged)
DEFAULT_MAX_REVISIONS = 2
#: what a router returns
REVISE, ACCEPT = "revise", "accept"
_CACHE_SIZE = 64


def check_max_revisions(value: Any) -> int:
    """``max_revisions`` if it is a whole number >= 0, else a one-line ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"max_revisions must be a whole number >= 0, got {value!r}")
    return value


def _mark_of(message: Any) -> int | None:
    extra = (
        message.get("additional_kwargs")
        if isinstance(message, Mapping)
        else getattr(message, "additional_kwargs", None)
    )
    value = extra.get(REVISION_KEY) if isinstance(extra, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def is_feedback(message: Any) -> bool:
    """Whether ``message`` is a revision loop's feedback message."""
    return _mark_of(message) is not None


def without_feedback(messages: Sequence[Any]) -> list[Any]:
    """``messages`` without the loops' feedback messages: what the question and context are read from."""
    return [m for m in messages if not is_feedback(m)]


def revision_mark(metadata: Mapping[str, Any] | None, messages: Sequence[Any] = ()) -> int | None:
    """The revision number a model call answers (1 for the first revision), or None when it is not
    a revision: the run's metadata says so, or a feedback message comes after the last model message."""
    value = (metadata or {}).get(REVISION_KEY)
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    from groundlens_core.trace.recorder.inputs import AI_ROLES, message_role

    for message in reversed(list(messages)):
        mark = _mark_of(message)
        if mark is not None:
            return mark
        if message_role(message) in AI_ROLES:
            return None
    return None


def revisions_so_far(messages: Sequence[Any]) -> int:
    """Feedback messages since the last message of the user: how often this answer was sent back."""
    from groundlens_core.trace.recorder.inputs import USER_ROLES, message_role

    n = 0
    for message in reversed(list(messages)):
        if is_feedback(message):
            n += 1
        elif message_role(message) in USER_ROLES:
            break
    return n


@dataclass(frozen=True)
class Check:
    """One answer checked by a loop: the inline result, its feedback, and the decision."""

    inline: InlineResult
    feedback: Feedback | None  # None when the answer could not be scored (it is accepted)
    revisions: int  # how often the answer was sent back before this check
    max_revisions: int

    @property
    def flagged(self) -> bool:
        return self.feedback is not None and self.feedback.band == "flagged"

    @property
    def decision(self) -> str:
        """``revise`` for a flagged answer while revisions are left, else ``accept``."""
        return REVISE if self.flagged and self.revisions < self.max_revisions else ACCEPT


class _LoopScorer(AdapterShell):
    """Scores in line for a loop that was given no adapter to share settings with."""

    framework = "revise"


class InlineChecker:
    """Scores answers in line, through ``adapter`` (an adapter of ours: its embedder and calibration)
    or a scorer of its own, and remembers the last few results so that a router and the node after
    it score one answer once."""

    def __init__(self, adapter: AdapterShell | None = None, *, embedder: Any = None, calibration: Any = None):
        if adapter is not None and not isinstance(adapter, AdapterShell):
            raise TypeError(
                f"adapter must be a groundlens adapter (a callback or listener), got {type(adapter).__name__}"
            )
        if adapter is not None and (embedder is not None or calibration is not None):
            raise ValueError("give either adapter= or embedder=/calibration=, not both (the adapter's are used)")
        self.adapter: AdapterShell = (
            adapter if adapter is not None else _LoopScorer(embedder=embedder, calibration=calibration)
        )
        self._lock = threading.Lock()
        self._cache: OrderedDict[tuple[Any, ...], InlineResult] = OrderedDict()

    def score(self, question: str | None, response: str, context: Sequence[ContextPiece]) -> InlineResult:
        key = (question, response, tuple(p.text for p in context))
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
        inline = self.adapter.score_inline(question=question, response=response, context=list(context))
        with self._lock:
            self._cache[key] = inline
            while len(self._cache) > _CACHE_SIZE:
                self._cache.popitem(last=False)
        return inline

    def check(
        self, question: str | None, response: str, context: Sequence[ContextPiece], revisions: int, max_revisions: int
    ) -> Check:
        inline = self.score(question, response, context)
        feedback = feedback_for(inline.result) if inline.result is not None else None
        if feedback is None:
            log.log(
                logging.WARNING if inline.error else logging.DEBUG,
                "groundlens: the answer could not be scored in line (%s); it is accepted without revision",
                inline.error or inline.skipped,
            )
        return Check(inline, feedback, revisions, max_revisions)
