"""Server hooks: the user's functions called at points of the master's and the workers' lives.

Owns: loading and checking the module named by the ``hooks`` setting (``load``), the read-only
views handed to hooks (``ServerView``, ``WorkerView``), calling a hook with its failure logged
with the traceback and the hook's name (``Hooks.call``), and the thin WSGI wrapper that runs
``pre_request`` / ``post_request`` (``wrap_app``, applied only when one of them is defined).

Which process runs each hook, and when, is in docs/hooks.md.

Must not: import ``tines._core``, fork, or start threads.
"""

from __future__ import annotations

import inspect
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType, ModuleType
from typing import Any

from tines import logs
from tines.app_loader import import_target
from tines.config import peers
from tines.errors import AppLoadError, ConfigError

HOOK_NAMES = (
    "on_starting", "when_ready", "pre_fork", "post_fork", "post_worker_init", "worker_exit",
    "child_exit", "on_exit", "pre_request", "post_request",
)
"""Every hook a hooks module may define (any other public function there is a typo)."""

FATAL_AT_START = ("on_starting", "post_fork")
"""Hooks whose failure stops the start (a worker's post_fork failure is a boot failure)."""

PRE_REQUEST_FAILED = b"Internal Server Error\n"

log = logs.get("hooks")


@dataclass(frozen=True)
class WorkerView:
    """What a hook sees of one worker (read-only). ``pid`` is None in ``pre_fork``.

    ``log`` writes into the error log (``info``, ``warning``, ``error``, ``debug``,
    ``exception``, as gunicorn's ``worker.log``); ``born`` is when it was forked
    (``time.monotonic()``), ``age`` the seconds since (gunicorn's ``age`` counts spawns: a
    worker forked by Tines' fork server has no such number; docs/hooks.md).
    """

    pid: int | None
    slot: int
    generation: int
    mpm: str
    born: float = field(default_factory=time.monotonic)
    log: Any = field(default=log, repr=False, compare=False)

    @property
    def age(self) -> float:
        """Seconds since the worker was forked (0 in ``pre_fork``: not yet)."""
        return 0.0 if self.pid is None else time.monotonic() - self.born


@dataclass(frozen=True)
class ServerView:
    """What a hook sees of the master (read-only).

    ``pid`` is the master's pid; ``config`` (also ``cfg``, gunicorn's name) the resolved
    settings (``config.workers``...); ``app`` the APP spec; ``workers`` the master's workers
    when the view was made (in a worker's hooks: empty, a worker does not know the others);
    ``log`` writes into the error log (``server.log.info(...)``, as in gunicorn).
    """

    pid: int
    config: Any
    app: str
    workers: tuple[WorkerView, ...] = ()
    log: Any = field(default=log, repr=False, compare=False)

    @property
    def cfg(self) -> Any:
        """The resolved settings, by gunicorn's name for them (``server.cfg.workers``)."""
        return self.config


class HookError(Exception):
    """A hook raised; ``str()`` is one line naming the hook (the traceback is logged)."""


class Hooks:
    """The hooks a module defines, by name. ``Hooks()`` has none (every call is a no-op).
    ``gunicorn``: they come from a gunicorn config file, and the request hooks take gunicorn's
    ``req`` and ``resp`` (``wrap_app``)."""

    def __init__(self, functions: Mapping[str, Callable[..., object]] | None = None,
                 source: str = "", gunicorn: bool = False) -> None:
        self.functions: Mapping[str, Callable[..., object]] = MappingProxyType(dict(functions or {}))
        self.source = source
        self.gunicorn = gunicorn

    def defines(self, name: str) -> bool:
        """True when the module defines hook ``name``."""
        return name in self.functions

    def call(self, name: str, *arguments: object) -> None:
        """Call hook ``name`` if defined; on an exception log it (hook name and traceback)
        and raise HookError, which the caller may ignore (``call_logged``) or act on."""
        function = self.functions.get(name)
        if function is None:
            return
        try:
            function(*arguments)
        except Exception as error:
            log.error("hook %s failed:\n%s", name, traceback.format_exc().rstrip())
            raise HookError(f"hook {name} raised {_describe(error)}") from None

    def call_logged(self, name: str, *arguments: object) -> None:
        """Call hook ``name``; a failure is logged and otherwise ignored (the caller goes on)."""
        try:
            self.call(name, *arguments)
        except HookError:
            pass


def load(spec: str | None, gunicorn: bool = False) -> Hooks:
    """Import the hooks module (a module path, or a ``.py`` file path) and check it.

    Raises ConfigError (one line) when it cannot be imported, or when it defines a public
    function that is not a hook (a typo such as ``post_frok``; helpers must start with ``_``),
    or a hook name that is not callable. ``gunicorn``: ``spec`` is a gunicorn config file
    (``tines.config.gunicorn`` read it and checked its hooks; its other functions are helpers,
    as gunicorn takes them), run again for its functions.
    """
    if spec is None:
        return Hooks()
    if gunicorn:
        from tines.config.gunicorn import run

        names = vars(run(spec))
        return Hooks({name: names[name] for name in HOOK_NAMES if callable(names.get(name))}, spec, True)
    try:
        module = import_target(spec.strip())
    except AppLoadError as error:
        if error.traceback:
            log.error("cannot import the hooks module:\n%s", error.traceback.rstrip())
        raise ConfigError(f"hooks: {error}") from None
    functions = _functions(module, spec)
    settings = [name for name, value in vars(module).items()
                if not callable(value) and not isinstance(value, ModuleType) and peers.find("gunicorn", name)]
    if settings:
        log.warning("hooks %r sets gunicorn settings (%s), which a hooks module does not read: "
                    "name a gunicorn config file with -c (docs/hooks.md)", spec, ", ".join(settings))
    return Hooks(functions, spec)


def _functions(module: ModuleType, spec: str) -> dict[str, Callable[..., object]]:
    functions: dict[str, Callable[..., object]] = {}
    for name, value in vars(module).items():
        if name in HOOK_NAMES:
            if not callable(value):
                raise ConfigError(f"hooks: {spec!r}: {name} is not callable")
            functions[name] = value
        elif (not name.startswith("_") and inspect.isfunction(value)
              and value.__module__ == module.__name__):
            close = [hook for hook in HOOK_NAMES if _similar(name, hook)]
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ConfigError(f"hooks: {spec!r} defines {name}(), which is not a hook{hint}; "
                              f"hooks are {', '.join(HOOK_NAMES)} (name helpers with a leading _)")
    return functions


def _similar(name: str, hook: str) -> bool:
    import difflib

    return difflib.SequenceMatcher(None, name, hook).ratio() >= 0.75


def _describe(error: BaseException) -> str:
    message = str(error)
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


# --- pre_request / post_request ----------------------------------------------------------------

WSGIApp = Callable[..., Any]


def wrap_app(app: WSGIApp, hooks: Hooks, worker: WorkerView) -> WSGIApp:
    """The app itself when neither request hook is defined (zero cost), else a thin wrapper.

    ``pre_request(worker, environ)`` runs before the app; if it raises, the failure is logged
    and the request is answered 500 without running the app. ``post_request(worker, environ,
    status)`` runs once the response is complete (after the app's iterable is closed), with the
    status line the app gave ``start_response`` (None if the app raised before giving one);
    its failure is logged and the worker goes on.
    """
    pre = hooks.functions.get("pre_request")
    post = hooks.functions.get("post_request")
    if pre is None and post is None:
        return app
    if hooks.gunicorn:
        return _wrap_gunicorn(app, hooks, worker)

    def hooked(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if pre is not None:
            try:
                hooks.call("pre_request", worker, environ)
            except HookError:
                start_response("500 Internal Server Error",
                               [("Content-Type", "text/plain"),
                                ("Content-Length", str(len(PRE_REQUEST_FAILED)))])
                return [PRE_REQUEST_FAILED]
        if post is None:
            return app(environ, start_response)  # type: ignore[no-any-return]
        status: list[str | None] = [None]

        def recording_start_response(line: str, headers: list[tuple[str, str]],
                                     exc_info: Any = None) -> Any:
            status[0] = line
            return start_response(line, headers, exc_info)

        try:
            result = app(environ, recording_start_response)
        except BaseException:
            hooks.call_logged("post_request", worker, environ, status[0])
            raise
        return _ClosingBody(result, lambda: hooks.call_logged("post_request", worker, environ, status[0]))

    return hooked


class _ClosingBody:
    """The app's iterable, with ``done`` called once after the app's own ``close()``."""

    def __init__(self, body: Iterable[bytes], done: Callable[[], None]) -> None:
        self.body = body
        self.done: Callable[[], None] | None = done

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.body)

    def close(self) -> None:
        try:
            close = getattr(self.body, "close", None)
            if close is not None:
                close()
        finally:
            done, self.done = self.done, None
            if done is not None:
                done()


# --- the request hooks of a gunicorn config file -----------------------------------------------


class GunicornRequest:
    """What gunicorn's ``pre_request(worker, req)`` and ``post_request`` read of a request,
    made from the WSGI environ: ``method``, ``uri`` (the request target as sent), ``path`` (its
    path, before any ``SCRIPT_NAME`` split), ``query``, ``version`` (``(1, 1)``), ``scheme`` and
    ``headers``, a list of (NAME, value) with names upper-cased as gunicorn gives them."""

    __slots__ = ("method", "uri", "path", "query", "version", "scheme", "headers")

    def __init__(self, environ: Mapping[str, Any]) -> None:
        self.method: str = environ.get("REQUEST_METHOD", "")
        self.query: str = environ.get("QUERY_STRING", "")
        raw = environ.get("RAW_URI")
        if raw is None:
            raw = environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", "")
            raw += f"?{self.query}" if self.query else ""
        self.uri: str = raw
        self.path: str = raw.split("?", 1)[0]
        if "://" in self.path:  # absolute-form (a proxy's request): the path part, as gunicorn's
            self.path = "/" + self.path.split("://", 1)[1].partition("/")[2]
        protocol = environ.get("SERVER_PROTOCOL", "HTTP/1.1").removeprefix("HTTP/")
        major, _, minor = protocol.partition(".")
        self.version: tuple[int, int] = (int(major) if major.isdigit() else 1, int(minor) if minor.isdigit() else 0)
        self.scheme: str = environ.get("wsgi.url_scheme", "http")
        self.headers: list[tuple[str, str]] = [
            (key[5:].replace("_", "-"), value) for key, value in environ.items() if key.startswith("HTTP_")]
        self.headers += [(key.replace("_", "-"), environ[key]) for key in ("CONTENT_TYPE", "CONTENT_LENGTH")
                         if environ.get(key)]


class GunicornResponse:
    """What gunicorn's ``post_request(worker, req, environ, resp)`` reads of the response:
    ``status`` (the status line the app gave, None if it gave none), ``status_code``,
    ``headers`` (the app's list) and ``sent`` (body bytes the app produced)."""

    __slots__ = ("status", "headers", "sent")

    def __init__(self) -> None:
        self.status: str | None = None
        self.headers: list[tuple[str, str]] = []
        self.sent = 0

    @property
    def status_code(self) -> int | None:
        """The status as a number (``200``)."""
        return int(self.status.split(None, 1)[0]) if self.status else None


def _post_request_arguments(function: Callable[..., object]) -> int:
    """How many of ``worker, req, environ, resp`` gunicorn passes ``post_request``: as many as
    it takes (2 to 4; gunicorn checks the same)."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return 4
    if any(parameter.kind == parameter.VAR_POSITIONAL for parameter in parameters):
        return 4
    return max(2, min(4, len(parameters)))


def _wrap_gunicorn(app: WSGIApp, hooks: Hooks, worker: WorkerView) -> WSGIApp:
    """``wrap_app`` for a gunicorn config file's hooks: ``pre_request(worker, req)`` before
    the app (its failure answers 500, as with Tines' hooks), ``post_request(worker, req,
    environ, resp)`` once the response is complete, the body bytes counted for ``resp.sent``."""
    post = hooks.functions.get("post_request")
    count = _post_request_arguments(post) if post is not None else 0

    def hooked(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        request = GunicornRequest(environ)
        try:
            hooks.call("pre_request", worker, request)
        except HookError:
            start_response("500 Internal Server Error",
                           [("Content-Type", "text/plain"), ("Content-Length", str(len(PRE_REQUEST_FAILED)))])
            return [PRE_REQUEST_FAILED]
        if post is None:
            return app(environ, start_response)  # type: ignore[no-any-return]
        response = GunicornResponse()

        def recording_start_response(line: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            response.status, response.headers = line, headers
            return start_response(line, headers, exc_info)

        def done() -> None:
            hooks.call_logged("post_request", *(worker, request, environ, response)[:count])

        try:
            result = app(environ, recording_start_response)
        except BaseException:
            done()
            raise
        return _CountingBody(result, response, done)

    return hooked


class _CountingBody(_ClosingBody):
    """``_ClosingBody`` that adds each block's length to ``response.sent``."""

    def __init__(self, body: Iterable[bytes], response: GunicornResponse, done: Callable[[], None]) -> None:
        super().__init__(body, done)
        self.response = response

    def __iter__(self) -> Iterator[bytes]:
        for block in self.body:
            self.response.sent += len(block)
            yield block
