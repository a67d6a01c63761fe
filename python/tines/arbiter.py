"""The master process: forks the workers, supervises them, stops them.

Owns: the master loop (the gunicorn ``Arbiter.run`` / nginx master-cycle shape: signal
handlers only queue the signal and wake the loop, ``handle_<signal>()`` methods act), when a
worker is spawned or retired, the stop sequences, and calling the master's server hooks
(docs/hooks.md) at those points. Its duties run through ``duty()`` (tines.duties): one that
fails is logged and the master goes on. The process's own mechanism (bring-up, sleep, the
ready line, tear-down) is ``tines.master``'s, which ``Arbiter`` extends.

It holds one ``Generation`` (tines.generation: the settings, worker settings, hooks and pool a
reload swaps) and acts on the decisions of its helpers, which never see it: the dynamic pool
(``tines.pool``: the master reads the scoreboard for it), the reload (``tines.reload``), the
binary upgrade (``tines.upgrade``), the status process (``tines.status``) and the crash-loop
guard (``tines.exits``). Each ``carry_out_*`` method is where one of them is obeyed. What is
done to one worker (fork, signal, retire, reap, memory samples) is ``tines.fleet``'s.

Must not: start a thread (it forks; see docs/adr/0001-fork-safety-and-readiness.md), or touch a
request. The signal table is in docs/signals.md.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Mapping

from setproctitle import setproctitle

from tines import exits, forkserver, logs, profiler, rate_limits, serving, upgrade, watchdog
from tines import standby as standby_policy
from tines import pool as spare_pool
from tines import reload as reloading
from tines import status as status_process
from tines import worker as worker_process
from tines.config import Config
from tines.errors import AppLoadError
from tines.exits import EXIT_OK, Stop
from tines.generation import Generation, Worker
from tines.hooks import WorkerView
from tines.master import Master
from tines.sockets import h2c_modes, tls_flags

LOOP_TIMEOUT = 1.0
"""The longest the master sleeps without a signal or a message (it re-checks its duties)."""

QUICK_STOP_WAIT = 2.0
"""How long INT/QUIT waits for workers before SIGKILL (or graceful_timeout if shorter)."""

log = logs.get("arbiter")


class Arbiter(Master):
    """The master. ``Arbiter(cfg).run()`` returns the process exit status.

    ``overrides`` are the command-line values ``cfg`` was resolved with (``tines.config.load``):
    HUP resolves the settings again with them (``tines.reload``).
    """

    def __init__(self, cfg: Config, overrides: Mapping[str, object] | None = None) -> None:
        super().__init__(cfg)
        self.ever_ready = False
        self.crashes = exits.CrashGuard()
        """The crash-loop guard: when the next worker may start, and when to give up."""
        self.next_pool_check = 0.0
        self.reloader = reloading.Reloader(dict(overrides or {}), ticket_secret=self.ticket_secret)
        """HUP's reload: the new generation, a bad deploy, a HUP during a HUP."""
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
            self.start(on_source_change=self.handle_hup)
            # A reload may ask for as many workers as the scoreboard sized at start holds.
            self.reloader.capacity = reloading.Capacity(self.fleet.scoreboard.slots - self.exit_room,
                                                        watchdog.scoreboard_threads(self.cfg))
            status = self.loop()
        finally:
            self.fleet.fork_server.stop()
            self.shutdown()
        return status

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
                while self.wakeup.signals:
                    self.dispatch(self.wakeup.signals.popleft())
                if self.stop_at is not None and time.monotonic() >= self.stop_at:
                    log.info("shutdown_delay over: graceful stop")
                    self.stop(graceful=True)
                self.read_notifications()
                if self.watcher is not None:
                    self.duty("development reload", self.watcher.check)
                self.duty("watchdog", self.fleet.check_requests)
                if self.generation.pool is not None and time.monotonic() >= self.next_pool_check:
                    self.next_pool_check = time.monotonic() + spare_pool.CHECK_INTERVAL
                    self.duty("pool", self.check_pool)
                self.duty("memory sampling", lambda: self.fleet.sample_memory(
                    time.monotonic(), self.cfg, self.generation.memory_merge))
                self.duty("upgrade", lambda: self.carry_out_upgrade(self.upgrade.turn(
                    len(self.workers), self.cfg.graceful_timeout, time.monotonic())))
                if self.upgrade.old_master_left():
                    # Its workers are gone: a count they left (killed with connections open)
                    # must not hold a client back here.
                    rate_limits.forget_other_side(self.fleet.client_connections)
                self.duty("start workers", self.manage_workers)
                self.duty("status process", self.start_status)
        except Stop as stop:
            return stop.status

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
        if self.watcher is not None:
            reload_due = self.watcher.wait(now)
            timeout = timeout if reload_due is None else min(timeout, reload_due)
        if self.stop_at is not None:
            timeout = min(timeout, max(0.0, self.stop_at - now))
        due = self.fleet.wait(now)  # a memory read, a watchdog deadline
        return timeout if due is None else min(timeout, due)

    def read_notifications(self) -> None:
        """Handle every complete ready / standby / interface / draining / boot_error message from the
        workers. A draining worker's standby is promoted at once (the rest of the loop's turn,
        a fork among it, would delay the promotion)."""
        now = time.monotonic()
        for kind, pid, slot, text in self.fleet.messages():
            if kind in ("ready", "standby"):
                self.on_ready(pid, standby=kind == "standby")
            elif kind == "draining":
                self.fleet.draining(pid, text, now)
                self.promote_standbys()
            elif kind == "interface":
                self.interface = text  # the ready line names it (tines.serving)
            else:
                self.on_boot_error(pid, slot, text)
        self.fleet.log_recycles(now)

    def on_ready(self, pid: int, standby: bool = False) -> None:
        """A worker loaded the app and is accepting, or a standby booted (``standby``)."""
        if self.fleet.ready(pid, time.monotonic(), self.generation.memory_merge, standby) is None:
            return
        self.crashes.ready()
        self.ever_ready = True
        self.reload_step()  # during a reload: retire an old worker for it, start the next ones
        if not self.announced and sum(w.ready for w in self.live_workers()) >= self.num_workers:
            self.announce_ready()

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
        return self.fleet.live(self.generation.number)

    def manage_workers(self) -> None:
        """Spawn up to the wanted count (after any backoff); stop extra workers. During a
        reload, the reload's rolling replacement does this (``tines.reload``)."""
        if not self.upgrade.wants_workers:
            return  # WINCH during an upgrade, or handing over to the new master
        if self.reload_step():
            return
        live = self.promote_standbys()
        while len(live) < self.num_workers and self.crashes.take_start(
                time.monotonic(), len(live), exits.crash_floor(self.num_workers)):
            if not self.spawn_worker():
                break
            live = self.live_workers()
        extra = len(live) - self.num_workers
        for worker in sorted(live, key=lambda w: w.born, reverse=True)[:max(extra, 0)]:
            self.retire_worker(worker, "idle_retire", "fewer workers")
        self.keep_standbys()

    def standby_plan(self) -> standby_policy.Plan:
        """The standby policy's plan for the workers missing now (``tines.standby``)."""
        number = self.generation.number
        return standby_policy.plan(self.num_workers - len(self.live_workers()),
                            [standby_policy.Standby(pid=w.pid, ready=w.ready, born=w.born, current=w.generation == number)
                             for w in self.fleet.standbys()],
                            standby_policy.count(self.cfg))

    def promote_standbys(self) -> list[Worker]:
        """Promote a standby for each serving worker missing (a draining one, a dead one), at
        once: it has booted, so no backoff holds it. The live workers afterwards."""
        for pid in self.standby_plan().promote:
            self.fleet.promote(self.workers[pid])
        return self.live_workers()

    def keep_standbys(self) -> None:
        """Retire the standbys of an older generation and those beyond the count; start what
        is missing (after any backoff), once every missing worker is started."""
        plan = self.standby_plan()
        for pid in plan.retire:
            self.retire_worker(self.workers[pid], "idle_retire", "standby no longer wanted")
        if len(self.live_workers()) < self.num_workers:
            return
        for _ in range(plan.start):
            if time.monotonic() < self.crashes.next_spawn or not self.spawn_worker(standby=True):
                break

    def spawn_worker(self, standby: bool = False) -> bool:
        """Fork one worker of the generation (or a standby) into a free slot; False when no
        slot is free."""
        slot = self.fleet.free_slot()
        if slot is None:
            log.warning("no free scoreboard slot: running %d workers and %d standbys, not %d and %d",
                        len(self.live_workers()), len(self.fleet.standbys()), self.num_workers,
                        standby_policy.count(self.cfg))
            return False
        generation, fleet = self.generation, self.fleet
        context = worker_process.WorkerContext(
            cfg=generation.cfg, slot=slot, generation=generation.number,
            listeners=[listener.fileno() for listener in self.listeners],
            tls_listeners=tls_flags(self.listeners, generation.worker_settings.get("tls") is not None),
            scoreboard=fleet.scoreboard, life_read=fleet.life_read, notify_write=fleet.notify_write,
            close_in_child=[fleet.life_write, fleet.notify_read, *self.wakeup.fds(),
                            *([self.watcher.fileno()] if self.watcher is not None else []),
                            *filter(None, [self.notifier.fileno()]), *self.upgrade.inherited_fds(),
                            *self.status.close_in_child(), *fleet.fork_server.fds(),
                            *self.ready_fd_held()],
            master_pid=self.pid, app=self.app, app_loggers=self.app_loggers,
            settings=generation.worker_settings, hooks=generation.hooks,
            profile_dir=profiler.profile_path(generation.cfg, self.pid), standby=standby,
            h2c_listeners=h2c_modes(self.listeners), rate_table=fleet.rate_table,
            client_connections=fleet.client_connections,
        )
        # The fork server starts before pre_fork: what the hook does in the master for this
        # worker must not reach every worker the fork server forks (docs/hooks.md).
        if forkserver.wanted(generation.cfg) and fleet.fork_server.due(time.monotonic()):
            fleet.fork_server.start(context)
        if generation.hooks.defines("pre_fork"):  # its views are O(workers): built only for it
            generation.hooks.call_logged("pre_fork", self.server_view(), WorkerView(
                pid=None, slot=slot, generation=generation.number, mpm=generation.cfg.mpm))
        fleet.fork(context)
        return True

    def retire_worker(self, worker: Worker, reason: str, why: str = "") -> None:
        """Stop one worker while the others go on, with the drain (``Fleet.retire``)."""
        self.fleet.retire(worker, reason, why)

    def check_pool(self) -> None:
        """The dynamic pool's check (once per pool.CHECK_INTERVAL): read every worker's slot,
        ask the policy, log and act (the spawns happen in ``manage_workers``, with the backoff)."""
        pool = self.generation.pool
        assert pool is not None
        if not self.upgrade.wants_workers:
            return
        if self.reloader.active:
            return  # the pool counts the new generation again once the reload is done
        decision = pool.check(self.fleet.samples(self.generation.number), self.owed_starts())
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

    # ----- reloads: the generation swapped ------------------------------------------------------

    def reload_step(self) -> bool:
        """The reload's turn (``Reloader.step``), carried out; True while a reload is in
        progress (then the usual worker management waits)."""
        self.carry_out_reload(self.reloader.step(self.fleet.processes(), self.num_workers,
                                                 self.announced, self.upgrade.wants_workers))
        return self.reloader.active

    def begin_reload(self) -> None:
        """A reload begins (HUP, or one that waited): systemd hears ``RELOADING=1``, the
        settings are read again and the new generation started (``Reloader.begin``)."""
        log.info("reload: reading the config again (generation %d serves meanwhile)", self.generation.number)
        self.notifier.reload_started()
        self.carry_out_reload(self.reloader.begin(self.generation, self.num_workers,
                                                  self.fleet.processes(), self.pid))

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
        self.fleet.scoreboard.set_generation(generation.number)
        # A reload keeps the table (every client's bucket); one that sets the first limit
        # makes it, before its workers fork.
        self.fleet.rate_table = rate_limits.ensure(generation.cfg, self.fleet.rate_table, None,
                                                   self.fleet.scoreboard)
        self.fleet.client_connections = rate_limits.ensure_connections(
            generation.cfg, self.fleet.client_connections, self.fleet.scoreboard)
        self.fleet.configure(generation.cfg)
        logging.getLogger(logs.LOGGER_NAME).setLevel(generation.cfg.log_level.upper())

    def reload_finished(self, succeeded: bool) -> None:
        """A reload ended: the new generation serves, or (``succeeded`` False) the old one
        still does (the error line was logged). systemd hears ``READY=1`` either way (a
        reload it was told of: HUP, or HUP with --preload's upgrade)."""
        if succeeded:
            log.info("reload done: generation %d serves with %s", self.generation.number,
                     serving.plural(len(self.live_workers()), "worker"))
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
            # The failed new master's workers are gone: what they counted goes with them.
            rate_limits.forget_other_side(self.fleet.client_connections)
            self.reload_finished(False)  # READY=1 again after a HUP with --preload's RELOADING=1
        if decision.leave:
            raise Stop(EXIT_OK)

    def start_upgrade(self, why: str) -> bool:
        """Start a new master (USR2, HUP with --preload), handing it the listeners."""
        passed = upgrade.Inheritance(pid=self.pid, listeners=self.listeners, status=self.status.listeners(),
                                     notify_socket=self.notifier.address, ticket_secret=self.ticket_secret,
                                     rate_table_fd=None if self.fleet.rate_table is None else self.fleet.rate_table.fd,
                                     client_connections=rate_limits.passed_connections(self.fleet.client_connections))
        return self.upgrade.start(why, self.announced, passed)

    def start_status(self) -> None:
        """Start the status process when it is due (none runs, after its backoff)."""
        if self.status.due(time.monotonic()):
            fleet = self.fleet
            self.status.start(status_process.Inheritance(
                close=(fleet.life_write, fleet.notify_read, fleet.notify_write, *self.wakeup.fds(),
                       *(public.fileno() for public in self.listeners)),
                life_read=fleet.life_read, scoreboard=fleet.scoreboard))

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
            if self.fleet.fork_server.reaped(pid, status, time.monotonic()):
                continue
            known = self.workers.get(pid)
            if known is not None and not known.stopping:
                # A worker can say ready (or draining), serve and die between two turns of the
                # loop: its messages are in the pipe before its death, so read them first.
                self.read_notifications()
            collected = self.fleet.collect(pid, status, usage.ru_utime + usage.ru_stime, self.cfg)
            if collected is None:
                continue
            worker, in_flight = collected
            if self.generation.hooks.defines("child_exit"):  # its views are O(workers)
                self.generation.hooks.call_logged("child_exit", self.server_view(), self.worker_view(worker))
            if not worker.ready and not worker.stopping:
                self.on_death_before_ready(worker, status)
            elif (not worker.stopping or worker.own_decision) and exits.crashed(status):
                self.crashes.crashed_after_ready(time.monotonic(), in_flight is not None and in_flight.serving,
                                                 exits.crash_floor(self.num_workers))

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
        """Ctrl-C: a quick stop in which each worker gets INT, so an ASGI app's lifespan
        shutdown runs (for at most ``interrupt_timeout``; a terminal sends the same INT
        to the workers itself, and a worker takes the second as the first). Ctrl-C again
        (``wait_for_workers``): QUIT, at once. The line and the wait are by the interface the
        master knows (``serving.interrupt_line``, ``serving.interrupt_wait``)."""
        log.info("%s", serving.interrupt_line(self.interface, self.cfg.interrupt_timeout))
        self.tell_stopping()
        self.stop(graceful=False, signum=signal.SIGINT)

    def handle_quit(self) -> None:
        """Quick stop."""
        log.info("QUIT: quick stop")
        self.tell_stopping()
        self.stop(graceful=False)

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
            self.duty("pool", lambda: self.carry_out(pool.grow(self.fleet.samples(self.generation.number),
                                                               self.owed_starts())))
            return
        self.num_workers += 1
        log.info("TTIN: %s", serving.plural(self.num_workers, "worker"))

    def handle_ttou(self) -> None:
        """One worker fewer, at least one stays (dynamic pool: retire one and lower the spare
        bounds, Pool.shrink)."""
        pool = self.generation.pool
        if pool is not None:
            self.duty("pool", lambda: self.carry_out(pool.shrink(self.fleet.samples(self.generation.number),
                                                                 self.owed_starts())))
            return
        self.num_workers = max(1, self.num_workers - 1)
        log.info("TTOU: %s", serving.plural(self.num_workers, "worker"))

    def handle_usr1(self) -> None:
        """Reopen log files here and in the workers (their access logs)."""
        log.info("USR1: reopening log files")
        self.duty("reopen the error log", lambda: logs.reopen(self.cfg.error_log))
        self.fleet.signal_all(signal.SIGUSR1)
        # The fork server's fds 1 and 2 are the old files, and it runs no Python to reopen
        # them: the next worker is forked by a new one, forked from this reopened state.
        self.fleet.fork_server.stop()

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

    def stop(self, graceful: bool, signum: int | None = None) -> None:
        """Stop every worker (TERM and wait up to graceful_timeout, or QUIT and a short wait;
        INT: for an ASGI app, the short wait after the workers' lifespan shutdown deadline), then SIGKILL
        whatever is left; leave the loop with status 0."""
        self.upgrade.final_stop()
        self.fleet.fork_server.stop()  # it forks nothing more; the workers are the master's
        if signum is None:
            signum = signal.SIGTERM if graceful else signal.SIGQUIT
        timeout = self.cfg.graceful_timeout if graceful else min(QUICK_STOP_WAIT, self.cfg.graceful_timeout)
        if signum == signal.SIGINT:
            timeout += serving.interrupt_wait(self.interface, self.cfg.interrupt_timeout)
        self.wait_for_workers(signum, timeout)
        raise Stop(EXIT_OK)

    def wait_for_workers(self, signum: int, timeout: float) -> None:
        """Signal every worker, reap until none is left or the deadline passes, then KILL."""
        self.fleet.signal_all(signum)
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
            # A second INT/QUIT during a graceful stop, or during an INT's, makes it quick.
            while self.wakeup.signals:
                queued = self.wakeup.signals.popleft()
                if queued in (signal.SIGINT, signal.SIGQUIT) and signum in (signal.SIGTERM, signal.SIGINT):
                    log.info("%s during the stop: QUIT to the workers, at once", signal.Signals(queued).name)
                    signum = signal.SIGQUIT
                    self.fleet.signal_all(signum)
                    deadline = min(deadline, time.monotonic() + QUICK_STOP_WAIT)
            self.sleep(min(remaining, 0.5))
        if self.workers:
            log.warning("killing %d worker(s) that did not stop in time", len(self.workers))
        self.kill_all()

