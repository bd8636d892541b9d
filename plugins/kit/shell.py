"""The adapter shell every plugin and provider guard stands on (the adapter kit): the lazy framework
import, one constructor and ``get_trace``, inline scoring, the guard modes and the one error guard
(our exceptions never reach the user's agent). Knows no framework. See docs/architecture.md."""

from __future__ import annotations

import asyncio
import difflib
import functools
import importlib
import inspect
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, ClassVar, TypedDict, TypeVar

from groundlens_core import internal_errors
from groundlens_core._imports import MissingFrameworkError, install_line, require
from groundlens_core.errors import describe_exception
from groundlens_core.internal_errors import internal_error
from groundlens_core.renamed import renamed
from groundlens_core.scoring.results import GroundlensResult
from groundlens_core.trace.model import META_INTERNAL_ERROR, ContextPiece, Trace, Usage
from groundlens_core.trace.recorder import CallRecord, Recorder, TraceListener, app_span
from groundlens_core.trace.recorder.inputs import context_from
from groundlens_core.trace.recorder.sampling import sampling_of

__all__ = [
    "DEFAULT_WAIT_SECONDS",
    "GUARD_MODES",
    "AdapterShell",
    "CarriesResult",
    "GroundlensFlaggedError",
    "InlineResult",
    "InlineScore",
    "MissingFrameworkError",
    "apply_guard",
    "check_mode",
    "handle_internal_errors",
    "install_line",
    "lazy_classes",
    "optional_base",
    "parse_usage",
    "report_internal_error",
    "require",
    "ShellOptions",
    "ShellOptionsBesideName",
    "names_shell_options",
]

#: what ``timeout=None`` means for ``get_trace`` / ``get_traces`` / ``flush``: wait this long at most
DEFAULT_WAIT_SECONDS = 120.0
#: the guard modes every guarding adapter accepts (the Semantic Kernel filter adds ``"replace"``)
GUARD_MODES: tuple[str, ...] = ("annotate", "raise")
#: trace key of an internal error that happened before the adapter knew which trace it belonged to
INTERNAL_TRACE_KEY = "groundlens-internal"

F = TypeVar("F", bound=Callable[..., Any])


def optional_base(module: str, name: str) -> type:
    """The framework class ``module.name`` for an adapter to subclass, or ``object`` when the
    framework is not installed (the adapter's constructor then raises the install line)."""
    try:
        return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]
    except ImportError:
        return object


def lazy_classes(module: str, builders: Mapping[str, Callable[[], type]]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that builds the classes subclassing framework types on first access
    (a missing framework raises the install line where the class is named), cached in ``_built``."""

    def __getattr__(name: str) -> Any:
        builder = builders.get(name)
        if builder is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        cache = vars(importlib.import_module(module)).setdefault("_built", {})
        if name not in cache:
            cls = builder()
            cls.__module__ = module
            cache[name] = cls
        return cache[name]

    return __getattr__


_INPUT_KEYS = ("input_tokens", "prompt_tokens", "prompt_token_count")
_OUTPUT_KEYS = ("output_tokens", "completion_tokens", "candidates_token_count")
_TOTAL_KEYS = ("total_tokens", "total_token_count")
#: where a response object or a framework's output dict keeps its usage
_NESTED_KEYS = ("usage", "usage_metadata", "token_usage", "models_usage")


def get_field(obj: Any, key: str, default: Any = None) -> Any:
    """``obj[key]`` for a mapping, ``obj.key`` for an SDK or framework object (requests and
    responses may hold either); ``default`` when absent."""
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    try:
        return getattr(obj, key, default)
    except Exception:  # odd objects (lazy proxies) must not break an adapter
        return default


def _count(obj: Any, keys: Sequence[str]) -> int | None:
    for key in keys:
        value = get_field(obj, key)
        if isinstance(value, bool):
            continue
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    return None


def parse_usage(obj: Any, _depth: int = 0) -> Usage | None:
    """Token usage from any SDK's or framework's usage object or dict (looked for up to two levels
    down, under ``usage`` and the like), or None when it holds no counts; the total defaults to
    the sum."""
    if obj is None or isinstance(obj, (str, bytes, int, float)):
        return None
    if isinstance(obj, Usage):
        return obj
    inp, out, total = _count(obj, _INPUT_KEYS), _count(obj, _OUTPUT_KEYS), _count(obj, _TOTAL_KEYS)
    if inp is None and out is None and total is None:
        if _depth >= 2:
            return None
        for key in _NESTED_KEYS:
            inner = get_field(obj, key)
            if inner is not None and inner is not obj:
                found = parse_usage(inner, _depth + 1)
                if found is not None:
                    return found
        return None
    if total is None:
        total = (inp or 0) + (out or 0)
    return Usage(inp, out, total)


class CarriesResult:
    """``flagged`` and ``triage`` of a value that carries a result, or none (not scored): the inline
    outcome and a provider guard's response read them the same way."""

    def carried_result(self) -> GroundlensResult | None:
        raise NotImplementedError

    @property
    def flagged(self) -> bool:
        result = self.carried_result()
        return result is not None and result.flagged

    @property
    def triage(self) -> str | None:
        result = self.carried_result()
        return None if result is None else result.triage


@dataclass(frozen=True)
class InlineResult(CarriesResult):
    """The outcome of :meth:`AdapterShell.score_inline`: the result, or None with ``error`` (scoring
    failed) or ``skipped`` (the call is not scorable). ``result.score`` is the number."""

    result: GroundlensResult | None
    error: str | None = None
    latency_ms: float = 0.0
    skipped: str | None = None

    def carried_result(self) -> GroundlensResult | None:
        return self.result

    score = renamed("result", "InlineResult.score")  # the result object, not its number

    def record_fields(self) -> dict[str, Any]:
        """The ``CallRecord`` fields that hand this outcome to the recorder (so it is not scored twice)."""
        if self.result is not None:
            return {"result": self.result, "scoring_latency_ms": self.latency_ms}
        if self.error is not None:
            return {"error": f"groundlens could not score this call: {self.error}"}
        return {}


#: the older name of :class:`InlineResult`, kept so code written against it still runs
InlineScore = InlineResult


class GroundlensFlaggedError(Exception):
    """Raised by ``mode="raise"`` for a flagged answer: ``.result`` (its ``.score`` is the number),
    ``.response``, ``.node``, ``.step_id``."""

    def __init__(
        self,
        message: str,
        *,
        result: GroundlensResult,
        response: Any,
        node: str | None = None,
        step_id: str | None = None,
    ):
        super().__init__(message)
        self.result = result
        self.response = response
        self.node = node
        self.step_id = step_id

    score = renamed("result", "GroundlensFlaggedError.score")  # the result object, not its number

    @property
    def function_name(self) -> str | None:
        """The Semantic Kernel name of :attr:`node`."""
        return self.node

    @classmethod
    def find(cls, exc: BaseException | None) -> GroundlensFlaggedError | None:
        """This error inside ``exc``'s cause/context chain (frameworks wrap it), or None."""
        seen: set[int] = set()
        while exc is not None and id(exc) not in seen:
            if isinstance(exc, cls):
                return exc
            seen.add(id(exc))
            exc = exc.__cause__ or exc.__context__
        return None

    @classmethod
    def for_result(
        cls, result: GroundlensResult, response: Any, node: str | None = None, step_id: str | None = None
    ) -> GroundlensFlaggedError:
        where = f" of {node}" if node else ""
        message = (
            f"groundlens flagged the answer{where} ({result.method.upper()}={result.value:.2f}): {result.explanation}"
        )
        return cls(message, result=result, response=response, node=node, step_id=step_id)


def check_mode(mode: str, on_flagged: Callable[..., Any] | None = None, modes: Sequence[str] = GUARD_MODES) -> str:
    """``mode`` if it is one of ``modes``, else a one-line ``ValueError``; ``on_flagged`` must be callable."""
    if mode not in modes:
        raise ValueError(f"mode must be one of {', '.join(modes)}, got {mode!r}")
    if on_flagged is not None and not callable(on_flagged):
        raise ValueError(f"on_flagged must be callable, got {type(on_flagged).__name__}")
    return mode


def apply_guard(
    inline: InlineResult,
    *,
    mode: str,
    response: Any,
    on_flagged: Callable[..., Any] | None = None,
    node: str | None = None,
    step_id: str | None = None,
) -> GroundlensFlaggedError | None:
    """Apply a guard mode to one scored answer: when flagged, call ``on_flagged(inline, response)``
    and, with ``mode="raise"``, return the error for the adapter to raise once its step is recorded."""
    if not inline.flagged or inline.result is None:
        return None
    if on_flagged is not None:
        on_flagged(inline, response)
    if mode == "raise":
        return GroundlensFlaggedError.for_result(inline.result, response, node, step_id)
    return None


@dataclass(frozen=True)
class _ErrorGuard:
    """See :func:`handle_internal_errors`."""

    adapter: Any
    where: str | None
    trace_key: Any
    node: str | None
    default: Any
    framework: str | None

    def __enter__(self) -> _ErrorGuard:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        if exc is None or not isinstance(exc, Exception):
            return False
        key = self.trace_key() if callable(self.trace_key) else self.trace_key
        _report(self.adapter, self.framework, self.where or "groundlens", exc, key, self.node)
        return True

    async def __aenter__(self) -> _ErrorGuard:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        return self.__exit__(exc_type, exc, tb)

    def __call__(self, fn: F) -> F:
        """As a decorator: a failure of ``fn`` is reported and ``default`` returned."""
        where = self.where or fn.__name__

        def failed(exc: Exception, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            owner = self.adapter
            if owner is None and args and isinstance(args[0], AdapterShell):
                owner = args[0]
            key = self.trace_key
            if callable(key):
                try:
                    key = key(*args, **kwargs)
                except Exception:
                    key = None
            _report(owner, self.framework, where, exc, key, self.node)
            return self.default

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                try:
                    return await fn(*args, **kwargs)
                except Exception as exc:
                    return failed(exc, args, kwargs)

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except Exception as exc:
                return failed(exc, args, kwargs)

        return wrapper  # type: ignore[return-value]


def handle_internal_errors(
    adapter: Any = None,
    where: str | None = None,
    *,
    trace_key: Any = None,
    node: str | None = None,
    default: Any = None,
    framework: str | None = None,
) -> Any:
    """The one error guard: our exceptions never reach the user's agent, request or batch; they are
    logged once and recorded as an ``error`` step (the adapters' side of the internal-error policy,
    :mod:`groundlens_core.internal_errors`: raised instead under ``GROUNDLENS_RAISE_INTERNAL_ERRORS``).

    A decorator on an adapter method (bare, or with keywords) or a context manager (``with`` or
    ``async with``). ``trace_key`` is a key or a callable given the method's arguments, returning a
    key or ``(key, node)``; ``default`` is what a decorated method returns after a failure;
    ``framework`` names the logger when there is no adapter."""
    if callable(adapter) and not isinstance(adapter, AdapterShell) and where is None:
        return _ErrorGuard(None, None, trace_key, node, default, framework)(adapter)  # bare @decorator
    return _ErrorGuard(adapter, where, trace_key, node, default, framework)


_SEEN_LOCK = threading.Lock()
_SEEN: set[tuple[str, str, str]] = set()


def _report(
    adapter: Any,
    framework: str | None,
    where: str,
    exc: BaseException,
    trace_key: Any,
    node: str | None,
    *,
    at: float | None = None,
) -> None:
    """Log once and record an error step. Never raises (but under GROUNDLENS_RAISE_INTERNAL_ERRORS,
    as every boundary does: see groundlens_core.internal_errors)."""
    owner_name = type(adapter).__name__ if adapter is not None else (framework or "plugins")
    internal_error(exc, f"{owner_name} inside {where}", None)
    try:
        if isinstance(trace_key, tuple):  # a trace_key callable may name the node too: (key, node)
            trace_key, node = trace_key[0], trace_key[1] if len(trace_key) > 1 and trace_key[1] else node
        fw = getattr(adapter, "framework", None) or framework or "plugins"
        logger = logging.getLogger(f"groundlens.{fw}")
        sig = (fw, where, type(exc).__name__)
        seen = getattr(adapter, "_logged_failures", None)
        if not isinstance(seen, set):
            seen = _SEEN
        with _SEEN_LOCK:
            first = sig not in seen
            seen.add(sig)
        owner = type(adapter).__name__ if adapter is not None else fw
        if first:
            logger.warning(
                "groundlens: %s failed inside %s: %s (could not record this event; an error step stands in for it)",
                owner,
                where,
                describe_exception(exc),
                exc_info=exc,
            )
        else:
            logger.debug("groundlens: %s failed inside %s again: %s", owner, where, describe_exception(exc))
        recorder = getattr(adapter, "recorder", None)
        if isinstance(recorder, Recorder):
            now = time.time() if at is None else at  # ``at``: when the event came, if it is translated later
            recorder.record(
                CallRecord(
                    trace_key=str(trace_key) if trace_key else INTERNAL_TRACE_KEY,
                    node=node or "groundlens",
                    kind="agent",
                    error=f"groundlens could not read this event ({where}): {describe_exception(exc)}",
                    started_at=now,
                    ended_at=now,
                    metadata={META_INTERNAL_ERROR: True, "callback": where},
                    # translated later, on another thread: its span is not the event's
                    otel_parent=app_span.ABSENT if internal_errors.in_deferred_work() else None,
                )
            )
    except Exception:  # pragma: no cover - the very last line of defence
        pass


#: the error guard's report, for an adapter method that catches its own failures in line (a hot
#: callback, where a decorator's extra call costs more than the callback itself)
report_internal_error = _report


def _attach_otel(recorder: Recorder, tracer_provider: Any, log: logging.Logger) -> bool:
    """Add the live OTel exporter for ``tracer_provider``; a broken provider is one warning, no raise."""
    try:
        otel = require("groundlens_core.trace.otel", "otel", "the OpenTelemetry exporter")
        recorder.add_listener(otel.OTelExporter(tracer_provider=tracer_provider))
        return True
    except Exception as exc:
        log.warning("groundlens: tracer_provider ignored, spans will not be exported: %s", describe_exception(exc))
        return False


class AdapterShell:
    """Base class of every framework adapter and provider guard (see the module docstring)."""

    #: the framework or SDK this adapter translates (``"langgraph"``, ``"openai"``): the recorder's
    #: framework, the logger name ``groundlens.<framework>``
    framework: ClassVar[str] = "plugins"
    #: the install extra that brings the framework (``pip install "groundlens-core[<extra>]"``)
    extra: ClassVar[str] = "all"
    #: the trace ``get_trace()`` reads when given no key (None: the latest)
    default_trace_key: str | None = None

    def __init__(
        self,
        *,
        name: str | None = None,
        recorder: Recorder | None = None,
        embedder: Any = None,
        calibration: Any = None,
        long_context: str | None = None,
        listeners: Sequence[TraceListener] = (),
        tracer_provider: Any = None,
        max_traces: int = 100,
        sample_rate: float = 1.0,
        nodes: Sequence[str] | None = None,
        skip_nodes: Sequence[str] = (),
    ):
        sampling = sampling_of(sample_rate, nodes, skip_nodes)  # checked before anything is made
        self.name = name
        self.log = logging.getLogger(f"groundlens.{self.framework}")
        self._logged_failures: set[tuple[str, str, str]] = set()  # (framework, place, exception type)
        if recorder is None:
            recorder = Recorder(
                self.framework,
                name=name,
                embedder=embedder,
                calibration=calibration,
                long_context=long_context,
                listeners=listeners,
                max_traces=max_traces,
            )
        else:
            if not isinstance(recorder, Recorder):
                raise TypeError(f"recorder must be a groundlens Recorder, got {type(recorder).__name__}")
            for listener in listeners:
                recorder.add_listener(listener)
        self.recorder: Recorder = recorder
        if sampling is not None:  # given ones only: a shared recorder keeps its own otherwise
            recorder.sampling = sampling
        if tracer_provider is not None:
            _attach_otel(recorder, tracer_provider, self.log)

    @property
    def embedder(self) -> Any:
        return self.recorder.scoring_options()["embedder"]

    @property
    def calibration(self) -> Any:
        return self.recorder.scoring_options()["calibration"]

    @property
    def long_context(self) -> str | None:
        return self.recorder.scoring_options().get("long_context")

    def get_trace(self, key: str | None = None, *, timeout: float | None = None) -> Trace | None:
        """The trace ``key`` (default: :attr:`default_trace_key`, else the latest) once its pending
        scores are done; after ``timeout``, the unscored steps are ``skip_reason="pending"``."""
        if isinstance(key, (int, float)) and not isinstance(key, bool):  # get_trace(5.0): a timeout
            key, timeout = None, float(key)
        self.flush(timeout)
        return self.recorder.get_trace(key or self.default_trace_key, wait=False)

    def get_traces(self, *, timeout: float | None = None) -> list[Trace]:
        """Every kept trace, oldest first, once pending scores are done (or ``timeout`` passed: the
        steps not scored yet are then marked ``skip_reason="pending"``)."""
        self.flush(timeout)
        return self.recorder.get_traces(wait=False)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every recorded call is scored; False when ``timeout`` (default
        :data:`DEFAULT_WAIT_SECONDS`) passed first."""
        return self.recorder.flush(DEFAULT_WAIT_SECONDS if timeout is None else timeout)

    def add_listener(self, listener: TraceListener) -> None:
        self.recorder.add_listener(listener)

    def score_inline(self, *, question: Any, response: Any, context: Any = ()) -> InlineResult:
        """Score one answer now, on this thread, deciding the method as the recorder does. Never raises."""
        t0 = time.perf_counter()
        try:
            pieces = _pieces(context)
            call = CallRecord(trace_key="", node="", question=question, response=response, context=pieces)
            method, reason = Recorder.method_of(call)
            if method != "score":
                return InlineResult(
                    None, error=reason if method == "error" else None, skipped=reason if method == "skipped" else None
                )
            from groundlens_core.scoring import evaluate

            # one entry per piece (None for one without text), so an evidence sentence's
            # passage_piece indexes the step's context
            texts = [p.text if isinstance(p.text, str) else None for p in pieces]
            result = evaluate(question, response, texts or None, **self.recorder.scoring_options())
            return InlineResult(result, latency_ms=(time.perf_counter() - t0) * 1000.0)
        except Exception as exc:
            internal_error(exc, f"{type(self).__name__}.score_inline", None)
            self.log.warning("groundlens: %s could not score in line: %s", type(self).__name__, describe_exception(exc))
            return InlineResult(None, error=describe_exception(exc), latency_ms=(time.perf_counter() - t0) * 1000.0)

    async def ascore_inline(self, *, question: Any, response: Any, context: Any = ()) -> InlineResult:
        """:meth:`score_inline` in a worker thread, so an event loop keeps running while it embeds."""
        return await asyncio.to_thread(self.score_inline, question=question, response=response, context=context)

    def record_internal_error(
        self, where: str, exc: BaseException, trace_key: str | None = None, node: str | None = None
    ) -> None:
        """What :func:`handle_internal_errors` does, for code that caught the exception itself."""
        _report(self, None, where, exc, trace_key, node)


#: the keywords of :class:`AdapterShell`'s constructor, the same on every adapter
SHELL_KEYWORDS = tuple(inspect.signature(AdapterShell.__init__).parameters)[1:]


class ShellOptionsBesideName(TypedDict, total=False):
    """:class:`ShellOptions` but ``name``, for an adapter that declares ``name`` itself (positional,
    or with a default trace name of its own)."""

    recorder: Recorder | None
    embedder: Any
    calibration: Any
    long_context: str | None
    listeners: Sequence[TraceListener]
    tracer_provider: Any
    max_traces: int
    sample_rate: float
    nodes: Sequence[str] | None
    skip_nodes: Sequence[str]


class ShellOptions(ShellOptionsBesideName, total=False):
    """The options every adapter takes and hands to :class:`AdapterShell` (defaults and meaning:
    its constructor). An adapter's ``**options: Unpack[ShellOptions]`` lets editors and type
    checkers see each name; :func:`names_shell_options` gives ``help()`` their defaults."""

    name: str | None


def names_shell_options(init: F) -> F:
    """An adapter constructor written ``__init__(self, ..., **options: Unpack[ShellOptions])`` gets
    the signature that names every shell option with its default (after its own keywords, before an
    SDK client's ``**kwargs``), so ``help()`` and ``inspect.signature`` show them as if written out.
    The list is written once, on :class:`AdapterShell`. A misspelt option is refused in the adapter's
    own name, with the closest option it takes."""
    own = inspect.signature(init)
    shell = inspect.signature(AdapterShell.__init__).parameters
    params = [p for p in own.parameters.values() if p.name != "options"]
    tail = [p for p in params if p.kind is inspect.Parameter.VAR_KEYWORD]
    head = [p for p in params if p.kind is not inspect.Parameter.VAR_KEYWORD]
    named = [shell[k] for k in SHELL_KEYWORDS if k not in own.parameters]
    signature = own.replace(parameters=[*head, *named, *tail])
    known = [name for name in signature.parameters if name != "self"]

    @functools.wraps(init)
    def checked(self: Any, *args: Any, **kwargs: Any) -> None:
        if not tail:  # without an SDK client's **kwargs, every keyword must be one of ours
            for key in kwargs:
                if key not in known:
                    close = difflib.get_close_matches(key, known, n=1)
                    hint = f"; did you mean {close[0]!r}?" if close else ""
                    raise TypeError(f"{type(self).__name__}() got an unexpected keyword argument {key!r}{hint}")
        init(self, *args, **kwargs)

    checked.__signature__ = signature  # type: ignore[attr-defined]
    return checked  # type: ignore[return-value]


def _pieces(context: Any) -> list[ContextPiece]:
    if context is None or isinstance(context, str):
        return context_from(context)
    if isinstance(context, Iterable):
        return context_from(list(context))
    raise TypeError(f"context must be text or a list of texts, got {type(context).__name__}")
