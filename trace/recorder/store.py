"""The traces a recorder keeps: oldest first, at most ``max_traces``, each with its next step index.

Plain data without a lock of its own: the recorder's lock guards every call, so a step's index and
its place in the worker's queue are taken together.
"""

from __future__ import annotations

import dataclasses

from groundlens_core.trace.model import Step, Trace
from groundlens_core.trace.recorder.events import Call, Event, TraceEnd


class TraceStore:
    def __init__(self, max_traces: int):
        self.max_traces = max_traces
        self.traces: dict[str, Trace] = {}
        self.order: list[str] = []  # trace keys, oldest first
        self.next_index: dict[str, int] = {}
        #: the step ids taken in each kept trace, each with the next suffix to try for a duplicate
        #: (forgotten with the trace: bounded like the traces themselves)
        self.step_ids: dict[str, dict[str, int]] = {}

    def __contains__(self, key: str) -> bool:
        return key in self.traces

    def get(self, key: str) -> Trace | None:
        return self.traces.get(key)

    def latest(self) -> str | None:
        return self.order[-1] if self.order else None

    def open(self, key: str, trace: Trace) -> list[str]:
        """Keep ``trace`` under ``key``; returns the keys of the oldest traces it evicted (``max_traces``)."""
        self.traces[key] = trace
        self.order.append(key)
        self.next_index[key] = 0
        self.step_ids[key] = {}
        evicted = []
        while len(self.order) > self.max_traces:
            old = self.order.pop(0)
            self.traces.pop(old, None)
            self.next_index.pop(old, None)
            self.step_ids.pop(old, None)
            evicted.append(old)
        return evicted

    def take_index(self, key: str) -> int:
        """The next step index of trace ``key``."""
        index = self.next_index.get(key, 0)
        self.next_index[key] = index + 1
        return index

    def unique_step_id(self, key: str, step_id: str) -> str:
        """``step_id``, taken for a step of trace ``key``; when a step of the trace has it already, the
        first of ``<step_id>-2``, ``<step_id>-3``, ... that none has (a report, a lineage link and an
        exporter's step key each need one step per id)."""
        taken = self.step_ids.get(key)
        if taken is None:  # not a kept trace: nothing to keep the id for
            return step_id
        if step_id not in taken:
            taken[step_id] = 2
            return step_id
        n = taken[step_id]
        while f"{step_id}-{n}" in taken:  # bounded: at most one turn per id the trace holds
            n += 1
        taken[step_id] = n + 1
        unique = f"{step_id}-{n}"
        taken[unique] = 2
        return unique

    def add_step(self, key: str, step: Step) -> tuple[Trace, Step] | None:
        """Put a finished step on its trace, with its ``cascade_from`` (lineage.py): the trace and the
        step as appended; None when the trace is gone (evicted)."""
        trace = self.traces.get(key)
        if trace is None:
            return None
        step = trace.add_step(step)
        if step.result is not None and trace.fingerprint is None:
            trace.fingerprint = step.result.fingerprint
        return trace, step

    def end(self, event: TraceEnd) -> Trace | None:
        """Mark a trace ended; None when it is gone (evicted)."""
        trace = self.traces.get(event.key)
        if trace is None:
            return None
        trace.ended_at = event.ended_at
        if event.error:
            trace.status, trace.error = "error", event.error
        return trace

    def applied(self, event: Event) -> bool:
        """Whether ``event`` is on its trace already (a step there, or the trace ended)."""
        if isinstance(event, Call):
            trace = self.traces.get(event.key)
            return trace is not None and any(s.id == event.step_id for s in trace.steps)
        if isinstance(event, TraceEnd):
            trace = self.traces.get(event.key)
            return trace is not None and trace.ended_at is not None
        return False

    def copy(self, key: str, waiting: list[Step] | None = None) -> Trace:
        """A copy of trace ``key`` for a reader, with the ``waiting`` steps not on it yet listed in place."""
        trace = self.traces[key]
        steps = list(trace.steps)
        if waiting:
            have = {s.id for s in steps}
            steps += [s for s in waiting if s.id not in have]
            steps.sort(key=lambda s: s.index)
        return dataclasses.replace(trace, steps=steps, metadata=dict(trace.metadata))
