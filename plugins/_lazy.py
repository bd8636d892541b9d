"""Import a framework on demand, or fail with the pip command that brings it."""

from __future__ import annotations

import importlib
from types import ModuleType


class MissingFrameworkError(ImportError):
    pass


def require(module: str, extra: str, what: str | None = None) -> ModuleType:
    """``importlib.import_module(module)``, or an ImportError that names the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingFrameworkError(
            f"{what or module} is not installed; install it with: pip install \"groundlens-core[{extra}]\" ({exc})"
        ) from exc
