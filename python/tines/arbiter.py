"""The master process: binds, forks the workers, supervises them, stops them.

Owns: the master loop (the gunicorn ``Arbiter.run`` / nginx master-cycle shape: signal
handlers only queue the signal and wake the loop, ``handle_<signal>()`` methods act), spawning
and reaping workers, the crash-loop guard, readiness, the stop sequences, and calling the
master's server hooks (docs/hooks.md) at those points. Its duties run through ``duty()``
(tines.duties): one that fails is logged and the master goes on. The dynamic pool's policy is
``tines.pool``; the master reads the scoreboard for it and acts on its decisions.

Must not: start a thread (it forks; see docs/adr/0001-fork-safety.md), or touch a request.
The signal table is in docs/signals.md.
"""

from __future__ import annotations

import errno
import gc
import json
import os
import select
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from setproctitle import setproctitle

from tines import limits, logs, memory, preflight, profiler, reloader, sdnotify, upgrade, watchdog
from tines import pool as spare_pool
from tines import reload as reloading
from tines import status as status_process
from tines import worker as worker_process
from tines import asgi
from tines.app_loader import load_app
from tines.config import Config
from tines.duties import Duties
from tines.errors import AppLoadError, ConfigError
from tines.hooks import HookError, Hooks, ServerView, WorkerView
from tines.sockets import Listener, bind_all

HANDLED_SIGNALS = ("CHLD", "TERM", "INT", "QUIT", "HUP", "TTIN", "TTOU", "USR1", "USR2", "WINCH")

SIGNAL_QUEUE_LIMIT = 8
"""Signals queued beyond this are dropped (a burst of the same signal means the same thing)."""

LOOP_TIMEOUT = 1.0
"""The longest the master sleeps without a signal or a message (it re-checks its duties)."""

BACKOFF_START = 0.1
BACKOFF_MAX = 5.0
"""Respawn delay after a worker died before ready, and after the second and later crashes of
ready workers within CRASH_WINDOW: 0.1 s, doubling, at most 5 s."""

CRASH_WINDOW = 10.0
"""Crashes of ready workers this recent (seconds) count toward the crash backoff. An app that
crashes a worker now and then gets every replacement at once; one that crashes workers on
every request (a crash loop after ready) gets its respawns slowed to about one per 5 s."""

QUICK_STOP_WAIT = 2.0
"""How long INT/QUIT waits for workers before SIGKILL (or graceful_timeout if shorter)."""

EXIT_OK = 0
EXIT_BOOT_FAILURES = 3
"""Exit status when workers keep dying before ready (gunicorn's WORKER_BOOT_ERROR)."""

log = logs.get("arbiter")


@dataclass
class Worker:
    """The master's record of one worker process."""

    pid: int
    slot: int
    generation: int
    born: float = field(default_factory=time.monotonic)
    ready: bool = False
    stopping: bool = False
    memory: memory.MemoryUsage | None = None
    """The latest memory sample (``Arbiter.record_memory``)."""
    reason: str | None = None
    """Why it is stopping while the others go on (``retire_worker``'s reason, or the one the
    worker gave in its ``draining`` message); None for the final stop and while serving."""
    own_decision: bool = False
    """It started draining by itself (max_requests, cpu_limit): the master did not signal it."""


class Stop(Exception):
    """Raised inside the loop to leave it with an exit status."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class Arbiter:
    """The master. ``Arbiter(cfg).run()`` returns the process exit status.

    ``overrides`` are the command-line values ``cfg`` was resolved with (``tines.config.load``):
    HUP resolves the settings again with them (``tines.reload``).
    """

    def __init__(self, cfg: Config, overrides: Mapping[str, object] | None = None) -> None:
        self.cfg = cfg
        self.pid = os.getpid()
        self.num_workers: int = cfg.workers
        self.listeners: list[Listener] = []
        self.workers: dict[int, Worker] = {}
        self.generation = 1
        self.signals: deque[int] = deque()
        self.app: Callable[..., object] | None = None
        self.ever_ready = False
        self.announced = False
        self.boot_failures = 0
        self.crash_times: deque[float] = deque()
        self.next_spawn = 0.0
        self.notify_buffer = bytearray()
        self.warned_threads = False
        self.scoreboard: object = None
        self.watchdog: watchdog.Watchdog | None = None
        self.worker_settings: dict[str, object] = {}
        self.wake_read = self.wake_write = -1
        self.notify_read = self.notify_write = -1
        self.life_read = self.life_write = -1
        self.hooks = Hooks()
        self.started = False
        """True once on_starting succeeded: on_exit runs at shutdown only then."""
        self.pool: spare_pool.Pool | None = None
        """The dynamic pool (``max_workers`` set); None for a fixed ``workers`` count."""
        self.next_pool_check = 0.0
        self.duties = Duties(log, passes=(Stop,))
        self.memory_sampler = memory.Sampler(memory.sample_rate(cfg))
        self.memory_merge = False
        """memory_merge is on and the kernel has it (``memory.check_merge``)."""
        self.reloader = reloading.Reloader(self, dict(overrides or {}))
        """HUP's reload: the new generation, a bad deploy, a HUP during a HUP."""
        self.watcher: reloader.SourceWatcher | None = None
        """The development reload's source watcher (``--reload``; tines.reloader)."""
        self.upgrade = upgrade.Upgrade(upgrade.Invocation.record(), cfg.pid_file)
        """USR2 (and HUP with preload): the new master, the pid file (``tines.upgrade``)."""
        self.notifier = sdnotify.Notifier(None)
        """sd_notify (``NOTIFY_SOCKET``): readiness, reloads and the stop told to systemd."""
        self.status = status_process.StatusProcess(cfg)
        """The status listener and its process (``status_bind``; tines.status)."""
        self.stop_at: float | None = None
        """When the graceful stop begins, during a TERM's ``shutdown_delay`` (readiness is off,
        the workers serve on); None otherwise."""

    # ----- start -----------------------------------------------------------------------------

    def run(self) -> int:
        """Start, supervise until told to stop, stop; return the exit status.

        Raises ConfigError / AppLoadError (one-line messages, exit 2 in the CLI) for a bad
        bind, a bad app at preload, or an app whose first workers cannot boot.
        """
        logs.configure(self.cfg.error_log, self.cfg.log_level)
        setproctitle(f"tines: master [{self.cfg.app}]")
        try:
            self.start()
            status = self.loop()
        finally:
            self.shutdown()
        return status

    def start(self) -> None:
        """Everything before the first fork."""
        cfg = self.cfg
        # What every worker would fail on is checked once, here, with the workers' own code
        # (the same checks as check-config's).
        checked = preflight.check(cfg)
        self.worker_settings = checked.worker_settings
        self.hooks = checked.hooks
        if checked.pool is not None:
            self.pool = spare_pool.Pool(checked.pool)
            self.num_workers = checked.pool.start_workers
        self.memory_merge = memory.check_merge(cfg)
        self.upgrade.write_pid_file(self.pid)
        if cfg.umask is not None:
            os.umask(cfg.umask)
        try:
            self.hooks.call("on_starting", self.server_view())
        except HookError as error:
            raise ConfigError(str(error)) from None
        self.started = True
        self.notifier = sdnotify.Notifier.from_environment()
        self.listeners = bind_all(list(cfg.bind), cfg.backlog, cfg.defer_accept)
        self.upgrade.adopt(self.listeners)
        self.status.bind(self.listeners)
        self.upgrade.adopt(self.status.listeners())
        if cfg.preload:
            self.app = load_app(cfg.app, cfg.factory, cfg.interface)
            if asgi.interface_of(self.app, cfg.interface, repr(str(cfg.app))) != "wsgi":
                asgi.check_mpm(cfg)
            # Objects the app made at import time stay shared copy-on-write: keep the cyclic
            # collector from touching (and so copying) them in the workers.
            gc.freeze()
        self.drop_privileges()
        logs.check_access_log(cfg.access_log)  # as the user the workers run as
        profiler.prepare(cfg, self.pid)  # likewise
        import tines._core as _core

        most = self.num_workers if self.pool is None else self.pool.settings.max_workers
        self.scoreboard = _core.Scoreboard(watchdog.scoreboard_slots(most), watchdog.scoreboard_threads(cfg))
        self.scoreboard.publish_master(self.pid)
        self.scoreboard.set_generation(self.generation)
        self.reloader.capacity = reloading.Capacity(watchdog.scoreboard_slots(most), watchdog.scoreboard_threads(cfg))
        self.watchdog = watchdog.Watchdog(cfg, self.scoreboard)
        self.wake_read, self.wake_write = self.pipe()
        self.notify_read, self.notify_write = self.pipe()
        self.life_read, self.life_write = self.pipe()
        os.set_blocking(self.notify_write, True)
        if cfg.reload:
            self.watcher = reloader.SourceWatcher(cfg, logs.get("reload"), self.handle_hup)
        signal.set_wakeup_fd(self.wake_write, warn_on_full_buffer=False)
        for name in HANDLED_SIGNALS:
            signal.signal(getattr(signal, f"SIG{name}"), self.on_signal)
        for listener in self.listeners:
            scheme = "unix" if listener.address.startswith("unix:") else "http"
            where = listener.address if scheme == "unix" else f"http://{listener.address}"
            log.info("Listening at: %s (%d)", where, self.pid)
        if self.pool is None:
            log.info("Using mpm %s with %d workers", cfg.mpm, self.num_workers)
        else:
            log.info("Using mpm %s with a %s", cfg.mpm, self.pool.settings.describe())

    def server_view(self) -> ServerView:
        """The read-only view of the master that hooks receive."""
        return ServerView(pid=self.pid, config=self.cfg, app=str(self.cfg.app),
                          workers=tuple(self.worker_view(w) for w in self.workers.values()))

    def worker_view(self, worker: Worker) -> WorkerView:
        """The read-only view of one worker that hooks receive."""
        return WorkerView(pid=worker.pid, slot=worker.slot, generation=worker.generation,
                          mpm=self.cfg.mpm)

    @staticmethod
    def pipe() -> tuple[int, int]:
        """A close-on-exec pipe whose ends are non-blocking."""
        read, write = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        return read, write

    def drop_privileges(self) -> None:
        """Switch to --group / --user after binding (so privileged ports can be bound). A
        change already in effect is skipped: a master started by an upgrade runs as the user
        its old master switched to, where setgroups would fail."""
        upgrade.drop_privileges(self.cfg.group, self.cfg.user)

    def on_signal(self, signum: int, frame: object) -> None:
        """The only work done in signal context: queue it (the wake-up fd wakes the loop)."""
        if len(self.signals) < SIGNAL_QUEUE_LIMIT:
            self.signals.append(signum)

    # ----- the loop --------------------------------------------------------------------------

    def loop(self) -> int:
        """Act on queued signals and worker messages; keep the worker count right.

        Each turn handles the signals (a CHLD reaps), then the messages, then spawns what is
        missing, and only then sleeps: a dead worker is replaced in the turn that reaps it.
        """
        try:
            self.status.turn(self)
            self.manage_workers()
            self.next_pool_check = time.monotonic() + spare_pool.CHECK_INTERVAL
            quiet_since = time.monotonic()
            while True:
                if self.sleep(self.loop_timeout()):
                    quiet_since = time.monotonic()
                elif time.monotonic() - quiet_since >= LOOP_TIMEOUT:
                    # (Timed wakes for memory samples come more often: not counted as events.)
                    log.debug("periodic check: no signal or message for %.1f s", LOOP_TIMEOUT)
                    quiet_since = time.monotonic()
                while self.signals:
                    self.dispatch(self.signals.popleft())
                if self.stop_at is not None and time.monotonic() >= self.stop_at:
                    log.info("shutdown_delay over: graceful stop")
                    self.stop(graceful=True)
                self.read_notifications()
                if self.watcher is not None:
                    self.duty("development reload", self.watcher.check)
                self.duty("watchdog", self.check_requests)
                if self.pool is not None and time.monotonic() >= self.next_pool_check:
                    self.next_pool_check = time.monotonic() + spare_pool.CHECK_INTERVAL
                    self.duty("pool", self.check_pool)
                self.duty("memory sampling", self.sample_memory)
                self.duty("upgrade", lambda: self.upgrade.turn(self))
                self.duty("start workers", self.manage_workers)
                self.duty("status process", lambda: self.status.turn(self))
        except Stop as stop:
            return stop.status

    def duty(self, name: str, action: Callable[[], object]) -> None:
        """Run one of the master's duties: an exception is logged with ``name`` and its
        traceback (rate-limited, tines.duties) and the master goes on; ``Stop`` passes."""
        self.duties.run(name, action)

    def dispatch(self, signum: int) -> None:
        """Call ``handle_<name>()`` for a signal."""
        name = signal.Signals(signum).name[3:].lower()
        getattr(self, f"handle_{name}")()

    def loop_timeout(self) -> float:
        """Sleep until the next delayed (backed-off) spawn, pool check, memory read or
        watchdog deadline is due, at most LOOP_TIMEOUT."""
        now = time.monotonic()
        timeout = LOOP_TIMEOUT
        if len(self.live_workers()) < self.num_workers and self.next_spawn > now:
            timeout = min(timeout, self.next_spawn - now)
        if self.pool is not None:
            timeout = min(timeout, max(0.0, self.next_pool_check - now))
        if any(w.ready and not w.stopping for w in self.workers.values()):
            timeout = min(timeout, self.memory_sampler.wait(now))
        if self.watcher is not None:
            reload_due = self.watcher.wait(now)
            timeout = timeout if reload_due is None else min(timeout, reload_due)
        if self.stop_at is not None:
            timeout = min(timeout, max(0.0, self.stop_at - now))
        due = self.watchdog.next_wake(self.workers.values()) if self.watchdog is not None else None
        return timeout if due is None else min(timeout, due)

    def sleep(self, timeout: float) -> bool:
        """Wait for a signal (wake-up fd) or a worker message, at most ``timeout``; False when
        the whole timeout passed with neither."""
        if self.signals:
            return True
        try:
            watched = [self.wake_read, self.notify_read, *self.upgrade.watched()]
            if self.watcher is not None:
                watched.append(self.watcher.fileno())
            ready, _, _ = select.select(watched, [], [], timeout)
        except InterruptedError:
            return True
        if not ready:
            return False
        if self.watcher is not None and self.watcher.fileno() in ready:
            self.duty("development reload", self.watcher.read)
        if self.wake_read in ready:
            try:
                while os.read(self.wake_read, 4096):
                    pass
            except BlockingIOError:
                pass
        return True

    def read_notifications(self) -> None:
        """Handle every complete ready / boot_error message from the workers."""
        try:
            while True:
                chunk = os.read(self.notify_read, 65536)
                if not chunk:
                    break
                self.notify_buffer += chunk
        except BlockingIOError:
            pass
        for kind, pid, slot, text in worker_process.decode(self.notify_buffer):
            if kind == "ready":
                self.on_ready(pid)
            elif kind == "draining":
                self.on_draining(pid, text)
            else:
                self.on_boot_error(pid, slot, text)

    def on_ready(self, pid: int) -> None:
        """A worker loaded the app and is accepting."""
        worker = self.workers.get(pid)
        if worker is None:
            return
        worker.ready = True
        self.boot_failures = 0
        self.ever_ready = True
        took = (time.monotonic() - worker.born) * 1000
        usage = self.memory_sampler.read(pid, self.memory_merge)
        if usage is not None:
            self.record_memory(worker, usage)
        figures = f" ({usage.describe()})" if usage is not None else ""
        log.info("worker %d (slot %d) ready in %.1f ms%s", pid, worker.slot, took, figures)
        self.retire_old_generation()
        if not self.announced and sum(w.ready for w in self.live_workers()) >= self.num_workers:
            self.announce_ready()

    def on_draining(self, pid: int, reason: str) -> None:
        """A worker started draining by itself (max_requests, cpu_limit): it is no longer
        live, so the loop's ``manage_workers`` spawns its replacement in this same turn while
        it finishes its connections (it still counts toward the processes until it exits)."""
        worker = self.workers.get(pid)
        if worker is None or worker.stopping:
            return
        worker.stopping = True
        worker.own_decision = True
        worker.reason = reason
        log.info("worker %d (slot %d) draining (%s): starting its replacement", pid, worker.slot, reason)

    def announce_ready(self) -> None:
        """Log and (with --ready-fd) write the machine-readable ready line, once."""
        self.announced = True
        binds = [listener.address for listener in self.listeners]
        log.info("ready: %d workers, mpm=%s", self.num_workers, self.cfg.mpm)
        # A master started by an upgrade does not write --ready-fd: that fd was its old
        # master's (closed after its own ready line; the number may be a listener here).
        if self.cfg.ready_fd is not None and self.upgrade.old_master is None:
            line = json.dumps({"event": "ready", "pid": self.pid, "workers": self.num_workers,
                               "mpm": self.cfg.mpm, "binds": binds})
            try:
                os.write(self.cfg.ready_fd, line.encode() + b"\n")
                os.close(self.cfg.ready_fd)
            except OSError as error:
                log.warning("cannot write to --ready-fd %d: %s", self.cfg.ready_fd, error)
        self.hooks.call_logged("when_ready", self.server_view())
        self.notifier.ready(self.status_text())
        self.upgrade.tell_old_master_ready()

    def status_text(self) -> str:
        """One line for sd_notify's ``STATUS=``: workers, MPM, binds."""
        binds = ", ".join(listener.address for listener in self.listeners)
        return f"{self.num_workers} workers, mpm {self.cfg.mpm}, listening on {binds}"

    def on_boot_error(self, pid: int, slot: int, message: str) -> None:
        """A worker could not load the app. On the first boot that is fatal (exit 2); in a
        reload's new generation it abandons the reload (``tines.reload``)."""
        worker = self.workers.get(pid)
        if worker is not None and self.reloader.on_boot_error(worker, message):
            return
        log.error("worker %d (slot %d) failed to boot: %s", pid, slot, message)
        if not self.ever_ready:
            raise AppLoadError(message)

    # ----- workers ---------------------------------------------------------------------------

    def live_workers(self) -> list[Worker]:
        """Workers of the current generation that are not being stopped."""
        return [w for w in self.workers.values() if not w.stopping and w.generation == self.generation]

    def free_slot(self) -> int | None:
        """The lowest scoreboard slot no worker holds."""
        taken = {w.slot for w in self.workers.values()}
        for slot in range(self.scoreboard.slots):  # type: ignore[attr-defined]
            if slot not in taken:
                return slot
        return None

    def manage_workers(self) -> None:
        """Spawn up to the wanted count (after any backoff); stop extra workers. During a
        reload, the reload's rolling replacement does this (``tines.reload``)."""
        if not self.upgrade.wants_workers:
            return  # WINCH during an upgrade, or handing over to the new master
        if self.reloader.step():
            return
        live = self.live_workers()
        while len(live) < self.num_workers and time.monotonic() >= self.next_spawn:
            if not self.spawn_worker():
                break
            live = self.live_workers()
        extra = len(live) - self.num_workers
        for worker in sorted(live, key=lambda w: w.born, reverse=True)[:max(extra, 0)]:
            self.retire_worker(worker, "idle_retire", "fewer workers")

    def sample_memory(self) -> None:
        """Read one worker's memory when the schedule says so (``memory.Sampler``: at most
        ``memory_sample_rate`` reads per second in total); retire it above
        ``max_worker_memory``. An error is logged and the master goes on."""
        try:
            sampled = [w for w in self.workers.values() if w.ready and not w.stopping]
            worker = self.memory_sampler.pick(sampled, time.monotonic())
            if worker is None:
                return
            usage = self.memory_sampler.read(worker.pid, self.memory_merge)
            if usage is None:
                return
            self.record_memory(worker, usage)
            log.debug("worker %d (slot %d) memory: %s", worker.pid, worker.slot, usage.describe())
            over = memory.over_limit(self.cfg, usage)
            if over is not None:
                log.warning("worker %d (slot %d) %s: recycling", worker.pid, worker.slot, over)
                self.retire_worker(worker, "memory")
        except Exception:  # noqa: BLE001 - a duty of the master must never end it
            log.exception("memory sampling failed")

    def check_requests(self) -> None:
        """The watchdog's turn: requests over ``request_timeout``, boots over ``boot_timeout``,
        and the kills of dumped workers (``tines.watchdog``)."""
        if self.watchdog is not None:
            self.watchdog.check(list(self.workers.values()))

    def record_memory(self, worker: Worker, usage: memory.MemoryUsage) -> None:
        """Keep a worker's latest memory sample (and publish it in its scoreboard slot): the
        one place a sample is written."""
        worker.memory = usage
        self.scoreboard.set_memory(worker.slot, usage.rss, usage.pss, usage.uss, usage.swap)  # type: ignore[attr-defined]

    def spawn_worker(self) -> bool:
        """Fork one worker into a free slot; False when no slot is free."""
        slot = self.free_slot()
        if slot is None:
            log.warning("no free scoreboard slot: running %d workers, not %d",
                        len(self.live_workers()), self.num_workers)
            return False
        if threading.active_count() != 1 and not self.warned_threads:
            self.warned_threads = True
            log.warning("the master has %d threads before fork (a preloaded app started them?): "
                        "threads do not survive fork, and locks they hold stay locked in workers",
                        threading.active_count())
        context = worker_process.WorkerContext(
            cfg=self.cfg, slot=slot, generation=self.generation,
            listeners=[listener.fileno() for listener in self.listeners],
            scoreboard=self.scoreboard, life_read=self.life_read, notify_write=self.notify_write,
            close_in_child=[self.life_write, self.notify_read, self.wake_read, self.wake_write,
                            *([self.watcher.fileno()] if self.watcher is not None else []),
                            *filter(None, [self.notifier.fileno()]), *self.upgrade.inherited_fds(),
                            *self.status.close_in_child()],
            master_pid=self.pid, app=self.app, settings=self.worker_settings, hooks=self.hooks,
            profile_dir=profiler.profile_path(self.cfg, self.pid),
        )
        self.hooks.call_logged("pre_fork", self.server_view(),
                               WorkerView(pid=None, slot=slot, generation=self.generation, mpm=self.cfg.mpm))
        # The child is born with USR2 (retire) blocked, so a retire sent while it boots waits
        # for the worker's own handler (tines.worker) instead of killing it.
        previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2})
        pid = os.fork()
        if pid == 0:
            worker_process.run(context)  # never returns
        signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)
        self.scoreboard.claim(slot, pid, self.generation)  # type: ignore[attr-defined]
        self.workers[pid] = Worker(pid, slot, self.generation)
        log.debug("spawned worker %d (slot %d)", pid, slot)
        return True

    def check_pool(self) -> None:
        """The dynamic pool's check (once per pool.CHECK_INTERVAL): read every worker's slot,
        ask the policy, log and act (the spawns happen in ``manage_workers``, with the backoff)."""
        assert self.pool is not None
        if not self.upgrade.wants_workers:
            return
        if self.reloader.active:
            return  # the pool counts the new generation again once the reload is done
        decision = self.pool.check(self.pool_samples(), self.owed_starts())
        log.debug("pool check: %s", decision.summary)
        self.carry_out(decision)

    def owed_starts(self) -> int:
        """Workers wanted but not started yet (the crash backoff holds them back)."""
        return max(0, self.num_workers - len(self.live_workers()))

    def carry_out(self, decision: spare_pool.Decision) -> None:
        """Log a pool decision and act on it: more workers wanted (``manage_workers`` starts
        them, after any backoff), or one retired."""
        if decision.limit_reached is not None:
            log.warning("%s", decision.limit_reached)
        if decision.retire is not None:
            self.retire_worker(self.workers[decision.retire], "idle_retire", decision.message)
            self.num_workers = len(self.live_workers())
            return
        if decision.message:
            log.info("%s", decision.message)
        if decision.spawn:
            self.num_workers = max(self.num_workers, len(self.live_workers())) + decision.spawn

    def pool_samples(self) -> list[spare_pool.WorkerSample]:
        """Every worker as the pool sees it: the master's record and its scoreboard slot."""
        samples = []
        for worker in self.workers.values():
            slot = self.scoreboard.read(worker.slot)  # type: ignore[attr-defined]
            samples.append(spare_pool.WorkerSample(
                pid=worker.pid, slot=worker.slot, ready=worker.ready,
                stopping=worker.stopping or slot["state"] == "stopping",
                current=worker.generation == self.generation, active=int(slot["active"]),
                connections=int(slot["connections"])))
        return samples

    def stop_worker(self, worker: Worker, signum: int) -> None:
        """Signal one worker (ignoring one that is already gone)."""
        worker.stopping = True
        try:
            os.kill(worker.pid, signum)
        except ProcessLookupError:
            pass

    def retire_worker(self, worker: Worker, reason: str, why: str = "") -> None:
        """Stop one worker while the others go on, with the drain (docs/signals.md, USR2): it
        stops accepting at once (the others and its replacement take the listen queue), ends
        in-flight requests and kept-alive connections with ``Connection: close``, closes
        connections silent for ``drain_timeout`` and exits. It is no longer live, so
        ``manage_workers`` starts its replacement in the same turn; it still counts as a
        process until it exits. A worker still booting takes the retire once it can drain
        (tines.worker keeps USR2 pending until then). ``reason`` is the exit reason (a name of
        ``tines._core.EXIT_REASONS``: memory, idle_retire, reload) recorded in its scoreboard
        slot; ``why`` (words for the log; the reason when empty) is logged now and at its exit.
        """
        if worker.stopping:
            return
        worker.reason = why or reason
        self.scoreboard.set_exit_reason(worker.slot, reason)  # type: ignore[attr-defined]
        log.info("retiring worker %d (slot %d): %s", worker.pid, worker.slot, worker.reason)
        self.stop_worker(worker, signal.SIGUSR2)

    def signal_workers(self, signum: int) -> None:
        """Signal every worker."""
        for worker in list(self.workers.values()):
            self.stop_worker(worker, signum) if signum != signal.SIGUSR1 else self._send(worker, signum)

    @staticmethod
    def _send(worker: Worker, signum: int) -> None:
        try:
            os.kill(worker.pid, signum)
        except ProcessLookupError:
            pass

    def retire_old_generation(self) -> None:
        """During a reload: retire an old worker for each new one that is ready, start the
        next ones (``tines.reload``)."""
        self.reloader.step()

    def reload_started(self) -> None:
        """A reload begins (HUP): the config is read again; systemd hears ``RELOADING=1``."""
        log.info("reload: reading the config again (generation %d serves meanwhile)", self.generation)
        self.notifier.reload_started()

    def reload_finished(self, succeeded: bool) -> None:
        """A reload ended: the new generation serves, or (``succeeded`` False) the old one
        still does (the error line was logged). systemd hears ``READY=1`` either way (a
        reload it was told of: HUP, or HUP with --preload's upgrade)."""
        if succeeded:
            log.info("reload done: generation %d serves with %d workers", self.generation,
                     len(self.live_workers()))
        self.notifier.reload_finished(succeeded, self.status_text())

    def reap_workers(self) -> None:
        """Collect every exited worker, log why it ended, free its slot."""
        while True:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if self.upgrade.reaped(self, pid, status):
                continue  # the new master of an upgrade, not a worker
            if self.status.reaped(pid, status):
                continue
            known = self.workers.get(pid)
            if known is not None and not known.stopping:
                # A worker can say ready (or draining), serve and die between two turns of the
                # loop: its messages are in the pipe before its death, so read them first.
                self.read_notifications()
            worker = self.workers.pop(pid, None)
            if worker is None:
                continue
            if self.watchdog is not None:
                self.watchdog.forget(pid)
            reason = watchdog.record_exit(self.scoreboard, worker.slot, status, worker.stopping)
            # Frees the slot; its counters go to the totals the status listener shows.
            self.scoreboard.retire(worker.slot, pid, status)  # type: ignore[attr-defined]
            self.log_exit(worker, status, usage.ru_utime + usage.ru_stime, reason)
            if worker.memory is not None and worker.memory.ksm_merging:
                log.info("worker %d (slot %d) last memory sample: %s", worker.pid, worker.slot,
                         worker.memory.describe())
            self.hooks.call_logged("child_exit", self.server_view(), self.worker_view(worker))
            if not worker.ready and not worker.stopping:
                self.on_death_before_ready(worker, status)
            elif (not worker.stopping or worker.own_decision) and self.crashed(status):
                self.on_crash_after_ready()

    def log_exit(self, worker: Worker, status: int, cpu_seconds: float = 0.0, reason: str = "none") -> None:
        """One line saying how a worker ended, naming the resource limit that ended it where
        that can be told (``limits.exit_cause``; ``cpu_seconds`` is its user + system time),
        or the exit reason the master or the worker recorded (``request_timeout``...)."""
        # A worker the master was stopping may have been killed by the master itself.
        signalled = worker.stopping and not worker.own_decision
        cause = "" if signalled else limits.exit_cause(self.cfg, status, cpu_seconds)
        if not cause and worker.reason is not None:
            cause = f" (retired: {worker.reason})"
        elif not cause and reason not in ("none", "crash", "signal", "stop"):
            cause = f" ({reason})"
        if os.WIFSIGNALED(status):
            name = signal.Signals(os.WTERMSIG(status)).name
            level = log.info if signalled and name in ("SIGKILL", "SIGTERM") else log.error
            level("worker %d (slot %d) was killed by signal %s%s", worker.pid, worker.slot, name, cause)
        else:
            code = os.WEXITSTATUS(status)
            expected = worker.stopping or code == 0
            (log.info if expected else log.error)(
                "worker %d (slot %d) exited with code %d%s", worker.pid, worker.slot, code, cause)

    @staticmethod
    def crashed(status: int) -> bool:
        """A death by signal or a non-zero exit. A worker that stops on its own for a reason
        (max_requests, the master gone) exits 0; one the master stopped is ``stopping``."""
        return os.WIFSIGNALED(status) or (os.WIFEXITED(status) and os.WEXITSTATUS(status) != 0)

    def on_crash_after_ready(self) -> None:
        """The crash backoff: the first crash in CRASH_WINDOW is replaced at once, each
        further one delays the next start (0.1 s doubling up to 5 s); the rate is logged."""
        now = time.monotonic()
        while self.crash_times and self.crash_times[0] <= now - CRASH_WINDOW:
            self.crash_times.popleft()
        self.crash_times.append(now)
        crashes = len(self.crash_times)
        if crashes == 1:
            return
        delay = min(BACKOFF_START * 2 ** (crashes - 2), BACKOFF_MAX)
        self.next_spawn = max(self.next_spawn, now + delay)
        log.warning("workers crashed after ready %d times in %.2f s: next start in %.1f s",
                    crashes, now - self.crash_times[0], delay)

    def on_death_before_ready(self, worker: Worker, status: int) -> None:
        """The crash-loop guard: count deaths before ready, back off, give up at the limit.
        A reload's new generation is not counted: the old one still serves (``tines.reload``)."""
        if self.reloader.on_death_before_ready(worker, status):
            return
        if not self.ever_ready and os.WIFEXITED(status) \
                and os.WEXITSTATUS(status) == worker_process.EXIT_BOOT_ERROR:
            # Its boot_error message says why; read it now if it is still in the pipe.
            self.read_notifications()
        self.boot_failures += 1
        serving = sum(w.ready and not w.stopping for w in self.workers.values())
        if self.boot_failures >= self.cfg.boot_failure_limit and self.reloader.last_failed and serving:
            # The code on disk is the deploy a reload could not boot: giving up would stop the
            # workers that still serve the old code. Keep them, retry slowly, say why.
            self.next_spawn = time.monotonic() + BACKOFF_MAX
            log.error("workers keep dying before they are ready (%d in a row): the code on disk "
                      "cannot boot (the last reload failed too); %d worker(s) still serve the old "
                      "code; next start in %.1f s; deploy a fix and send HUP",
                      self.boot_failures, serving, BACKOFF_MAX)
            return
        if self.boot_failures >= self.cfg.boot_failure_limit:
            log.error("workers keep dying before they are ready (%d in a row): giving up",
                      self.boot_failures)
            raise Stop(EXIT_BOOT_FAILURES)
        delay = min(BACKOFF_START * 2 ** (self.boot_failures - 1), BACKOFF_MAX)
        self.next_spawn = time.monotonic() + delay
        log.warning("worker died before ready (%d in a row): next start in %.1f s",
                    self.boot_failures, delay)

    # ----- signal handlers -------------------------------------------------------------------

    def handle_chld(self) -> None:
        """A worker exited: reap it (the loop respawns at once)."""
        self.reap_workers()

    def handle_term(self) -> None:
        """Graceful stop, in the order of docs/signals.md ("Stop sequence"): readiness off
        (``STOPPING=1``), then ``shutdown_delay`` seconds of normal service (the loop goes on;
        a second TERM ends the delay), then workers take what is queued, close their copies of
        the listeners (the master closes its own as it sends TERM: ADR 0007), finish in-flight
        requests and exit."""
        if self.stop_at is not None:
            log.info("TERM again during shutdown_delay: graceful stop now")
            self.stop(graceful=True)
        log.info("TERM: graceful stop")
        self.tell_stopping()
        if self.cfg.shutdown_delay > 0:
            self.stop_at = time.monotonic() + self.cfg.shutdown_delay
            log.info("readiness off: workers serve on for %g s (shutdown_delay), then the graceful stop",
                     self.cfg.shutdown_delay)
            return
        self.stop(graceful=True)

    def handle_int(self) -> None:
        """Quick stop."""
        log.info("INT: quick stop")
        self.tell_stopping()
        self.stop(graceful=False)

    def handle_quit(self) -> None:
        """Quick stop."""
        log.info("QUIT: quick stop")
        self.tell_stopping()
        self.stop(graceful=False)

    def tell_stopping(self) -> None:
        """Not ready from now on: in the scoreboard (the status listener's ``/readyz``), and
        ``STOPPING=1`` to systemd, unless this is the new master of an upgrade whose old
        master still runs (a TERM to it is a manual rollback: the old one is the main pid and
        the unit is not stopping)."""
        if self.scoreboard is not None:
            self.scoreboard.set_stopping()  # type: ignore[attr-defined]
        if self.upgrade.old_master_alive():
            log.info("not telling systemd STOPPING=1: old master %s is still the main process",
                     self.upgrade.old_master)
            return
        self.notifier.stopping()

    def handle_hup(self) -> None:
        """Reload: read the config again and start a new generation of workers, a batch at a
        time; each old worker is retired as a new one is ready (``tines.reload``). A bad
        config or code that cannot boot leaves the old generation serving; a HUP during a
        reload runs when it ends. The one entry point for every reload.

        Listeners stay open throughout, so no connection is refused. With --preload the app
        object is the master's: HUP starts a new master as USR2 does (``tines.upgrade``), which
        imports the new code. During an upgrade, see ``Upgrade.hup``.
        """
        if self.stop_at is not None:
            log.info("HUP ignored: stopping (shutdown_delay)")
            return
        if self.upgrade.in_overlap:
            self.upgrade.hup()
            return
        if self.cfg.preload:
            self.notifier.reload_started()
            started: list[bool] = []
            self.duty("upgrade", lambda: started.append(self.upgrade.start(self, "HUP with --preload")))
            if not any(started):
                self.reload_finished(False)  # systemd's RELOADING=1 gets its READY=1
            return
        self.reloader.request()
        self.manage_workers()

    def handle_ttin(self) -> None:
        """One worker more (dynamic pool: start one and raise the spare bounds, Pool.grow)."""
        pool = self.pool
        if pool is not None:
            self.duty("pool", lambda: self.carry_out(pool.grow(self.pool_samples(), self.owed_starts())))
            return
        self.num_workers += 1
        log.info("TTIN: %d workers", self.num_workers)

    def handle_ttou(self) -> None:
        """One worker fewer, at least one stays (dynamic pool: retire one and lower the spare
        bounds, Pool.shrink)."""
        pool = self.pool
        if pool is not None:
            self.duty("pool", lambda: self.carry_out(pool.shrink(self.pool_samples(), self.owed_starts())))
            return
        self.num_workers = max(1, self.num_workers - 1)
        log.info("TTOU: %d workers", self.num_workers)

    def handle_usr1(self) -> None:
        """Reopen log files here and in the workers (their access logs)."""
        log.info("USR1: reopening log files")
        self.duty("reopen the error log", lambda: logs.reopen(self.cfg.error_log))
        self.signal_workers(signal.SIGUSR1)

    def handle_usr2(self) -> None:
        """Binary upgrade: start a new master with the listeners; this one leaves once the new
        one is ready, or keeps serving if it fails (``tines.upgrade``, docs/signals.md)."""
        if self.stop_at is not None:
            log.info("USR2 ignored: stopping (shutdown_delay)")
            return
        if self.reloader.active:
            log.warning("USR2 ignored: a reload (generation %d) is in progress; send it again "
                        "once it is done", self.generation)
            return
        self.duty("upgrade", lambda: self.upgrade.start(self, "USR2"))

    def upgrade_succeeded(self, new_pid: int) -> None:
        """The new master of an upgrade is ready: this master hands over (its workers drain)
        and exits 0. The one place that knows the upgrade succeeded: systemd is told the new
        main pid (``MAINPID=``; the new master already said ``READY=1``), after which this
        master sends it nothing more."""
        self.notifier.reloading = False  # a HUP with --preload: the new master's READY=1 ended it
        self.notifier.main_pid(new_pid)
        self.upgrade.hand_over(self, new_pid)

    def handle_winch(self) -> None:
        """During an upgrade, stop this master's workers (it stays for a rollback); otherwise
        ignored (sent by terminals on resize)."""
        self.upgrade.winch(self)

    # ----- stop ------------------------------------------------------------------------------

    def stop(self, graceful: bool) -> None:
        """Stop every worker (TERM and wait up to graceful_timeout, or QUIT and a short wait),
        then SIGKILL whatever is left; leave the loop with status 0."""
        self.upgrade.final_stop()
        signum = signal.SIGTERM if graceful else signal.SIGQUIT
        timeout = self.cfg.graceful_timeout if graceful else min(QUICK_STOP_WAIT, self.cfg.graceful_timeout)
        self.wait_for_workers(signum, timeout)
        raise Stop(EXIT_OK)

    def wait_for_workers(self, signum: int, timeout: float) -> None:
        """Signal every worker, reap until none is left or the deadline passes, then KILL."""
        self.signal_workers(signum)
        log.info("sent %s to %d worker(s): waiting up to %g s for them to exit",
                 signal.Signals(signum).name, len(self.workers), timeout)
        # The master's copy of each listening socket goes now: the workers take what is queued
        # and close theirs (crates/server, Listener::close), so the socket closes as soon as
        # the last of them has, and a later connection is refused at once instead of waiting,
        # unserved, to be reset when the stop ends (docs/signals.md, Stop sequence). Unix
        # socket files are still removed last, by shutdown.
        for listener in self.listeners:
            listener.close_socket()
        deadline = time.monotonic() + timeout
        while self.workers:
            self.reap_workers()
            remaining = deadline - time.monotonic()
            if not self.workers or remaining <= 0:
                break
            # A second INT/QUIT during a graceful stop makes it quick.
            while self.signals:
                queued = self.signals.popleft()
                if queued in (signal.SIGINT, signal.SIGQUIT) and signum == signal.SIGTERM:
                    signum = signal.SIGQUIT
                    self.signal_workers(signum)
                    deadline = min(deadline, time.monotonic() + QUICK_STOP_WAIT)
            self.sleep(min(remaining, 0.5))
        if self.workers:
            log.warning("killing %d worker(s) that did not stop in time", len(self.workers))
        self.kill_all()

    def kill_all(self) -> None:
        """SIGKILL and reap every remaining worker (no zombie, no orphan)."""
        for worker in list(self.workers.values()):
            self._send(worker, signal.SIGKILL)
        for worker in list(self.workers.values()):
            try:
                os.waitpid(worker.pid, 0)
            except ChildProcessError:
                pass
            self.workers.pop(worker.pid, None)
            self.hooks.call_logged("child_exit", self.server_view(), self.worker_view(worker))

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
        try:
            signal.set_wakeup_fd(-1)
        except ValueError:
            pass
        for fd in (self.wake_read, self.wake_write, self.notify_read, self.notify_write,
                   self.life_read, self.life_write):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError as error:
                    if error.errno != errno.EBADF:
                        raise
        self.upgrade.at_exit(self.pid)
        self.notifier.close()
        if self.started:
            self.hooks.call_logged("on_exit", self.server_view())
        log.info("master %d exiting", self.pid)
        sys.stderr.flush()
