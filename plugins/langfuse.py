"""Scores as Langfuse scores, through the Langfuse SDK (``langfuse``).

::

    from groundlens_core.plugins.langfuse import LangfuseScores

    sink = LangfuseScores()          # langfuse.get_client(): your configured client (LANGFUSE_* variables)
    cb = GroundlensLangGraphCallback(listeners=[sink])

Each scored step becomes one numeric score: the step's score as ``value``, the explanation as
``comment``, and the band (the label, which a numeric Langfuse score has no field for) in its
``metadata["label"]``. It is attached to the observation of the LLM call when an OpenTelemetry span
is known for it (Langfuse's ids are OpenTelemetry's: the instrumentor's LLM span, else the span our
exporter made for the step, else the application span the call was made in), else to a trace whose
id Langfuse derives from the groundlens trace id (``Langfuse.create_trace_id(seed=...)``).

Each batch of steps is one request to Langfuse's score endpoint (``client.api.scores.create``, the
SDK's REST client), sent on the sink's own thread, off the agent's. Not through ``create_score``:
that only queues a score for the SDK's background thread, which drops it on failure without a word
and whose flush (and exit) waits as long as its retries last. So ``sink.stats["sent"]`` counts the
scores Langfuse accepted (a partial acceptance, HTTP 207, counts the rest as failed), and a request
waits ``SEND_TIMEOUT`` seconds at most.
"""

from __future__ import annotations

import datetime
from typing import Any

from groundlens_core.plugins.kit.shell import require
from groundlens_core.trace.score_sink import DEFAULT_NAME, MAX_QUEUED_BATCHES, PartlySent, ScoreItem, ScoreSink

__all__ = ["LangfuseScores"]

EXTRA = "langfuse"
#: seconds one request to Langfuse may take (the SDK's own retries are not used: a failed batch is counted)
SEND_TIMEOUT = 10


class LangfuseScores(ScoreSink):
    """A recorder listener that creates a Langfuse score for each scored step.

    ``client``: a ``langfuse.Langfuse``; else ``langfuse.get_client()``, the client your
    application configured (or Langfuse makes from its ``LANGFUSE_*`` environment variables)."""

    vendor = "Langfuse"

    def __init__(self, client: Any = None, *, name: str = DEFAULT_NAME, max_queued_batches: int = MAX_QUEUED_BATCHES):
        super().__init__(name=name, max_queued_batches=max_queued_batches)
        if client is None:
            client = require("langfuse", EXTRA, "the Langfuse SDK").get_client()
        self.client = client

    def send(self, items: list[ScoreItem]) -> None:
        scores = [self._score(item) for item in items]
        answer = self.client.api.scores.create(
            request=scores, request_options={"timeout_in_seconds": SEND_TIMEOUT, "max_retries": 0}
        )
        rejected = getattr(answer, "rejected", 0) or 0
        if rejected:  # HTTP 207: some accepted, some not (and not to be resent as they are)
            errors = "; ".join(str(getattr(e, "message", e)) for e in (getattr(answer, "errors", None) or [])[:3])
            raise PartlySent(len(items) - int(rejected), f"Langfuse rejected {rejected} score(s): {errors}")

    def _score(self, item: ScoreItem) -> dict[str, Any]:
        """The score as the API takes it (what ``create_score`` would queue for this item)."""
        if item.span is not None:
            trace_id, observation_id = item.span.trace_id, item.span.span_id
        else:
            trace_id, observation_id = self.client.create_trace_id(seed=item.trace_id), None
        score = {
            "id": self.client.create_trace_id(seed=f"{item.name}:{item.step_id}"),  # a resend updates it
            "traceId": trace_id,
            "observationId": observation_id,
            "name": item.name,
            "value": float(item.score),
            "dataType": "NUMERIC",
            "comment": item.comment,
            "environment": getattr(self.client, "_environment", None),
            "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "metadata": {"label": item.label, **item.metadata},
        }
        return {k: v for k, v in score.items() if v is not None}
