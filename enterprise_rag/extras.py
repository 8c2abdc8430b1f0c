"""Import optional dependencies with an actionable message when they are missing."""

from __future__ import annotations

import importlib
from types import ModuleType

from enterprise_rag.errors import MissingExtraError


def require(module: str, extra: str) -> ModuleType:
    """Import ``module`` or raise :class:`MissingExtraError` naming the extra that provides it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(
            f"{module} is not installed; install it with: pip install 'enterprise-rag[{extra}]'"
        ) from exc
