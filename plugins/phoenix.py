"""Scores as Arize Phoenix span annotations, through Phoenix's own client (``arize-phoenix-client``).

::

    from groundlens_core.plugins.phoenix import PhoenixAnnotations

    sink = PhoenixAnnotations(base_url="http://127.0.0.1:6006")     # or client=phoenix.client.Client(...)
    cb = GroundlensLangGraphCallback(listeners=[sink], tracer_provider=provider)

Each scored step becomes one annotation (``annotator_kind="CODE"``) with the step's score as
``score``, its band as ``label`` and the explanation as ``explanation``, on the span of the LLM call
(an instrumentor's, e.g. OpenInference's), else on the span our OpenTelemetry exporter made for the
step, else on the application span the call was made in. A step with none of these is skipped
(counted, one warning). Each batch of steps is one request, sent off the agent's thread.
"""

from __future__ import annotations

from typing import Any

from groundlens_core.plugins.kit.shell import require
from groundlens_core.trace.score_sink import DEFAULT_NAME, MAX_QUEUED_BATCHES, ScoreItem, ScoreSink

__all__ = ["PhoenixAnnotations"]

EXTRA = "phoenix"


class PhoenixAnnotations(ScoreSink):
    """A recorder listener that logs each scored step as a Phoenix span annotation.

    ``client``: a ``phoenix.client.Client``; else one is made from ``base_url`` / ``api_key`` /
    ``headers`` (unset: Phoenix's own environment variables, ``PHOENIX_ENDPOINT`` or
    ``PHOENIX_COLLECTOR_ENDPOINT``, and ``PHOENIX_API_KEY``). ``sync=True`` asks Phoenix to insert
    before it answers (slower; the default lets Phoenix queue the insert, as its client does)."""

    vendor = "Phoenix"

    def __init__(
        self,
        client: Any = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        headers: dict[str, str] | None = None,
        name: str = DEFAULT_NAME,
        sync: bool = False,
        max_queued_batches: int = MAX_QUEUED_BATCHES,
    ):
        super().__init__(name=name, max_queued_batches=max_queued_batches)
        if client is None:
            phoenix_client = require("phoenix.client", EXTRA, "the Phoenix client (arize-phoenix-client)")
            client = phoenix_client.Client(base_url=base_url, api_key=api_key, headers=headers)
        self.client = client
        self.sync = bool(sync)

    def accepts(self, item: ScoreItem) -> str | None:
        if item.span is None:
            return "the step has no span to annotate (no instrumentor span, OpenTelemetry exporter or application span)"
        return None

    def send(self, items: list[ScoreItem]) -> None:
        self.client.spans.log_span_annotations(span_annotations=[annotation(it) for it in items], sync=self.sync)


def annotation(item: ScoreItem) -> dict[str, Any]:
    """The ``SpanAnnotationData`` of one item; ``identifier`` (the step id) makes a resend an update."""
    assert item.span is not None
    return {
        "name": item.name,
        "annotator_kind": "CODE",
        "span_id": item.span.span_id,
        "identifier": item.step_id,
        "result": {"score": item.score, "label": item.label, "explanation": item.comment},
        "metadata": item.metadata,
    }
