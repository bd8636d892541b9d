"""What the recorder queues for its worker: one small frozen class per kind of event.

The agent's threads put them in the one queue in order (an adapter that defers its work puts its raw
events, :class:`Raw`, translated where the queue is taken); the worker takes them in that order and
turns them into trace starts, steps and trace ends (see docs/recorder.md).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from groundlens_core.trace.recorder.calls import CallRecord

#: skip reasons of steps recorded without a score because of the scoring load (not the step itself)
OVERLOAD = "overload"  # the backlog was full when the call arrived
PENDING = "pending"  # not scored yet when get_trace(timeout=...) returned (only in that copy)


@dataclass(frozen=True, slots=True, eq=False)
class TraceStart:
    """A trace was opened: listeners hear of it before any of its steps."""

    key: str


@dataclass(frozen=True, slots=True, eq=False)
class Call:
    """One recorded call, with its place in its trace."""

    call: CallRecord
    index: int
    step_id: str
    needs_model: bool  # the worker embeds it (counts against ``max_pending_steps``)
    size: int  # UTF-8 bytes of its texts (counts against ``max_pending_bytes``)
    reason: str | None = None  # recorded unscored for this reason (``OVERLOAD``, ``PENDING``)

    @property
    def key(self) -> str:
        return self.call.trace_key


@dataclass(frozen=True, slots=True, eq=False)
class TraceEnd:
    """A trace was ended (``error``: the agent raised)."""

    key: str
    error: str | None
    ended_at: str


@dataclass(frozen=True, slots=True, eq=False)
class FlushMarker:
    """A ``flush()`` waits for ``done``: set once everything queued before the marker is on its trace."""

    done: threading.Event


class Raw:
    """An adapter's event as its callback saw it, queued by the agent's thread without a lock
    (:meth:`~groundlens_core.trace.recorder.Recorder.defer`): ``translate(*args)`` turns it into the
    events above (trace starts, calls with their prompt read, trace ends) where the queue is taken,
    off the agent's thread. A plain slotted class, not a dataclass: it is made on the agent's thread
    for every callback, and a frozen dataclass costs several times as much to make."""

    __slots__ = ("translate", "args")

    def __init__(self, translate: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.translate = translate
        self.args = args


@dataclass(frozen=True, slots=True, eq=False)
class HeldMarker:
    """Where holding began: the worker takes the held events here, in order."""


#: the events that belong to a trace (and can be held with it)
TraceEvent = TraceStart | Call | TraceEnd
Event = TraceStart | Call | TraceEnd | FlushMarker | HeldMarker | Raw
