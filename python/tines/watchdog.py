"""The master's watchdog over stuck workers: ``request_timeout`` and ``boot_timeout``.

Owns: the policy (which app thread overran, which worker is not ready in time), the log line
that says so, recording the exit reason in the scoreboard, the dump signal and the kill that
follows it, the deadline the master's loop must wake for, and the scoreboard's size.

How a stuck worker ends (docs/signals.md): the master reads each app thread's sub-slot
(dispatch and last-progress times on CLOCK_MONOTONIC, the same clock as ``time.monotonic``).
An app thread that has held a request in the app, not waiting on the client, for
``request_timeout`` seconds since its last progress (dispatch, the app returning its iterable,
a body block handed to the socket) is overdue: the master logs it, records the exit reason,
marks the sub-slot timed out and sends the worker ``DUMP_SIGNAL``. In the worker, faulthandler
writes the Python stack of every thread to the error log, then the chained Rust handler
answers 503 on each marked connection that has no response byte yet and sets the slot's
``dumped`` flag. The master never waits: it notes a kill deadline and on a later turn (the flag
seen, or ``DUMP_WAIT`` passed) sends SIGKILL; the worker is reaped and replaced as usual. A
worker not ready ``boot_timeout`` seconds after its fork is dumped and killed the same way.

Must not: block, sleep, fork or start a thread; it runs inside the master's loop.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from tines import logs
from tines.config import Config

DUMP_SIGNAL = signal.SIGURG
"""The signal that makes a worker dump its stacks. Not one a worker uses for anything else
(TERM, INT, QUIT, HUP, USR1, USR2, XCPU, CHLD), nor one a terminal sends a process group
(WINCH, TSTP): SIGURG is sent by the kernel only to a socket's owner set with ``F_SETOWN``,
which Tines never sets, and its default action is to ignore it, so one arriving before the
handlers are installed does nothing."""

DUMP_WAIT = 2.0
"""Seconds the master waits for the ``dumped`` flag before it kills the worker anyway (a dump
of even hundreds of threads takes milliseconds; a worker before its Rust handler is installed
never sets the flag)."""

DUMP_POLL = 0.05
"""While a dump is awaited, the master's loop wakes this often to look at the flag."""

log = logs.get("watchdog")


class WorkerRecord(Protocol):
    """What the watchdog reads of the master's record of a worker (``generation.Worker``)."""

    pid: int
    slot: int
    born: float
    ready: bool
    stopping: bool


EXIT_ROOM = 64
"""Slots kept, with ``max_requests`` 1, for the processes that have served their request and
are still exiting (each holds its slot until it is reaped): under load with a process per
request, each connection in flight may be one. A slot is about 1 KiB per app thread."""


def scoreboard_slots(workers: int, standbys: int = 0, max_requests: int = 0) -> int:
    """Scoreboard slots for at most ``workers`` live workers (the fixed count, or the dynamic
    pool's ``max_workers``) and ``standbys`` (``tines.standby``), plus room for a reload's new
    generation and the replacements that start while stopped workers still hold their slots,
    and with ``max_requests`` 1 (every request ends its process) ``EXIT_ROOM`` more for the
    processes exiting at once."""
    processes = workers + standbys
    exiting = max(EXIT_ROOM, processes * 2) if max_requests == 1 else 0
    return max(processes * 2, processes + 8) + exiting


LOOP_GRACE = 1.0
"""Seconds an async worker's event loop may go unmarked beyond ``request_timeout`` before it
is taken for stuck: the loop marks itself at least every second (tines.asgi.TICK)."""


def scoreboard_threads(cfg: Config) -> int:
    """Sub-slots per scoreboard slot: one per app thread (prefork and ``event`` with
    ``threads = 0`` run the app on one thread)."""
    if cfg.mpm == "prefork":
        return 1
    threads: int = cfg.threads
    return max(1, threads)


@dataclass
class PendingKill:
    """A worker that was sent ``DUMP_SIGNAL`` and is to be killed."""

    reason: str
    deadline: float
    killed: bool = False
    """SIGKILL was sent; the worker waits to be reaped (``forget``)."""


class Watchdog:
    """Judges stuck requests and slow boots; ``check`` once per turn of the master's loop."""

    def __init__(self, cfg: Config, scoreboard: Any) -> None:
        self.request_timeout: float = cfg.request_timeout
        self.boot_timeout: float = cfg.boot_timeout
        self.scoreboard = scoreboard
        self.pending: dict[int, PendingKill] = {}

    def check(self, workers: Iterable[WorkerRecord]) -> None:
        """Act on every worker: kill those whose dump is done or overdue, dump those that
        overran a timeout. A worker being stopped (drain, reload) is judged too: a stuck
        request would keep it from ever exiting."""
        now = time.monotonic()
        for worker in workers:
            pending = self.pending.get(worker.pid)
            if pending is not None:
                if not pending.killed and (now >= pending.deadline
                                           or self.scoreboard.read(worker.slot)["dumped"]):
                    self.kill(worker, pending)
                continue
            if not worker.ready:
                self.check_boot(worker, now)
            elif self.request_timeout > 0:
                self.check_requests(worker, now)

    def check_boot(self, worker: WorkerRecord, now: float) -> None:
        """A worker not ready ``boot_timeout`` after its fork: dump and kill it. It stays a
        death before ready for the crash-loop guard (it is not marked stopping)."""
        if self.boot_timeout <= 0 or worker.stopping or now - worker.born < self.boot_timeout:
            return
        log.error("worker %d (slot %d) not ready after %.1f s (boot_timeout %g s): "
                  "dumping its stack to the error log and killing it",
                  worker.pid, worker.slot, now - worker.born, self.boot_timeout)
        self.dump(worker, "boot_timeout", now)

    def check_requests(self, worker: WorkerRecord, now: float) -> None:
        """Every app thread of ``worker`` that overran ``request_timeout``: log, mark; then
        dump and kill the worker (its replacement starts at once)."""
        reading = self.scoreboard.read(worker.slot)
        if reading["pid"] != worker.pid:
            return
        if reading["loop_heartbeat"] > 0:
            # An ASGI worker: its requests share one event loop, and each overrun request is
            # cancelled there; the worker is killed only when the loop itself stops.
            stalled = time.time() - reading["loop_heartbeat"]
            if stalled >= self.request_timeout + LOOP_GRACE:
                log.error("worker %d (slot %d): its event loop made no progress for %.1f s "
                          "(request_timeout %g s): dumping the worker's stacks to the error log "
                          "and killing it", worker.pid, worker.slot, stalled, self.request_timeout)
                worker.stopping = True
                self.dump(worker, "request_timeout", now)
            return
        now_ns = int(now * 1e9)
        limit_ns = int(self.request_timeout * 1e9)
        overdue = [thread for thread in reading["threads"]
                   if thread["state"] == "busy" and not thread["waiting_on_client"]
                   and now_ns - thread["progress_ns"] >= limit_ns]
        if not overdue:
            return
        for thread in overdue:
            log.error("worker %d (slot %d) thread %d: request %s %s made no progress for %.1f s "
                      "(request_timeout %g s, %.1f s since dispatch): dumping the worker's stacks "
                      "to the error log and killing it",
                      worker.pid, worker.slot, thread["thread"], thread["method"], thread["target"],
                      (now_ns - thread["progress_ns"]) / 1e9, self.request_timeout,
                      (now_ns - thread["dispatch_ns"]) / 1e9)
            self.scoreboard.mark_timed_out(worker.slot, thread["thread"], thread["request"])
        # Stopping: the loop starts the replacement now, and the kill is no crash.
        worker.stopping = True
        self.dump(worker, "request_timeout", now)

    def dump(self, worker: WorkerRecord, reason: str, now: float) -> None:
        """Record the exit reason, send the dump signal, note the kill deadline."""
        self.scoreboard.set_exit_reason(worker.slot, reason)
        self.pending[worker.pid] = PendingKill(reason, now + DUMP_WAIT)
        try:
            os.kill(worker.pid, DUMP_SIGNAL)
        except ProcessLookupError:
            pass

    def kill(self, worker: WorkerRecord, pending: PendingKill) -> None:
        """SIGKILL a dumped worker (reaped by the loop, which logs its exit reason)."""
        pending.killed = True
        try:
            os.kill(worker.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def forget(self, pid: int) -> None:
        """The worker was reaped."""
        self.pending.pop(pid, None)

    def next_wake(self, workers: Iterable[WorkerRecord]) -> float | None:
        """Seconds until the watchdog next has something to do, None when nothing is due: a
        request's deadline, a boot deadline, or the next look at a pending dump's flag. The
        master's loop sleeps no longer than this, so a timeout fires on time (a request that
        starts while the master sleeps is seen on its next turn, at most a second later)."""
        now = time.monotonic()
        wake: float | None = None

        def due(at: float) -> None:
            nonlocal wake
            delay = max(0.0, at - now)
            wake = delay if wake is None else min(wake, delay)

        for worker in workers:
            pending = self.pending.get(worker.pid)
            if pending is not None:
                if not pending.killed:
                    due(min(pending.deadline, now + DUMP_POLL))
            elif not worker.ready:
                if self.boot_timeout > 0 and not worker.stopping:
                    due(worker.born + self.boot_timeout)
            elif self.request_timeout > 0:
                reading = self.scoreboard.read(worker.slot)
                if reading["loop_heartbeat"] > 0:
                    due(now + self.request_timeout + LOOP_GRACE - (time.time() - reading["loop_heartbeat"]))
                    continue
                for thread in reading["threads"]:
                    if thread["state"] == "busy" and not thread["waiting_on_client"]:
                        due(thread["progress_ns"] / 1e9 + self.request_timeout)
        return wake


def record_exit(scoreboard: Any, slot: int, status: int, stopping: bool) -> str:
    """The exit reason of a reaped worker: the one recorded in its slot, else what its wait
    status says (``signal``, ``crash``, or ``stop`` for a worker the master stopped), recorded
    so the slot keeps it. ``none`` for a worker that exited 0 on its own without one."""
    reason: str = scoreboard.read(slot)["exit_reason"]
    if reason != "none":
        return reason
    if stopping:
        reason = "stop"
    elif os.WIFSIGNALED(status):
        reason = "signal"
    elif os.WIFEXITED(status) and os.WEXITSTATUS(status) != 0:
        reason = "crash"
    else:
        return reason
    scoreboard.set_exit_reason(slot, reason)
    return reason
