"""The Google guard and instrumented client (public name of ``groundlens_core.plugins.providers.google``)."""

from groundlens_core.plugins.providers.google import *  # noqa: F403
from groundlens_core.plugins.providers.google import __all__, __doc__  # noqa: F401
