"""What a worker process does between its fork (the master's ``os.fork()``, or the fork server's
clone: ``tines.forkserver``) and the Rust MPM loop.

Owns: the worker settings handed to Rust (``worker_settings``, which the master checks before
its first fork with the same conversion the worker runs) and the one value that carries them
into Rust with the worker's fds and messages (``WorkerSpec``), the child side of the fork (its
process title, signal reset, closing the master's fds, the parent-death signal, the resource limits;
the part that depends on neither its slot nor its process, ``share_set_up``, is done once by the
fork server when there is one), the worker's server hooks
(post_fork, post_worker_init, worker_exit; the request hooks wrap the app), the app's logging
(``log_config`` applied before the app loads, or a handler for a root logger it left without),
loading the app,
telling the master ``boot_error`` through the notify pipe (also for a failing post_fork), and handing over to ``tines._core.run_worker``
(or ``tines._core.AsgiWorker``, for an ASGI app), which
writes the ``ready`` message once its set-up is complete. It never returns into the master's
code: the process ends with ``os._exit``.

Notify-pipe messages (one ``write`` each, at most PIPE_BUF = 4096 bytes, so atomic):

- ready:      ``b"R" + struct.pack("<ii", pid, slot)``
- standby:    ``b"S" + struct.pack("<ii", pid, slot)``: a standby (``tines.standby``) has
  booted and waits for its promotion; promoted, a WSGI standby serves without another message
  (an ASGI one writes ``ready`` once its lifespan startup is done).
- boot error: ``b"E" + struct.pack("<iiH", pid, slot, n) + <n bytes of UTF-8 message>``
- interface:  ``b"I" + struct.pack("<iiH", pid, slot, n) + <n bytes of ASCII interface>``
  ("wsgi", "asgi3", "asgi2"), written once the app is loaded and checked, before ``ready``: the
  master's ready line names it and what serves it (``tines.serving``).
- draining:   ``b"D" + struct.pack("<iiH", pid, slot, n) + <n bytes of ASCII reason>``, written
  by Rust the moment a worker starts draining by its own decision (reason ``max_requests`` or
  ``cpu_limit``), so that the master starts its replacement in the same turn.

Retire (SIGUSR2 from the master): the child blocks USR2 right after fork and Rust unblocks it
once its handler is installed, so a retire sent while the worker boots waits until the worker
can drain (it then stops at once, having accepted nothing) instead of killing it.

Promotion (``PROMOTE_SIGNAL`` from the master, to a standby): blocked from the fork on like
USR2, so one sent while the standby boots waits for it; the standby takes it, or a stop (TERM,
INT, QUIT) or a retire (USR2), with ``sigwait`` once it has booted. A WSGI standby waits inside
``run_worker``, its Rust set-up done (``WorkerSpec.standby``); an ASGI standby waits before its
``AsgiWorker`` (its lifespan startup runs once it is promoted).

Stops (TERM, INT, QUIT): blocked from the fork on too, so one sent before the master's Python
handlers are reset in the child is not lost to them; a worker unblocks them once they are reset,
a standby keeps them blocked until its ``sigwait`` has taken its promotion.
"""

from __future__ import annotations

import atexit
import ctypes
import faulthandler
import functools
import gc
import os
import resource
import signal
import struct
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, NoReturn

from setproctitle import setproctitle

from tines import limits, logs, memory, serving, watchdog
from tines.app_loader import check_mpm, interface_of, load_app
from tines.config import Config
from tines.config.validators import H2C_MODES
from tines.errors import AppLoadError, ConfigError
from tines.hooks import HookError, Hooks, ServerView, WorkerView, wrap_app

READY = b"R"
STANDBY = b"S"
BOOT_ERROR = b"E"
DRAINING = b"D"
INTERFACE = b"I"
DRAINING_REASONS = ("max_requests", "cpu_limit", "request_timeout")
"""The reasons a worker drains by its own decision (``run_worker``'s stop reasons)."""
READY_FORMAT = "<ii"
ERROR_FORMAT = "<iiH"
PIPE_BUF = 4096

EXIT_BOOT_ERROR = 3
"""Exit status of a worker whose app failed to load (gunicorn's WORKER_BOOT_ERROR)."""

RESET_SIGNALS = (
    signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGUSR1,
    signal.SIGUSR2, signal.SIGCHLD, signal.SIGTTIN, signal.SIGTTOU, signal.SIGWINCH,
)
"""The master's handlers, reset in the child (Rust installs the worker's own)."""

PR_SET_PDEATHSIG = 1

PROMOTE_SIGNAL = signal.SIGRTMIN
"""Promotes a standby (ADR 0021). A real-time signal no part of Tines or a terminal sends for
anything else; it stays blocked in a promoted worker, so a second one would wait unseen."""

STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGQUIT})

STANDBY_ENDS = STOP_SIGNALS | {PROMOTE_SIGNAL, signal.SIGUSR2}
"""What a standby waits for: its promotion, or a stop or a retire (then it exits, code 0)."""

BLOCKED_AT_FORK = STANDBY_ENDS
"""What the master blocks around ``fork``, so the child is born with it blocked (above)."""

log = logs.get("worker")


@dataclass
class WorkerContext:
    """What the master hands a freshly forked worker."""

    cfg: Config
    slot: int
    generation: int
    listeners: list[int]
    tls_listeners: list[bool]
    """Which of ``listeners`` speak TLS (``sockets.tls_flags``), parallel to them."""
    scoreboard: Any
    life_read: int
    notify_write: int
    close_in_child: list[int]
    master_pid: int
    app: Callable[..., object] | None
    """The preloaded app, or None to load it in the worker."""
    app_loggers: frozenset[str]
    """The loggers the preloaded app made as the master imported it: a ``log_config`` applied
    here leaves them enabled (``logs.apply_config``)."""
    settings: dict[str, object]
    """The worker settings for ``tines._core.run_worker`` (from ``worker_settings``)."""
    hooks: Hooks
    """The server hooks (post_fork, post_worker_init, worker_exit, pre/post_request run here)."""
    profile_dir: str | None = None
    """Where the sampling profiler writes (``profile``; None: off)."""
    standby: bool = False
    """Boot, then wait for the master's promotion before serving (``tines.standby``)."""
    set_up_shared: bool = False
    """``share_set_up`` is done (by the fork server, once for all its workers)."""
    interface: str | None = None
    """The preloaded app's interface ("wsgi", "asgi3"...) as ``share_set_up`` checked it
    against the MPM; None: checked once the app is loaded (and its error reported)."""
    forked_by_server: bool = False
    """Forked by the fork server (``tines.forkserver``), which set the parent-death signal."""
    h2c_listeners: list[str] = field(default_factory=list)
    """What each of ``listeners`` speaks in cleartext (``sockets.h2c_modes``), parallel to them;
    empty: HTTP/1.1 on every one."""
    rate_table: Any = None
    """The rate limits' shared table (``tines._core.RateTable``; None: no limit is set)."""
    client_connections: Any = None
    """``max_connections_per_client``'s counts (``tines._core.ClientConnections``; None: off)."""


@dataclass(frozen=True)
class WorkerSpec:
    """What the Rust worker starts with: the one value ``tines._core.run_worker`` and
    ``tines._core.AsgiWorker`` take, read by attribute, once, in Rust (``PythonSpec`` in
    crates/python/src/worker.rs)."""

    settings: dict[str, object]
    """The worker settings (``worker_settings``); ``settings["tls"]`` is the generation's TLS
    material (``tines._core.TlsMaterial``) or None."""
    listeners: list[int]
    scoreboard: Any
    slot: int
    life_fd: int | None = None
    """The read end of the life pipe (end of file: the master is gone; None: not watched)."""
    ready: tuple[int, bytes] | None = None
    """``(fd, message)``: written once the worker's set-up is done (the notify pipe)."""
    draining: tuple[int, dict[str, bytes]] | None = None
    """``(fd, {reason: message})``: written the moment the worker drains by its own decision."""
    standby: Callable[[], bool] | None = None
    """A standby's wait, run by Rust once its set-up is done (``_stand_by``): True once
    promoted; None for a worker that serves at once."""
    tls_listeners: list[bool] = field(default_factory=list)
    """Which of ``listeners`` speak TLS, one flag for each (with ``settings["tls"]`` set:
    the TCP listeners not marked ``plain:``); not given: none does."""

    h2c_listeners: list[str] = field(default_factory=list)
    """What each of ``listeners`` speaks in cleartext, one mode for each: ``off`` (HTTP/1.1),
    ``only`` (h2c with prior knowledge: an ``h2c:`` bind) or ``both`` (``http1+h2c:``); not
    given: ``off`` on every one."""

    rate_table: Any = None
    """The rate limits' shared table (``tines._core.RateTable``, made by the master before the
    fork); None: no limit is set."""
    client_connections: Any = None
    """``max_connections_per_client``'s counts (``tines._core.ClientConnections``); None: off."""

    def __post_init__(self) -> None:
        if not self.tls_listeners:
            object.__setattr__(self, "tls_listeners", [False] * len(self.listeners))
        if len(self.tls_listeners) != len(self.listeners):
            raise ValueError(f"tls_listeners has {len(self.tls_listeners)} flags for {len(self.listeners)} listeners")
        if not self.h2c_listeners:
            object.__setattr__(self, "h2c_listeners", ["off"] * len(self.listeners))
        if len(self.h2c_listeners) != len(self.listeners):
            raise ValueError(f"h2c_listeners has {len(self.h2c_listeners)} modes for {len(self.listeners)} listeners")
        if not set(self.h2c_listeners) <= set(H2C_MODES):
            raise ValueError(f"h2c_listeners must be modes of {', '.join(H2C_MODES)}, got {self.h2c_listeners}")


def worker_spec(context: WorkerContext, pid: int, standby: Callable[[], bool] | None = None) -> WorkerSpec:
    """The spec of the worker ``context`` describes, running as ``pid``. A WSGI standby waits
    in ``standby`` and writes no ``ready``: its ``standby`` message made it ready for the master,
    and one wake-up less per promotion matters with ``max_requests`` 1."""
    draining = {reason: encode_draining(pid, context.slot, reason) for reason in DRAINING_REASONS}
    ready = None if standby is not None else (context.notify_write, encode_ready(pid, context.slot))
    return WorkerSpec(settings=context.settings, listeners=context.listeners,
                      scoreboard=context.scoreboard, slot=context.slot, life_fd=context.life_read,
                      ready=ready, draining=(context.notify_write, draining), standby=standby,
                      tls_listeners=context.tls_listeners, h2c_listeners=context.h2c_listeners,
                      rate_table=context.rate_table, client_connections=context.client_connections)


def worker_settings(cfg: Config, tls: object | None = None) -> dict[str, object]:
    """The settings dict ``tines._core.run_worker`` takes, checked by the conversion it runs:
    the registry's worker settings, resolved by ``config.load`` (Rust takes every value as
    given), plus ``workers`` (the master's count) and ``tls``: the TLS material the master made
    (``tines.tls.make_material``; None without ``certfile``), from which each worker builds its
    rustls configuration without reading a file.

    Raises ConfigError (one line naming the setting) for a value no worker could run with, such
    as a timeout too long for the clock, so the master stops before forking rather than every
    worker failing after it.
    """
    import tines._core as _core

    settings = cfg.worker_settings()
    settings["workers"] = cfg.workers
    settings["tls"] = tls
    try:
        _core.check_worker_settings(settings)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    return settings


def encode_ready(pid: int, slot: int) -> bytes:
    """The ready message."""
    return READY + struct.pack(READY_FORMAT, pid, slot)


def encode_standby(pid: int, slot: int) -> bytes:
    """The standby message."""
    return STANDBY + struct.pack(READY_FORMAT, pid, slot)


def encode_boot_error(pid: int, slot: int, message: str) -> bytes:
    """The boot-error message (the text is cut to fit one atomic pipe write)."""
    header = 1 + struct.calcsize(ERROR_FORMAT)
    data = message.encode("utf-8", "replace")[: PIPE_BUF - header]
    return BOOT_ERROR + struct.pack(ERROR_FORMAT, pid, slot, len(data)) + data


def encode_interface(pid: int, slot: int, interface: str) -> bytes:
    """The interface message (``interface`` is one of ``serving.INTERFACES``)."""
    data = interface.encode("ascii")
    return INTERFACE + struct.pack(ERROR_FORMAT, pid, slot, len(data)) + data


def encode_draining(pid: int, slot: int, reason: str) -> bytes:
    """The draining message (a worker stops by its own decision; ``reason`` is short ASCII)."""
    data = reason.encode("ascii")
    return DRAINING + struct.pack(ERROR_FORMAT, pid, slot, len(data)) + data


def decode(buffer: bytearray) -> list[tuple[str, int, int, str]]:
    """Take every complete message off the front of ``buffer``: (kind, pid, slot, text)."""
    messages = []
    while buffer:
        kind = bytes(buffer[:1])
        if kind in (READY, STANDBY):
            size = 1 + struct.calcsize(READY_FORMAT)
            if len(buffer) < size:
                break
            pid, slot = struct.unpack_from(READY_FORMAT, buffer, 1)
            messages.append(("ready" if kind == READY else "standby", pid, slot, ""))
        elif kind in (BOOT_ERROR, DRAINING, INTERFACE):
            head = 1 + struct.calcsize(ERROR_FORMAT)
            if len(buffer) < head:
                break
            pid, slot, length = struct.unpack_from(ERROR_FORMAT, buffer, 1)
            size = head + length
            if len(buffer) < size:
                break
            name = {BOOT_ERROR: "boot_error", DRAINING: "draining", INTERFACE: "interface"}[kind]
            messages.append((name, pid, slot, buffer[head:size].decode("utf-8", "replace")))
        else:
            # Not a message we know: drop the byte rather than stall the stream.
            size = 1
        del buffer[:size]
    return messages


LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
"""The C library (for ``prctl``), opened once in the master: the symbols of the process itself,
libc's among them. ``ctypes.util.find_library`` would run ``ldconfig -p`` in a subprocess in
every worker (6-12 ms of its start; a worker stopped during it left that child behind)."""


def set_parent_death_signal() -> None:
    """Ask the kernel to SIGKILL this worker if the master dies (Linux)."""
    if LIBC is not None:
        LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _raise_open_files_limit() -> None:
    """Raise the soft RLIMIT_NOFILE to the hard limit before saying ready.

    A worker holds every connection it accepts (10,000 idle keep-alive connections with the
    event MPM); the common soft default of 1024 would make accept fail with EMFILE long
    before that. Rust does the same at the start of ``run_worker`` (for other embedders);
    doing it here means the limit is in force when the master hears ``ready``. Not called with
    ``limit_open_files`` set: that sets soft and hard alike, so Rust's raise changes nothing.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard and (hard == resource.RLIM_INFINITY or soft < hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as error:
            log.warning("cannot raise the open files limit from %d to %d: %s", soft, hard, error)


def _register_dump_signal(context: WorkerContext) -> None:
    """Prepare for the master's dump signal (``request_timeout``, ``boot_timeout``; see
    ``tines.watchdog``) before anything of the app runs, so a hanging import is caught too.

    Rust's handler goes first and faulthandler is registered in front of it with
    ``chain=True``: on the signal CPython writes the Python stack of every thread to the
    error log (fd 2), then re-raises to Rust's handler, which sets the slot's ``dumped`` flag
    and has the timed-out connections answered 503: by the loop thread when the app runs on
    app threads (thread, event), else by itself (docs/signals.md, "A stuck request").
    faulthandler writes to fd 2 by number;
    a reopened error log is put on fd 2 (``logs.reopen``), so the registration stays valid.
    """
    import tines._core as _core

    _core.install_dump_handler(context.scoreboard, context.slot, watchdog.DUMP_SIGNAL)
    faulthandler.register(watchdog.DUMP_SIGNAL, file=sys.stderr, all_threads=True, chain=True)


def _stand_by(context: WorkerContext, pid: int) -> bool:
    """Tell the master this standby has booted and wait: True once promoted, False for a stop
    or a retire. The stop signals are blocked from the fork on (so none is lost before this
    wait, nor taken by Rust's handlers during its set-up), USR2 again here (the set-up unblocks
    it); once promoted the stop signals go to their handlers, the promotion stays blocked."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STANDBY_ENDS)
    _write(context.notify_write, encode_standby(pid, context.slot))
    promoted = signal.sigwait(STANDBY_ENDS) == PROMOTE_SIGNAL
    signal.pthread_sigmask(signal.SIG_SETMASK, (previous - STOP_SIGNALS) | {PROMOTE_SIGNAL})
    return promoted


def _write(fd: int, data: bytes) -> None:
    try:
        os.write(fd, data)
    except OSError:
        pass  # the master is gone: the life pipe will end us


def run(context: WorkerContext) -> NoReturn:
    """The worker's whole life after fork. Never returns."""
    status = 1
    try:
        status = _serve(context)
    except BaseException:  # noqa: BLE001 - the last resort before os._exit
        log.error("worker crashed:\n%s", traceback.format_exc())
        status = 1
    finally:
        try:
            _run_exit_callbacks()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(status)


def _run_exit_callbacks() -> None:
    """Run the ``atexit`` callbacks, as a normal interpreter exit would, and nothing else of
    its teardown (``os._exit`` follows: no module clean-up, no garbage collection of the heap
    shared with the master, which would only copy its pages to free them).

    Those registered in the worker (by the app, a library it uses, a hook) and those it
    inherited from the master (a preloaded app's), as gunicorn's and uWSGI's workers do;
    ``logging``'s own is among them, so the log handlers are flushed and closed. Each one that
    raises is reported on stderr and the others still run (``atexit``'s own rule). A worker
    that ends with a stuck app thread ends in Rust instead and runs none of them (ADR 0020).
    """
    if atexit._ncallbacks():
        atexit._run_exitfuncs()


def close_fds(fds: list[int]) -> None:
    """Close the master's fds (those not already gone)."""
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def check_interface(app: Callable[..., object], cfg: Config) -> str:
    """The app's interface, checked against the MPM; AppLoadError (one line) if it cannot run."""
    interface = interface_of(app, cfg.interface, repr(str(cfg.app)))
    if interface != "wsgi":
        check_mpm(cfg)
    return interface


def share_set_up(context: WorkerContext) -> None:
    """What every worker does first after fork that depends neither on its slot nor on its
    own process, done once by the fork server for all the workers it forks
    (``tines.forkserver``): the master's signal handlers reset, the fault handler (a segfault
    or a fatal error leaves the Python stack of every thread in the error log, fd 2), the
    master's fds closed, the open-files limit raised and the preloaded app's interface checked
    (an app that fails the check is left to each worker, which reports it as a boot error).
    The resource limits (``limits``) stay the worker's own: ``limit_cpu`` counts a process's
    own CPU, and the fork server's forks would use it up."""
    for signum in RESET_SIGNALS:
        signal.signal(signum, signal.SIG_DFL)
    signal.set_wakeup_fd(-1)
    faulthandler.enable(file=sys.stderr, all_threads=True)
    close_fds(context.close_in_child)
    context.close_in_child = []
    if context.cfg.limit_open_files is None:
        _raise_open_files_limit()
    if context.app is not None:
        try:
            context.interface = check_interface(context.app, context.cfg)
        except AppLoadError:
            pass
    context.set_up_shared = True


def _serve(context: WorkerContext) -> int:
    # A retire (USR2) that comes before Rust's handler stays pending: the master forked us with
    # it blocked, and Rust unblocks it once its handler is installed. Blocked here too, for
    # callers that fork without it.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2})
    # First, so ps tells this process from the master (whose title it inherited) at once.
    # The tag names the MPM that serves, which an ASGI app's interface decides: "loading" until
    # it is known (the setting names it, or the app is loaded below).
    tag = serving.title_tag(context.interface or serving.known_interface(context.cfg.interface), context.cfg.mpm)
    setproctitle(f"tines: worker {context.slot} [{tag}] gen {context.generation}")
    if not context.set_up_shared:
        share_set_up(context)  # a fork server did it once for all its workers
    if not context.standby:
        # Blocked from the fork on (tines.fleet): a stop sent before the signal reset would have
        # gone to the master's handler and been lost; pending, it now has its default action.
        # A standby keeps them blocked for its sigwait (``_stand_by``).
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    _register_dump_signal(context)
    if not context.forked_by_server:  # the fork server set it in Rust, right after the fork
        set_parent_death_signal()
        if os.getppid() != context.master_pid:
            return 0  # the master died before we set the death signal
    pid = os.getpid()
    try:
        # Before post_fork and the app, so what they allocate and open counts too.
        limits.apply(context.cfg)
    except (OSError, ValueError) as error:
        _write(context.notify_write, encode_boot_error(pid, context.slot, f"cannot set a resource limit: {error}"))
        return EXIT_BOOT_ERROR
    cfg = context.cfg
    if cfg.memory_merge:
        memory.opt_in_merge()  # before post_fork and the app: all they map can be merged
    if cfg.log_config is not None:
        try:  # before post_fork and the app, so their records follow it
            logs.apply_config(cfg.log_config, context.app_loggers)
        except ConfigError as error:
            _write(context.notify_write, encode_boot_error(pid, context.slot, str(error)))
            return EXIT_BOOT_ERROR
    server = ServerView(pid=context.master_pid, config=cfg, app=repr(str(cfg.app)))
    # Before the app is loaded: the MPM that serves as far as the setting or the preloaded app tell.
    known = context.interface or serving.known_interface(cfg.interface)
    worker = WorkerView(pid=pid, slot=context.slot, generation=context.generation,
                        mpm=serving.serving_mpm(known, cfg.mpm))
    try:
        context.hooks.call("post_fork", server, worker)
    except HookError as error:
        _write(context.notify_write, encode_boot_error(pid, context.slot, str(error)))
        return EXIT_BOOT_ERROR
    app = context.app
    if app is None:
        try:
            app = load_app(context.cfg.app, context.cfg.factory, context.cfg.interface)
        except AppLoadError as error:
            if error.traceback:
                log.error("cannot load the app:\n%s", error.traceback.rstrip())
            _write(context.notify_write, encode_boot_error(pid, context.slot, str(error)))
            return EXIT_BOOT_ERROR
        except BaseException as error:  # noqa: BLE001 - report anything the app raised
            log.error("cannot load the app:\n%s", traceback.format_exc().rstrip())
            message = f"error while loading the app: {type(error).__name__}: {error}"
            _write(context.notify_write, encode_boot_error(pid, context.slot, message))
            return EXIT_BOOT_ERROR
        # What the app allocated at import time is long-lived: keep the collector off it.
        gc.freeze()
    interface = context.interface
    if interface is None:
        try:
            interface = check_interface(app, cfg)
        except AppLoadError as error:
            _write(context.notify_write, encode_boot_error(pid, context.slot, str(error)))
            return EXIT_BOOT_ERROR
    _write(context.notify_write, encode_interface(pid, context.slot, interface))
    if serving.serving_mpm(interface, cfg.mpm) != worker.mpm:
        # post_fork saw the MPM the setting names (the app was not loaded yet); the hooks from
        # here on (post_worker_init, the request hooks, worker_exit) see the one that serves.
        worker = replace(worker, mpm=serving.serving_mpm(interface, cfg.mpm))
    if serving.title_tag(interface, cfg.mpm) != tag:
        setproctitle(f"tines: worker {context.slot} [{serving.title_tag(interface, cfg.mpm)}] gen {context.generation}")
    if cfg.log_config is None:
        logs.handle_app_records()  # once the app is loaded: one that set up logging is left alone
    context.hooks.call_logged("post_worker_init", worker)
    if interface != "wsgi":
        from tines import asgi

        if context.standby and not _stand_by(context, pid):
            context.hooks.call_logged("worker_exit", server, worker)
            return 0
        return _serve_asgi(context, asgi.as_asgi3(app, interface), server, worker)
    app = wrap_app(app, context.hooks, worker)
    import tines._core as _core

    sampler = None
    if context.profile_dir is not None:
        from tines import profiler

        # The app's frames sit on this function's frame (run_worker calls the app from Rust):
        # the profiler cuts the stacks there.
        sampler = profiler.Sampler(context.profile_dir, cfg.profile_interval, _serve.__code__)
        sampler.start()
    # Rust writes the ready message once the access log is open and the app threads started.
    standby = functools.partial(_stand_by, context, pid) if context.standby else None
    reason = _core.run_worker(app, worker_spec(context, pid, standby))
    log.debug("worker %d (slot %d) stopped: %s", pid, context.slot, reason)
    if sampler is not None:
        sampler.stop()
    context.hooks.call_logged("worker_exit", server, worker)
    return 0


def _serve_asgi(context: WorkerContext, app: Any, server: ServerView, worker: WorkerView) -> int:
    """The ASGI worker (ADR 0014): the app on an asyncio loop on this thread, which drives the
    Rust reactor through its epoll fd (``tines.asgi``); ready once the app's lifespan startup
    is done."""
    from tines import asgi
    import tines._core as _core

    cfg = context.cfg
    pid = os.getpid()
    for hook in ("pre_request", "post_request"):
        if hook in context.hooks.functions:
            log.warning("the %s hook runs for WSGI apps only: not called for this ASGI app", hook)
    bridge = _core.AsgiWorker(worker_spec(context, pid))
    try:
        reason = asgi.serve(app, bridge, cfg, cfg.interrupt_timeout)
    except (asgi.LifespanError, AppLoadError) as error:
        prefix = "lifespan startup failed: " if isinstance(error, asgi.LifespanError) else ""
        _write(context.notify_write, encode_boot_error(pid, context.slot, f"{prefix}{error}"))
        return EXIT_BOOT_ERROR
    log.debug("worker %d (slot %d) stopped: %s", pid, context.slot, reason)
    context.hooks.call_logged("worker_exit", server, worker)
    return 0
