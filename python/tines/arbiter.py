"""The master process: binds, forks the workers, supervises them, stops them.

Owns: the master loop (the gunicorn ``Arbiter.run`` / nginx master-cycle shape: signal
handlers only queue the signal and wake the loop, ``handle_<signal>()`` methods act), spawning
and reaping workers, the crash-loop guard, readiness, the stop sequences, and calling the
master's server hooks (docs/hooks.md) at those points. Its duties run through ``duty()``
(tines.duties): one that fails is logged and the master goes on.

It holds one ``Generation`` (tines.generation: the settings, worker settings, hooks and pool a
reload swaps) and acts on the decisions of its helpers, which never see it: the dynamic pool
(``tines.pool``: the master reads the scoreboard for it), the reload (``tines.reload``), the
binary upgrade (``tines.upgrade``), the status process (``tines.status``) and the crash-loop
guard (``tines.exits``). Each ``carry_out_*`` method is where one of them is obeyed.

Must not: start a thread (it forks; see docs/adr/0001-fork-safety-and-readiness.md), or touch a
request. The signal table is in docs/signals.md.
"""

from __future__ import annotations

import errno
import gc
import json
import logging
import os
import select
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping

from setproctitle import setproctitle

from tines import exits, logs, memory, preflight, profiler, reloader, sdnotify, upgrade, watchdog
from tines import pool as spare_pool
from tines import reload as reloading
from tines import status as status_process
from tines import worker as worker_process
from tines import asgi
from tines.app_loader import load_app
from tines.config import Config
from tines.duties import Duties
from tines.errors import AppLoadError, ConfigError
from tines.exits import EXIT_OK, Stop
from tines.generation import Generation, Worker
from tines.hooks import HookError, Hooks, ServerView, WorkerView
from tines.sockets import Listener, bind_all

HANDLED_SIGNALS = ("CHLD", "TERM", "INT", "QUIT", "HUP", "TTIN", "TTOU", "USR1", "USR2", "WINCH")

SIGNAL_QUEUE_LIMIT = 8
"""Signals queued beyond this are dropped (a burst of the same signal means the same thing)."""

LOOP_TIMEOUT = 1.0
"""The longest the master sleeps without a signal or a message (it re-checks its duties)."""

QUICK_STOP_WAIT = 2.0
"""How long INT/QUIT waits for workers before SIGKILL (or graceful_timeout if shorter)."""

log = logs.get("arbiter")


class Arbiter:
    """The master. ``Arbiter(cfg).run()`` returns the process exit status.

    ``overrides`` are the command-line values ``cfg`` was resolved with (``tines.config.load``):
    HUP resolves the settings again with them (``tines.reload``).
    """

    def __init__(self, cfg: Config, overrides: Mapping[str, object] | None = None) -> None:
        self.generation = Generation(number=1, cfg=cfg, worker_settings={}, hooks=Hooks(), pool=None,
                                     memory_merge=False)
        """What the workers are spawned with; a reload swaps it whole (``put_in_force``). Until
        ``start`` has checked the settings, only its ``cfg`` is filled in."""
        self.pid = os.getpid()
        self.num_workers: int = cfg.workers
        self.listeners: list[Listener] = []
        self.workers: dict[int, Worker] = {}
        self.signals: deque[int] = deque()
        self.app: Callable[..., object] | None = None
        self.ever_ready = False
        self.announced = False
        self.crashes = exits.CrashGuard()
        """The crash-loop guard: when the next worker may start, and when to give up."""
        self.notify_buffer = bytearray()
        self.warned_threads = False
        self.scoreboard: object = None
        self.watchdog: watchdog.Watchdog | None = None
        self.wake_read = self.wake_write = -1
        self.notify_read = self.notify_write = -1
        self.life_read = self.life_write = -1
        self.started = False
        """True once on_starting succeeded: on_exit runs at shutdown only then."""
        self.next_pool_check = 0.0
        self.duties = Duties(log, passes=(Stop,))
        self.memory_sampler = memory.Sampler(memory.sample_rate(cfg))
        self.reloader = reloading.Reloader(dict(overrides or {}))
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

    @property
    def cfg(self) -> Config:
        """The settings in force: the generation's."""
        return self.generation.cfg

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
            self.app = load_app(cfg.app, cfg.factory, cfg.interface)
            if asgi.interface_of(self.app, cfg.interface, repr(str(cfg.app))) != "wsgi":
                asgi.check_mpm(cfg)
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
        self.scoreboard = _core.Scoreboard(watchdog.scoreboard_slots(most), watchdog.scoreboard_threads(cfg))
        self.scoreboard.publish_master(self.pid)
        self.scoreboard.set_generation(self.generation.number)
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
        if pool is None:
            log.info("Using mpm %s with %d workers", cfg.mpm, self.num_workers)
        else:
            log.info("Using mpm %s with a %s", cfg.mpm, pool.settings.describe())

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
            self.start_status()
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
                if self.generation.pool is not None and time.monotonic() >= self.next_pool_check:
                    self.next_pool_check = time.monotonic() + spare_pool.CHECK_INTERVAL
                    self.duty("pool", self.check_pool)
                self.duty("memory sampling", self.sample_memory)
                self.duty("upgrade", lambda: self.carry_out_upgrade(self.upgrade.turn(
                    len(self.workers), self.cfg.graceful_timeout, time.monotonic())))
                self.duty("start workers", self.manage_workers)
                self.duty("status process", self.start_status)
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
        if len(self.live_workers()) < self.num_workers and self.crashes.next_spawn > now:
            timeout = min(timeout, self.crashes.next_spawn - now)
        if self.generation.pool is not None:
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
        self.crashes.ready()
        self.ever_ready = True
        took = (time.monotonic() - worker.born) * 1000
        usage = self.memory_sampler.read(pid, self.generation.memory_merge)
        if usage is not None:
            self.record_memory(worker, usage)
        figures = f" ({usage.describe()})" if usage is not None else ""
        log.info("worker %d (slot %d) ready in %.1f ms%s", pid, worker.slot, took, figures)
        self.reload_step()  # during a reload: retire an old worker for it, start the next ones
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
        self.generation.hooks.call_logged("when_ready", self.server_view())
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
        if worker is not None:
            decision = self.reloader.on_boot_error(worker, message, self.generation.number, self.workers.values())
            if decision is not None:
                self.carry_out_reload(decision)
                return
        log.error("worker %d (slot %d) failed to boot: %s", pid, slot, message)
        if not self.ever_ready:
            raise AppLoadError(message)

    # ----- workers ---------------------------------------------------------------------------

    def live_workers(self) -> list[Worker]:
        """Workers of the current generation that are not being stopped."""
        return [w for w in self.workers.values() if not w.stopping and w.generation == self.generation.number]

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
        if self.reload_step():
            return
        live = self.live_workers()
        while len(live) < self.num_workers and time.monotonic() >= self.crashes.next_spawn:
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
            usage = self.memory_sampler.read(worker.pid, self.generation.memory_merge)
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
        generation = self.generation
        context = worker_process.WorkerContext(
            cfg=generation.cfg, slot=slot, generation=generation.number,
            listeners=[listener.fileno() for listener in self.listeners],
            scoreboard=self.scoreboard, life_read=self.life_read, notify_write=self.notify_write,
            close_in_child=[self.life_write, self.notify_read, self.wake_read, self.wake_write,
                            *([self.watcher.fileno()] if self.watcher is not None else []),
                            *filter(None, [self.notifier.fileno()]), *self.upgrade.inherited_fds(),
                            *self.status.close_in_child()],
            master_pid=self.pid, app=self.app, settings=generation.worker_settings, hooks=generation.hooks,
            profile_dir=profiler.profile_path(generation.cfg, self.pid),
        )
        generation.hooks.call_logged("pre_fork", self.server_view(),
                                     WorkerView(pid=None, slot=slot, generation=generation.number, mpm=generation.cfg.mpm))
        # The child is born with USR2 (retire) blocked, so a retire sent while it boots waits
        # for the worker's own handler (tines.worker) instead of killing it.
        previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2})
        pid = os.fork()
        if pid == 0:
            worker_process.run(context)  # never returns
        signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)
        self.scoreboard.claim(slot, pid, generation.number)  # type: ignore[attr-defined]
        self.workers[pid] = Worker(pid, slot, generation.number)
        log.debug("spawned worker %d (slot %d)", pid, slot)
        return True

    def check_pool(self) -> None:
        """The dynamic pool's check (once per pool.CHECK_INTERVAL): read every worker's slot,
        ask the policy, log and act (the spawns happen in ``manage_workers``, with the backoff)."""
        pool = self.generation.pool
        assert pool is not None
        if not self.upgrade.wants_workers:
            return
        if self.reloader.active:
            return  # the pool counts the new generation again once the reload is done
        decision = pool.check(self.pool_samples(), self.owed_starts())
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
                current=worker.generation == self.generation.number, active=int(slot["active"]),
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

    # ----- reloads: the generation swapped ------------------------------------------------------

    def reload_step(self) -> bool:
        """The reload's turn (``Reloader.step``), carried out; True while a reload is in
        progress (then the usual worker management waits)."""
        self.carry_out_reload(self.reloader.step(self.workers.values(), self.num_workers,
                                                 self.announced, self.upgrade.wants_workers))
        return self.reloader.active

    def begin_reload(self) -> None:
        """A reload begins (HUP, or one that waited): systemd hears ``RELOADING=1``, the
        settings are read again and the new generation started (``Reloader.begin``)."""
        log.info("reload: reading the config again (generation %d serves meanwhile)", self.generation.number)
        self.notifier.reload_started()
        self.carry_out_reload(self.reloader.begin(self.generation, self.num_workers,
                                                  self.workers.values(), self.pid))

    def carry_out_reload(self, decision: reloading.Decision) -> None:
        """Do what the reload decided, in the order of its fields."""
        for pid in decision.retire:
            self.retire_worker(self.workers[pid], "reload", decision.why)
        if decision.put_in_force is not None:
            self.put_in_force(decision.put_in_force, decision.workers)
        if decision.finished is not None:
            self.reload_finished(decision.finished)
        for _ in range(decision.spawn):
            if time.monotonic() < self.crashes.next_spawn or not self.spawn_worker():
                break
        if decision.begin:
            self.begin_reload()

    def put_in_force(self, generation: Generation, workers: int) -> None:
        """Spawn and supervise with ``generation`` (and ``workers`` of it wanted) from now on:
        the one swap of a reload, and of its rollback."""
        self.generation = generation
        self.num_workers = workers
        cfg = generation.cfg
        self.scoreboard.set_generation(generation.number)  # type: ignore[attr-defined]
        if self.watchdog is not None:
            self.watchdog.request_timeout = cfg.request_timeout
            self.watchdog.boot_timeout = cfg.boot_timeout
        self.memory_sampler.interval = 1.0 / memory.sample_rate(cfg)
        logging.getLogger(logs.LOGGER_NAME).setLevel(cfg.log_level.upper())

    def reload_finished(self, succeeded: bool) -> None:
        """A reload ended: the new generation serves, or (``succeeded`` False) the old one
        still does (the error line was logged). systemd hears ``READY=1`` either way (a
        reload it was told of: HUP, or HUP with --preload's upgrade)."""
        if succeeded:
            log.info("reload done: generation %d serves with %d workers", self.generation.number,
                     len(self.live_workers()))
        self.notifier.reload_finished(succeeded, self.status_text())

    # ----- upgrades and the status process ----------------------------------------------------

    def carry_out_upgrade(self, decision: upgrade.Decision) -> None:
        """Do what the upgrade decided, in the order of its fields. ``succeeded`` is the one
        place that knows an upgrade succeeded: systemd hears the new main pid (the new master
        already said ``READY=1``), after which this master sends it nothing more."""
        if decision.succeeded is not None:
            self.notifier.reloading = False  # a HUP with --preload: the new master's READY=1 ended it
            self.notifier.main_pid(decision.succeeded)
        if decision.retire is not None:
            for worker in list(self.workers.values()):
                self.retire_worker(worker, "reload", decision.retire)
        if decision.main_again:
            self.notifier.main_pid(self.pid)
            self.notifier.ready(self.status_text())
        if decision.failed:
            self.reload_finished(False)  # READY=1 again after a HUP with --preload's RELOADING=1
        if decision.leave:
            raise Stop(EXIT_OK)

    def start_upgrade(self, why: str) -> bool:
        """Start a new master (USR2, HUP with --preload), handing it the listeners."""
        passed = upgrade.Inheritance(pid=self.pid, listeners=self.listeners, status=self.status.listeners(),
                                     notify_socket=self.notifier.address)
        return self.upgrade.start(why, self.announced, passed)

    def start_status(self) -> None:
        """Start the status process when it is due (none runs, after its backoff)."""
        if self.status.due(time.monotonic()):
            self.status.start(status_process.Inheritance(
                close=(self.life_write, self.notify_read, self.notify_write, self.wake_read, self.wake_write,
                       *(public.fileno() for public in self.listeners)),
                life_read=self.life_read, scoreboard=self.scoreboard))

    # ----- exits -----------------------------------------------------------------------------

    def reap_workers(self) -> None:
        """Collect every exited worker, log why it ended, free its slot."""
        while True:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            upgraded = self.upgrade.reaped(pid, status)
            if upgraded is not None:
                self.carry_out_upgrade(upgraded)
                continue  # the new master of an upgrade, not a worker
            if self.status.reaped(pid, status, time.monotonic()):
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
            exits.log_exit(self.cfg, worker, status, usage.ru_utime + usage.ru_stime, reason)
            if worker.memory is not None and worker.memory.ksm_merging:
                log.info("worker %d (slot %d) last memory sample: %s", worker.pid, worker.slot,
                         worker.memory.describe())
            self.generation.hooks.call_logged("child_exit", self.server_view(), self.worker_view(worker))
            if not worker.ready and not worker.stopping:
                self.on_death_before_ready(worker, status)
            elif (not worker.stopping or worker.own_decision) and exits.crashed(status):
                self.crashes.crashed_after_ready(time.monotonic())

    def on_death_before_ready(self, worker: Worker, status: int) -> None:
        """The crash-loop guard counts a death before ready (``exits.CrashGuard``), unless it
        is a reload's new generation: the old one still serves (``tines.reload``)."""
        decision = self.reloader.on_death_before_ready(worker, status, self.generation.number,
                                                       self.workers.values())
        if decision is not None:
            self.carry_out_reload(decision)
            return
        if not self.ever_ready and os.WIFEXITED(status) \
                and os.WEXITSTATUS(status) == worker_process.EXIT_BOOT_ERROR:
            # Its boot_error message says why; read it now if it is still in the pipe.
            self.read_notifications()
        serving = sum(w.ready and not w.stopping for w in self.workers.values())
        self.crashes.died_before_ready(time.monotonic(), self.cfg.boot_failure_limit, serving,
                                       self.reloader.last_failed)

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
            self.duty("upgrade", lambda: started.append(self.start_upgrade("HUP with --preload")))
            if not any(started):
                self.reload_finished(False)  # systemd's RELOADING=1 gets its READY=1
            return
        if self.reloader.request(self.announced):
            self.begin_reload()
        self.manage_workers()

    def handle_ttin(self) -> None:
        """One worker more (dynamic pool: start one and raise the spare bounds, Pool.grow)."""
        pool = self.generation.pool
        if pool is not None:
            self.duty("pool", lambda: self.carry_out(pool.grow(self.pool_samples(), self.owed_starts())))
            return
        self.num_workers += 1
        log.info("TTIN: %d workers", self.num_workers)

    def handle_ttou(self) -> None:
        """One worker fewer, at least one stays (dynamic pool: retire one and lower the spare
        bounds, Pool.shrink)."""
        pool = self.generation.pool
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
                        "once it is done", self.generation.number)
            return
        self.duty("upgrade", lambda: self.start_upgrade("USR2"))

    def handle_winch(self) -> None:
        """During an upgrade, stop this master's workers (it stays for a rollback); otherwise
        ignored (sent by terminals on resize)."""
        self.carry_out_upgrade(self.upgrade.winch(len(self.workers)))

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
            self.generation.hooks.call_logged("child_exit", self.server_view(), self.worker_view(worker))

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
            self.generation.hooks.call_logged("on_exit", self.server_view())
        log.info("master %d exiting", self.pid)
        sys.stderr.flush()
