"""The one place Ray is imported: lazily, with an error in the user's words when it is missing."""

from __future__ import annotations

from types import ModuleType

from veeksha.errors import ConfigurationError

__all__ = ["MISSING_RAY", "import_ray"]

MISSING_RAY = (
    "a distributed run needs Ray, which is not installed: pip install 'veeksha[ray]' "
    "(on the driver and on every node of the cluster)"
)


def import_ray() -> ModuleType:
    """``import ray``; a :class:`ConfigurationError` (exit 2) saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ConfigurationError(MISSING_RAY) from None
    return ray
