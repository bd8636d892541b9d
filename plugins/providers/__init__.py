"""The provider layer's public face: :class:`ProviderGuard`, guard calls and instrumented clients."""

from __future__ import annotations

from groundlens_core.plugins.kit.shell import GroundlensFlaggedError
from groundlens_core.plugins.providers.guard_call import AsyncGuardedStream, GuardCalls, GuardedStream
from groundlens_core.plugins.providers.instrument import Instrumenting, guard_of, uninstrument
from groundlens_core.plugins.providers.values import (
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
