"""Provider guards: groundlens for teams that call an LLM SDK directly, with no agent framework.

One module per SDK, each importing its SDK only when used (a missing SDK raises ``ImportError``
with the install line)::

    from groundlens_core.providers.openai import OpenAIProvider, instrument      # pip install "groundlens-core[openai]"
    from groundlens_core.providers.anthropic import AnthropicProvider, instrument  # [anthropic]
    from groundlens_core.providers.google import GoogleProvider, instrument        # [google] (google-genai)

Each gives a guard call (``complete`` / ``acomplete`` / ``stream`` / ``astream`` returning a
:class:`ProviderResponse` with ``groundlens_result``) and ``instrument(client)``, which records the
calls of a client you already have into a trace without changing them. The code lives beside the
framework adapters, in ``groundlens_core.plugins``; these modules are their public names. How
they work: ``docs/providers.md``.

Scores are triage signals for ranking outputs for human review, never verdicts of truth.
"""

from __future__ import annotations

from groundlens_core.plugins.providers import *  # noqa: F403 - the shared public names
from groundlens_core.plugins.providers import PUBLIC, ProviderGuard

__all__ = [*PUBLIC, "ProviderGuard"]
