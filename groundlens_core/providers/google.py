"""The Google guard and instrumented client (public name of ``groundlens_core.plugins.google``)."""

from groundlens_core.plugins.google import *  # noqa: F403
from groundlens_core.plugins.google import __all__, __doc__  # noqa: F401
