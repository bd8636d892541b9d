"""CrewAI: the revision loop as a task guardrail (``Task(guardrail=GroundlensGuardrail(...))``):
crewai's own retry mechanism sends a flagged answer back to the agent with its findings named
(docs/revise.md). Imports no crewai: a guardrail is a callable of the task output.

crewai retries a failed guardrail up to the task's ``guardrail_max_retries`` and then fails the
task; the guardrail accepts the answer as it is after ``max_revisions`` (never more than the
task's retries), so a model that keeps its error ends the task with that answer, its step flagged,
instead of failing the crew.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from groundlens_core.plugins.crewai.names import _ident, task_question
from groundlens_core.plugins.kit.revise import (
    DEFAULT_MAX_REVISIONS,
    Check,
    InlineChecker,
    check_max_revisions,
)
from groundlens_core.trace.model import ContextPiece
from groundlens_core.trace.recorder.inputs import context_from

__all__ = ["Answer", "GroundlensGuardrail", "RevisionLinks"]

log = logging.getLogger("groundlens.crewai")

_KEPT = 256  # final answers the listener remembers for the guardrail to find


@dataclass(frozen=True)
class Answer:
    """A final answer the listener recorded: who gave it in which task, and its step."""

    agent: Any
    task: Any
    step_id: str


def _answer_key(description: Any, text: Any) -> tuple[str, str]:
    return (" ".join(str(description or "").split()), " ".join(str(text or "").split()))


class RevisionLinks:
    """The listener's side of the loop: the final answers it recorded (so the guardrail, which
    crewai hands only the task output, finds their agent, task and step), and which (agent, task)
    answers again next (its next final answer gets ``revision_of``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._answers: OrderedDict[tuple[str, str], Answer] = OrderedDict()
        self._pending: dict[tuple[str, str], tuple[str, int]] = {}

    def answered(self, agent: Any, task: Any, response: Any, step_id: str) -> None:
        if task is None or not isinstance(response, str):
            return
        key = _answer_key(getattr(task, "description", None), response)
        with self._lock:
            self._answers[key] = Answer(agent, task, step_id)
            self._answers.move_to_end(key)
            while len(self._answers) > _KEPT:
                self._answers.popitem(last=False)

    def find(self, description: Any, raw: Any) -> Answer | None:
        with self._lock:
            return self._answers.get(_answer_key(description, raw))

    def send_back(self, answer: Answer, revision: int) -> None:
        with self._lock:
            self._pending[(_ident(answer.agent), _ident(answer.task))] = (answer.step_id, revision)

    def take(self, agent: Any, task: Any) -> tuple[str, int] | None:
        """(the step this final answer revises, the revision number), once, or None."""
        with self._lock:
            return self._pending.pop((_ident(agent), _ident(task)), None)


class GroundlensGuardrail:
    """A crewai task guardrail: a flagged answer fails it with the feedback (what the source says
    instead), and crewai asks the agent again; after ``max_revisions`` revisions the answer is
    accepted as it is.

    With ``listener`` (your ``GroundlensCrewListener``) the answer is checked against what the
    agent saw in the task (its tool results and the earlier tasks' outputs), with the listener's
    settings, and the trace links each new answer to the one it revises (``revision_of``). Without
    one, give the source as ``context`` (text, a list of texts, or a callable of the task output).
    Our failures accept the answer; they never fail the task."""

    def __init__(
        self,
        listener: Any = None,
        *,
        max_revisions: int = DEFAULT_MAX_REVISIONS,
        context: Any = None,
        embedder: Any = None,
        calibration: Any = None,
    ):
        self.max_revisions = check_max_revisions(max_revisions)
        self.listener = listener
        self.context = context
        self.checker = InlineChecker(listener, embedder=embedder, calibration=calibration)
        self._lock = threading.Lock()
        self._sent_back: dict[tuple[str, str], int] = {}  # (task, agent) -> revisions asked so far
        # crewai's guardrail events name a guardrail by ``__name__`` and quote its source
        # (``inspect.getsource``, which follows ``__wrapped__``): both lead to :meth:`validate`
        self.__name__ = "groundlens_guardrail"
        self.__wrapped__ = self.validate

    def _links(self) -> RevisionLinks | None:
        links = getattr(self.listener, "revisions", None)
        return links if isinstance(links, RevisionLinks) else None

    def _context(self, output: Any, found: Answer | None) -> list[ContextPiece]:
        if self.context is not None:
            given = self.context(output) if callable(self.context) else self.context
            return context_from(given, source="argument:context")
        if found is not None and self.listener is not None:
            return list(self.listener.context_for(found.agent, found.task))
        return []

    def _question(self, output: Any, found: Answer | None) -> str | None:
        if found is not None and self.listener is not None:
            return self.listener.question_for(found.task)
        return task_question(output)  # a task output has the task's description too

    def check(self, output: Any) -> tuple[Check | None, Answer | None, tuple[str, str]]:
        """The inline check of a task output, the recorded answer it is, and its loop key."""
        raw = getattr(output, "raw", None)
        text = raw.strip() if isinstance(raw, str) else ""
        description = getattr(output, "description", None)
        links = self._links()
        found = links.find(description, text) if links is not None else None
        key = (str(description or ""), str(getattr(output, "agent", "") or ""))
        if not text:
            return None, found, key
        with self._lock:
            revisions = self._sent_back.get(key, 0)
        limit = self.max_revisions
        retries = getattr(found.task, "guardrail_max_retries", None) if found is not None else None
        if isinstance(retries, int) and retries < limit:
            limit = retries  # crewai fails the task once its retries are spent: accept before that
        question, context = self._question(output, found), self._context(output, found)
        return self.checker.check(question, text, context, revisions, limit), found, key

    def __call__(self, output):  # no annotations: crewai checks a guardrail's signature at run time
        return self.validate(output)

    def validate(self, output):  # type: ignore[no-untyped-def]
        """``(True, output)`` to accept, ``(False, feedback)`` to send the answer back. Never raises."""
        try:
            found, answer, key = self.check(output)
            if found is None or found.decision != "revise" or found.feedback is None or found.feedback.text is None:
                if found is not None and found.flagged:
                    log.info("groundlens: still flagged after %d revision(s); accepted as it is", found.revisions)
                with self._lock:
                    self._sent_back.pop(key, None)
                return (True, output)
            with self._lock:
                self._sent_back[key] = found.revisions + 1
            links = self._links()
            if links is not None and answer is not None:
                links.send_back(answer, found.revisions + 1)
            return (False, found.feedback.text)
        except Exception as exc:
            log.warning("groundlens: the guardrail failed, the answer is accepted: %s", exc)
            return (True, output)
