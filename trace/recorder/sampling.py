"""Live sampling: which recorded calls a recorder keeps, by trace and by node.

``sample_rate`` keeps that share of traces, decided by the trace key alone (a hash of it), so every
call of one run is kept or left out together, and a rerun of the same key decides the same way
whatever the process. ``nodes`` keeps only the calls of those nodes, ``skip_nodes`` leaves those out.
A call left out costs the agent no scoring and no queue slot, and is never silently missing: its
trace counts it (``Trace.unsampled``, shown in ``summary()``). A node matches by its name or by the
last part of a nested node's path (``subgraph/answer`` matches ``answer``).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any, Sequence

__all__ = ["Sampling", "sampling_of", "trace_fraction"]


def trace_fraction(key: str) -> float:
    """Where the trace ``key`` falls in [0, 1): the first 8 bytes of its SHA-256, as a fraction.
    A trace is sampled when this is below the rate: the same key, the same decision, everywhere."""
    digest = hashlib.sha256(str(key).encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def _names(value: Sequence[str] | None, what: str) -> frozenset[str] | None:
    if value is None:
        return None
    if isinstance(value, str):  # nodes="answer": one node, not five letters
        value = (value,)
    names = frozenset(value)
    if not all(isinstance(n, str) and n for n in names):
        raise ValueError(f"{what} takes node names (non-empty strings), got {sorted(map(repr, names))}")
    return names


@dataclass(frozen=True)
class Sampling:
    """What a recorder keeps: ``rate`` of the traces, of the nodes in ``nodes`` (None: all) less ``skip_nodes``."""

    rate: float = 1.0
    nodes: frozenset[str] | None = None
    skip_nodes: frozenset[str] = frozenset()

    def keeps_trace(self, key: str) -> bool:
        return self.rate >= 1.0 or (self.rate > 0.0 and trace_fraction(key) < self.rate)

    def keeps_node(self, node: str) -> bool:
        names = {node, str(node).rsplit("/", 1)[-1]}
        if self.nodes is not None and not names & self.nodes:
            return False
        return not names & self.skip_nodes

    def keeps(self, call: Any) -> bool:
        """Whether the call (a :class:`~groundlens_core.trace.recorder.CallRecord`) is recorded."""
        return self.keeps_node(call.node) and self.keeps_trace(call.trace_key)


def sampling_of(
    sample_rate: float = 1.0, nodes: Sequence[str] | None = None, skip_nodes: Sequence[str] = ()
) -> Sampling | None:
    """The :class:`Sampling` of an adapter's options, checked; None when it keeps everything."""
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, (int, float)):
        raise ValueError(f"sample_rate must be a number in [0, 1], got {sample_rate!r}")
    rate = float(sample_rate)
    if math.isnan(rate) or not 0.0 <= rate <= 1.0:
        raise ValueError(f"sample_rate must be in [0, 1] (the share of traces kept), got {sample_rate!r}")
    keep, skip = _names(nodes, "nodes"), _names(skip_nodes, "skip_nodes") or frozenset()
    if rate >= 1.0 and keep is None and not skip:
        return None
    return Sampling(rate, keep, skip)
