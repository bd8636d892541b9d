"""The one policy for our own failures where our code meets the user's: logged, or raised in tests.

Every boundary catches what our code raises there and hands it to :func:`internal_error`: the
recorder's ``record``, its worker's batches and listener calls, scoring on the worker, the
OpenTelemetry exporter, in-line scoring, the LangChain evaluator, and the one error guard that
adapters wear (``groundlens_core.plugins.kit.shell.handle_internal_errors``). In a user's program
the failure is logged and the boundary goes on as it documents (an ``error`` step, a span not
exported, an evaluator result without a score): our bug never breaks the user's agent, request or batch.

Under ``GROUNDLENS_RAISE_INTERNAL_ERRORS=1`` (our test suite turns it on in ``tests/conftest.py``)
the same failure is raised instead, where it happened, so a bug in an exporter, a listener or an
adapter fails a test rather than leaving a warning nobody reads. Every failure seen under the
setting is also kept (:func:`take_seen`): one on a background thread (the recorder's worker, whose
caller is elsewhere) is raised on the next ``flush`` / ``get_trace`` of a recorder on the caller's
side, and the test suite fails a test that leaves one unclaimed, also when a framework swallowed
the raise (LangChain logs what a callback raises). Our errors raised on purpose (a
``GroundlensError``: a missing model, an input we cannot score) are outcomes, not bugs: logged only.

Why one policy: with a hand-written guard per boundary, each with its own logging, an exporter bug
only ever showed as a log line, in our own tests too. Modelled on logfire's
``handle_internal_errors``, which is the adapters' guard here. The setting is read when a failure
happens, so a test can turn it off for a failure it injects on purpose (``monkeypatch.setenv(ENV, "0")``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from groundlens_core import settings
from groundlens_core.errors import GroundlensError, describe_exception

__all__ = [
    "ENV",
    "InternalError",
    "deferring",
    "in_deferred_work",
    "internal_error",
    "raise_seen",
    "raising",
    "take_seen",
]

#: the setting that raises our internal errors instead of logging them
ENV = "GROUNDLENS_RAISE_INTERNAL_ERRORS"

F = TypeVar("F", bound=Callable[..., Any])

_lock = threading.Lock()
_seen: list[tuple[str, BaseException, bool]] = []  # failures under the setting (where, exc, deferred), unclaimed
_logged: set[tuple[str, str, str]] = set()  # (logger, where, exception type): logged with a traceback once
_local = threading.local()  # .deferring: this thread works for a caller elsewhere (see deferring())


class InternalError(RuntimeError):
    """A failure of our own code kept from a background thread and raised on the caller's side
    (under the setting only); ``__cause__`` is the original exception."""


def raising() -> bool:
    """Whether internal errors are raised (``GROUNDLENS_RAISE_INTERNAL_ERRORS``), read now."""
    return settings.flag(ENV)


def internal_error(
    exc: BaseException,
    where: str,
    logger: logging.Logger | None,
    *,
    deferred: bool = False,
    once: set[tuple[str, str, str]] | None = None,
) -> None:
    """Hand one caught failure of ours to the policy; call it in the ``except`` block of a boundary.

    Normally: logged on ``logger`` (the first of its kind with the traceback, then one debug line;
    ``None`` when the boundary logs in its own words; ``once``: the set that says what was logged
    already, e.g. one per recorder, instead of the process's) and returned from, for the boundary to
    go on.
    Under the setting: kept for :func:`take_seen` and raised (``deferred``: a background thread's
    failure, kept and logged only, raised on the caller's side by :func:`raise_seen`).

    A :class:`~groundlens_core.errors.GroundlensError` (a model that is not installed, an input we
    cannot score) is raised on purpose with its one-line message: the boundary's documented
    outcome, logged, never raised by the setting."""
    deferred = deferred or getattr(_local, "deferring", False)
    if raising() and not isinstance(exc, GroundlensError):
        with _lock:
            _seen.append((where, exc, deferred))
        if not deferred:
            raise exc
    if logger is None:
        return
    key = (logger.name, where, type(exc).__name__)
    logged = _logged if once is None else once
    with _lock:
        first = key not in logged
        logged.add(key)
    if first:
        logger.warning("groundlens: %s failed: %s", where, describe_exception(exc), exc_info=exc)
    else:
        logger.debug("groundlens: %s failed again: %s", where, describe_exception(exc))


class deferring:
    """A block in which this thread does work queued by another (an adapter's raw events, translated
    on the recorder's worker or in a ``flush``): a failure inside is kept and raised on the caller's
    side by :func:`raise_seen`, as a background thread's is, not raised here into the drain."""

    def __enter__(self) -> deferring:
        self._outer = getattr(_local, "deferring", False)
        _local.deferring = True
        return self

    def __exit__(self, *exc: Any) -> None:
        _local.deferring = self._outer


def in_deferred_work() -> bool:
    """Whether this thread is inside :class:`deferring`: working for a caller elsewhere."""
    return bool(getattr(_local, "deferring", False))


def take_seen() -> list[tuple[str, BaseException]]:
    """The failures seen under the setting since the last call (where, exception), now claimed."""
    with _lock:
        seen = [(where, exc) for where, exc, _ in _seen]
        _seen.clear()
    return seen


def raise_seen() -> None:
    """Under the setting: raise the failures kept from background threads as one
    :class:`InternalError` (on the thread that waits for them: a recorder's ``flush``)."""
    if not raising():
        return
    with _lock:
        seen = [(where, exc) for where, exc, deferred in _seen if deferred]
        _seen[:] = [item for item in _seen if not item[2]]
    if seen:
        where, first = seen[0]
        more = f" (and {len(seen) - 1} more)" if len(seen) > 1 else ""
        raise InternalError(f"groundlens: {where} failed: {describe_exception(first)}{more}") from first
