"""Import an optional package on demand, or fail with the one line that installs it.

Lives in the core (it imports nothing itself) so that ``trace/`` and ``plugins/`` share it without
``trace`` ever importing ``plugins``. Adapters reach it through the adapter kit
(``groundlens_core.plugins.kit.shell.require``).
"""

from __future__ import annotations

import importlib
from types import ModuleType


class MissingFrameworkError(ImportError):
    """An optional framework/SDK is not installed; the message is the install line."""


def install_line(extra: str) -> str:
    return f'pip install "groundlens-core[{extra}]"'


def require(module: str, extra: str, what: str | None = None) -> ModuleType:
    """``importlib.import_module(module)``, or :class:`MissingFrameworkError` naming the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingFrameworkError(
            f"{what or module} is not installed; install it with: {install_line(extra)} ({exc})"
        ) from exc
