"""The Anthropic guard and instrumented client (public name of ``groundlens_core.plugins.providers.anthropic``)."""

from groundlens_core.plugins.providers.anthropic import *  # noqa: F403
from groundlens_core.plugins.providers.anthropic import __all__, __doc__  # noqa: F401
