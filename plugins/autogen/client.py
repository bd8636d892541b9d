"""AutoGen: a ``ChatCompletionClient`` wrapper whose results come back unchanged, scored off the
hot path. AutoGen does not tell a client which agent calls it: wrap one client per agent."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, AsyncIterator, Sequence

from groundlens_core.errors import describe_exception
from groundlens_core.plugins.autogen.reading import (
    _TRACE_KEY,
    DEFAULT_QUESTION_SOURCES,
    DEFAULT_TRACE_KEY,
    EXTRA,
    _agent_from_request,
    _AutoGenShell,
    _core_models,
    request_question_and_context,
    turn_id,
)
from groundlens_core.plugins.kit.shell import (
    ShellOptions,
    handle_internal_errors,
    names_shell_options,
    parse_usage,
    require,
)
from groundlens_core.trace.model import new_id
from groundlens_core.trace.recorder import CallRecord

if TYPE_CHECKING:
    from typing import Unpack  # Python 3.11; annotations only


class _ClientTranslation(_AutoGenShell):
    """What :class:`GroundlensChatCompletionClient` does; the AutoGen base classes are added on
    first access (see :func:`_build_client`)."""

    @names_shell_options
    def __init__(
        self,
        client: Any,
        *,
        agent_name: str | None = None,
        trace_key: str = DEFAULT_TRACE_KEY,
        question_sources: Sequence[str] | None = DEFAULT_QUESTION_SOURCES,
        agent_messages_as_context: bool = True,
        **options: Unpack[ShellOptions],
    ):
        self._client = client
        self.agent_name = agent_name
        self.trace_key = trace_key
        self._turns: dict[str, str] = {}  # trace key -> this agent's current turn in it
        super().__init__(
            question_sources=question_sources,
            agent_messages_as_context=agent_messages_as_context,
            **options,
        )

    @property
    def wrapped(self) -> Any:
        return self._client

    async def create(self, messages: Sequence[Any], **kwargs: Any) -> Any:
        started = time.time()
        try:
            result = await self._client.create(messages, **kwargs)
        except Exception as exc:
            self._record(messages, None, started, error=f"the model call raised {describe_exception(exc)}")
            raise
        self._record(messages, result, started)
        return result

    async def create_stream(self, messages: Sequence[Any], **kwargs: Any) -> AsyncIterator[Any]:
        models = _core_models()
        started = time.time()
        final = None
        error: str | None = None
        try:
            async for chunk in self._client.create_stream(messages, **kwargs):
                if isinstance(chunk, models.CreateResult):
                    final = chunk
                yield chunk
        except Exception as exc:
            error = f"the model call raised {describe_exception(exc)}"
            raise
        finally:
            self._record(messages, final, started, error=error, streaming=True)

    def _record(
        self, messages: Sequence[Any], result: Any, started: float, *, error: str | None = None, streaming: bool = False
    ) -> None:
        """Cheap: read the request and result, queue a CallRecord. Never raises."""
        ended = time.time()
        key = _TRACE_KEY.get() or self.trace_key
        with handle_internal_errors(self, "record a model call", trace_key=key, node=self.agent_name or "assistant"):
            node = self.agent_name or _agent_from_request(messages) or "assistant"
            question, pieces = request_question_and_context(
                messages, self.question_sources, self.agent_messages_as_context
            )
            meta: dict[str, Any] = {"client": type(self._client).__name__}
            if streaming:
                meta["streaming"] = True
            kind, response = "llm", None
            if result is not None:
                content = result.content
                if isinstance(content, str):
                    response = content
                else:
                    kind = "tool_call"
                    meta["calls"] = [getattr(c, "name", "?") for c in content or []]
                if getattr(result, "finish_reason", None):
                    meta["finish_reason"] = result.finish_reason
            elif error is None:
                meta["skip_note"] = "the stream ended without a result"
            step_id = new_id()
            self.recorder.record(
                CallRecord(
                    trace_key=key,
                    step_id=step_id,
                    parent_id=self._turn(key, messages, step_id),
                    node=node,
                    kind=kind,
                    question=question,
                    context=pieces,
                    response=response,
                    model=self._model_name(),
                    provider=type(self._client).__name__,
                    usage=parse_usage(getattr(result, "usage", None)),
                    started_at=started,
                    ended_at=ended,
                    error=error,
                    metadata=meta,
                )
            )

    def _turn(self, key: str, messages: Sequence[Any], step_id: str) -> str:
        """The agent turn of a model call: a call fed tool results continues this agent's turn in the
        trace; any other call opens a new one, named after its own step."""
        models = _core_models()
        if messages and isinstance(messages[-1], models.FunctionExecutionResultMessage) and key in self._turns:
            return self._turns[key]
        self._turns.pop(key, None)
        self._turns[key] = turn = turn_id(step_id)
        while len(self._turns) > 256:  # traces long ended
            self._turns.pop(next(iter(self._turns)))
        return turn

    def _model_name(self) -> str | None:
        for attr in ("model", "_model", "model_name"):
            value = getattr(self._client, attr, None)
            if isinstance(value, str):
                return value
        args = getattr(self._client, "_create_args", None)
        if isinstance(args, dict) and isinstance(args.get("model"), str):
            return args["model"]
        try:
            family = self._client.model_info.get("family")
        except Exception:
            family = None
        return str(family) if family else None

    @property
    def default_trace_key(self) -> str | None:  # type: ignore[override]
        """``get_trace()`` without a key reads this wrapper's ``trace_key``."""
        return self.trace_key

    async def close(self) -> None:
        await self._client.close()

    def actual_usage(self) -> Any:
        return self._client.actual_usage()

    def total_usage(self) -> Any:
        return self._client.total_usage()

    def count_tokens(self, messages: Sequence[Any], **kwargs: Any) -> int:
        return self._client.count_tokens(messages, **kwargs)

    def remaining_tokens(self, messages: Sequence[Any], **kwargs: Any) -> int:
        return self._client.remaining_tokens(messages, **kwargs)

    @property
    def capabilities(self) -> Any:  # deprecated in AutoGen, kept for old callers
        return self._client.capabilities

    @property
    def model_info(self) -> Any:
        return self._client.model_info

    def __getattr__(self, name: str) -> Any:
        # only reached for attributes this class lacks: e.g. ReplayChatCompletionClient.reset
        client = self.__dict__.get("_client")
        if client is None:
            raise AttributeError(name)
        return getattr(client, name)

    def _to_config(self, **given: Any) -> Any:
        return super()._to_config(client=self._client.dump_component(), **given)

    @classmethod
    def _from_config(cls, config: Any) -> Any:
        fields = dict(config)
        return cls(_core_models().ChatCompletionClient.load_component(fields.pop("client")), **fields)


def _build_client() -> type:
    models, core = _core_models(), require("autogen_core", EXTRA, "AutoGen")
    from pydantic import BaseModel

    class GroundlensClientConfig(BaseModel):
        client: core.ComponentModel  # type: ignore[name-defined]
        agent_name: str | None = None
        trace_key: str = DEFAULT_TRACE_KEY
        question_sources: list[str] | None = list(DEFAULT_QUESTION_SOURCES)
        agent_messages_as_context: bool = True

    class GroundlensChatCompletionClient(
        _ClientTranslation,
        models.ChatCompletionClient,  # type: ignore[name-defined]
        core.Component[GroundlensClientConfig],  # type: ignore[name-defined]
    ):  # type: ignore[name-defined]
        """Wraps a ``ChatCompletionClient``, one per agent (``agent_name``): results come back
        unchanged and are scored off the hot path; the rest is delegated to the wrapped client."""

        component_type = "model"
        component_config_schema = GroundlensClientConfig
        component_provider_override = "groundlens_core.plugins.autogen.GroundlensChatCompletionClient"

    return GroundlensChatCompletionClient
