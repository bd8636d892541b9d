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
id Langfuse derives from the groundlens trace id (``Langfuse.create_trace_id(seed=...)``). The SDK
batches and sends the scores on its own thread; this sink hands them over off the agent's thread.
"""

from __future__ import annotations

from typing import Any

from groundlens_core.trace.adapter_shell import require
from groundlens_core.trace.score_sink import DEFAULT_NAME, MAX_QUEUED_BATCHES, ScoreItem, ScoreSink

__all__ = ["LangfuseScores"]

EXTRA = "langfuse"


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
        for item in items:
            if item.span is not None:
                trace_id, observation_id = item.span.trace_id, item.span.span_id
            else:
                trace_id, observation_id = self.client.create_trace_id(seed=item.trace_id), None
            self.client.create_score(
                name=item.name,
                value=item.score,
                data_type="NUMERIC",
                trace_id=trace_id,
                observation_id=observation_id,
                score_id=self.client.create_trace_id(seed=f"{item.name}:{item.step_id}"),  # a resend updates it
                comment=item.comment,
                metadata={"label": item.label, **item.metadata},
            )

    def _flush_client(self, timeout: float | None) -> bool:
        self.client.flush()
        return True
