"""Scores as LangSmith feedback, through the LangSmith client (``langsmith``).

::

    from groundlens_core.plugins.langsmith import LangSmithFeedback

    sink = LangSmithFeedback()       # langsmith.Client(): LANGSMITH_API_KEY, LANGSMITH_ENDPOINT
    cb = GroundlensLangGraphCallback(listeners=[sink])

Each scored step of a LangChain or LangGraph run becomes one feedback on the LLM run it scores
(LangSmith's run ids are LangChain's, which the step keeps as its id): the step's score as
``score``, its band as ``value`` (the label) and the explanation as ``comment``. Steps of other
frameworks have no LangSmith run; they are skipped (counted, one warning). Everything runs off the
agent's thread.

Each feedback is one request (``POST /feedback``) sent on the sink's own thread, so ``sent`` counts
what LangSmith accepted. The root run is not passed as ``trace_id``: with it the client only queues
the feedback for its background thread, which the interpreter waits for at exit as long as its
retries last (minutes against a server that never answers) and whose failures the sink never sees.
"""

from __future__ import annotations

import uuid
from typing import Any

from groundlens_core.plugins.kit.shell import require
from groundlens_core.trace.score_sink import DEFAULT_NAME, MAX_QUEUED_BATCHES, PartlySent, ScoreItem, ScoreSink

__all__ = ["LangSmithFeedback"]

EXTRA = "langsmith"
#: the adapters whose step ids are LangChain run ids (the ids LangSmith's own tracer gives the runs)
LANGCHAIN_FRAMEWORKS = frozenset({"langchain", "langgraph"})


class LangSmithFeedback(ScoreSink):
    """A recorder listener that creates LangSmith feedback for each scored LangChain/LangGraph step.

    ``client``: a ``langsmith.Client``; else one made from the ``LANGSMITH_*`` variables, without
    the client's background tracing thread (a client you pass keeps its own, which the interpreter
    waits for at exit however long its requests take; the sink does not use it).
    ``session_id``: the id of the tracing project the runs are in, which newer LangSmith deployments
    need to find a run (passed with every feedback when given)."""

    vendor = "LangSmith"

    def __init__(
        self,
        client: Any = None,
        *,
        session_id: str | None = None,
        name: str = DEFAULT_NAME,
        max_queued_batches: int = MAX_QUEUED_BATCHES,
    ):
        super().__init__(name=name, max_queued_batches=max_queued_batches)
        if client is None:
            # no background tracing thread: the sink never queues on it, and the interpreter would
            # wait for it at exit (it asks the server for its /info first, as long as that takes)
            client = require("langsmith", EXTRA, "the LangSmith client").Client(auto_batch_tracing=False)
        self.client = client
        self.session_id = session_id

    def accepts(self, item: ScoreItem) -> str | None:
        if item.framework not in LANGCHAIN_FRAMEWORKS or _uuid(item.run_id) is None:
            return "the step has no LangSmith run (only LangChain and LangGraph steps do)"
        return None

    def send(self, items: list[ScoreItem]) -> None:
        for done, item in enumerate(items):
            try:
                self._send_one(item)
            except Exception as exc:
                if not done:
                    raise
                raise PartlySent(done, f"{type(exc).__name__}: {exc}") from exc

    def _send_one(self, item: ScoreItem) -> None:
        self.client.create_feedback(
            run_id=_uuid(item.run_id),
            key=item.name,
            score=item.score,
            value=item.label,
            comment=item.comment,
            feedback_id=uuid.uuid5(uuid.NAMESPACE_URL, f"groundlens:{item.name}:{item.step_id}"),
            source_info=item.metadata,
            feedback_source_type="model",
            session_id=self.session_id,
        )


def _uuid(value: str | None) -> uuid.UUID | None:
    """A run id as LangChain writes it (a UUID in its canonical form), else None."""
    if not value:
        return None
    try:
        parsed = uuid.UUID(value)
    except ValueError:
        return None
    return parsed if str(parsed) == value else None
