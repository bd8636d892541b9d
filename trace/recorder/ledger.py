"""The recorder's side of the decision ledger: scored steps become signed records.

A :class:`LedgerListener` is a trace listener, so it runs on the recorder's worker thread, never on
the agent's: ``on_step`` turns a scored or failed step into a record body (hashes of its texts, no
texts unless asked for) and ``on_batch_end`` signs the batch's records and appends them under the
ledger's file lock, with one ``fsync`` per batch (groundlens_core/ledger.py holds the format).
"""

from __future__ import annotations

import logging
import os
import time
import weakref
from typing import Any

from groundlens_core.ledger import Ledger, decision_record
from groundlens_core.scoring.bands import SCORED_METHODS
from groundlens_core.trace.model import Step, Trace

log = logging.getLogger("groundlens.ledger")

#: the step methods that get a decision record: scored, or failed (tool results and skipped turns do not)
RECORDED_METHODS = (*SCORED_METHODS, "error")


def step_record(trace: Trace, step: Step, *, include_text: bool = False) -> dict[str, Any]:
    """The body of the decision record of one step (the ledger's writer chains and signs it)."""
    return decision_record(
        method=step.method,
        band=step.band,
        question=step.question,
        context=[p.text for p in step.context] if step.context else None,
        response=step.response,
        result=step.result,
        reason=step.error if step.method == "error" else None,
        step_id=step.id,
        trace_id=trace.id,
        node=step.node,
        fingerprint=trace.fingerprint,
        include_text=include_text,
    )


class LedgerListener:
    """Appends one signed record per scored or failed step, one locked, fsync'd append per batch."""

    #: seconds between two warnings about records the ledger did not take (the first is at once)
    warn_interval: float = 60.0

    def __init__(self, ledger: Ledger):
        self.ledger = ledger
        self._bodies: list[dict[str, Any]] = []
        self._last_warning: float | None = None
        self._unwritten = 0  # records not written since the last warning
        self._unwritten_total = 0
        _LISTENERS.add(self)

    def on_trace_start(self, trace: Trace) -> None:
        pass

    def on_step(self, trace: Trace, step: Step) -> None:
        if step.method in RECORDED_METHODS:
            self._bodies.append(step_record(trace, step, include_text=self.ledger.include_text))

    def on_trace_end(self, trace: Trace) -> None:
        pass

    def on_batch_end(self) -> None:
        bodies, self._bodies = self._bodies, []
        if not bodies:
            return
        try:
            self.ledger.append(bodies)
        except Exception as exc:  # the agent goes on; the ledger's owner is told, never silently
            lost = len(bodies) - getattr(exc, "written", 0)  # a write cut short keeps the lines before it
            self._unwritten += lost
            self._unwritten_total += lost
            now = time.monotonic()
            if self._last_warning is None or now - self._last_warning >= self.warn_interval:
                self._last_warning = now
                log.warning(
                    "groundlens: %d record(s) not written to the ledger %s (%d in all since this recorder started): %s",
                    self._unwritten,
                    self.ledger.path,
                    self._unwritten_total,
                    exc,
                )
                self._unwritten = 0
            return
        if self._unwritten:  # appending again: the records lost since the last warning are counted
            log.warning(
                "groundlens: the ledger %s takes records again; %d more record(s) were not written before "
                "(%d in all since this recorder started)",
                self.ledger.path,
                self._unwritten,
                self._unwritten_total,
            )
            self._unwritten = 0


_LISTENERS: weakref.WeakSet[LedgerListener] = weakref.WeakSet()


def _listeners_after_fork() -> None:
    """A forked child drops the records its parent's worker had gathered: the parent appends them."""
    for listener in list(_LISTENERS):
        listener._bodies = []


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_listeners_after_fork)


def ledger_listeners(ledger: Any) -> list[LedgerListener]:
    """The listeners for ``Recorder(ledger=...)``: a :class:`Ledger`, a ledger path (signed with the
    key ``GROUNDLENS_SIGNING_KEY`` names), None for ``GROUNDLENS_LEDGER`` (unset: none), False: none.
    A missing or unreadable key, or a ledger this key cannot continue (its last line is not a
    record this key signed), raises a one-line error now, before anything is scored."""
    if ledger is None:
        ledger = Ledger.from_env()
    elif isinstance(ledger, (str, os.PathLike)):
        ledger = Ledger(ledger)
    if ledger is None or ledger is False:
        return []
    if not isinstance(ledger, Ledger):
        raise TypeError(f"ledger must be a groundlens Ledger or a path, got {type(ledger).__name__}")
    ledger.check()
    return [LedgerListener(ledger)]
