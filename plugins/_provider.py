"""The provider layer: guard calls and instrumented SDK clients, written once for every LLM SDK.

Teams that call an LLM SDK directly (no agent framework) get two things from a provider module
(``groundlens_core.providers.openai``, ``.anthropic``, ``.google``), both built here on the adapter
shell (:class:`~groundlens_core.plugins._shell.AdapterShell`):

* **The guard call**: ``guard.complete(prompt, context=None, *, question=None, system=None,
  **request_kwargs)`` (and ``acomplete``, ``stream``, ``astream``) sends one request through the
  SDK and returns a frozen :class:`ProviderResponse`: ``text``, ``model``, ``usage``,
  ``finish_reason``, ``raw`` (the SDK's own response) and ``groundlens_score`` (SGI when a context
  was given, DGI otherwise; None only when scoring failed, with ``scoring_error`` saying why). The
  context goes into the request in one way, for every provider: :func:`prompt_with_context`
  wraps it in ``<context>`` tags ahead of the prompt in the user message. The question scored is
  ``question`` if given, else the prompt (never the prompt with the context around it).
  Guard modes: ``mode="annotate"`` (default), ``on_flagged=callable``, ``mode="raise"``
  (:class:`GroundlensFlaggedError`, raised after the step is recorded). Guard calls score on the
  caller's thread (``acomplete``/``astream`` in a worker thread), since the answer carries its score.

* **Instrumented clients**: ``guard.instrument(client)`` (or the module's ``instrument(client)``)
  replaces the SDK's own generate methods *on that client instance* (e.g.
  ``client.chat.completions.create``) with a thin wrapper and returns the same client. Calls work
  unchanged: the same arguments, the SDK's own return objects (a stream is the SDK's stream object,
  its iterator tapped in place) and the SDK's own exceptions (HTTP errors, retries, time-outs, a
  stream that breaks). Each call becomes a step in the guard's :class:`Recorder`, scored on its
  worker thread, never on the caller's. Question = the last user message; context = the tool
  results in the conversation plus any context the caller attaches without sending it:

  - the keyword ``groundlens_context=`` (text or list of texts), removed before the SDK sees the
    call; ``groundlens_question=`` replaces the question, ``groundlens_node=`` names the step;
  - ``with using_context("...")``: every call made inside the block (any guard, any client) gets
    the context; blocks nest.

  A turn that only requests tools is an unscored ``tool_call`` step. Calls outside a trace each get
  their own trace; ``with guard.trace("name"):`` groups the calls made inside it into one.

What a provider module implements is the :class:`ProviderGuard` hooks (see
``/work/notes/providers-layer.md`` and ``plugins/openai.py`` as the worked example): how to make
a client, build and send a guard request, read a response and a stream event, which client methods
to instrument, and how to read a request. Everything else (trace keys, context, recording, scoring,
guard modes, error isolation) is here.

Scores are triage signals for ranking outputs for human review, never verdicts of truth.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, ClassVar

from groundlens_core.plugins._shell import (
    GUARD_MODES,
    AdapterShell,
    GroundlensFlaggedError,
    InlineScore,
    apply_guard,
    check_mode,
    handle_internal_errors,
    require,
)
from groundlens_core.results import GroundlensScore
from groundlens_core.trace.model import ContextPiece, Usage, new_id
from groundlens_core.trace.recorder import CallRecord, Recorder, context_pieces

__all__ = [
    "CONTEXT_KEYWORD",
    "GROUNDLENS_KEYWORDS",
    "NODE_KEYWORD",
    "QUESTION_KEYWORD",
    "AsyncGuardedStream",
    "Completion",
    "GroundlensFlaggedError",
    "GuardedStream",
    "ProviderGuard",
    "ProviderResponse",
    "RequestView",
    "StreamReader",
    "Target",
    "guard_of",
    "listed",
    "prompt_with_context",
    "uninstrument",
    "using_context",
]

#: keywords an instrumented call accepts and removes before the SDK sees the call
CONTEXT_KEYWORD = "groundlens_context"
QUESTION_KEYWORD = "groundlens_question"
NODE_KEYWORD = "groundlens_node"
GROUNDLENS_KEYWORDS = (CONTEXT_KEYWORD, QUESTION_KEYWORD, NODE_KEYWORD)
#: source of context attached with ``groundlens_context=`` or ``using_context``
ATTACHED_SOURCE = "attached"
#: source of the ``context=`` of a guard call
GUARD_CONTEXT_SOURCE = "context"

#: the one way a guard call puts its context into the request (every provider)
CONTEXT_TEMPLATE = "Answer using the context below.\n\n<context>\n{context}\n</context>\n\n{prompt}"


def prompt_with_context(prompt: str, context: Sequence[str]) -> str:
    """The user message of a guard call: the prompt as it is without context; with context, the
    pieces (joined by blank lines) in ``<context>`` tags ahead of the prompt (:data:`CONTEXT_TEMPLATE`)."""
    texts = [c for c in context if c.strip()]
    if not texts:
        return prompt
    return CONTEXT_TEMPLATE.format(context="\n\n".join(texts), prompt=prompt)


def listed(value: Any, nested: Sequence[str] = ()) -> Any:
    """``value`` made re-readable for an instrumented call: the SDKs accept any iterable of messages
    (and of content parts), so a generator reaching the wrapper must be read into a list that both
    our reader and the SDK then use, or our reading would leave the SDK an exhausted iterator and it
    would send ``[]``. Mapping items whose ``nested`` keys hold an iterator are copied with those as
    lists (the caller's dicts are never changed). Returns ``value`` itself when nothing was one-shot;
    only iterators count (a pydantic message is iterable but is no iterator, and stays as it is)."""
    items = list(value) if isinstance(value, Iterator) else value
    if nested and isinstance(items, (list, tuple)):
        fixed = [
            {**item, **{k: list(item[k]) for k in nested if isinstance(item.get(k), Iterator)}}
            if isinstance(item, dict) and any(isinstance(item.get(k), Iterator) for k in nested)
            else item
            for item in items
        ]
        if any(a is not b for a, b in zip(fixed, items)):
            items = fixed
    return items


# ---------------------------------------------------------------- what provider modules hand back


@dataclass(frozen=True)
class Completion:
    """What a provider module reads from one SDK response, or from a stream once it ended."""

    text: str | None
    model: str | None = None
    usage: Usage | None = None
    finish_reason: str | None = None
    tool_calls: tuple[str, ...] = ()  # names of the tools the model asked for
    #: context the SDK gathered itself within the call (google-genai's automatic function calling
    #: runs the tools inside one ``generate_content``): added to the call's context
    context: tuple[ContextPiece, ...] = ()

    @property
    def only_tool_calls(self) -> bool:
        """A turn that asks for tools and says nothing: recorded as an unscored ``tool_call`` step."""
        return bool(self.tool_calls) and not (self.text or "").strip()


@dataclass(frozen=True)
class RequestView:
    """What a provider module reads from the arguments of one SDK call."""

    question: str | None
    context: tuple[ContextPiece, ...] = ()  # tool results in the conversation
    model: str | None = None
    stream: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Target:
    """One SDK method to instrument: ``getattr(owner, attr)`` on a client, e.g.
    ``Target(client.chat.completions, "create", "chat")``. ``operation`` names what the call is
    (the provider module's reader and the step's default node use it)."""

    owner: Any
    attr: str
    operation: str


class StreamReader:
    """Reads the events of one stream as they pass: ``add`` returns the text an event carries (or
    None), ``completion`` what the whole stream said. A provider module subclasses it per API."""

    def add(self, event: Any) -> str | None:  # pragma: no cover - abstract
        raise NotImplementedError

    def completion(self) -> Completion:  # pragma: no cover - abstract
        raise NotImplementedError


@dataclass(frozen=True)
class ProviderResponse:
    """The answer of a guard call, with its groundlens score attached.

    ``groundlens_score`` is the core's score object (``SGIResult`` with context, ``DGIResult``
    without); None only when scoring failed (``scoring_error`` says why) or the answer has no text
    to score (a turn that only asked for tools). A triage signal, never a verdict of truth.
    """

    text: str
    model: str | None
    usage: Usage | None
    groundlens_score: GroundlensScore | None
    finish_reason: str | None
    raw: Any  # the SDK's own response object (for a stream: the SDK's stream object)
    scoring_error: str | None = None
    question: str | None = None
    context: tuple[ContextPiece, ...] = ()
    tool_calls: tuple[str, ...] = ()
    step_id: str | None = None

    @property
    def flagged(self) -> bool:
        return self.groundlens_score is not None and self.groundlens_score.flagged

    @property
    def triage(self) -> str | None:
        return None if self.groundlens_score is None else self.groundlens_score.triage

    def __str__(self) -> str:
        return self.text


# ---------------------------------------------------------------- context and traces of a block

_ATTACHED: contextvars.ContextVar[tuple[ContextPiece, ...]] = contextvars.ContextVar("groundlens_attached", default=())
_TRACE: contextvars.ContextVar[tuple[Recorder, str] | None] = contextvars.ContextVar(
    "groundlens_provider_trace", default=None
)


#: the recorder of the guard whose guard call is sending right now: a client that this same guard
#: instrumented passes that request through (the guard call records its own step)
_GUARD_SENDING: contextvars.ContextVar[Recorder | None] = contextvars.ContextVar(
    "groundlens_guard_sending", default=None
)


@contextlib.contextmanager
def _guard_sending(recorder: Recorder) -> Iterator[None]:
    token = _GUARD_SENDING.set(recorder)
    try:
        yield
    finally:
        _GUARD_SENDING.reset(token)


@contextlib.contextmanager
def using_context(*texts: Any, source: str = ATTACHED_SOURCE) -> Iterator[tuple[ContextPiece, ...]]:
    """Attach context to every guarded or instrumented call made inside the block, without sending it.

    ``texts`` are strings, lists of strings or :class:`ContextPiece` s. Blocks nest (the inner
    block adds to the outer one) and follow ``contextvars``, so threads and asyncio tasks started
    inside see the context too. Yields the pieces in force.
    """
    pieces = _as_pieces(texts, source)
    token = _ATTACHED.set(_ATTACHED.get() + pieces)
    try:
        yield _ATTACHED.get()
    finally:
        _ATTACHED.reset(token)


def _as_pieces(value: Any, source: str) -> tuple[ContextPiece, ...]:
    """Strings, lists/tuples of them (nested once), pieces and ``(text, source)`` pairs -> pieces."""
    if value is None:
        return ()
    if isinstance(value, (str, ContextPiece)):
        return context_pieces([value], source)
    items: list[Any] = []
    for item in value:
        if isinstance(item, (list, tuple)) and not (len(item) == 2 and all(isinstance(x, str) for x in item)):
            items.extend(item)
        elif item is not None:
            items.append(item)
    for item in items:
        if not isinstance(item, (str, ContextPiece, tuple)):
            raise TypeError(f"context must be text or a list of texts, got {type(item).__name__}")
    return context_pieces(items, source)


# ---------------------------------------------------------------- one call in progress


@dataclass
class _Call:
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
    ended: bool = False  # an instrumented stream's step was recorded (it is recorded once)
    #: guards ``ended``: a stream's close() on one thread can meet the end of its iteration on another
    ending: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)


# ---------------------------------------------------------------- the guard base


_GUARDS: weakref.WeakKeyDictionary[Any, ProviderGuard] = weakref.WeakKeyDictionary()


def guard_of(client: Any) -> ProviderGuard | None:
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


class ProviderGuard(AdapterShell):
    """Base class of the provider guards (``OpenAIProvider``, ``AnthropicProvider``, ``GoogleProvider``).

    Args:
        model: the model guard calls ask for (``complete``/``stream``); instrumented calls name
            their own.
        client: your configured SDK client (base URL, keys, retries, proxies stay yours); sync or
            async. Without it the guard makes one from ``client_kwargs`` when first needed.
        async_client: the async client for ``acomplete``/``astream`` when ``client`` is a sync one
            (without it they run the sync client in a worker thread).
        mode / on_flagged: guard modes of guard calls (annotate, raise; ``on_flagged(inline,
            response)`` is called for a flagged answer). Instrumented calls are never changed by a
            score: they are only recorded.
        name, recorder, embedder, calibration, long_context, listeners, tracer_provider,
        max_traces: the adapter shell's keywords, the same on every adapter.
        **client_kwargs: passed to the SDK client constructor (``api_key=``, ``base_url=``, ...).
    """

    #: the ``gen_ai.provider.name`` of the steps (``openai``, ``anthropic``, ``gcp.gemini``)
    provider: ClassVar[str] = "provider"
    #: the SDK's import name and what to call it in the install hint
    sdk_module: ClassVar[str] = ""
    sdk_name: ClassVar[str] = ""
    #: the node of a guard call's step
    guard_operation: ClassVar[str] = "complete"

    def __init__(
        self,
        model: str | None = None,
        client: Any = None,
        *,
        async_client: Any = None,
        mode: str = "annotate",
        on_flagged: Callable[..., Any] | None = None,
        name: str | None = None,
        recorder: Recorder | None = None,
        embedder: Any = None,
        calibration: Any = None,
        long_context: str | None = None,
        listeners: Sequence[Any] = (),
        tracer_provider: Any = None,
        max_traces: int = 100,
        **client_kwargs: Any,
    ):
        self.mode = check_mode(mode, on_flagged, GUARD_MODES)
        self.on_flagged = on_flagged
        self.sdk: ModuleType = require(self.sdk_module, self.extra, self.sdk_name or self.sdk_module)
        super().__init__(
            name=name,
            recorder=recorder,
            embedder=embedder,
            calibration=calibration,
            long_context=long_context,
            listeners=listeners,
            tracer_provider=tracer_provider,
            max_traces=max_traces,
        )
        self.model = model
        self._client_kwargs = dict(client_kwargs)
        self._client = None
        self._async_client = async_client
        if client is not None:
            if self._is_async_client(client):
                self._async_client = client
            else:
                self._client = client
        self._instrumented: weakref.WeakKeyDictionary[Any, list[tuple[Any, str]]] = weakref.WeakKeyDictionary()

    # ============================================================ hooks a provider module implements

    def _new_client(self, *, asynchronous: bool, **client_kwargs: Any) -> Any:
        """A new SDK client (sync or async) from ``client_kwargs``."""
        raise NotImplementedError

    def _is_async_client(self, client: Any) -> bool:
        """Whether ``client`` is the SDK's async client."""
        raise NotImplementedError

    def _build_request(
        self, *, user_text: str, system: str | None, stream: bool, request_kwargs: dict[str, Any]
    ) -> dict[str, Any]:
        """The keyword arguments of the SDK call for a guard call (model, messages, ...).
        ``user_text`` already holds the context (:func:`prompt_with_context`)."""
        raise NotImplementedError

    def _send(self, client: Any, request: dict[str, Any]) -> Any:
        """Send a guard request with the sync client; returns the SDK's response (or stream)."""
        raise NotImplementedError

    async def _asend(self, client: Any, request: dict[str, Any]) -> Any:
        """Send a guard request with the async client."""
        raise NotImplementedError

    def _read_response(self, raw: Any, operation: str) -> Completion:
        """Text, model, usage, finish reason and tool calls of an SDK response."""
        raise NotImplementedError

    def _stream_reader(self, operation: str) -> StreamReader:
        """A new reader for the events of one stream of ``operation``."""
        raise NotImplementedError

    def _targets(self, client: Any) -> list[Target]:
        """The methods of ``client`` that ``instrument`` wraps."""
        raise NotImplementedError

    def _read_request(self, operation: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> RequestView:
        """Question, tool-result context, model and stream flag of one instrumented call."""
        raise NotImplementedError

    def _tap_stream(self, result: Any, wrap: Callable[[Any], Any]) -> Any:
        """Make the SDK stream ``result`` pass its events through ``wrap(events)`` (a generator over
        the stream's own iterator; an async generator for an async stream) and return what the
        caller should get: the SDK's own stream object, tapped in place, where the SDK allows it."""
        raise NotImplementedError

    def _is_stream(self, operation: str, requested: bool, result: Any) -> bool:
        """Whether ``result`` of an instrumented call is a stream (default: the request asked for one)."""
        return requested

    def _passthrough(self, kwargs: dict[str, Any]) -> bool:
        """True for calls the wrapper must not read at all (e.g. the SDK's raw-response helpers)."""
        return False

    def _is_async_stream(self, result: Any) -> bool:
        """Whether a stream the SDK returned without an ``await`` is read with ``async for`` (e.g.
        Anthropic's ``AsyncMessageStreamManager``, an async context manager ``messages.stream()``
        hands back at once): its events then pass through the async tap. Default: no."""
        return False

    # ============================================================ clients

    def _sync_client(self) -> Any:
        if self._client is None:
            if self._async_client is not None and not self._client_kwargs:
                raise TypeError(
                    f"{type(self).__name__} was given an async client; use acomplete/astream, or pass a sync client too"
                )
            self._client = self._new_client(asynchronous=False, **self._client_kwargs)
        return self._client

    def _async_client_or_none(self) -> Any:
        """The async client; None when only a sync client was given (its calls then run in a thread)."""
        if self._async_client is None and self._client is None:
            self._async_client = self._new_client(asynchronous=True, **self._client_kwargs)
        return self._async_client

    @property
    def client(self) -> Any:
        """The sync SDK client guard calls use (made on first use when none was given)."""
        return self._sync_client()

    # ============================================================ traces

    @contextlib.contextmanager
    def trace(self, name: str | None = None, *, metadata: dict[str, Any] | None = None) -> Iterator[str]:
        """Group the guard and instrumented calls made inside the block into one trace; yields its key."""
        key = new_id()
        self.recorder.start_trace(key, name=name or self.name, metadata=metadata)
        token = _TRACE.set((self.recorder, key))
        error: str | None = None
        try:
            yield key
        except BaseException as exc:
            error = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            _TRACE.reset(token)
            self.recorder.end_trace(key, error=error)

    def _begin(
        self,
        operation: str,
        view: RequestView,
        *,
        question: Any = None,
        extra_context: Any = None,
        node: Any = None,
        metadata: dict[str, Any] | None = None,
    ) -> _Call:
        """Open the step of one call: its trace (the block's, or a new one), question and context."""
        current = _TRACE.get()
        node_name = str(node) if node else f"{self.provider}.{operation}"
        if current is not None and current[0] is self.recorder:
            key, owns = current[1], False
        else:
            key, owns = new_id(), True
            self.recorder.start_trace(key, name=self.name or node_name)
        q = question if isinstance(question, str) and question.strip() else view.question
        context = tuple(view.context) + _as_pieces(extra_context, ATTACHED_SOURCE) + _ATTACHED.get()
        meta = dict(view.metadata)
        meta.update(metadata or {})
        if question is not None:
            meta["question_source"] = QUESTION_KEYWORD
        return _Call(
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

    def _end(self, call: _Call, error: str | None = None) -> None:
        if call.owns_trace:
            self.recorder.end_trace(call.key, error=error)

    def _record(
        self,
        call: _Call,
        completion: Completion | None,
        *,
        error: str | None = None,
        inline: InlineScore | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> str:
        """Hand one finished call to the recorder (scored there unless ``inline`` scored it already)."""
        meta = dict(call.metadata)
        meta.update(metadata or {})
        fields: dict[str, Any] = {}
        if inline is not None:
            fields = inline.record_fields()
        if completion is not None:
            if completion.finish_reason:
                meta["finish_reason"] = completion.finish_reason
            if completion.tool_calls:
                meta["tool_calls"] = list(completion.tool_calls)
        kind = "tool_call" if completion is not None and completion.only_tool_calls else "llm"
        record = CallRecord(
            trace_key=call.key,
            node=call.node,
            kind=kind,
            question=call.question,
            context=_context_of(call, completion),
            response=None if completion is None or kind == "tool_call" else completion.text,
            model=(completion.model if completion is not None and completion.model else call.model),
            provider=self.provider,
            usage=None if completion is None else completion.usage,
            started_at=call.started,
            ended_at=time.time(),
            step_id=call.step_id,
            error=error,
            metadata=meta,
        )
        for k, v in fields.items():
            if k == "error" and error is None:
                record.error = v
            elif k != "error":
                setattr(record, k, v)
        return self.recorder.record(record)

    # ============================================================ guard calls

    def _prepare(
        self, prompt: Any, context: Any, question: Any, system: Any, request_kwargs: dict[str, Any], *, stream: bool
    ) -> tuple[_Call, dict[str, Any]]:
        if not isinstance(prompt, str) or not prompt.strip():
            raise TypeError(f"prompt must be non-blank text, got {type(prompt).__name__}")
        if question is not None and not isinstance(question, str):
            raise TypeError(f"question must be text, got {type(question).__name__}")
        if system is not None and not isinstance(system, str):
            raise TypeError(f"system must be text, got {type(system).__name__}")
        if not stream and request_kwargs.get("stream"):  # the answer would be an unread SDK stream, text ""
            raise TypeError(f"{type(self).__name__}.complete takes no stream=True; use .stream() / .astream()")
        pieces = _as_pieces(context, GUARD_CONTEXT_SOURCE)
        kwargs = dict(request_kwargs)
        if self.model is not None:
            kwargs.setdefault("model", self.model)
        if not kwargs.get("model"):
            raise TypeError(
                f"{type(self).__name__} needs a model: {type(self).__name__}(model=...) or complete(..., model=...)"
            )
        request = self._build_request(
            user_text=prompt_with_context(prompt, [str(p.text) for p in pieces]),
            system=system,
            stream=stream,
            request_kwargs=kwargs,
        )
        view = RequestView(
            question=question if question and question.strip() else prompt,
            context=pieces,
            model=str(kwargs.get("model")),
            stream=stream,
            metadata={"guard": self.mode},
        )
        call = self._begin(self.guard_operation, view)
        if question:
            call.metadata["question_source"] = "question"
        return call, request

    def _failed(self, call: _Call, exc: BaseException) -> None:
        """The SDK raised: record an error step (the exception itself goes to the caller untouched)."""
        with handle_internal_errors(self, "record a failed call", trace_key=call.key, node=call.node):
            message = f"the call raised {type(exc).__name__}: {exc}"
            self._record(call, None, error=message, metadata={"sdk_error": type(exc).__name__})
            self._end(call, error=message)

    def _guarded_response(
        self, call: _Call, raw: Any, completion: Completion | None, inline: InlineScore, read_error: str | None
    ) -> tuple[ProviderResponse, GroundlensFlaggedError | None]:
        """Record the step, build the response, apply the guard mode (the error to raise, if any)."""
        error = None if read_error is None else f"groundlens could not read the response: {read_error}"
        response = ProviderResponse(
            text=(completion.text if completion is not None else None) or "",
            model=completion.model if completion is not None else None,
            usage=completion.usage if completion is not None else None,
            groundlens_score=inline.score,
            finish_reason=completion.finish_reason if completion is not None else None,
            raw=raw,
            scoring_error=error or inline.error,
            question=call.question,
            context=_context_of(call, completion),
            tool_calls=completion.tool_calls if completion is not None else (),
            step_id=call.step_id,
        )
        with handle_internal_errors(self, "record a guard call", trace_key=call.key, node=call.node):
            self._record(call, completion, error=error, inline=inline)
        flagged = apply_guard(
            inline, mode=self.mode, response=response, on_flagged=self.on_flagged, node=call.node, step_id=call.step_id
        )
        with handle_internal_errors(self, "end a guard call's trace", trace_key=call.key, node=call.node):
            self._end(call, error=None if flagged is None else f"GroundlensFlaggedError: {flagged}")
        return response, flagged

    def _read_guarded(self, raw: Any) -> tuple[Completion | None, str | None]:
        try:
            return self._read_response(raw, self.guard_operation), None
        except Exception as exc:  # our reader's bug: the caller still gets the SDK's response in .raw
            self.record_internal_error("read a guard response", exc)
            return None, f"{type(exc).__name__}: {exc}"

    def _score_args(self, call: _Call, completion: Completion | None) -> dict[str, Any]:
        text = None if completion is None or completion.only_tool_calls else completion.text
        return {"question": call.question, "response": text, "context": _context_of(call, completion)}

    def complete(
        self,
        prompt: str,
        context: Any = None,
        *,
        question: str | None = None,
        system: str | None = None,
        **request_kwargs: Any,
    ) -> ProviderResponse:
        """Ask the model, score the answer, return both (see the module docstring).

        Raises the SDK's own exceptions unchanged; :class:`GroundlensFlaggedError` only in
        ``mode="raise"`` for a flagged answer; ``TypeError`` for a missing prompt or model.
        """
        call, request = self._prepare(prompt, context, question, system, request_kwargs, stream=False)
        try:
            with _guard_sending(self.recorder):
                raw = self._send(self._sync_client(), request)
        except BaseException as exc:
            self._failed(call, exc)
            raise
        completion, read_error = self._read_guarded(raw)
        inline = self.score_inline(**self._score_args(call, completion))
        response, flagged = self._guarded_response(call, raw, completion, inline, read_error)
        if flagged is not None:
            raise flagged
        return response

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
        try:
            client = self._async_client_or_none()
            if client is None:
                with _guard_sending(self.recorder):
                    raw = await asyncio.to_thread(self._send, self._sync_client(), request)
            else:
                with _guard_sending(self.recorder):
                    raw = await self._asend(client, request)
        except BaseException as exc:
            self._failed(call, exc)
            raise
        completion, read_error = self._read_guarded(raw)
        inline = await self.ascore_inline(**self._score_args(call, completion))
        response, flagged = self._guarded_response(call, raw, completion, inline, read_error)
        if flagged is not None:
            raise flagged
        return response

    def stream(
        self,
        prompt: str,
        context: Any = None,
        *,
        question: str | None = None,
        system: str | None = None,
        **request_kwargs: Any,
    ) -> GuardedStream:
        """Send the request and return a :class:`GuardedStream`: iterate it for text chunks as they
        arrive; once it ends, ``.response`` holds the :class:`ProviderResponse` with the score.
        HTTP errors raise here, as the SDK's own ``stream=True`` call does."""
        call, request = self._prepare(prompt, context, question, system, request_kwargs, stream=True)
        try:
            with _guard_sending(self.recorder):
                raw = self._send(self._sync_client(), request)
        except BaseException as exc:
            self._failed(call, exc)
            raise
        return GuardedStream(self, call, raw, self._stream_reader(self.guard_operation))

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
        try:  # as in acomplete: a client that cannot be had is an error step, and the call's trace ends
            client = self._async_client_or_none()
            if client is None:
                raise TypeError(f"{type(self).__name__}.astream needs an async client (async_client=...)")
            with _guard_sending(self.recorder):
                raw = await self._asend(client, request)
        except BaseException as exc:
            self._failed(call, exc)
            raise
        return AsyncGuardedStream(self, call, raw, self._stream_reader(self.guard_operation))

    def _finish_stream(
        self, call: _Call, raw: Any, reader: StreamReader, error: BaseException | None, incomplete: bool
    ) -> tuple[ProviderResponse | None, GroundlensFlaggedError | None]:
        """A guard stream ended: record (error or score) and build its response."""
        completion = None
        read_error = None
        try:
            completion = reader.completion()
        except Exception as exc:
            self.record_internal_error("read a guard stream", exc, call.key, call.node)
            read_error = f"{type(exc).__name__}: {exc}"
        if error is not None:
            message = f"the stream raised {type(error).__name__}: {error}"
            with handle_internal_errors(self, "record a failed stream", trace_key=call.key, node=call.node):
                self._record(
                    call, completion, error=message, metadata={"streaming": True, "sdk_error": type(error).__name__}
                )
                self._end(call, error=message)
            return None, None
        call.metadata["streaming"] = True
        if incomplete:  # closed early (or collected): no answer to guard; the recorder scores what came
            with handle_internal_errors(self, "record a closed stream", trace_key=call.key, node=call.node):
                self._record(call, completion, metadata={"stream_incomplete": True})
                self._end(call)
            return None, None
        inline = self.score_inline(**self._score_args(call, completion))
        return self._guarded_response(call, raw, completion, inline, read_error)

    # ============================================================ instrumented clients

    def instrument(self, client: Any = None) -> Any:
        """Record every generate call of ``client`` (default: this guard's own client) into this
        guard's recorder; returns the same client, its calls unchanged. Only that client instance is
        touched (``client.with_options(...)`` / ``copy()`` make new, uninstrumented clients)."""
        if client is None:
            client = self._client or self._async_client or self._sync_client()
        if guard_of(client) is not None:
            if guard_of(client) is not self:
                self.log.warning(
                    "groundlens: %s is already instrumented by another guard; left as it is", type(client).__name__
                )
            return client
        patched: list[tuple[Any, str]] = []
        for target in self._targets(client):
            original = getattr(target.owner, target.attr)
            if getattr(original, "__groundlens_original__", None) is not None:
                continue
            setattr(target.owner, target.attr, self._wrap(target, original))
            patched.append((target.owner, target.attr))
        self._instrumented[client] = patched
        _GUARDS[client] = self
        return client

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
            extras = _pop_extras(kwargs)
            if guard._passthrough(kwargs) or _GUARD_SENDING.get() is guard.recorder:
                return original(*args, **kwargs)
            call = guard._start_call(operation, args, kwargs, extras)
            try:
                result = original(*args, **kwargs)
            except BaseException as exc:
                if call is not None:
                    guard._failed(call, exc)
                raise
            if call is None:
                return result
            if inspect.isawaitable(result):
                return guard._awaited(call, result)
            return guard._returned(call, result, asynchronous=False)

        wrapper.__groundlens_original__ = original  # type: ignore[attr-defined]
        return wrapper

    async def _awaited(self, call: _Call, awaitable: Any) -> Any:
        try:
            result = await awaitable
        except BaseException as exc:
            self._failed(call, exc)
            raise
        return self._returned(call, result, asynchronous=True)

    def _start_call(
        self, operation: str, args: tuple[Any, ...], kwargs: dict[str, Any], extras: dict[str, Any]
    ) -> _Call | None:
        """Read the request of an instrumented call; None (and an error logged and recorded) when
        our reading fails, and then the call goes on unrecorded."""
        try:
            view = self._read_request(operation, args, kwargs)
            call = self._begin(
                operation,
                view,
                question=extras.get(QUESTION_KEYWORD),
                extra_context=extras.get(CONTEXT_KEYWORD),
                node=extras.get(NODE_KEYWORD),
            )
            call.metadata["operation"] = operation
            call.metadata["stream"] = view.stream
            return call
        except Exception as exc:
            self.record_internal_error(f"read a {operation} request", exc)
            return None

    def _returned(self, call: _Call, result: Any, *, asynchronous: bool) -> Any:
        """The SDK returned: record (a stream is tapped and recorded when it ends). Returns ``result``
        or, for a stream, what :meth:`_tap_stream` gives back (the SDK's own stream object)."""
        try:
            if self._is_stream(call.operation, bool(call.metadata.get("stream")), result):
                reader = self._stream_reader(call.operation)
                is_async = asynchronous or self._is_async_stream(result)
                tap = self._atap if is_async else self._tap
                taps: list[Any] = []

                def wrap(events: Any) -> Any:
                    taps.append(tap(call, events, reader))
                    return taps[-1]

                def end_on_close(obj: Any) -> None:
                    """Let ``obj.close()`` end the tap too (a module whose stream is opened later
                    hooks it then, e.g. Anthropic's stream manager on enter)."""
                    if taps:
                        self._end_tap_on_close(obj, call, reader, asynchronous=is_async)

                wrap.end_on_close = end_on_close  # type: ignore[attr-defined]
                out = self._tap_stream(result, wrap)
                if taps and out is not taps[0]:
                    end_on_close(out)
                return out
            completion = self._read_response(result, call.operation)
            self._record(call, completion)
            self._end(call)
        except Exception as exc:
            self.record_internal_error(f"read a {call.operation} response", exc, call.key, call.node)
            with contextlib.suppress(Exception):
                self._end(call)
        return result

    def _end_tap_on_close(self, stream: Any, call: _Call, reader: StreamReader, *, asynchronous: bool) -> None:
        """The SDK stream object's own ``close()`` (which ``with``/``async with`` call on exit) also
        records the call, so a stream the caller leaves early (or never reads) is recorded when it is
        closed, not only when Python collects it: the answer so far, ``stream_incomplete``. Our tap is
        left as it is (a stream read after its close gives what the SDK gives); a call is recorded
        once. Set on that stream instance only; the SDK's own close runs after ours, always."""
        original = getattr(stream, "close", None)
        if not callable(original):
            return
        guard = self

        def end_call() -> None:
            if not call.ended:
                guard._stream_ended(call, reader, None, incomplete=True)

        if asynchronous:

            async def aclose(*args: Any, **kwargs: Any) -> Any:
                end_call()
                return await original(*args, **kwargs)

            stream.close = functools.wraps(original)(aclose)
        else:

            def close(*args: Any, **kwargs: Any) -> Any:
                end_call()
                return original(*args, **kwargs)

            stream.close = functools.wraps(original)(close)

    def _stream_ended(self, call: _Call, reader: StreamReader, error: BaseException | None, incomplete: bool) -> None:
        with call.ending:  # check and set at once: else both ends could pass the check and record
            if call.ended:
                return
            call.ended = True
        with handle_internal_errors(self, f"record a {call.operation} stream", trace_key=call.key, node=call.node):
            completion = reader.completion()
            meta: dict[str, Any] = {"streaming": True}
            message = None
            if error is not None:
                message = f"the stream raised {type(error).__name__}: {error}"
                meta["sdk_error"] = type(error).__name__
            elif incomplete:
                meta["stream_incomplete"] = True
            self._record(call, completion, error=message, metadata=meta)
            self._end(call, error=message)

    def _read_event(self, call: _Call, reader: StreamReader, event: Any) -> None:
        try:
            reader.add(event)
        except Exception as exc:
            self.record_internal_error(f"read a {call.operation} stream event", exc, call.key, call.node)

    def _tap(self, call: _Call, events: Iterable[Any], reader: StreamReader) -> Iterator[Any]:
        """The instrumented stream's events, read on their way to the caller, recorded at the end."""
        error: BaseException | None = None
        finished = False
        try:
            for event in events:
                self._read_event(call, reader, event)
                yield event
            finished = True
        except GeneratorExit:
            raise
        except BaseException as exc:
            error = exc
            raise
        finally:
            self._stream_ended(call, reader, error, incomplete=not finished and error is None)

    async def _atap(self, call: _Call, events: AsyncIterator[Any], reader: StreamReader) -> AsyncIterator[Any]:
        error: BaseException | None = None
        finished = False
        try:
            async for event in events:
                self._read_event(call, reader, event)
                yield event
            finished = True
        except GeneratorExit:
            raise
        except BaseException as exc:
            error = exc
            raise
        finally:
            self._stream_ended(call, reader, error, incomplete=not finished and error is None)


def _context_of(call: _Call, completion: Completion | None) -> tuple[ContextPiece, ...]:
    """The call's context, plus what the SDK gathered within the call (:attr:`Completion.context`)."""
    if completion is None or not completion.context:
        return call.context
    return context_pieces(tuple(call.context) + tuple(completion.context))


def _pop_extras(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Remove our keywords from an SDK call's keyword arguments (the SDK never sees them)."""
    if not kwargs:
        return {}
    return {k: kwargs.pop(k) for k in GROUNDLENS_KEYWORDS if k in kwargs}


# ---------------------------------------------------------------- the streams of guard calls


class _GuardStreamState:
    """What the sync and async streams of a guard call share: the SDK stream, the text so far, the
    response once it ended, and which of its ends records the call."""

    def __init__(self, guard: ProviderGuard, call: _Call, raw: Any, reader: StreamReader):
        self._guard = guard
        self._call = call
        self.raw = raw
        self._reader = reader
        self.response: ProviderResponse | None = None
        self._parts: list[str] = []
        self._done = False
        self._closed = False  # closed: a read under way on another thread or task stops at its next event
        self._ending = threading.Lock()
        self._iterator: Any = self._run()

    def _run(self) -> Any:  # the sync or async generator of chunks
        raise NotImplementedError

    @property
    def groundlens_score(self) -> GroundlensScore | None:
        return None if self.response is None else self.response.groundlens_score

    @property
    def text(self) -> str:
        """The text so far (all of it once the stream ended)."""
        return self.response.text if self.response is not None else "".join(self._parts)

    def _claim(self) -> bool:
        """True for the first of the stream's ends only (its last chunk, its error, a close), which
        records the call: a close on one thread can meet the end of a read on another."""
        with self._ending:
            first, self._done = not self._done, True
        return first


class GuardedStream(_GuardStreamState):
    """The text chunks of a guard call's stream, as they arrive; the scored response once it ends.

    Iterate it (``for text in stream``) or use it as a context manager. After the last chunk,
    ``response`` is the :class:`ProviderResponse` (``response.groundlens_score``); in
    ``mode="raise"`` a flagged answer raises :class:`GroundlensFlaggedError` at the end of the
    iteration, after every chunk was yielded. A stream that breaks raises the SDK's own exception
    and is recorded as an ``error`` step. ``raw`` is the SDK's stream object.
    """

    def _run(self) -> Iterator[str]:
        error: BaseException | None = None
        flagged = None
        try:
            for event in self.raw:
                if self._closed:  # closed on another thread while this read waited for the event
                    break
                try:
                    text = self._reader.add(event)
                except Exception as exc:
                    self._guard.record_internal_error("read a guard stream event", exc, self._call.key, self._call.node)
                    text = None
                if text:
                    self._parts.append(text)
                    yield text
        except GeneratorExit:
            if self._claim():
                self._end(None, incomplete=True)
            raise
        except BaseException as exc:
            error = exc
            raise
        finally:
            if self._claim():  # a close on another thread that set _closed but has not claimed yet: incomplete
                self.response, flagged = self._end(error, incomplete=self._closed)
        if flagged is not None:
            raise flagged

    def _end(self, error: BaseException | None, *, incomplete: bool) -> tuple[ProviderResponse | None, Any]:
        response, flagged = self._guard._finish_stream(self._call, self.raw, self._reader, error, incomplete)
        self.response = response
        return response, flagged

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        return next(self._iterator)

    def close(self) -> None:
        """Stop early: the SDK stream is closed and the partial answer recorded (``stream_incomplete``).
        Safe from another thread while one is reading the stream (a "stop" button): that read ends
        at its next event, or with the SDK's own error for a stream closed under it."""
        self._closed = True
        with contextlib.suppress(ValueError):  # "generator already executing": read on another thread now
            self._iterator.close()  # type: ignore[attr-defined]
        if self._claim():  # closed before the first chunk (the generator never ran), or mid-read elsewhere
            self._end(None, incomplete=True)
        with contextlib.suppress(Exception):
            self.raw.close()

    def __enter__(self) -> GuardedStream:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class AsyncGuardedStream(_GuardStreamState):
    """:class:`GuardedStream` for asyncio: ``async for text in stream``."""

    async def _run(self) -> AsyncIterator[str]:
        error: BaseException | None = None
        try:
            async for event in self.raw:
                if self._closed:  # closed by another task while this read waited for the event
                    break
                try:
                    text = self._reader.add(event)
                except Exception as exc:
                    self._guard.record_internal_error("read a guard stream event", exc, self._call.key, self._call.node)
                    text = None
                if text:
                    self._parts.append(text)
                    yield text
        except GeneratorExit:
            if self._claim():
                self._guard._finish_stream(self._call, self.raw, self._reader, None, True)
            raise
        except BaseException as exc:
            error = exc
            raise
        finally:
            if error is not None and self._claim():
                self._guard._finish_stream(self._call, self.raw, self._reader, error, False)
        if not self._claim():  # closed by another task while this read was under way: recorded then
            return
        if self._closed:  # closed by another task, and this read ended before that close recorded it
            self._guard._finish_stream(self._call, self.raw, self._reader, None, True)
            return
        # normal end: score in a worker thread so the event loop keeps going
        response, flagged = await asyncio.to_thread(
            self._guard._finish_stream, self._call, self.raw, self._reader, None, False
        )
        self.response = response
        if flagged is not None:
            raise flagged

    def __aiter__(self) -> AsyncGuardedStream:
        return self

    async def __anext__(self) -> str:
        return await self._iterator.__anext__()

    async def aclose(self) -> None:
        """Stop early (see :meth:`GuardedStream.close`); safe while another task is reading."""
        self._closed = True
        with contextlib.suppress(RuntimeError):  # "asynchronous generator is already running": another task
            await self._iterator.aclose()  # type: ignore[attr-defined]
        if self._claim():
            self._guard._finish_stream(self._call, self.raw, self._reader, None, True)
        with contextlib.suppress(Exception):
            await self.raw.close()

    async def __aenter__(self) -> AsyncGuardedStream:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()
