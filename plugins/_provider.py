"""The provider layer's public face: :class:`ProviderGuard`, guard calls and instrumented clients."""

from __future__ import annotations

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


class ProviderGuard(GuardCalls, Instrumenting):
    """Base class of ``OpenAIProvider``, ``AnthropicProvider`` and ``GoogleProvider``."""
