"""The provider layer's public face: :class:`ProviderGuard`, guard calls and instrumented clients."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from groundlens_core.plugins._guard_call import AsyncGuardedStream, GuardCalls, GuardedStream
from groundlens_core.plugins._instrument import Instrumenting, guard_of, uninstrument
from groundlens_core.plugins._provider_values import (
    CONTEXT_KEYWORD,
    GROUNDLENS_KEYWORDS,
    NODE_KEYWORD,
    QUESTION_KEYWORD,
    Completion,
    ProviderResponse,
    RequestView,
    StreamReader,
    Target,
    listed,
    prompt_with_context,
    using_context,
)
from groundlens_core.trace.adapter_shell import GroundlensFlaggedError

__all__ = [
    "CONTEXT_KEYWORD",
    "NODE_KEYWORD",
    "QUESTION_KEYWORD",
    "AsyncGuardedStream",
    "GroundlensFlaggedError",
    "GuardedStream",
    "ProviderResponse",
    "guard_of",
    "prompt_with_context",
    "uninstrument",
    "using_context",
]
#: the names every SDK module (``groundlens_core.providers.openai`` ...) re-exports
PUBLIC = tuple(__all__)
__all__ += ["GROUNDLENS_KEYWORDS", "Completion", "ProviderGuard", "RequestView", "StreamReader", "Target", "listed"]
#: the header of the Stainless SDKs' raw-response helpers (``with_raw_response`` ...)
RAW_RESPONSE_HEADER = "X-Stainless-Raw-Response"


class ProviderGuard(GuardCalls, Instrumenting):
    """Base class of ``OpenAIProvider``, ``AnthropicProvider`` and ``GoogleProvider``."""


class StainlessGuard(ProviderGuard):
    """A guard for a Stainless-generated SDK (OpenAI, Anthropic): the client's ``request`` makes every
    stream, and calls of its raw-response helpers pass through unread."""

    def _passthrough(self, kwargs: dict[str, Any]) -> bool:
        headers = kwargs.get("extra_headers")
        return isinstance(headers, Mapping) and RAW_RESPONSE_HEADER in headers

    def _request_clients(self, client: Any) -> list[Any]:
        return [client]
