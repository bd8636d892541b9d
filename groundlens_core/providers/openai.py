"""The OpenAI guard and instrumented client (public name of ``groundlens_core.plugins.providers.openai``)."""

from groundlens_core.plugins.providers.openai import *  # noqa: F403
from groundlens_core.plugins.providers.openai import __all__, __doc__  # noqa: F401
