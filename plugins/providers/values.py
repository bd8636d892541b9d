"""The values the provider layer passes around: the keywords of an instrumented call, what the
SDK readers hand back, a guard call's answer and the context a ``using_context`` block attaches."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from groundlens_core.plugins.kit.shell import CarriesResult, get_field
from groundlens_core.renamed import renamed
from groundlens_core.scoring.results import GroundlensResult
from groundlens_core.trace.model import ContextPiece, Usage
from groundlens_core.trace.recorder import Recorder, context_pieces

T = TypeVar("T")

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
    """``value`` made re-readable: a generator of messages is read into a list that our reader and
    the SDK then share (else the SDK would send ``[]``); the caller's dicts are never changed."""
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


@dataclass(frozen=True)
class Completion:
    """What an SDK module reads from one response, or from a stream once it ended."""

    text: str | None
    model: str | None = None
    usage: Usage | None = None
    finish_reason: str | None = None
    tool_calls: tuple[str, ...] = ()  # names of the tools the model asked for
    #: context the SDK gathered itself within the call (google-genai's automatic function calling)
    context: tuple[ContextPiece, ...] = ()

    @property
    def only_tool_calls(self) -> bool:
        """A turn that asks for tools and says nothing: recorded as an unscored ``tool_call`` step."""
        return bool(self.tool_calls) and not (self.text or "").strip()


#: what a call that raised (or whose response our reader could not read) said
NOTHING_READ = Completion(text=None)


@dataclass(frozen=True)
class RequestView:
    """What an SDK module reads from the arguments of one call."""

    question: str | None
    context: tuple[ContextPiece, ...] = ()  # tool results in the conversation
    model: str | None = None
    stream: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Target:
    """One SDK method to instrument, ``getattr(owner, attr)``, and the operation naming its calls."""

    owner: Any
    attr: str
    operation: str


class StreamReader:
    """Reads a stream's events as they pass: ``add`` returns the text an event carries (or None),
    ``completion`` what the whole stream said. An SDK module subclasses it per API."""

    def add(self, event: Any) -> str | None:  # pragma: no cover - abstract
        raise NotImplementedError

    def completion(self) -> Completion:  # pragma: no cover - abstract
        raise NotImplementedError


@dataclass(frozen=True)
class ProviderResponse(CarriesResult):
    """The answer of a guard call with its result (SGI with context, DGI without; None when scoring
    failed, see ``scoring_error``, or the turn only asked for tools): ``groundlens_result.score`` is
    the number. A triage signal, not a verdict."""

    text: str
    model: str | None
    usage: Usage | None
    groundlens_result: GroundlensResult | None
    finish_reason: str | None
    raw: Any  # the SDK's own response object (for a stream: the SDK's stream object)
    scoring_error: str | None = None
    question: str | None = None
    context: tuple[ContextPiece, ...] = ()
    tool_calls: tuple[str, ...] = ()
    step_id: str | None = None

    def carried_result(self) -> GroundlensResult | None:
        return self.groundlens_result

    groundlens_score = renamed("groundlens_result", "ProviderResponse.groundlens_score")  # the object, not its number

    def __str__(self) -> str:
        return self.text


_ATTACHED: contextvars.ContextVar[tuple[ContextPiece, ...]] = contextvars.ContextVar("groundlens_attached", default=())
_TRACE: contextvars.ContextVar[tuple[Recorder, str] | None] = contextvars.ContextVar(
    "groundlens_provider_trace", default=None
)
#: the recorder of the guard whose guard call is sending right now: a client that this same guard
#: instrumented passes that request through (the guard call records its own step)
GUARD_SENDING: contextvars.ContextVar[Recorder | None] = contextvars.ContextVar(
    "groundlens_guard_sending", default=None
)


@contextlib.contextmanager
def sending(
    var: contextvars.ContextVar[T | None], value: T | None, failed: Callable[[BaseException], Any]
) -> Iterator[None]:
    """A request is sent inside the block: ``var`` holds ``value`` meanwhile (it is left as it is
    when ``value`` is None), and an exception the block raises goes to ``failed`` and on."""
    token = None if value is None else var.set(value)
    try:
        yield
    except BaseException as exc:
        failed(exc)
        raise
    finally:
        if token is not None:
            var.reset(token)


@contextlib.contextmanager
def using_context(*texts: Any, source: str = ATTACHED_SOURCE) -> Iterator[tuple[ContextPiece, ...]]:
    """Attach context to every guarded or instrumented call made inside the block, without sending
    it. Blocks nest and follow threads and asyncio tasks; yields the pieces in force."""
    token = _ATTACHED.set(_ATTACHED.get() + as_pieces(texts, source))
    try:
        yield _ATTACHED.get()
    finally:
        _ATTACHED.reset(token)


def as_pieces(value: Any, source: str) -> tuple[ContextPiece, ...]:
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


def whole_number(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def read_usage(usage: Any, keys: tuple[str, str, str | None], get: Callable[..., Any] = get_field) -> Usage | None:
    """Token usage read by the SDK's own field names ``(input, output, total)``: cheaper per stream
    chunk than the generic ``parse_usage``, which probes every SDK's names."""
    if usage is None:
        return None
    inp, out = whole_number(get(usage, keys[0])), whole_number(get(usage, keys[1]))
    total = whole_number(get(usage, keys[2])) if keys[2] else None
    if inp is None and out is None and total is None:
        return None
    return Usage(inp, out, total if total is not None else (inp or 0) + (out or 0))
