"""The master's workers: the table of their records and what the master does to one of them.

Owns: the records (``Worker``, by pid), the scoreboard slots they hold (a free slot for a fork,
the exit reason, the memory sample, freeing a slot at the reap), the pipes they talk to the
master through (the notify pipe: ready / draining / boot_error messages; the life pipe whose
EOF tells them the master is gone), the fork itself (with USR2 blocked; through the fork
server, ``tines.forkserver``, while there is one), signalling, retiring with the drain, killing, collecting an exit (and naming the request a crashed worker was
serving), their memory samples and the watchdog's look at their requests.

It is the mechanism; ``tines.arbiter`` decides which worker, when, and how many (with the pool,
the reload, the upgrade and the crash-loop guard), and calls the server hooks around it.

Must not: import ``tines.arbiter``, decide the worker count, or start threads.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import Any

from tines import exits, forkserver, logs, memory, watchdog
from tines import pool as spare_pool
from tines import worker as worker_process
from tines.config import Config
from tines.generation import Worker

log = logs.get("arbiter")


class Fleet:
    """Every worker process the master holds, by pid."""

    def __init__(self, cfg: Config) -> None:
        self.workers: dict[int, Worker] = {}
        self.scoreboard: Any = None
        """The ``tines._core.Scoreboard``, from ``Master.start`` on."""
        self.rate_table: Any = None
        """The rate limits' ``tines._core.RateTable`` once a generation needs it (``tines.rate_limits``)."""
        self.client_connections: Any = None
        """``max_connections_per_client``'s ``tines._core.ClientConnections``, likewise."""
        self.watchdog: watchdog.Watchdog | None = None
        """Requests over ``request_timeout``, boots over ``boot_timeout`` (``tines.watchdog``)."""
        self.memory_sampler = memory.Sampler(memory.sample_rate(cfg))
        self.notify_read = self.notify_write = -1
        self.life_read = self.life_write = -1
        self.notify_buffer = bytearray()
        self.warned_threads = False
        self.recycles = RecycleLog()
        self.fork_server = forkserver.ForkServer()
        """Forks the workers while there is one (``tines.forkserver``); else the master does."""

    def open_pipes(self) -> None:
        """The notify pipe (workers write whole messages to it: its write end blocks) and the
        life pipe (the master never writes it; its EOF is the master's death)."""
        self.notify_read, self.notify_write = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self.life_read, self.life_write = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        os.set_blocking(self.notify_write, True)

    def pipe_ends(self) -> list[int]:
        """Every end of the two pipes that is open (to close at exit)."""
        return [fd for fd in (self.notify_read, self.notify_write, self.life_read, self.life_write) if fd >= 0]

    def configure(self, cfg: Config) -> None:
        """Supervise with ``cfg``'s timeouts and sample rate from now on (a reload's swap)."""
        if self.watchdog is not None:
            self.watchdog.request_timeout = cfg.request_timeout
            self.watchdog.boot_timeout = cfg.boot_timeout
        self.memory_sampler.interval = 1.0 / memory.sample_rate(cfg)

    # ----- who is there ------------------------------------------------------------------------

    def live(self, generation: int) -> list[Worker]:
        """Workers of ``generation`` that are not being stopped (standbys are not workers
        until their promotion)."""
        return [w for w in self.workers.values()
                if not w.stopping and not w.standby and w.generation == generation]

    def processes(self) -> list[Worker]:
        """Every worker process but the standbys (a reload replaces these; the standbys of the
        generation it replaces are retired once it is done)."""
        return [w for w in self.workers.values() if not w.standby]

    def standbys(self) -> list[Worker]:
        """Standbys not promoted and not being stopped, of every generation."""
        return [w for w in self.workers.values() if w.standby and not w.stopping]

    def serving(self) -> list[Worker]:
        """Ready workers that are not being stopped."""
        return [w for w in self.workers.values() if w.ready and not w.stopping]

    def free_slot(self) -> int | None:
        """The lowest scoreboard slot no worker holds."""
        taken = {w.slot for w in self.workers.values()}
        for slot in range(self.scoreboard.slots):
            if slot not in taken:
                return slot
        return None

    def samples(self, generation: int) -> list[spare_pool.WorkerSample]:
        """Every worker as the pool sees it: the master's record and its scoreboard slot."""
        samples = []
        for worker in self.workers.values():
            slot = self.scoreboard.read(worker.slot)
            samples.append(spare_pool.WorkerSample(
                pid=worker.pid, slot=worker.slot, ready=worker.ready,
                stopping=worker.stopping or slot["state"] == "stopping",
                current=worker.generation == generation, active=int(slot["active"]),
                connections=int(slot["connections"])))
        return samples

    def wait(self, now: float) -> float | None:
        """Seconds until a memory read or a watchdog deadline is due; None when none is."""
        waits = [self.memory_sampler.wait(now)] if self.serving() else []
        summary = self.recycles.wait(now)
        waits += [summary] if summary is not None else []
        due = self.watchdog.next_wake(self.workers.values()) if self.watchdog is not None else None
        waits += [due] if due is not None else []
        return min(waits) if waits else None

    # ----- birth -------------------------------------------------------------------------------

    def fork(self, context: worker_process.WorkerContext) -> None:
        """Fork one worker into ``context.slot`` (free: ``free_slot``) and record it: the fork
        server forks it while there is one (a child of the master all the same), else the
        master does."""
        if threading.active_count() != 1 and not self.warned_threads:
            self.warned_threads = True
            log.warning("the master has %d threads before fork (a preloaded app started them?): "
                        "threads do not survive fork, and locks they hold stay locked in workers",
                        threading.active_count())
        # The child is born with USR2 (retire) blocked, so a retire sent while it boots waits
        # for the worker's own handler (tines.worker) instead of killing it; with the promotion
        # blocked, so a standby promoted while it boots takes it once booted; and with the stop
        # signals blocked, so a stop sent before it resets the master's handlers is not lost.
        previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, worker_process.BLOCKED_AT_FORK)
        try:
            # Claimed before the fork: a claim after it could wipe the child's first records
            # (the request a quick child died serving) if the master is slow to run again.
            self.scoreboard.claim(context.slot, 0, context.generation)
            if self.client_connections is not None:
                self.client_connections.clear(context.slot)
            pid = self.fork_server.fork(context)
            if pid is None:
                pid = os.fork()
                if pid == 0:
                    worker_process.run(context)  # never returns
        finally:
            # Also when the fork failed (EAGAIN at a pid limit): a mask left blocked would keep
            # every stop signal from the master for good.
            signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)
        self.scoreboard.set_pid(context.slot, pid)
        self.workers[pid] = Worker(pid, context.slot, context.generation, standby=context.standby)
        log.debug("spawned %s %d (slot %d)", "standby" if context.standby else "worker", pid, context.slot)

    def promote(self, worker: Worker) -> None:
        """Make a standby a worker: it enters the Rust worker and accepts (it writes ``ready``
        once its set-up is done); it counts as live from now on."""
        worker.standby = False
        send(worker, worker_process.PROMOTE_SIGNAL)
        log.debug("promoted standby %d (slot %d)", worker.pid, worker.slot)

    def messages(self) -> list[tuple[str, int, int, str]]:
        """Every complete message the workers wrote so far: (kind, pid, slot, text)."""
        try:
            while True:
                chunk = os.read(self.notify_read, 65536)
                if not chunk:
                    break
                self.notify_buffer += chunk
        except BlockingIOError:
            pass
        return worker_process.decode(self.notify_buffer)

    def ready(self, pid: int, now: float, merge: bool, standby: bool = False) -> Worker | None:
        """A worker said ready, or a standby that it booted: mark it, log how long it took.

        With ``max_requests`` 1 this runs once per request, so a recycle's replacement (and a
        standby, and its promotion) is logged at debug, with no memory read: the recycles are
        summed up at info (``RecycleLog``) and its memory is sampled on the sampler's schedule.
        Any other ready line (the start, a reload, a crash's replacement) is at info, with the
        worker's memory read at once.
        """
        worker = self.workers.get(pid)
        if worker is None:
            return None
        promoted = worker.ready  # a standby's second message: promoted, it serves
        worker.ready = True
        elapsed = (now - worker.born) * 1000
        if standby or promoted or self.recycles.open:
            what = "booted" if standby else "serving" if promoted else "ready"
            log.debug("%s %d (slot %d) %s in %.1f ms", "standby" if standby else "worker", pid, worker.slot,
                      what, elapsed)
            return worker
        usage = self.memory_sampler.read(pid, merge)
        if usage is not None:
            self.record_memory(worker, usage)
        figures = f" ({usage.describe()})" if usage is not None else ""
        log.info("worker %d (slot %d) ready in %.1f ms%s", pid, worker.slot, elapsed, figures)
        return worker

    def draining(self, pid: int, reason: str, now: float) -> None:
        """A worker started draining by itself (max_requests, cpu_limit): it is no longer
        live, so the master's ``manage_workers`` spawns its replacement in this same turn while
        it finishes its connections (it still counts toward the processes until it exits)."""
        worker = self.workers.get(pid)
        if worker is None or worker.stopping:
            return
        worker.stopping = True
        worker.own_decision = True
        worker.reason = reason
        level = log.info
        if reason == "max_requests":  # with max_requests 1, one per request: summed up at info
            self.recycles.count(reason, now)
            level = log.debug
        level("worker %d (slot %d) draining (%s): starting its replacement", pid, worker.slot, reason)

    def log_recycles(self, now: float) -> None:
        """The recycles' info line, once per ``RECYCLE_SUMMARY_PERIOD`` while workers recycle."""
        line = self.recycles.summary(now)
        if line is not None:
            log.info("%s", line)

    # ----- life --------------------------------------------------------------------------------

    def sample_memory(self, now: float, cfg: Config, merge: bool) -> None:
        """Read one worker's memory when the schedule says so (``memory.Sampler``: at most
        ``memory_sample_rate`` reads per second in total); retire it above
        ``max_worker_memory``. An error is logged and the master goes on."""
        try:
            worker = self.memory_sampler.pick(self.serving(), now)
            if worker is None:
                return
            usage = self.memory_sampler.read(worker.pid, merge)
            if usage is None:
                return
            self.record_memory(worker, usage)
            log.debug("worker %d (slot %d) memory: %s", worker.pid, worker.slot, usage.describe())
            over = memory.over_limit(cfg, usage)
            if over is not None:
                log.warning("worker %d (slot %d) %s: recycling", worker.pid, worker.slot, over)
                self.retire(worker, "memory")
        except Exception:  # noqa: BLE001 - a duty of the master must never end it
            log.exception("memory sampling failed")

    def record_memory(self, worker: Worker, usage: memory.MemoryUsage) -> None:
        """Keep a worker's latest memory sample (and publish it in its scoreboard slot): the
        one place a sample is written."""
        worker.memory = usage
        if usage.rss_only:  # PSS and USS unread (under ``user``): the status page says n/a
            self.scoreboard.set_memory(worker.slot, usage.rss, memory.UNKNOWN, memory.UNKNOWN, usage.swap)
        else:
            self.scoreboard.set_memory(worker.slot, usage.rss, usage.pss, usage.uss, usage.swap)

    def check_requests(self) -> None:
        """The watchdog's turn: requests over ``request_timeout``, boots over ``boot_timeout``,
        and the kills of dumped workers (``tines.watchdog``)."""
        if self.watchdog is not None:
            self.watchdog.check(list(self.workers.values()))

    # ----- signals -----------------------------------------------------------------------------

    def stop(self, worker: Worker, signum: int) -> None:
        """Signal one worker (ignoring one that is already gone); it is stopping from now on."""
        worker.stopping = True
        send(worker, signum)

    def retire(self, worker: Worker, reason: str, why: str = "") -> None:
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
        self.scoreboard.set_exit_reason(worker.slot, reason)
        log.info("retiring worker %d (slot %d): %s", worker.pid, worker.slot, worker.reason)
        self.stop(worker, signal.SIGUSR2)

    def signal_all(self, signum: int) -> None:
        """Signal every worker (USR1 leaves them serving; any other signal stops them)."""
        for worker in list(self.workers.values()):
            self.stop(worker, signum) if signum != signal.SIGUSR1 else send(worker, signum)

    # ----- death -------------------------------------------------------------------------------

    def collect(self, pid: int, status: int, cpu_seconds: float,
                cfg: Config) -> tuple[Worker, exits.InFlight | None] | None:
        """A reaped ``pid``: when it was a worker, forget it, free its slot (its counters go to
        the totals the status listener shows), log how it ended and, when a ready worker
        crashed, what it was serving (read from its slot before the slot is freed, so the
        operator can find a request of death); the record and that, or None."""
        worker = self.workers.pop(pid, None)
        if worker is None:
            return None
        if self.watchdog is not None:
            self.watchdog.forget(pid)
        in_flight = None
        if worker.ready and (not worker.stopping or worker.own_decision) and exits.crashed(status):
            in_flight = exits.InFlight.of(self.scoreboard.read(worker.slot))
        reason = watchdog.record_exit(self.scoreboard, worker.slot, status, worker.stopping)
        self.scoreboard.retire(worker.slot, pid, status)
        if self.client_connections is not None:
            # Its connections died with it: their counts go (ADR 0038).
            self.client_connections.clear(worker.slot)
        exits.log_exit(cfg, worker, status, cpu_seconds, reason)
        if in_flight is not None:
            log.error("worker %d (slot %d) crashed %s", worker.pid, worker.slot, in_flight.describe())
        if worker.memory is not None and worker.memory.ksm_merging:
            log.info("worker %d (slot %d) last memory sample: %s", worker.pid, worker.slot,
                     worker.memory.describe())
        return worker, in_flight

    def kill_all(self, reaped: Callable[[Worker], object]) -> None:
        """SIGKILL and reap every remaining worker (no zombie, no orphan), calling ``reaped``
        with each as it is gone."""
        for worker in list(self.workers.values()):
            send(worker, signal.SIGKILL)
        for worker in list(self.workers.values()):
            try:
                os.waitpid(worker.pid, 0)
            except ChildProcessError:
                pass
            self.workers.pop(worker.pid, None)
            if self.client_connections is not None:
                # As in reaped(): a new master of an upgrade counts on in the same mapping.
                self.client_connections.clear(worker.slot)
            reaped(worker)


RECYCLE_SUMMARY_PERIOD = 10.0
"""Seconds summed up by one info line about recycles (with ``max_requests`` 1, one per request:
their own lines are at debug)."""


class RecycleLog:
    """Workers that drained by their own decision, counted by reason for one info line per
    period: "recycled 412 workers in the last 10 s (max_requests)". The master counts the
    ``max_requests`` ones (a ``cpu_limit`` one is rare and logged at info on its own)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.since: float | None = None
        """When the open period began (its first recycle); None when none is open."""

    @property
    def open(self) -> bool:
        """A recycle was counted and not summed up yet: a replacement's lines are at debug."""
        return self.since is not None

    def count(self, reason: str, now: float) -> None:
        """One worker started draining by its own decision for ``reason``."""
        if self.since is None:
            self.since = now
        self.counts[reason] = self.counts.get(reason, 0) + 1

    def wait(self, now: float) -> float | None:
        """Seconds until the summary is due; None while no period is open."""
        return None if self.since is None else max(0.0, self.since + RECYCLE_SUMMARY_PERIOD - now)

    def summary(self, now: float) -> str | None:
        """The line once the period is over (and the period closed), else None."""
        if self.since is None or now - self.since < RECYCLE_SUMMARY_PERIOD:
            return None
        total = sum(self.counts.values())
        reasons = ", ".join(f"{reason} {n}" if len(self.counts) > 1 else reason
                            for reason, n in sorted(self.counts.items()))
        line = f"recycled {total} worker{'s' if total != 1 else ''} in the last {now - self.since:.0f} s ({reasons})"
        self.counts.clear()
        self.since = None
        return line


def send(worker: Worker, signum: int) -> None:
    """Signal one worker, ignoring one that is already gone."""
    try:
        os.kill(worker.pid, signum)
    except ProcessLookupError:
        pass
