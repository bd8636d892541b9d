"""Google Gemini: guard calls and instrumented clients through the ``google-genai`` SDK; this module
holds the Gemini readers. What each call records: ``docs/providers.md``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from groundlens_core.plugins.kit.shell import get_field
from groundlens_core.plugins.providers import *  # noqa: F403 - the shared public names, re-exported
from groundlens_core.plugins.providers import PUBLIC, Completion, ProviderGuard, RequestView, StreamReader, Target
from groundlens_core.plugins.providers.values import read_usage
from groundlens_core.trace.model import ContextPiece, Usage
from groundlens_core.trace.recorder.inputs import as_json

__all__ = [*PUBLIC, "GoogleProvider", "instrument"]

GENERATE = "generate_content"
GENERATE_STREAM = "generate_content_stream"
_RESULT_KEYS = ("output", "result", "content", "text")


class GoogleProvider(ProviderGuard):
    """The Gemini guard: guard calls through ``models.generate_content``, and ``instrument(client)``."""

    framework: ClassVar[str] = "google"
    provider: ClassVar[str] = "gcp.gemini"
    sdk_module: ClassVar[str] = "google.genai"
    sdk_name: ClassVar[str] = "The Google Gen AI SDK (google-genai)"
    guard_operation: ClassVar[str] = GENERATE

    client_class: ClassVar[str] = "Client"
    async_client_class: ClassVar[str] = "client.AsyncClient"

    def _new_client(self, *, asynchronous: bool) -> Any:
        client = self.sdk.Client(**self._client_kwargs)
        return client.aio if asynchronous else client

    def _async_client_or_none(self) -> Any:
        """A sync ``genai.Client`` carries its async side (``client.aio``): the async calls use it."""
        if self._async_client is None and self._client is not None:
            self._async_client = self._client.aio
        return super()._async_client_or_none()

    def _build_request(self, request: dict[str, Any], *, user_text: str, system: str | None, stream: bool) -> None:
        request["contents"] = [{"role": "user", "parts": [{"text": user_text}]}]
        if system:
            config = request.get("config")
            if config is None:
                request["config"] = {"system_instruction": system}
            elif isinstance(config, Mapping):
                request["config"] = {**config, "system_instruction": system}
            else:  # a types.GenerateContentConfig
                request["config"] = config.model_copy(update={"system_instruction": system})

    def _send(self, client: Any, request: dict[str, Any], stream: bool) -> Any:
        if stream:
            return client.models.generate_content_stream(**request)
        return client.models.generate_content(**request)

    def _read_response(self, raw: Any, operation: str) -> Completion:
        reader = ChunkReader()
        reader.add(raw)
        return reader.completion()

    def _stream_reader(self, operation: str) -> StreamReader:
        return ChunkReader()

    def _targets(self, client: Any) -> list[Target]:
        sides = [client] if self._is_async_client(client) else [client, client.aio]
        return [Target(side.models, attr, attr) for side in sides for attr in (GENERATE, GENERATE_STREAM)]

    def _read_request(self, operation: str, kwargs: dict[str, Any]) -> RequestView:
        question, context = _read_contents(kwargs.get("contents"))
        model = kwargs.get("model")
        return RequestView(
            question=question,
            context=tuple(context),
            model=str(model) if model else None,
            stream=operation == GENERATE_STREAM,
        )


def instrument(client: Any, **kwargs: Any) -> Any:
    """Record every generate call of ``client`` (its ``aio`` side included); returns the same client."""
    return GoogleProvider(client=client, **kwargs).instrument(client)


def _get(obj: Any, key: str, default: Any = None) -> Any:
    """``obj.key`` for an SDK object; for a dict ``obj[key]``, or its REST spelling
    (``function_response`` -> ``functionResponse``) as hand-written dicts may use it."""
    if isinstance(obj, Mapping):
        if key in obj:
            return obj[key]
        head, *rest = key.split("_")
        return obj.get(head + "".join(w.title() for w in rest), default) if rest else default
    return get_field(obj, key, default)


def _is_turn(item: Any) -> bool:
    """A ``Content`` (has ``parts``) rather than a part or a string."""
    return not isinstance(item, str) and _get(item, "parts") is not None


def _is_model_part(part: Any) -> bool:
    return not isinstance(part, str) and _get(part, "function_call") is not None


def turns(contents: Any) -> list[tuple[str, list[Any]]]:
    """``contents`` as ``(role, parts)`` turns, grouped as the SDK groups them (``t_contents``):
    a run of loose user parts is one user turn, a run of function calls one model turn."""
    if contents is None:
        return []
    items = contents if isinstance(contents, (list, tuple)) else [contents]
    out: list[tuple[str, list[Any]]] = []
    loose: list[Any] = []

    def close_loose() -> None:
        if loose:
            out.append(("model" if _is_model_part(loose[0]) else "user", list(loose)))
            loose.clear()

    for item in items:
        if _is_turn(item):
            close_loose()
            out.append((str(_get(item, "role") or "user"), list(_get(item, "parts") or [])))
        elif isinstance(item, (list, tuple)):
            close_loose()
            out.append(("user", list(item)))
        else:
            if loose and _is_model_part(item) != _is_model_part(loose[0]):
                close_loose()
            loose.append(item)
    close_loose()
    return out


def _part_text(part: Any) -> str | None:
    if isinstance(part, str):
        return part
    if _get(part, "thought"):
        return None
    text = _get(part, "text")
    return text if isinstance(text, str) else None


def turn_text(parts: Sequence[Any]) -> str:
    return "\n\n".join(t for t in (_part_text(p) for p in parts) if t and t.strip()).strip()


def _question_index(all_turns: Sequence[tuple[str, list[Any]]]) -> int | None:
    for i in range(len(all_turns) - 1, -1, -1):
        role, parts = all_turns[i]
        if role == "user" and turn_text(parts):
            return i
    return None


def request_question(contents: Any) -> str | None:
    """The question of a ``generate_content`` call: the last user turn with text (docs/providers.md)."""
    return _read_contents(contents)[0]


def _response_text(response: Any) -> str:
    if isinstance(response, str):
        return response
    if isinstance(response, Mapping):
        for key in _RESULT_KEYS:
            if isinstance(response.get(key), str):
                return str(response[key])
    return as_json(response)


def request_context(contents: Any) -> list[ContextPiece]:
    """The ``function_response`` parts the model is shown, from the question on (the whole
    conversation when no question is found)."""
    return _read_contents(contents)[1]


def _read_contents(contents: Any) -> tuple[str | None, list[ContextPiece]]:
    """:func:`request_question` and :func:`request_context` of ``contents``, its turns read once."""
    all_turns = turns(contents)
    i = _question_index(all_turns)
    pieces = []
    for _role, parts in all_turns[(i or 0) :]:
        for part in parts:
            result = None if isinstance(part, str) else _get(part, "function_response")
            if result is None:
                continue
            text = _response_text(_get(result, "response"))
            if text.strip():
                pieces.append(ContextPiece(text=text, source=f"tool:{_get(result, 'name') or 'function'}"))
    return (None if i is None else turn_text(all_turns[i][1]) or None), pieces


def _usage(meta: Any) -> Usage | None:
    return read_usage(meta, ("prompt_token_count", "candidates_token_count", "total_token_count"), _get)


def _finish(value: Any) -> str | None:
    if value is None:
        return None
    name = getattr(value, "name", None)  # types.FinishReason is an Enum
    return name if isinstance(name, str) else str(value)


class ChunkReader(StreamReader):
    """``GenerateContentResponse`` s (the chunks of a stream, or one whole response): the first
    candidate's text and function calls, the last finish reason, model version and usage seen."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.calls: list[str] = []
        self.model: str | None = None
        self.usage: Usage | None = None
        self.finish_reason: str | None = None
        self.history: Any = None  # the contents the SDK's automatic function calling sent and got

    def add(self, event: Any) -> str | None:
        candidates = _get(event, "candidates") or ()
        first = candidates[0] if candidates else None
        texts = []
        for part in _get(_get(first, "content"), "parts") or ():
            text = _part_text(part)
            if text:
                texts.append(text)
            call = _get(part, "function_call")
            if call is not None:
                self.calls.append(str(_get(call, "name") or "function"))
        if first is not None and _get(first, "finish_reason") is not None:
            self.finish_reason = _finish(_get(first, "finish_reason"))
        if first is None and _get(_get(event, "prompt_feedback"), "block_reason") is not None:
            self.finish_reason = f"BLOCKED:{_finish(_get(_get(event, 'prompt_feedback'), 'block_reason'))}"
        history = _get(event, "automatic_function_calling_history")
        if history:  # the SDK ran the tools itself; each later chunk carries the list: read it once, at the end
            self.history = list(history) if isinstance(history, list) else history  # as it is now
        self.model = _get(event, "model_version") or self.model
        usage = _usage(_get(event, "usage_metadata"))
        if usage is not None:
            self.usage = usage
        self.parts.extend(texts)
        return "".join(texts) or None

    def completion(self) -> Completion:
        text = "".join(self.parts)
        return Completion(
            text=text if text.strip() else None,
            model=self.model,
            usage=self.usage,
            finish_reason=self.finish_reason,
            tool_calls=tuple(self.calls),
            context=tuple(request_context(self.history)) if self.history else (),
        )
