"""Instrumented clients: ``guard.instrument(client)`` records each generate call of that client as
a step, its arguments, results and exceptions unchanged. A stream is tapped at the most public
seam of its SDK: the Stainless SDKs' ``request`` method and stream class, google-genai's generator."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import weakref
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from groundlens_core.plugins.providers.core import Call, ProviderCore, Tap
from groundlens_core.plugins.providers.values import (
    GROUNDLENS_KEYWORDS,
    GUARD_SENDING,
    RequestView,
    Target,
    sending,
)

_GUARDS: weakref.WeakKeyDictionary[Any, Instrumenting] = weakref.WeakKeyDictionary()

#: the header of the Stainless SDKs' raw-response helpers (``with_raw_response`` ...)
RAW_RESPONSE_HEADER = "X-Stainless-Raw-Response"
#: the tap of the instrumented stream whose request is being sent now: the client's ``request``
#: hands it to the stream class it makes
PENDING_TAP: contextvars.ContextVar[Tap | None] = contextvars.ContextVar("groundlens_pending_tap", default=None)


def guard_of(client: Any) -> Any:
    """The guard that instrumented ``client`` (its recorder holds the client's traces), or None."""
    try:
        return _GUARDS.get(client)
    except TypeError:
        return None


def uninstrument(client: Any) -> Any:
    """Put the SDK's own methods back on ``client``; returns it."""
    guard = guard_of(client)
    if guard is not None:
        guard.uninstrument(client)
    return client


@functools.cache
def tapped_stream_class(stream_cls: Any) -> type:
    """A subclass of the SDK's stream class whose events pass through the pending tap, and whose
    ``close()`` records a stream left early."""

    class TappedStream(stream_cls):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self._groundlens_tap = PENDING_TAP.get()  # before the SDK's __init__, which may open the stream
            super().__init__(*args, **kwargs)

        def __stream__(self) -> Any:
            events, tap = super().__stream__(), self._groundlens_tap
            if tap is None:
                return events
            return tap.aevents(events) if inspect.isasyncgen(events) else tap.events(events)

        def close(self) -> None:
            if self._groundlens_tap is not None:
                self._groundlens_tap.end()
            super().close()

    if not inspect.iscoroutinefunction(stream_cls.close):
        return TappedStream

    class TappedAsyncStream(TappedStream):
        async def close(self) -> None:  # type: ignore[override]  # a coroutine function, as the SDK's own is
            if self._groundlens_tap is not None:
                self._groundlens_tap.end()
            await stream_cls.close(self)

    return TappedAsyncStream


def _tapped_request(original: Callable[..., Any]) -> Callable[..., Any]:
    """The client's ``request`` (sync or async: the result is passed on as it is), making the stream
    of an instrumented call with :func:`tapped_stream_class`."""

    @functools.wraps(original)
    def request(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("stream") and kwargs.get("stream_cls") is not None and PENDING_TAP.get() is not None:
            kwargs["stream_cls"] = tapped_stream_class(kwargs["stream_cls"])
        return original(*args, **kwargs)

    request.__groundlens_original__ = original  # type: ignore[attr-defined]
    return request


class Instrumenting(ProviderCore):
    """``instrument(client)`` / ``uninstrument(client)`` of a provider guard."""

    #: a Stainless-generated SDK (OpenAI, Anthropic): the client's ``request`` makes every stream,
    #: and calls of its raw-response helpers (``with_raw_response`` ...) pass through unread
    stainless: ClassVar[bool] = False

    def _targets(self, client: Any) -> list[Target]:
        """The methods of ``client`` that ``instrument`` wraps."""
        raise NotImplementedError

    def _read_request(self, operation: str, kwargs: dict[str, Any]) -> RequestView:
        """Question, tool-result context, model and stream flag of one call."""
        raise NotImplementedError

    def _passthrough(self, kwargs: dict[str, Any]) -> bool:
        """True for calls the wrapper must not read at all: the Stainless raw-response helpers'."""
        headers = kwargs.get("extra_headers")
        return self.stainless and isinstance(headers, Mapping) and RAW_RESPONSE_HEADER in headers

    def _tap_stream(self, result: Any, tap: Tap) -> Any:
        """What the caller gets for a stream: the SDK's stream, already tapped by its ``request``;
        a plain (async) generator, tapped here."""
        if getattr(result, "_groundlens_tap", None) is tap:
            return result
        return tap.aevents(result) if hasattr(result, "__anext__") else tap.events(result)

    def instrument(self, client: Any = None) -> Any:
        """Record every generate call of ``client`` (default: this guard's own) into this guard's
        recorder; returns the same client. Only that instance is touched."""
        if client is None:
            client = self._client or self._async_client or self.client
        if guard_of(client) is not None:
            if guard_of(client) is not self:
                self.log.warning(
                    "groundlens: %s is already instrumented by another guard; left as it is", type(client).__name__
                )
            return client
        patched: list[tuple[Any, str]] = []
        for target in self._targets(client):
            original = getattr(target.owner, target.attr)
            if getattr(original, "__groundlens_original__", None) is None:
                setattr(target.owner, target.attr, self._wrap(target, original))
                patched.append((target.owner, target.attr))
        if self.stainless and getattr(client.request, "__groundlens_original__", None) is None:
            client.request = _tapped_request(client.request)
            patched.append((client, "request"))
        self._instrumented[client] = patched
        _GUARDS[client] = self
        return client

    @functools.cached_property
    def _instrumented(self) -> weakref.WeakKeyDictionary[Any, list[tuple[Any, str]]]:
        return weakref.WeakKeyDictionary()

    def uninstrument(self, client: Any) -> Any:
        """Put the SDK's own methods back on ``client``; returns it."""
        for owner, attr in self._instrumented.pop(client, []):
            with contextlib.suppress(AttributeError):
                delattr(owner, attr)  # the instance attribute goes; the class's method shows again
        with contextlib.suppress(KeyError, TypeError):
            del _GUARDS[client]
        return client

    def _wrap(self, target: Target, original: Callable[..., Any]) -> Callable[..., Any]:
        """The wrapper put on the client: a plain function, as the SDK's own methods are; for an
        async client the SDK method returns a coroutine, and so does the wrapper."""
        guard, operation = self, target.operation

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            extras = {k: kwargs.pop(k) for k in GROUNDLENS_KEYWORDS if k in kwargs} if kwargs else {}
            if guard._passthrough(kwargs) or GUARD_SENDING.get() is guard.recorder:
                return original(*args, **kwargs)
            call, tap = guard._start_call(operation, kwargs, extras)
            if call is None:
                return original(*args, **kwargs)
            with sending(PENDING_TAP, tap, lambda exc: guard.end_call(call, failure=exc)):
                result = original(*args, **kwargs)
            if inspect.isawaitable(result):
                return guard._awaited(call, tap, result)
            return guard._returned(call, tap, result)

        wrapper.__groundlens_original__ = original  # type: ignore[attr-defined]
        return wrapper

    async def _awaited(self, call: Call, tap: Tap | None, awaitable: Any) -> Any:
        with sending(PENDING_TAP, tap, lambda exc: self.end_call(call, failure=exc)):
            result = await awaitable
        return self._returned(call, tap, result)

    def _start_call(
        self, operation: str, kwargs: dict[str, Any], extras: dict[str, Any]
    ) -> tuple[Call | None, Tap | None]:
        """Read the request; (None, None) and an error recorded when our reading fails, and then the
        call goes on unrecorded. A stream gets its tap now, before its request is sent."""
        try:
            view = self._read_request(operation, kwargs)
            call = self._begin(operation, view, extras)
            call.metadata["operation"] = operation
            call.metadata["stream"] = view.stream
            return call, (Tap(self, call, self._stream_reader(operation)) if view.stream else None)
        except Exception as exc:
            self.record_internal_error(f"read a {operation} request", exc)
            return None, None

    def _returned(self, call: Call, tap: Tap | None, result: Any) -> Any:
        """The SDK returned: record the call (a stream when it ends); returns what the caller gets."""
        try:
            if tap is not None:
                return self._tap_stream(result, tap)
            completion = self._read_response(result, call.operation)
        except Exception as exc:
            self.record_internal_error(f"read a {call.operation} response", exc, call.key, call.node)
            if call.claim():
                with contextlib.suppress(Exception):
                    self._close_trace(call)
            return result
        self.end_call(call, completion)
        return result
