"""Tines: an application server for Python web apps (WSGI, and ASGI 3 with WebSocket) with a
Rust core.

Importing the package is cheap on purpose: it loads neither the Rust extension
(``tines._core``) nor the CLI, so ``tines.config`` can be used on its own.
"""

from __future__ import annotations

from importlib import metadata as _metadata


def _read_version() -> str:
    """Return the installed distribution's version, or the source tree's when not installed."""
    try:
        return _metadata.version("tines")
    except _metadata.PackageNotFoundError:
        return "0.1.0"


__version__: str = _read_version()

__all__ = ["__version__"]
