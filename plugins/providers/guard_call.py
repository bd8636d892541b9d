"""Guard calls (``complete``, ``acomplete``, ``stream``, ``astream``): the instrumented send, tap
and end path of :mod:`.core`, plus the inline scoring and the guard mode."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from groundlens_core.plugins.kit.shell import InlineResult
from groundlens_core.plugins.providers.core import Call, ProviderCore, Tap
from groundlens_core.plugins.providers.values import (
    GUARD_CONTEXT_SOURCE,
    GUARD_SENDING,
    Completion,
    ProviderResponse,
    RequestView,
    as_pieces,
    prompt_with_context,
    sending,
)
from groundlens_core.renamed import renamed
from groundlens_core.scoring.results import GroundlensResult


class GuardCalls(ProviderCore):
    """``complete`` / ``acomplete`` / ``stream`` / ``astream`` of a provider guard."""

    def _build_request(self, request: dict[str, Any], *, user_text: str, system: str | None, stream: bool) -> None:
        """Fill in ``request``, the keyword arguments of the SDK call (the caller's, with the model):
        messages and the like; ``user_text`` holds the context."""
        raise NotImplementedError

    def _send(self, client: Any, request: dict[str, Any], stream: bool) -> Any:
        """Send a guard request (``stream``: a stream's) with ``client``; returns the SDK's response
        or stream (an async client's: a coroutine of it)."""
        raise NotImplementedError

    def complete(
        self,
        prompt: str,
        context: Any = None,
        *,
        question: str | None = None,
        system: str | None = None,
        **request_kwargs: Any,
    ) -> ProviderResponse:
        """Ask the model, score the answer, return both. The SDK's exceptions pass unchanged."""
        call, request = self._prepare(prompt, context, question, system, request_kwargs, stream=False)
        raw = self._sent(call, request, stream=False)
        completion, read_error = self.read_completion(call, lambda: self._read_response(raw, self.guard_operation))
        inline = self.score_inline(**call.score_args(completion))
        return self._answer(call, raw, completion, inline, read_error)

    async def acomplete(
        self,
        prompt: str,
        context: Any = None,
        *,
        question: str | None = None,
        system: str | None = None,
        **request_kwargs: Any,
    ) -> ProviderResponse:
        """:meth:`complete` for asyncio: the async client (or the sync one in a worker thread);
        scoring runs in a worker thread so the event loop keeps going."""
        call, request = self._prepare(prompt, context, question, system, request_kwargs, stream=False)
        raw = await self._asent(call, request, stream=False)
        completion, read_error = self.read_completion(call, lambda: self._read_response(raw, self.guard_operation))
        inline = await self.ascore_inline(**call.score_args(completion))
        return self._answer(call, raw, completion, inline, read_error)

    def stream(
        self,
        prompt: str,
        context: Any = None,
        *,
        question: str | None = None,
        system: str | None = None,
        **request_kwargs: Any,
    ) -> GuardedStream:
        """Send the request and return a :class:`GuardedStream` of text chunks; once it ends,
        ``.response`` holds the scored :class:`ProviderResponse`. HTTP errors raise here."""
        call, request = self._prepare(prompt, context, question, system, request_kwargs, stream=True)
        raw = self._sent(call, request, stream=True)
        tap = Tap(self, call, self._stream_reader(self.guard_operation), scored=True, raw=raw)
        return GuardedStream(tap, tap.events(raw))

    async def astream(
        self,
        prompt: str,
        context: Any = None,
        *,
        question: str | None = None,
        system: str | None = None,
        **request_kwargs: Any,
    ) -> AsyncGuardedStream:
        """:meth:`stream` for asyncio: ``async for text in await guard.astream(...)``."""
        call, request = self._prepare(prompt, context, question, system, request_kwargs, stream=True)
        raw = await self._asent(call, request, stream=True)
        tap = Tap(self, call, self._stream_reader(self.guard_operation), scored=True, raw=raw)
        return AsyncGuardedStream(tap, tap.aevents(raw))

    def _prepare(
        self, prompt: Any, context: Any, question: Any, system: Any, request_kwargs: dict[str, Any], *, stream: bool
    ) -> tuple[Call, dict[str, Any]]:
        """The call's step, opened, and its request: ``request_kwargs`` (the caller's own ``**`` dict)
        filled in for the SDK."""
        if not isinstance(prompt, str) or not prompt.strip():
            raise TypeError(f"prompt must be non-blank text, got {type(prompt).__name__}")
        if question is not None and not isinstance(question, str):
            raise TypeError(f"question must be text, got {type(question).__name__}")
        if system is not None and not isinstance(system, str):
            raise TypeError(f"system must be text, got {type(system).__name__}")
        if not stream and request_kwargs.get("stream"):  # the answer would be an unread SDK stream, text ""
            raise TypeError(f"{type(self).__name__}.complete takes no stream=True; use .stream() / .astream()")
        pieces = as_pieces(context, GUARD_CONTEXT_SOURCE)
        if self.model is not None:
            request_kwargs.setdefault("model", self.model)
        if not request_kwargs.get("model"):
            raise TypeError(
                f"{type(self).__name__} needs a model: {type(self).__name__}(model=...) or complete(..., model=...)"
            )
        user_text = prompt_with_context(prompt, [str(p.text) for p in pieces])
        self._build_request(request_kwargs, user_text=user_text, system=system, stream=stream)
        view = RequestView(
            question=question if question and question.strip() else prompt,
            context=pieces,
            model=str(request_kwargs.get("model")),
            metadata={"guard": self.mode, "question_source": "question"} if question else {"guard": self.mode},
        )
        return self._begin(self.guard_operation, view, {}), request_kwargs

    def _sent(self, call: Call, request: dict[str, Any], *, stream: bool) -> Any:
        """The SDK's answer to ``request``; a failure is an error step, and the SDK's exception is raised."""
        with sending(GUARD_SENDING, self.recorder, lambda exc: self.end_call(call, failure=exc)):
            return self._send(self.client, request, stream)

    async def _asent(self, call: Call, request: dict[str, Any], *, stream: bool) -> Any:
        # a client that cannot be had is an error step too, and the call's trace ends
        with sending(GUARD_SENDING, self.recorder, lambda exc: self.end_call(call, failure=exc)):
            client = self._async_client_or_none()
            if client is not None:
                return await self._send(client, request, stream)  # the async client's methods return coroutines
            if stream:
                raise TypeError(f"{type(self).__name__}.astream needs an async client (async_client=...)")
            return await asyncio.to_thread(self._send, self.client, request, stream)

    def _answer(
        self, call: Call, raw: Any, completion: Completion, inline: InlineResult, read_error: str | None
    ) -> ProviderResponse:
        if not call.claim():  # pragma: no cover - a guard call ends here only
            raise RuntimeError("a guard call ended twice")
        response, flagged = self._guard_end(call, raw, completion, inline, read_error)
        if flagged is not None:
            raise flagged
        return response


class _GuardStream:
    """What the sync and async streams of a guard call share: the tap, the SDK stream, the response."""

    def __init__(self, tap: Tap, chunks: Any):
        self._tap = tap
        self.raw = tap.raw  # the SDK's stream object
        self._iterator = chunks  # its text chunks, read through the tap

    @property
    def response(self) -> ProviderResponse | None:
        """The scored :class:`ProviderResponse` once the stream ended whole; None before, or when cut."""
        return self._tap.response

    @property
    def groundlens_result(self) -> GroundlensResult | None:
        """The result of the whole answer once the stream ended whole (``.score`` is the number); None before."""
        return None if self._tap.response is None else self._tap.response.groundlens_result

    groundlens_score = renamed("groundlens_result", "the stream's groundlens_score")  # the object, not its number

    @property
    def text(self) -> str:
        """The text so far (all of it once the stream ended)."""
        return self._tap.response.text if self._tap.response is not None else "".join(self._tap.parts)


class GuardedStream(_GuardStream):
    """The text chunks of a guard call's stream as they arrive; the scored response once it ends.
    In ``mode="raise"`` a flagged answer raises after the last chunk."""

    def __iter__(self) -> GuardedStream:
        return self

    def __next__(self) -> str:
        return next(self._iterator)

    def close(self) -> None:
        """Stop early and record the partial answer; safe from another thread while one is reading."""
        self._tap.closed = True
        with contextlib.suppress(ValueError):  # "generator already executing": read on another thread now
            self._iterator.close()  # type: ignore[attr-defined]
        self._tap.end()  # closed before the first chunk, or mid-read elsewhere
        with contextlib.suppress(Exception):
            self.raw.close()

    def __enter__(self) -> GuardedStream:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class AsyncGuardedStream(_GuardStream):
    """:class:`GuardedStream` for asyncio: ``async for text in stream``."""

    def __aiter__(self) -> AsyncGuardedStream:
        return self

    async def __anext__(self) -> str:
        return await self._iterator.__anext__()

    async def aclose(self) -> None:
        """Stop early (see :meth:`GuardedStream.close`); safe while another task is reading."""
        self._tap.closed = True
        with contextlib.suppress(RuntimeError):  # "asynchronous generator is already running": another task
            await self._iterator.aclose()  # type: ignore[attr-defined]
        self._tap.end()
        with contextlib.suppress(Exception):
            await self.raw.close()

    async def __aenter__(self) -> AsyncGuardedStream:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()
