"""The master process's own mechanism: what it holds, and how it comes up, sleeps, tells the
world it is ready or stopping, and goes down.

Owns: the bring-up before the first fork (the checks and the first ``Generation``, the pid file,
``on_starting``, binding or adopting the listeners and the status listener, the preloaded app,
the switch to ``user``/``group``, the scoreboard, the pipes, the signal handlers), the views of
the master that hooks receive, the sleep between two turns of the loop, the ready line
(``--ready-fd``, sd_notify, the old master of an upgrade), telling that it stops, killing the
workers left, and the tear-down.

``tines.arbiter.Arbiter`` is this process with the supervision: the loop, the signal handlers,
when a worker starts or goes, and the decisions of the reload, the upgrade, the status process,
the dynamic pool and the crash-loop guard carried out. The line between them is the concern:
what the process holds and does for itself is here, what it decides about its workers is there.

Must not: import ``tines.arbiter``, decide the worker count or swap the generation after the
start, or start a thread (it forks; see docs/adr/0001-fork-safety-and-readiness.md).
"""

from __future__ import annotations

import errno
import gc
import json
import os
import sys
from collections.abc import Callable

from tines import logs, memory, preflight, profiler, rate_limits, reloader, sdnotify, serving, standby, tls, upgrade, watchdog
from tines import pool as spare_pool
from tines import status as status_process
from tines.app_loader import check_mpm, interface_of, load_app
from tines.config import Config
from tines.duties import Duties
from tines.errors import ConfigError
from tines.exits import Stop
from tines.fleet import Fleet
from tines.generation import Generation, Worker
from tines.hooks import HookError, Hooks, ServerView, WorkerView
from tines.sockets import Listener, bind_all, tls_flags
from tines.wakeup import Wakeup

log = logs.get("arbiter")

H2C_SAYS = {"off": "", "only": ": HTTP/2 (h2c) only", "both": ": HTTP/1.1 and HTTP/2 (h2c)"}
"""What the "Listening at" line adds for a listener's h2c mode (``Listener.h2c``)."""


class Master:
    """The master process: its resources and their life (``Arbiter`` supervises with them)."""

    def __init__(self, cfg: Config) -> None:
        self.generation = Generation(number=1, cfg=cfg, worker_settings={}, hooks=Hooks(), pool=None,
                                     memory_merge=False)
        """What the workers are spawned with; a reload swaps it whole (``Arbiter.put_in_force``).
        Until ``start`` has checked the settings, only its ``cfg`` is filled in."""
        self.pid = os.getpid()
        self.num_workers: int = cfg.workers
        """The workers wanted (TTIN, TTOU, the dynamic pool and a reload change it)."""
        self.listeners: list[Listener] = []
        self.fleet = Fleet(cfg)
        """The workers, and what is done to each of them (``tines.fleet``)."""
        self.wakeup = Wakeup()
        """The queued signals and the wake-up fd the loop sleeps on (``tines.wakeup``)."""
        self.app: Callable[..., object] | None = None
        self.app_loggers: frozenset[str] = frozenset()
        """The loggers the preloaded app made as it was imported (``logs.apply_config``)."""
        self.interface: str | None = serving.known_interface(cfg.interface)
        """The app's interface ("wsgi", "asgi3", "asgi2"): from the ``interface`` setting, the
        preloaded app, or the workers' ``interface`` messages (``Arbiter.read_notifications``);
        None until one of them tells. The messages name it and the MPM serving it."""
        self.announced = False
        self.exit_room = 0
        """Scoreboard slots sized at start for processes on their way out
        (``watchdog.exit_room``): not room for more workers."""
        self.started = False
        """True once on_starting succeeded: on_exit runs at shutdown only then."""
        self.duties = Duties(log, passes=(Stop,))
        self.watcher: reloader.SourceWatcher | None = None
        """The development reload's source watcher (``--reload``; tines.reloader)."""
        self.upgrade = upgrade.Upgrade(upgrade.Invocation.record(), cfg.pid_file)
        """USR2 (and HUP with preload): the new master, the pid file (``tines.upgrade``)."""
        self.notifier = sdnotify.Notifier(None)
        """sd_notify (``NOTIFY_SOCKET``): readiness, reloads and the stop told to systemd."""
        self.status = status_process.StatusProcess(cfg)
        """The status listener and its process (``status_bind``; tines.status)."""
        self.ticket_secret = self.upgrade.ticket_secret or tls.new_ticket_secret()
        """The TLS ticket keys' secret: this master's own, or its old master's (USR2), so that
        tickets stay valid across reloads and upgrades (``tines.tls``)."""

    @property
    def cfg(self) -> Config:
        """The settings in force: the generation's."""
        return self.generation.cfg

    @property
    def workers(self) -> dict[int, Worker]:
        """Every worker process, by pid (the fleet's records)."""
        return self.fleet.workers

    # ----- start -----------------------------------------------------------------------------

    def start(self, on_source_change: Callable[[], None]) -> None:
        """Everything before the first fork. ``on_source_change`` is what the development
        reload's source watcher calls (``--reload``: what HUP does)."""
        cfg = self.cfg
        # What every worker would fail on is checked once, here, with the workers' own code
        # (the same checks as check-config's).
        checked = preflight.check(cfg, self.ticket_secret)
        pool = spare_pool.Pool(checked.pool) if checked.pool is not None else None
        if checked.pool is not None:
            self.num_workers = checked.pool.start_workers
        self.generation = Generation(number=1, cfg=cfg, worker_settings=checked.worker_settings,
                                     hooks=checked.hooks, pool=pool, memory_merge=memory.check_merge(cfg))
        self.upgrade.write_pid_file(self.pid)
        if cfg.umask is not None:
            os.umask(cfg.umask)
        try:
            self.generation.hooks.call("on_starting", self.server_view())
        except HookError as error:
            raise ConfigError(str(error)) from None
        self.started = True
        self.notifier = sdnotify.Notifier.from_environment()
        self.listeners = bind_all(list(cfg.bind), cfg.backlog, cfg.defer_accept)
        self.upgrade.adopt(self.listeners)
        self.status.bind(self.listeners)
        self.upgrade.adopt(self.status.listeners())
        if cfg.preload:
            before = logs.logger_names()
            self.app = load_app(cfg.app, cfg.factory, cfg.interface)
            self.app_loggers = logs.logger_names() - before
            self.interface = interface_of(self.app, cfg.interface, repr(str(cfg.app)))
            if self.interface != "wsgi":
                check_mpm(cfg)
                # The loop (and asyncio, ssl), loaded once for every worker to inherit. For a
                # WSGI app no process loads it: every fork would copy its mappings for nothing.
                import tines.asgi  # noqa: F401
            # Objects the app made at import time stay shared copy-on-write: keep the cyclic
            # collector from touching (and so copying) them in the workers.
            gc.freeze()
        # After binding (so privileged ports can be bound). A master started by an upgrade runs
        # as the user its old master switched to: the switch is skipped.
        preflight.drop_privileges(cfg.group, cfg.user)
        logs.check_access_log(cfg.access_log)  # as the user the workers run as
        profiler.prepare(cfg, self.pid)  # likewise
        import tines._core as _core

        pool = self.generation.pool
        most = self.num_workers if pool is None else pool.settings.max_workers
        slots = watchdog.scoreboard_slots(most, standby.count(cfg), cfg.max_requests)
        self.exit_room = watchdog.exit_room(most + standby.count(cfg), cfg.max_requests)
        scoreboard = self.fleet.scoreboard = _core.Scoreboard(slots, watchdog.scoreboard_threads(cfg))
        scoreboard.publish_master(self.pid)
        scoreboard.set_generation(self.generation.number)
        # Before the first fork, so every worker maps the same buckets (ADR 0038).
        self.fleet.rate_table = rate_limits.ensure(cfg, None, self.upgrade.rate_table_fd, scoreboard)
        self.fleet.client_connections = rate_limits.ensure_connections(cfg, None, scoreboard,
                                                                       self.upgrade.client_connections)
        self.fleet.watchdog = watchdog.Watchdog(cfg, scoreboard)
        self.wakeup.open()
        self.fleet.open_pipes()
        if cfg.reload:
            self.watcher = reloader.SourceWatcher(cfg, logs.get("reload"), on_source_change)
        self.wakeup.install()
        for listener, speaks_tls in zip(self.listeners, tls_flags(self.listeners, tls.enabled(cfg))):
            scheme = "unix" if listener.address.startswith("unix:") else "https" if speaks_tls else "http"
            where = listener.address if scheme == "unix" else f"{scheme}://{listener.address}"
            log.info("Listening at: %s (%d)%s", where, self.pid, H2C_SAYS[listener.h2c])
        for warning in checked.warnings:
            log.warning("%s", warning)
        workers = serving.plural(self.num_workers, "worker") if pool is None else f"a {pool.settings.describe()}"
        log.info("%s", serving.start_line(self.interface, cfg.mpm, cfg.source("mpm") != "default", workers))

    def server_view(self) -> ServerView:
        """The read-only view of the master that hooks receive."""
        return ServerView(pid=self.pid, config=self.cfg, app=str(self.cfg.app),
                          workers=tuple(self.worker_view(w) for w in self.workers.values()))

    def worker_view(self, worker: Worker) -> WorkerView:
        """The read-only view of one worker that hooks receive."""
        return WorkerView(pid=worker.pid, slot=worker.slot, generation=worker.generation,
                          mpm=serving.serving_mpm(self.interface, self.cfg.mpm), born=worker.born)

    # ----- the loop's own mechanism ---------------------------------------------------------

    def duty(self, name: str, action: Callable[[], object]) -> None:
        """Run one of the master's duties: an exception is logged with ``name`` and its
        traceback (rate-limited, tines.duties) and the master goes on; ``Stop`` passes."""
        self.duties.run(name, action)

    def sleep(self, timeout: float) -> bool:
        """Wait for a signal or a worker message (or the upgrade's pipe, or the source
        watcher), at most ``timeout``; False when the whole timeout passed with none."""
        watcher = [self.watcher.fileno()] if self.watcher is not None else []
        ready = self.wakeup.sleep(timeout, [self.fleet.notify_read, *self.upgrade.watched(), *watcher])
        if ready is None:
            return False
        if self.watcher is not None and watcher[0] in ready:
            self.duty("development reload", self.watcher.read)
        return True

    # ----- what the world is told ------------------------------------------------------------

    def ready_fd_held(self) -> list[int]:
        """``--ready-fd`` while this master still holds it (until its ready line): a process it
        forks meanwhile must close it, or a supervisor reading it to its end would wait for
        that process's exit too. Not after it (the number may be another fd by then), nor in a
        master started by an upgrade (its old master's)."""
        if self.cfg.ready_fd is None or self.announced or self.upgrade.old_master is not None:
            return []
        return [self.cfg.ready_fd]

    def announce_ready(self) -> None:
        """Log and (with --ready-fd) write the machine-readable ready line, once."""
        self.announced = True
        binds = [listener.address for listener in self.listeners]
        log.info("ready: %s", serving.workers_line(self.interface, self.cfg.mpm, self.num_workers))
        # A master started by an upgrade does not write --ready-fd: that fd was its old
        # master's (closed after its own ready line; the number may be a listener here).
        if self.cfg.ready_fd is not None and self.upgrade.old_master is None:
            line = json.dumps({"event": "ready", "pid": self.pid, "workers": self.num_workers,
                               "mpm": serving.serving_mpm(self.interface, self.cfg.mpm),
                               "interface": self.interface, "binds": binds})
            try:
                os.write(self.cfg.ready_fd, line.encode() + b"\n")
                os.close(self.cfg.ready_fd)
            except OSError as error:
                log.warning("cannot write to --ready-fd %d: %s", self.cfg.ready_fd, error)
        self.generation.hooks.call_logged("when_ready", self.server_view())
        self.notifier.ready(self.status_text())
        self.upgrade.tell_old_master_ready()

    def status_text(self) -> str:
        """One line for sd_notify's ``STATUS=``: workers, interface and MPM, binds."""
        binds = ", ".join(listener.address for listener in self.listeners)
        return f"{serving.workers_line(self.interface, self.cfg.mpm, self.num_workers)}, listening on {binds}"

    def tell_stopping(self) -> None:
        """Not ready from now on: in the scoreboard (the status listener's ``/readyz``), and
        ``STOPPING=1`` to systemd, unless this is the new master of an upgrade whose old
        master still runs (a TERM to it is a manual rollback: the old one is the main pid and
        the unit is not stopping)."""
        if self.fleet.scoreboard is not None:
            self.fleet.scoreboard.set_stopping()
        if self.upgrade.old_master_alive():
            log.info("not telling systemd STOPPING=1: old master %s is still the main process",
                     self.upgrade.old_master)
            return
        self.notifier.stopping()

    # ----- the end ----------------------------------------------------------------------------

    def kill_all(self) -> None:
        """SIGKILL and reap every remaining worker (no zombie, no orphan)."""
        self.fleet.kill_all(lambda worker: self.generation.hooks.call_logged(
            "child_exit", self.server_view(), self.worker_view(worker)))

    def shutdown(self) -> None:
        """Last: kill what is left, close listeners (unlinking Unix sockets) and pipes."""
        if self.workers:
            self.kill_all()
        self.status.stop()  # last: /readyz said "stopping" until the workers were gone
        for listener in self.listeners:
            listener.close()
        self.listeners = []
        if self.watcher is not None:
            self.watcher.close()
        self.wakeup.uninstall()
        for fd in (*self.wakeup.fds(), *self.fleet.pipe_ends()):
            try:
                os.close(fd)
            except OSError as error:
                if error.errno != errno.EBADF:
                    raise
        self.upgrade.at_exit(self.pid)
        self.notifier.close()
        if self.started:
            self.generation.hooks.call_logged("on_exit", self.server_view())
        log.info("master %d exiting", self.pid)
        sys.stderr.flush()
