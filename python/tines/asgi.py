"""ASGI 3 in a worker (ADR 0014): the event loop, lifespan, one task per request, timeouts.

Owns: adapting an ASGI 2 app, picking the loop (``loop``: uvloop when installed and asked for),
the ``lifespan`` protocol (startup before the worker is ready, shutdown after it drained, or
after an INT, a terminal's Ctrl-C, as uvicorn runs it: at once, the request tasks cancelled
first, under ``interrupt_timeout``),
running each request's app call as a task on the loop, cancelling a task that overruns
``request_timeout`` (its stack logged), and marking the loop alive in the scoreboard for the
master's watchdog.

The bytes are not here: ``tines._core.AsgiWorker`` holds the worker's Rust reactor, which owns
every socket; the loop watches the reactor's epoll fd (one fd for all of them) and runs a turn
of the reactor when it is readable, at its next deadline, and after requests end; a turn hands
over every request it found complete. ``Request.receive`` and ``Request.send`` (Rust) parse
and write.

Telling an ASGI app from a WSGI one (``interface_of``) and the MPM check are
``tines.app_loader``'s, which needs no asyncio: this module (and with it asyncio and ssl) is
imported only for an ASGI app, in the master when it preloads one.

Must not: touch sockets, or block the loop (everything here runs on it).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import signal
import traceback
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from tines.errors import AppLoadError

log = logging.getLogger("tines.error")

ASGIApp = Callable[[MutableMapping[str, Any], Callable[[], Awaitable[Any]],
                    Callable[[MutableMapping[str, Any]], Awaitable[None]]], Awaitable[None]]

TICK = 1.0
"""Most seconds between two marks of the loop in the scoreboard (and looks for overrun
requests); a quarter of ``request_timeout`` when that is shorter."""


class LifespanError(Exception):
    """The app's lifespan startup failed (its message says why): the worker does not start."""


def as_asgi3(app: Any, kind: str) -> ASGIApp:
    """The app as an ASGI 3 callable: an ASGI 2 app is called with the scope, then its
    instance with ``receive`` and ``send``."""
    if kind != "asgi2":
        return app  # type: ignore[no-any-return]

    async def asgi2(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        instance = app(scope)
        await instance(receive, send)

    return asgi2


def new_loop(choice: str) -> asyncio.AbstractEventLoop:
    """The event loop for ``loop``: ``uvloop`` (an error when it is not installed),
    ``asyncio``, or ``auto`` (uvloop when installed)."""
    if choice in ("auto", "uvloop"):
        try:
            uvloop: Any = importlib.import_module("uvloop")
        except ImportError:
            if choice == "uvloop":
                raise AppLoadError("loop uvloop: uvloop is not installed "
                                   "(pip install uvloop, or loop asyncio)") from None
        else:
            loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
            return loop
    return asyncio.new_event_loop()


class Lifespan:
    """The ``lifespan`` protocol: the app runs as one task for the worker's life, told of the
    startup and the shutdown through ``receive``. With ``mode`` ``auto``, an app that raises
    before it answers the startup is taken not to speak the protocol (logged at info);
    with ``on`` that is a startup failure."""

    def __init__(self, app: ASGIApp, mode: str, loop: asyncio.AbstractEventLoop) -> None:
        self.app = app
        self.mode = mode
        self.loop = loop
        self.state: dict[str, Any] = {}
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.startup_done: asyncio.Future[str | None] = loop.create_future()
        self.shutdown_done: asyncio.Future[str | None] = loop.create_future()
        self.supported = True
        self.task: asyncio.Task[None] | None = None

    async def startup(self) -> None:
        """Runs the app's startup; raises LifespanError when it fails."""
        if self.mode == "off":
            self.supported = False
            return
        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"},
                 "state": self.state}
        self.task = self.loop.create_task(self._run(scope))
        await self.inbox.put({"type": "lifespan.startup"})
        failure = await self.startup_done
        if failure is not None:
            raise LifespanError(failure)

    async def shutdown(self) -> None:
        """Runs the app's shutdown (errors are logged: the worker is stopping anyway)."""
        if not self.supported or self.task is None or self.task.done():
            return
        await self.inbox.put({"type": "lifespan.shutdown"})
        failure = await self.shutdown_done
        if failure is not None:
            log.error("lifespan shutdown failed: %s", failure)

    async def _run(self, scope: dict[str, Any]) -> None:
        try:
            await self.app(scope, self.inbox.get, self._send)
        except BaseException as error:  # noqa: BLE001 - any failure of the app is reported
            if not self.startup_done.done():
                if self.mode == "auto":
                    self.supported = False
                    log.info("the app does not support the ASGI lifespan protocol "
                             "(%s: %s): going on without it", type(error).__name__, error)
                    self.startup_done.set_result(None)
                else:
                    log.error("lifespan startup raised", exc_info=True)
                    self.startup_done.set_result(f"{type(error).__name__}: {error}")
            elif not self.shutdown_done.done():
                log.error("lifespan raised", exc_info=True)
                self.shutdown_done.set_result(f"{type(error).__name__}: {error}")
        finally:
            if not self.startup_done.done():
                # Returned without answering: it does not speak the protocol.
                self.supported = False
                self.startup_done.set_result(None)
            if not self.shutdown_done.done():
                self.shutdown_done.set_result(None)

    async def _send(self, message: MutableMapping[str, Any]) -> None:
        kind = message.get("type")
        if kind == "lifespan.startup.complete":
            self._settle(self.startup_done, None)
        elif kind == "lifespan.startup.failed":
            self._settle(self.startup_done, str(message.get("message", "")) or "startup failed")
        elif kind == "lifespan.shutdown.complete":
            self._settle(self.shutdown_done, None)
        elif kind == "lifespan.shutdown.failed":
            self._settle(self.shutdown_done, str(message.get("message", "")) or "shutdown failed")
        else:
            raise RuntimeError(f"unknown ASGI lifespan message type {kind!r}")

    @staticmethod
    def _settle(future: asyncio.Future[str | None], value: str | None) -> None:
        if future.done():
            raise RuntimeError("lifespan message sent twice")
        future.set_result(value)


class Server:
    """One worker's ASGI serving: the reactor's fd on the loop, a task per request."""

    def __init__(self, app: ASGIApp, worker: Any, loop: asyncio.AbstractEventLoop,
                 request_timeout: float) -> None:
        import tines._core as _core

        self.app = app
        self.worker = worker
        self.loop = loop
        self.request_timeout = request_timeout
        self.tick_interval = min(TICK, request_timeout / 4) if request_timeout > 0 else TICK
        self.stopped: asyncio.Future[str] = loop.create_future()
        # Request -> its task, for request_timeout; a timed-out request stays until its task
        # ends (cancelled again at each tick if the app swallowed the cancellation).
        self.active: dict[Any, asyncio.Task[None]] = {}
        self.timed_out: set[Any] = set()
        # The WebSocket tasks (asyncio keeps only weak references to tasks).
        self.websocket_tasks: set[asyncio.Task[None]] = set()
        # The loop marks itself alive until the worker's very end (the lifespan shutdown too).
        self.finished = False
        self.disconnected = _core.ClientDisconnected
        # The one timer for the reactor's next deadline (a turn also runs on every event).
        self.timer: asyncio.TimerHandle | None = None

    def start(self, state: dict[str, Any] | None) -> None:
        self.worker.tick()
        self.loop.call_later(self.tick_interval, self.tick)
        self.worker.start(self.loop.create_future, self.loop.call_soon, self.turn, state)
        self.loop.add_reader(self.worker.fileno(), self.turn)
        # Compressed blocks and warmed static lookups come back from the worker's pool (there
        # is one with compression on or a static mount set).
        pool = self.worker.pool_fileno()
        if pool is not None:
            self.loop.add_reader(pool, self.worker.pool_done)
        self.turn()

    def turn(self) -> None:
        """A turn of the reactor: new requests become tasks; the next deadline is scheduled."""
        try:
            requests, websockets, stopped = self.worker.turn()
        except BaseException as error:  # noqa: BLE001 - the worker cannot go on: end its loop
            if not self.stopped.done():
                self.loop.remove_reader(self.worker.fileno())
                self.stopped.set_exception(error)
            return
        if requests:
            create_task = self.loop.create_task
            for request in requests:
                self.active[request] = create_task(self.serve(request))
        for websocket in websockets:
            # Exempt from request_timeout: a WebSocket lives as long as its client wants.
            task = self.loop.create_task(self.serve(websocket))
            self.websocket_tasks.add(task)
            task.add_done_callback(self.websocket_tasks.discard)
        if stopped is not None:
            if not self.stopped.done():
                self.loop.remove_reader(self.worker.fileno())
                if self.timer is not None:
                    self.timer.cancel()
                self.stopped.set_result(stopped)
            return
        deadline = self.loop.time() + self.worker.timeout()
        if self.timer is None or self.timer.cancelled() or self.timer.when() > deadline:
            if self.timer is not None:
                self.timer.cancel()
            self.timer = self.loop.call_at(deadline, self.on_timer)

    def cancel_requests(self) -> set[asyncio.Task[None]]:
        """Cancels every request's and WebSocket's task still running (after an INT: the
        reactor stopped); returns them, for the caller to wait on."""
        tasks = {task for task in (*self.active.values(), *self.websocket_tasks) if not task.done()}
        for task in tasks:
            task.cancel()
        return tasks

    async def websockets_returned(self) -> None:
        """Waits until every WebSocket's app returned (the master's `graceful_timeout`
        bounds it)."""
        while self.websocket_tasks:
            await asyncio.wait(list(self.websocket_tasks))

    def on_timer(self) -> None:
        self.timer = None
        self.turn()

    async def serve(self, request: Any) -> None:
        try:
            await self.app(request.scope, request.receive, request.send)
        except self.disconnected:
            pass  # the client went away while the app sent: nothing to answer
        except asyncio.CancelledError:
            request.fail()
        except BaseException:  # noqa: BLE001 - any failure of the app is a 500 and a log line
            log.error("Error handling request %s", request.describe(), exc_info=True)
            request.fail()
        finally:
            self.active.pop(request, None)
            self.timed_out.discard(request)
            complaint = request.end()
            if complaint is not None:
                log.error("Error handling request %s", complaint)

    def tick(self) -> None:
        """Marks the loop alive; cancels requests that made no progress for
        ``request_timeout`` (as for WSGI: from dispatch or the app's last ``receive`` or
        ``send``; a ``send`` waiting for a slow client is the client's time)."""
        self.worker.tick()
        if self.request_timeout > 0:
            for request, task in list(self.active.items()):
                if task.done():
                    continue
                if request in self.timed_out:
                    task.cancel()  # it swallowed the last cancellation
                elif request.idle_seconds() >= self.request_timeout:
                    log.error("request %s made no progress for request_timeout (%g s): "
                              "cancelled (a 503 if nothing was sent, else the connection "
                              "closes); where it waits (most recent call last):\n%s",
                              request.describe(), self.request_timeout, await_stack(task))
                    request.fail_timeout()
                    task.cancel()
                    self.timed_out.add(request)
        if not self.finished:
            self.loop.call_later(self.tick_interval, self.tick)


def await_stack(task: asyncio.Task[Any]) -> str:
    """Where a task waits: its coroutine and every coroutine (or generator) it awaits, down to
    the innermost (``Task.print_stack`` shows the outermost frame only)."""
    frames = []
    awaited: Any = task.get_coro()
    while awaited is not None:
        frame = (getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
                 or getattr(awaited, "ag_frame", None))
        if frame is None:
            break
        frames.append((frame, frame.f_lineno))
        awaited = (getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
                   or getattr(awaited, "ag_await", None))
    return "".join(traceback.format_list(traceback.StackSummary.extract(frames))).rstrip()


async def shutdown_interrupted(server: Server, lifespan: Lifespan, deadline: float) -> str:
    """After an INT (Ctrl-C): the reactor cut the connections, so the app's request and
    WebSocket tasks still running are cancelled (what they would send goes nowhere, and a
    handler must not run beside the shutdown that closes what it uses); once they have
    unwound, the app's lifespan shutdown runs. Both within ``deadline`` seconds
    (``interrupt_timeout``) of the INT. A QUIT ends it at once (the master sends it on a second
    Ctrl-C; the terminal's own second INT, which comes with it, finds Rust's handler, which no
    longer looks, so it cannot cut the shutdown before the master's QUIT does). Returns how it
    ended: ``done``, ``deadline`` or ``quit``."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline
    quit_sent: asyncio.Future[None] = loop.create_future()

    def on_quit() -> None:
        if not quit_sent.done():
            quit_sent.set_result(None)

    loop.add_signal_handler(signal.SIGQUIT, on_quit)
    shutdown: asyncio.Task[None] | None = None
    try:
        requests = server.cancel_requests()
        if requests:
            unwound: asyncio.Future[Any] = asyncio.gather(*requests, return_exceptions=True)
            await asyncio.wait({unwound, quit_sent}, timeout=deadline, return_when=asyncio.FIRST_COMPLETED)
            if not unwound.done() and not quit_sent.done():
                log.warning("%d cancelled request(s) still running %g s after the INT (Ctrl-C): "
                            "leaving without the lifespan shutdown", sum(not task.done() for task in requests),
                            deadline)
                return "deadline"
        if not quit_sent.done():
            shutdown = loop.create_task(lifespan.shutdown())
            await asyncio.wait({shutdown, quit_sent}, timeout=max(0.0, end - loop.time()),
                               return_when=asyncio.FIRST_COMPLETED)
    finally:
        loop.remove_signal_handler(signal.SIGQUIT)
        # Not back to QUIT's default action, a core dump, for the rest of the exit (the app's
        # clean-up, worker_exit, atexit): a QUIT from now on finds the worker already leaving.
        signal.signal(signal.SIGQUIT, signal.SIG_IGN)
    if shutdown is not None and shutdown.done():
        return "done"
    if shutdown is not None:
        shutdown.cancel()
    if quit_sent.done():
        log.info("QUIT during the lifespan shutdown (Ctrl-C again): leaving at once")
        return "quit"
    log.warning("lifespan shutdown not done %g s after the INT (Ctrl-C): leaving without it", deadline)
    return "deadline"


async def _main(app: ASGIApp, worker: Any, cfg: Any, interrupt_deadline: float) -> str:
    loop = asyncio.get_running_loop()
    lifespan = Lifespan(app, cfg.lifespan, loop)
    await lifespan.startup()
    server = Server(app, worker, loop, cfg.request_timeout)
    server.start(lifespan.state if lifespan.supported else None)
    try:
        reason = await server.stopped
        if reason == "interrupt":
            await shutdown_interrupted(server, lifespan, interrupt_deadline)
        elif reason != "quick":
            # A WebSocket's connection went back to the reactor when it closed (ADR 0023): its
            # app may still be on its way out (a handler's cleanup after the disconnect).
            await server.websockets_returned()
            await lifespan.shutdown()
    finally:
        server.finished = True
    return reason


def serve(app: ASGIApp, worker: Any, cfg: Any, interrupt_deadline: float) -> str:
    """Runs the worker's loop until the reactor stops; returns why (as ``run_worker`` does).
    After an INT the lifespan shutdown runs for at most ``interrupt_deadline`` seconds
    (``shutdown_interrupted``); after a QUIT not at all. Raises LifespanError when the app's
    startup fails (the worker was never ready)."""
    loop = new_loop(cfg.loop)
    asyncio.set_event_loop(loop)
    try:
        reason = loop.run_until_complete(_main(app, worker, cfg, interrupt_deadline))
    finally:
        if not loop.is_closed():
            _cancel_all(loop)
            loop.close()
    return reason


def _cancel_all(loop: asyncio.AbstractEventLoop) -> None:
    """Cancels what the app left running (background tasks) and lets it unwind."""
    tasks = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    loop.run_until_complete(loop.shutdown_asyncgens())
