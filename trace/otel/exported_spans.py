"""Which OpenTelemetry span the exporter made for each step, for the score sinks to annotate.

The exporter runs on the recorder's worker thread in ``on_step``; a sink reads this in
``on_batch_end``, after every listener has seen the batch's steps, so it finds the span of each step
whatever the order of the listeners. Bounded: the oldest entries go first.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

#: steps remembered at most (a sink reads them within the batch they were exported in)
MAX_REMEMBERED = 10_000

_LOCK = threading.Lock()
_SPANS: OrderedDict[str, tuple[str, str]] = OrderedDict()


def remember(step_id: str, trace_id: int, span_id: int) -> None:
    """The span ``span_id`` of trace ``trace_id`` (OpenTelemetry's integers) stands for step ``step_id``."""
    with _LOCK:
        _SPANS[step_id] = (format(trace_id, "032x"), format(span_id, "016x"))
        _SPANS.move_to_end(step_id)
        while len(_SPANS) > MAX_REMEMBERED:
            _SPANS.popitem(last=False)


def lookup(step_id: str) -> tuple[str, str] | None:
    """(trace id, span id) in hex of the span exported for ``step_id``, or None."""
    with _LOCK:
        return _SPANS.get(step_id)
