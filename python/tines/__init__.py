"""Tines: an application server for Python web apps (WSGI, and ASGI 3 with WebSocket) with a
Rust core.

Importing the package is cheap on purpose: it loads neither the Rust extension
(``tines._core``) nor the CLI, so ``tines.config`` can be used on its own. ``__version__`` is
read from the installed distribution on first use (PEP 562): ``importlib.metadata`` pulls in
``email``, ``zipfile``, ``csv`` and more, which the master would otherwise hold, and copy into
every fork, for nothing (docs/mpm.md).
"""

from __future__ import annotations

__version__: str
"""The installed distribution's version, or the source tree's when not installed."""

__all__ = ["__version__"]


def __getattr__(name: str) -> str:
    """``__version__``, read once, on first use."""
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import metadata

    try:
        version = metadata.version("tines")
    except metadata.PackageNotFoundError:
        version = "0.1.0"
    globals()["__version__"] = version
    return version
