"""The Anthropic guard and instrumented client (public name of ``groundlens_core.plugins.anthropic``)."""

from groundlens_core.plugins.anthropic import *  # noqa: F403
from groundlens_core.plugins.anthropic import __all__, __doc__  # noqa: F401
