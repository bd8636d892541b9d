"""What guard calls and instrumented clients share: one call in progress (with its record-once
latch), one stream tap (sync and async) and the end paths of a call: recorded for the recorder to
score, or scored in line (a guard call). See ``docs/providers.md``."""

from __future__ import annotations

import asyncio
import contextlib
import operator
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, ClassVar, ContextManager

from groundlens_core.errors import describe_exception
from groundlens_core.plugins.kit.shell import (
    GUARD_MODES,
    SHELL_KEYWORDS,
    AdapterShell,
    GroundlensFlaggedError,
    InlineResult,
    apply_guard,
    check_mode,
    handle_internal_errors,
    names_shell_options,
    require,
)
from groundlens_core.plugins.providers.values import (
    _ATTACHED,
    _TRACE,
    ATTACHED_SOURCE,
    CONTEXT_KEYWORD,
    NODE_KEYWORD,
    NOTHING_READ,
    QUESTION_KEYWORD,
    Completion,
    ProviderResponse,
    RequestView,
    StreamReader,
    as_pieces,
)
from groundlens_core.trace.model import ContextPiece, new_id
from groundlens_core.trace.recorder import CallRecord, context_pieces
from groundlens_core.trace.recorder.inputs import trace_scope


@dataclass
class Call:
    """What a guarded or instrumented call knows between its start and its end."""

    key: str
    owns_trace: bool
    node: str
    operation: str
    question: str | None
    context: tuple[ContextPiece, ...]
    model: str | None
    started: float
    step_id: str = field(default_factory=new_id)
    metadata: dict[str, Any] = field(default_factory=dict)
    _ended: bool = field(default=False, repr=False)
    _latch: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def claim(self) -> bool:
        """True for the first of the call's ends only, which records it: a stream's close on one
        thread can meet the end of its iteration on another, and both must not record."""
        with self._latch:
            first, self._ended = not self._ended, True
        return first

    def context_with(self, completion: Completion) -> tuple[ContextPiece, ...]:
        """The call's context, plus what the SDK gathered within the call."""
        if not completion.context:
            return self.context
        return context_pieces(tuple(self.context) + tuple(completion.context))

    def score_args(self, completion: Completion) -> dict[str, Any]:
        text = None if completion.only_tool_calls else completion.text
        return {"question": self.question, "response": text, "context": self.context_with(completion)}


class Tap:
    """One stream's events on their way to the caller, each read as it passes; the first of the
    stream's ends records the call once. ``scored`` (a guard call's stream) scores it in line, and
    its caller gets the text of the events, not the events."""

    def __init__(self, guard: ProviderCore, call: Call, reader: StreamReader, *, scored: bool = False, raw: Any = None):
        self.guard = guard
        self.call = call
        self.reader = reader
        self.scored = scored
        self.raw = raw
        self.closed = False  # a guard stream closed: a read under way elsewhere stops at its next event
        self.parts: list[str] = []
        self.response: ProviderResponse | None = None

    def feed(self, event: Any) -> Any:
        """Read ``event``; what the caller gets for it: the event, or a guard stream's text (or _SKIP)."""
        try:
            text = self.reader.add(event)
        except Exception as exc:
            self.guard.record_internal_error(
                f"read a {self.call.operation} stream event", exc, self.call.key, self.call.node
            )
            text = None
        if not self.scored:
            return event
        if text:  # a guard stream's text so far
            self.parts.append(text)
        return text or _SKIP

    def end(self, failure: BaseException | None = None, whole: bool = False) -> GroundlensFlaggedError | None:
        """Record the stream once: a guard stream that ended whole is scored in line (returns the
        guard's error to raise, if any), every other end is recorded for the recorder to score."""
        if not self.call.claim():
            return None
        guard, call = self.guard, self.call
        call.metadata["streaming"] = True
        completion, read_error = guard.read_completion(call, self.reader.completion)
        if whole and self.scored:
            inline = guard.score_inline(**call.score_args(completion))
            self.response, flagged = guard._guard_end(call, self.raw, completion, inline, read_error)
            return flagged
        guard.end_call(call, completion, failure=failure, incomplete=failure is None and not whole, claimed=True)
        return None

    def events(self, source: Iterable[Any]) -> Iterator[Any]:
        """The events of ``source`` (a guard stream's: the text they carry), tapped."""
        with self._ending(defer_scoring=False) as outcome:
            for event in source:
                if self.closed:
                    break
                item = self.feed(event)
                if item is not _SKIP:
                    yield item
            else:
                outcome.whole = True
        if outcome.flagged is not None:
            raise outcome.flagged

    async def aevents(self, source: AsyncIterator[Any]) -> AsyncIterator[Any]:
        """:meth:`events` for an async stream; a guard stream is scored in a worker thread."""
        with self._ending(defer_scoring=True) as outcome:
            async for event in source:
                if self.closed:
                    break
                item = self.feed(event)
                if item is not _SKIP:
                    yield item
            else:
                outcome.whole = True
        if outcome.score_later:
            outcome.flagged = await asyncio.to_thread(self.end, None, True)
        if outcome.flagged is not None:
            raise outcome.flagged

    @contextlib.contextmanager
    def _ending(self, *, defer_scoring: bool) -> Iterator[_Outcome]:
        """How the iteration ended (whole, with the SDK's error, or left: ``GeneratorExit``); the
        stream is recorded on the way out, except a whole guard stream's scoring when deferred."""
        outcome = _Outcome()
        try:
            yield outcome
        except GeneratorExit:
            raise
        except BaseException as exc:
            outcome.failure = exc
            raise
        finally:
            whole = outcome.whole and not self.closed
            outcome.score_later = defer_scoring and whole and self.scored
            if not outcome.score_later:
                outcome.flagged = self.end(outcome.failure, whole)


_SKIP = object()  # an event that carries no text, in a stream of texts


@dataclass
class _Outcome:
    whole: bool = False
    failure: BaseException | None = None
    flagged: GroundlensFlaggedError | None = None
    score_later: bool = False


class ProviderCore(AdapterShell):
    """The clients, traces, steps and end paths of a provider guard (constructor: docs/providers.md)."""

    #: the ``gen_ai.provider.name`` of the steps (``openai``, ``anthropic``, ``gcp.gemini``), the
    #: SDK's import name and its install extra: an SDK's guard that does not name one gets its framework
    provider: ClassVar[str] = "provider"
    sdk_module: ClassVar[str] = ""
    #: what to call the SDK in the install hint
    sdk_name: ClassVar[str] = ""
    #: the operation (and node) of a guard call's step
    guard_operation: ClassVar[str] = "complete"
    #: the SDK's sync and async client classes (``OpenAI``, ``AsyncOpenAI``), by name in the SDK module
    client_class: ClassVar[str] = ""
    async_client_class: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for attr in ("provider", "sdk_module", "extra"):
            if "framework" in vars(cls) and getattr(cls, attr) == getattr(ProviderCore, attr):
                setattr(cls, attr, cls.framework)

    @names_shell_options
    def __init__(
        self,
        model: str | None = None,
        client: Any = None,
        *,
        async_client: Any = None,
        mode: str = "annotate",
        on_flagged: Callable[..., Any] | None = None,
        **kwargs: Any,
    ):
        """``**kwargs`` are the SDK client's own (``api_key=``, ``base_url=`` ...), for the client
        made when none is given, once the shell's options (``recorder=``, ``listeners=`` ...: the
        signature names them) are taken out."""
        self.mode = check_mode(mode, on_flagged, GUARD_MODES)
        self.on_flagged = on_flagged
        self.sdk: ModuleType = require(self.sdk_module, self.extra, self.sdk_name or self.sdk_module)
        super().__init__(**{key: kwargs.pop(key) for key in SHELL_KEYWORDS if key in kwargs})
        self.model = model
        self._client_kwargs = kwargs  # what is left: the SDK client's own (api_key=, base_url= ...)
        is_async = client is not None and self._is_async_client(client)
        self._client = None if is_async else client
        self._async_client = client if is_async else async_client

    def _new_client(self, *, asynchronous: bool) -> Any:
        """A new SDK client (sync or async) from the constructor's client keywords."""
        name = self.async_client_class if asynchronous else self.client_class
        return operator.attrgetter(name)(self.sdk)(**self._client_kwargs)

    def _is_async_client(self, client: Any) -> bool:
        return isinstance(client, operator.attrgetter(self.async_client_class)(self.sdk))

    def _read_response(self, raw: Any, operation: str) -> Completion:
        """Text, model, usage, finish reason and tool calls of an SDK response."""
        raise NotImplementedError

    def _stream_reader(self, operation: str) -> StreamReader:
        """A new reader for the events of one stream of ``operation``."""
        raise NotImplementedError

    def _async_client_or_none(self) -> Any:
        """The async client; None when only a sync client was given (its calls then run in a thread)."""
        if self._async_client is None and self._client is None:
            self._async_client = self._new_client(asynchronous=True)
        return self._async_client

    @property
    def client(self) -> Any:
        """The sync SDK client guard calls use (made on first use when none was given)."""
        if self._client is None:
            if self._async_client is not None and not self._client_kwargs:
                raise TypeError(
                    f"{type(self).__name__} was given an async client; use acomplete/astream, or pass a sync client too"
                )
            self._client = self._new_client(asynchronous=False)
        return self._client

    def trace(self, name: str | None = None, *, metadata: dict[str, Any] | None = None) -> ContextManager[str]:
        """Group the guard and instrumented calls made inside the block into one trace; yields its key."""
        return trace_scope(
            self.recorder, _TRACE, lambda key: (self.recorder, key), name=name or self.name, metadata=metadata
        )

    def _begin(self, operation: str, view: RequestView, extras: Mapping[str, Any]) -> Call:
        """Open the step of one call: its trace (the block's, or a new one), question and context;
        ``extras`` are an instrumented call's ``groundlens_*`` keywords (a guard call has none)."""
        question, node = extras.get(QUESTION_KEYWORD), extras.get(NODE_KEYWORD)
        current = _TRACE.get()
        node_name = str(node) if node else f"{self.provider}.{operation}"
        if current is not None and current[0] is self.recorder:
            key, owns = current[1], False
        else:
            key, owns = new_id(), True
            self.recorder.start_trace(key, name=self.name or node_name)
        q = question if isinstance(question, str) and question.strip() else view.question
        context = tuple(view.context) + as_pieces(extras.get(CONTEXT_KEYWORD), ATTACHED_SOURCE) + _ATTACHED.get()
        meta = dict(view.metadata)
        if question is not None:
            meta["question_source"] = QUESTION_KEYWORD
        return Call(
            key=key,
            owns_trace=owns,
            node=node_name,
            operation=operation,
            question=q,
            context=context_pieces(context),
            model=view.model,
            started=time.time(),
            metadata=meta,
        )

    def _record(
        self, call: Call, completion: Completion, *, error: str | None, inline: InlineResult | None = None
    ) -> str:
        """Hand one finished call to the recorder (scored there unless ``inline`` scored it already)."""
        meta = dict(call.metadata)
        scored = {} if inline is None else inline.record_fields()
        if error is None:
            error = scored.get("error")
        if completion.finish_reason:
            meta["finish_reason"] = completion.finish_reason
        if completion.tool_calls:
            meta["tool_calls"] = list(completion.tool_calls)
        kind = "tool_call" if completion.only_tool_calls else "llm"
        return self.recorder.record(
            CallRecord(
                trace_key=call.key,
                node=call.node,
                kind=kind,
                question=call.question,
                context=call.context_with(completion),
                response=None if kind == "tool_call" else completion.text,
                model=completion.model or call.model,
                provider=self.provider,
                usage=completion.usage,
                started_at=call.started,
                ended_at=time.time(),
                step_id=call.step_id,
                error=error,
                metadata=meta,
                result=scored.get("result"),
                scoring_latency_ms=scored.get("scoring_latency_ms"),
            )
        )

    def _close_trace(self, call: Call, error: str | None = None) -> None:
        if call.owns_trace:
            self.recorder.end_trace(call.key, error=error)

    def end_call(
        self,
        call: Call,
        completion: Completion = NOTHING_READ,
        *,
        failure: BaseException | None = None,
        incomplete: bool = False,
        claimed: bool = False,
    ) -> None:
        """Record a call that is not scored in line (an instrumented call, a failed or cut guard
        call) and close its trace: once, whichever of its ends comes first. Never raises."""
        if not claimed and not call.claim():
            return
        what = "stream" if call.metadata.get("streaming") else "call"
        error = None
        if failure is not None:
            error = f"the {what} raised {describe_exception(failure)}"
            call.metadata["sdk_error"] = type(failure).__name__
        elif incomplete:
            call.metadata["stream_incomplete"] = True
        with handle_internal_errors(self, f"record a {call.operation} {what}", trace_key=call.key, node=call.node):
            self._record(call, completion, error=error)
        with handle_internal_errors(self, f"end a {call.operation} trace", trace_key=call.key, node=call.node):
            self._close_trace(call, error)

    def read_completion(self, call: Call, read: Callable[[], Completion]) -> tuple[Completion, str | None]:
        """``read()``, or (:data:`NOTHING_READ`, why) when our reader fails: the call goes on."""
        try:
            return read(), None
        except Exception as exc:  # our reader's bug: the caller still gets the SDK's response
            self.record_internal_error(f"read a {call.operation} response", exc, call.key, call.node)
            return NOTHING_READ, describe_exception(exc)

    def _guard_end(
        self, call: Call, raw: Any, completion: Completion, inline: InlineResult, read_error: str | None
    ) -> tuple[ProviderResponse, GroundlensFlaggedError | None]:
        """Record the scored step, build the response, apply the guard mode (the error to raise, if any)."""
        error = None if read_error is None else f"groundlens could not read the response: {read_error}"
        response = ProviderResponse(
            text=completion.text or "",
            model=completion.model,
            usage=completion.usage,
            groundlens_result=inline.result,
            finish_reason=completion.finish_reason,
            raw=raw,
            scoring_error=error or inline.error,
            question=call.question,
            context=call.context_with(completion),
            tool_calls=completion.tool_calls,
            step_id=call.step_id,
        )
        with handle_internal_errors(self, "record a guard call", trace_key=call.key, node=call.node):
            self._record(call, completion, error=error, inline=inline)
        flagged = apply_guard(
            inline, mode=self.mode, response=response, on_flagged=self.on_flagged, node=call.node, step_id=call.step_id
        )
        with handle_internal_errors(self, "end a guard call's trace", trace_key=call.key, node=call.node):
            self._close_trace(call, error=None if flagged is None else f"GroundlensFlaggedError: {flagged}")
        return response, flagged
