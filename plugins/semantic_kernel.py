"""Semantic Kernel: a function-invocation filter that scores prompt functions in line and records
native functions as ``tool`` steps whose outputs become context. docs/integrations/semantic-kernel.md."""

from __future__ import annotations

import contextvars
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable, ContextManager, Sequence

from groundlens_core.errors import describe_exception
from groundlens_core.plugins.kit.shell import (
    AdapterShell,
    GroundlensFlaggedError,
    ShellOptions,
    apply_guard,
    check_mode,
    handle_internal_errors,
    names_shell_options,
    parse_usage,
    require,
)
from groundlens_core.trace.model import ContextPiece, Usage, new_id
from groundlens_core.trace.recorder import CallRecord
from groundlens_core.trace.recorder.inputs import (
    CONTEXT_NAMES,
    QUESTION_NAMES,
    as_text,
    context_from,
    first_text,
    short,
    trace_scope,
)

if TYPE_CHECKING:  # pragma: no cover
    from typing import Unpack  # Python 3.11; annotations only

    from semantic_kernel.filters.functions.function_invocation_context import FunctionInvocationContext

log = logging.getLogger("groundlens.semantic_kernel")

FRAMEWORK = "semantic_kernel"
EXTRA = "semantic-kernel"
MODES = ("annotate", "replace", "raise")
DEFAULT_REPLACEMENT = (
    "This answer was held back for human review: groundlens ranked it as weakly grounded. "
    "(A triage signal, not a verdict of truth.)"
)


@dataclass
class _Run:
    """One trace in progress: its key, and the native-function outputs seen so far."""

    key: str
    context: list[ContextPiece] = field(default_factory=list)


@dataclass(frozen=True)
class _Step:
    """Where the step of one function invocation goes: its trace, node, id, parent and start."""

    run: _Run
    node: str
    step_id: str
    parent_id: str | None
    started: float

    def record(self, kind: str, **fields: Any) -> CallRecord:
        fields.setdefault("ended_at", time.time())
        return CallRecord(
            trace_key=self.run.key,
            node=self.node,
            kind=kind,
            started_at=self.started,
            step_id=self.step_id,
            parent_id=self.parent_id,
            **fields,
        )


_RUN: contextvars.ContextVar[_Run | None] = contextvars.ContextVar("groundlens_sk_run", default=None)
_PARENT: contextvars.ContextVar[str | None] = contextvars.ContextVar("groundlens_sk_parent", default=None)


class GroundlensFilter(AdapterShell):
    """A ``FUNCTION_INVOCATION`` filter: scores prompt functions, records native ones as context."""

    framework = FRAMEWORK
    extra = EXTRA

    @names_shell_options
    def __init__(
        self,
        *,
        mode: str = "annotate",
        on_flagged: Callable[..., Any] | None = None,
        replacement: str = DEFAULT_REPLACEMENT,
        question_arguments: Sequence[str] = QUESTION_NAMES,
        context_arguments: Sequence[str] = CONTEXT_NAMES,
        metadata_key: str = "groundlens",
        **options: Unpack[ShellOptions],
    ):
        self.mode = check_mode(mode, on_flagged, MODES)
        require("semantic_kernel", EXTRA, "Semantic Kernel")
        self.on_flagged = on_flagged
        self.replacement = replacement
        self.question_arguments = tuple(question_arguments)
        self.context_arguments = tuple(context_arguments)
        self.metadata_key = metadata_key
        super().__init__(**options)

    def trace(self, name: str | None = None, *, metadata: dict[str, Any] | None = None) -> ContextManager[str]:
        """Group several ``kernel.invoke`` calls into one trace; yields its key."""
        return trace_scope(self.recorder, _RUN, lambda key: _Run(key=key), name=name, metadata=metadata)

    async def __call__(self, context: FunctionInvocationContext, next: Callable[[Any], Awaitable[None]]) -> None:
        run, owner_token = self._enter(context)
        step = _Step(run, _function_name(context), new_id(), _PARENT.get(), time.time())
        parent_token = _PARENT.set(step.step_id)
        try:
            await next(context)
        except BaseException as exc:  # CancelledError too: a timed-out invoke must not leave its trace open
            with handle_internal_errors(self, "record_failure", trace_key=run.key):
                kind = "llm" if self._is_prompt_function(context.function) else "tool"
                self.recorder.record(step.record(kind, error=f"the function raised {describe_exception(exc)}"))
            self._leave(run, owner_token, error=describe_exception(exc))
            raise
        finally:
            _PARENT.reset(parent_token)
        ended = time.time()
        flagged: GroundlensFlaggedError | None = None
        try:
            async with handle_internal_errors(self, "score_result", trace_key=run.key, node=step.node):
                flagged = await self._after(context, step, ended)
        finally:
            # a deliberate raise still ends the invocation abnormally: the trace says so
            self._leave(run, owner_token, error=None if flagged is None else f"GroundlensFlaggedError: {flagged}")
        if flagged is not None:
            raise flagged

    def _enter(self, context: Any) -> tuple[_Run, contextvars.Token | None]:
        run = _RUN.get()
        if run is not None:
            return run, None
        run = _Run(key=new_id())
        with handle_internal_errors(self, "start_trace"):
            self.recorder.start_trace(run.key, name=_function_name(context))
        return run, _RUN.set(run)

    def _leave(self, run: _Run, owner_token: contextvars.Token | None, *, error: str | None) -> None:
        if owner_token is None:
            return
        try:
            _RUN.reset(owner_token)
        except ValueError:  # pragma: no cover - a different context; nothing to undo
            pass
        with handle_internal_errors(self, "end_trace", trace_key=run.key):
            self.recorder.end_trace(run.key, error=error)

    def _is_prompt_function(self, function: Any) -> bool:
        sk_prompt = require("semantic_kernel.functions.kernel_function_from_prompt", EXTRA, "Semantic Kernel")
        return isinstance(function, sk_prompt.KernelFunctionFromPrompt)

    async def _after(self, context: Any, step: _Step, ended: float) -> GroundlensFlaggedError | None:
        if context.result is None:
            return None
        if not self._is_prompt_function(context.function):
            self._record_native(context, step, ended)
            return None

        history = context.result.metadata.get("messages")
        question, q_source = self._question(context, history)
        pieces = self._context(context, history, step.run)
        meta: dict[str, Any] = {"function_kind": "prompt"}
        if q_source:
            meta["question_source"] = q_source
        base: dict[str, Any] = dict(question=question, context=pieces, metadata=meta, ended_at=ended)

        if context.is_streaming:
            self._wrap_stream(context, step, base)
            return None

        value = context.result.value
        first = (value[0] if value else None) if isinstance(value, list) else value
        response = _message_text(first)
        model, usage = _model_and_usage(first)
        base.update(model=model, usage=usage)
        if _only_function_calls(first):
            self.recorder.record(step.record("tool_call", response=None, **base))
            return None
        if not (response and response.strip() and question and question.strip()):
            self.recorder.record(step.record("llm", response=response, **base))
            return None

        inline = await self.ascore_inline(question=question, response=response, context=pieces)
        if inline.result is not None:
            context.result.metadata[self.metadata_key] = inline.result.to_dict()
        flagged_error = apply_guard(
            inline, mode=self.mode, response=response, on_flagged=self.on_flagged, node=step.node, step_id=step.step_id
        )
        if inline.result is not None and inline.flagged and self.mode == "replace":
            context.result = self._replaced(context.result, response, inline.result.to_dict())
            meta["guard"] = "replaced"
        elif flagged_error is not None:
            meta["guard"] = "raised"
        self.recorder.record(step.record("llm", response=response, **inline.record_fields(), **base))
        return flagged_error

    def _question(self, context: Any, history: Any) -> tuple[str | None, str | None]:
        """(question, where it came from): an argument, else the last user message sent."""
        args = context.arguments
        hit = first_text(args, self.question_arguments)
        if hit:
            return hit[1], f"argument:{hit[0]}"
        for value in (history, *(args or {}).values()):
            text = _last_user_text(value)
            if text:
                return text, "chat_history"
        prompt = getattr(context.result, "rendered_prompt", None)
        if isinstance(prompt, str) and prompt.strip():
            return prompt, "rendered_prompt"
        return None, None

    def _context(self, context: Any, history: Any, run: _Run) -> list[ContextPiece]:
        tool_results = _function_results(history)
        from_args: list[ContextPiece] = []
        args = context.arguments or {}
        for name in self.context_arguments:
            try:
                value = args.get(name)
            except Exception:
                value = None
            from_args.extend(context_from(value, source=f"argument:{name}"))
        return context_from(tool_results, from_args, list(run.context))

    def _replaced(self, result: Any, original: str, result_dict: dict[str, Any]) -> Any:
        from semantic_kernel.contents import AuthorRole, ChatMessageContent
        from semantic_kernel.functions.function_result import FunctionResult

        value = result.value
        first = value[0] if isinstance(value, list) and value else None
        message = ChatMessageContent(
            role=AuthorRole.ASSISTANT, content=self.replacement, ai_model_id=getattr(first, "ai_model_id", None)
        )
        metadata = dict(result.metadata)
        metadata[self.metadata_key] = result_dict
        metadata[f"{self.metadata_key}_guard"] = {
            "mode": "replace",
            "action": "replaced",
            "original_response": original,
            "original_value": value,
        }
        return FunctionResult(
            function=result.function, value=[message], rendered_prompt=result.rendered_prompt, metadata=metadata
        )

    def _record_native(self, context: Any, step: _Step, ended: float) -> None:
        """A native function's step; its result is context for the later prompt functions of the
        run, naming this step as its producer."""
        text = _result_text(context.result)
        args = {
            k: short(v) for k, v in (context.arguments or {}).items() if not isinstance(v, (list, dict)) or len(v) < 20
        }
        metadata = {"function_kind": "native", "arguments": args}
        step_id = self.recorder.record(step.record("tool", response=text, ended_at=ended, metadata=metadata))
        if text and text.strip():
            step.run.context.append(ContextPiece(text=text, source=f"tool:{step.node}", producer=step_id or None))

    def _wrap_stream(self, context: Any, step: _Step, base: dict[str, Any]) -> None:
        """Pass the stream through untouched; record (and score in the background) once it ends."""
        inner = context.result.value
        if not hasattr(inner, "__aiter__"):
            self.recorder.record(step.record("llm", response=_result_text(context.result), **base))
            return
        recorder = self.recorder
        base = dict(base, metadata=dict(base["metadata"], streaming=True))

        async def passthrough() -> AsyncIterator[Any]:
            parts: list[str] = []
            model = None
            failed: str | None = None
            try:
                async for chunk in inner:
                    try:
                        for msg in chunk if isinstance(chunk, list) else [chunk]:
                            role = getattr(msg, "role", "")
                            if str(getattr(role, "value", role)) in ("assistant", ""):
                                text = _message_text(msg)
                                if text:
                                    parts.append(text)
                                model = model or getattr(msg, "ai_model_id", None)
                    except Exception:  # pragma: no cover - defensive
                        log.debug("groundlens: unreadable stream chunk", exc_info=True)
                    yield chunk
            except Exception as exc:
                failed = f"the stream raised {describe_exception(exc)}"
                raise
            finally:
                try:
                    fields = dict(base, ended_at=time.time(), model=model, error=failed)
                    recorder.record(step.record("llm", response="".join(parts) or None, **fields))
                except Exception:  # pragma: no cover - defensive
                    log.warning("groundlens: could not record a stream", exc_info=True)

        context.result.value = passthrough()


def _function_name(context: Any) -> str:
    fn = getattr(context, "function", None)
    return str(getattr(fn, "fully_qualified_name", None) or getattr(fn, "name", None) or "function")


def _role(message: Any) -> str:
    role = getattr(message, "role", None)
    return str(getattr(role, "value", role) or "")


def _message_text(message: Any) -> str | None:
    if isinstance(message, str):
        return message
    content = getattr(message, "content", None)
    if isinstance(content, str) and content:
        return content
    text = getattr(message, "text", None)
    if isinstance(text, str) and text:
        return text
    return content if isinstance(content, str) else None


def _only_function_calls(message: Any) -> bool:
    items = getattr(message, "items", None) or []
    names = {type(i).__name__ for i in items}
    return bool(names) and names <= {"FunctionCallContent"} and not (_message_text(message) or "").strip()


def _model_and_usage(message: Any) -> tuple[str | None, Usage | None]:
    model = getattr(message, "ai_model_id", None)
    meta = getattr(message, "metadata", None) or {}
    usage = parse_usage(meta.get("usage")) if isinstance(meta, dict) else None
    return (str(model) if model else None), usage


def _history_messages(history: Any) -> list[Any]:
    messages = getattr(history, "messages", None)
    return list(messages) if isinstance(messages, list) else []


def _last_user_text(history: Any) -> str | None:
    for message in reversed(_history_messages(history)):
        if _role(message) == "user":
            text = _message_text(message)
            if text and text.strip():
                return text
    return None


def _function_results(history: Any) -> list[ContextPiece]:
    """Every tool result (``FunctionResultContent``) in a chat history, as context pieces."""
    out: list[ContextPiece] = []
    for message in _history_messages(history):
        for item in getattr(message, "items", None) or []:
            if type(item).__name__ != "FunctionResultContent":
                continue
            name = getattr(item, "name", None) or getattr(item, "function_name", None) or "function"
            out.extend(context_from(getattr(item, "result", None), source=f"tool:{name}"))
    return out


def _result_text(result: Any) -> str | None:
    if result is None:
        return None
    value = getattr(result, "value", None)
    text = as_text(value)
    if text is not None:
        return text
    try:
        text = str(result)
    except Exception:
        return None
    return text or None


__all__ = ["DEFAULT_REPLACEMENT", "MODES", "GroundlensFilter", "GroundlensFlaggedError"]
