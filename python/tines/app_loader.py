"""Turn an APP spec into the app (a WSGI or an ASGI callable).

Owns: parsing the spec (``module:attr``, ``package.module:attr``, ``path/to/file.py:attr``,
``module`` alone), importing it, resolving a dotted attribute, calling a factory, and the
one-line ``AppLoadError`` messages for each way that can fail; telling an ASGI app from a WSGI
one under the ``interface`` setting (``interface_of``: an app that is not what it asks for is
one of those errors) and refusing an MPM setting an ASGI app cannot run on (``check_mpm``); and
the directory the app is imported from (``source_directory``, what ``--reload`` watches).

Must not: import ``tines._core`` or ``tines.asgi`` (asyncio and ssl: the master of a WSGI app
would hold them, and copy their mappings into every fork, for nothing), configure logging, or
print: the caller (the arbiter with ``--preload``, else each worker) decides where the message
and the traceback go.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import inspect
import os
import sys
import traceback
from collections.abc import Callable
from types import ModuleType
from typing import Any

from tines.errors import AppLoadError

DEFAULT_ATTRIBUTES = ("application", "app")
"""Tried in order when the spec names only a module (``application`` is Django's name)."""

WSGIApp = Callable[..., object]


def load_app(spec: str, factory: bool, interface: str = "auto") -> WSGIApp:
    """Import the app named by ``spec`` and return it; raise AppLoadError on any failure.

    File specs put the file's directory first on ``sys.path`` and import the file under its
    stem (registered in ``sys.modules``); module specs make sure the current directory is on
    ``sys.path``. With ``factory``, the named object is called with no arguments and its result
    is the app. An exception raised by the user's code (while importing, or in the factory)
    becomes an AppLoadError whose ``traceback`` holds the formatted traceback. The app must be
    what ``interface`` asks for (``interface_of``); a WSGI app must take
    ``(environ, start_response)``.
    """
    target, attributes = _parse(spec)
    module = _import_file(target) if _is_file(target) else _import_module(target)
    obj, attribute = _resolve(module, target, attributes)
    name = f"{target}:{attribute}"
    if factory:
        if not callable(obj):
            raise AppLoadError(f"{name!r} is not callable")
        try:
            app: object = obj()
        except Exception as error:
            raise AppLoadError(f"factory {name!r} raised {_describe(error)}",
                               traceback.format_exc()) from None
        if not callable(app):
            raise AppLoadError(f"factory {name!r} returned {type(app).__name__}, which is not callable")
        interface_of(app, interface, f"factory {name!r}'s app")
        return app
    if not callable(obj):
        raise AppLoadError(f"{name!r} is not callable")
    if interface_of(obj, interface, repr(name)) == "wsgi":
        _check_wsgi_signature(obj, name)
    return obj


def is_coroutine_app(app: object) -> bool:
    """An ``async def`` function, or an object whose class's ``__call__`` is one (Starlette,
    FastAPI, Django's ASGIHandler)."""
    return inspect.iscoroutinefunction(app) or inspect.iscoroutinefunction(
        getattr(type(app), "__call__", None))


def interface_of(app: object, interface: str, name: str) -> str:
    """``"wsgi"``, ``"asgi3"`` or ``"asgi2"`` for ``app`` under the ``interface`` setting;
    AppLoadError (one line, naming the app as ``name`` says) when the app cannot be what was
    asked for.

    ``auto`` takes a coroutine app for ASGI 3 and anything else for WSGI: an ASGI 2 app (a
    class whose instances are the coroutine) looks like a WSGI callable, so it needs
    ``asgi2``."""
    if interface == "auto":
        return "asgi3" if is_coroutine_app(app) else "wsgi"
    if interface == "wsgi":
        if is_coroutine_app(app):
            raise AppLoadError(f"{name} is an ASGI app (async def), but interface is wsgi")
        return "wsgi"
    if interface == "asgi":
        if not is_coroutine_app(app):
            raise AppLoadError(f"{name} is not an ASGI 3 app (not async def); for an ASGI 2 "
                               "app use interface asgi2")
        return "asgi3"
    if not callable(app):
        raise AppLoadError(f"{name} is not callable")
    return "asgi2"


def check_mpm(cfg: Any) -> None:
    """An ASGI app runs on the event MPM's reactor: a ``mpm`` set to another is refused (one
    line) rather than ignored; so is ``stream_body_paths`` (a body read from the socket while
    the app runs would block the loop)."""
    if cfg.mpm != "event" and cfg.source("mpm") != "default":
        raise AppLoadError(f"an ASGI app runs on the event MPM, but mpm is {cfg.mpm} "
                           f"({cfg.source('mpm')}): leave mpm unset or set it to event")
    if cfg.stream_body_paths:
        raise AppLoadError(f"stream_body_paths ({cfg.source('stream_body_paths')}) is for WSGI "
                           "apps: an ASGI app gets every body buffered (docs/asgi.md)")


def import_target(target: str) -> ModuleType:
    """Import a module path (``package.module``) or a ``.py`` file path, as APP specs are
    imported; raise AppLoadError (with the traceback of an error in the module's code)."""
    if not _is_file(target) and not all(part.isidentifier() for part in target.split(".")):
        raise AppLoadError(f"bad module {target!r} (expected package.module or path/to/file.py)")
    return _import_file(target) if _is_file(target) else _import_module(target)


def source_directory(spec: str) -> str:
    """The directory the app named by ``spec`` is imported from, found without importing it
    (``--reload`` watches it): a file spec's directory; for a module spec, the directory
    holding its top-level module or package on ``sys.path`` as the workers search it (the
    current directory first), except that a package found outside the current directory (one
    installed elsewhere) gives its own directory rather than its whole ``sys.path`` entry. The
    current directory when the module is not found (the workers will say why it cannot load).
    """
    target = spec.strip().partition(":")[0]
    if _is_file(target):
        return os.path.dirname(os.path.abspath(target))
    current = os.getcwd()
    search = [entry or current for entry in sys.path]
    if current not in search:
        search.insert(0, current)
    found = importlib.machinery.PathFinder.find_spec(target.split(".")[0], search)
    if found is None:
        return current
    locations = list(found.submodule_search_locations or ())
    if locations:
        package = os.path.abspath(locations[0])
        holder = os.path.dirname(package)
        return holder if os.path.realpath(holder) == os.path.realpath(current) else package
    if found.origin is None:  # pragma: no cover - a path finder's plain module has an origin
        return current
    return os.path.dirname(os.path.abspath(found.origin))


def _parse(spec: str) -> tuple[str, tuple[str, ...]]:
    """(module name or file path, attribute candidates); raise AppLoadError when malformed."""
    bad = AppLoadError(f"bad APP {spec!r} (expected module:attr or path/to/file.py:attr)")
    target, colon, attribute = spec.strip().partition(":")
    if not target or (colon and not attribute) or ":" in attribute:
        raise bad
    if attribute and not all(part.isidentifier() for part in attribute.split(".")):
        raise bad
    if not _is_file(target) and not all(part.isidentifier() for part in target.split(".")):
        raise bad
    return target, (attribute,) if attribute else DEFAULT_ATTRIBUTES


def _is_file(target: str) -> bool:
    return target.endswith(".py") or os.sep in target or "/" in target


def _import_file(path: str) -> ModuleType:
    if not path.endswith(".py") or not os.path.isfile(path):
        raise AppLoadError(f"file not found: {path!r}")
    full_path = os.path.abspath(path)
    directory = os.path.dirname(full_path)
    if not sys.path or sys.path[0] != directory:
        sys.path.insert(0, directory)
    module_name = os.path.splitext(os.path.basename(full_path))[0]
    module_spec = importlib.util.spec_from_file_location(module_name, full_path)
    if module_spec is None or module_spec.loader is None:  # pragma: no cover - .py always loads
        raise AppLoadError(f"cannot import {path!r}: no loader for this file")
    module = importlib.util.module_from_spec(module_spec)
    previous = sys.modules.get(module_name)
    sys.modules[module_name] = module
    try:
        module_spec.loader.exec_module(module)
    except (Exception, SystemExit) as error:
        if previous is None:
            sys.modules.pop(module_name, None)
        else:
            sys.modules[module_name] = previous
        raise AppLoadError(f"error while importing {path!r}: {_describe(error)}",
                           traceback.format_exc()) from None
    return module


def _import_module(name: str) -> ModuleType:
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        # The module itself (or a package on its path) is missing: the user's spec is wrong.
        # A missing module imported *by* the app is an error inside the app instead.
        if error.name is not None and (name == error.name or name.startswith(error.name + ".")):
            raise AppLoadError(f"cannot import {name!r}: {error}") from None
        raise AppLoadError(f"error while importing {name!r}: {_describe(error)}",
                           traceback.format_exc()) from None
    except (Exception, SystemExit) as error:
        raise AppLoadError(f"error while importing {name!r}: {_describe(error)}",
                           traceback.format_exc()) from None


def _resolve(module: ModuleType, target: str, attributes: tuple[str, ...]) -> tuple[object, str]:
    """(the object, the attribute it was found as)."""
    if len(attributes) > 1:
        for candidate in attributes:
            if hasattr(module, candidate):
                return getattr(module, candidate), candidate
        names = " or ".join(repr(candidate) for candidate in attributes)
        raise AppLoadError(f"module {target!r} has no attribute {names}")
    obj: object = module
    for part in attributes[0].split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise AppLoadError(f"module {target!r} has no attribute {attributes[0]!r}") from None
    return obj, attributes[0]


def _check_wsgi_signature(app: WSGIApp, name: str) -> None:
    """Reject an object that cannot take (environ, start_response): likely a factory."""
    try:
        signature = inspect.signature(app)
    except (TypeError, ValueError):  # builtins and some C callables have no signature
        return
    try:
        signature.bind(None, None)
    except TypeError:
        raise AppLoadError(f"{name!r} cannot be called as app(environ, start_response)"
                           " (if it is a factory, add --factory)") from None


def _describe(error: BaseException) -> str:
    message = str(error)
    return f"{type(error).__name__}: {message}" if message else type(error).__name__
