"""The master's watchdog over stuck workers: ``request_timeout`` and ``boot_timeout``.

Owns: the policy (which app thread overran, which worker is not ready in time, when a dumped
worker is killed), the log lines that say so, recording the exit reason in the scoreboard, the
dump signal and the kill that follows it, the deadline the master's loop must wake for, and
the scoreboard's size.

How a stuck request ends (docs/signals.md, "A stuck request"): the master reads each app
thread's sub-slot (dispatch and last-progress times on CLOCK_MONOTONIC, the same clock as
``time.monotonic``). An app thread that has held a request in the app, not waiting on the
client, for ``request_timeout`` seconds since its last progress (dispatch, the app returning
its iterable, a body block handed to the socket) is overdue: the master logs it, records the
exit reason, marks the sub-slot timed out (one CAS against the app thread's claim of its
response: the request owes its client a 503 if its response had not begun, else a shutdown),
marks the worker stopping (its replacement starts at once) and sends it ``DUMP_SIGNAL``. In
the worker, faulthandler writes the Python stack of every thread to the error log, then the
chained Rust handler sets the slot's ``dumped`` flag and:

- on a worker whose app threads are not its loop thread (``thread``; ``event`` with
  ``threads`` > 0; WSGI), wakes the loop, which answers the stuck client and drains the
  worker: the other requests in flight finish, then the worker exits by itself without
  waiting for the stuck thread. A thread that overruns after the dump is marked and signalled
  the same way (its client answered too). The master kills it only when ``drain_verdict`` says so: the
  drain is done but the worker did not exit, ``graceful_timeout`` passed since the dump, or
  the stuck thread holds the GIL (the interpreter probe the loop starts on the dump, taking
  the GIL every half second, has not reported for ``GIL_WAIT``);
- on any other worker (prefork and ``event`` with ``threads = 0``, where the stuck request is
  the loop thread itself; an ASGI worker whose event loop is blocked), answers the client
  itself, and the master kills the worker once it sees the flag (or ``DUMP_WAIT`` passed).

A worker not ready ``boot_timeout`` seconds after its fork is dumped and killed the second
way. The dead worker is reaped and replaced as usual.

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

GIL_WAIT = 3.0
"""Seconds after the dump of a draining worker within which its interpreter probe (a thread the
worker's loop starts on the dump, which takes the GIL and lets it go) must report, and at least
one of its other busy app threads must make progress (a dispatch, the app returning, a body
block written): if either fails, the stuck thread is taken to hold the GIL (C code), which no
drain can outlast (an idle app thread needs the GIL to start a queued request, a busy one to go
on), and the worker is killed at once. A few seconds: a thread that only waits for the GIL is
switched in every 5 ms once it is released."""

DRAIN_POLL = 0.25
"""While a dumped worker drains, the master's loop wakes this often to judge it."""

EXIT_WAIT = 2.0
"""Seconds a drained worker (no request in flight but its stuck ones, no other connection)
has to exit by itself before it is killed."""

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
    return max(processes * 2, processes + 8) + exit_room(processes, max_requests)


def exit_room(processes: int, max_requests: int) -> int:
    """The slots ``scoreboard_slots`` adds for processes exiting at once: with ``max_requests``
    1, ``EXIT_ROOM`` or twice the ``processes``, whichever is more; none otherwise. Room for
    processes on their way out, not for more workers: a reload's capacity leaves it out."""
    return max(EXIT_ROOM, processes * 2) if max_requests == 1 else 0


LOOP_GRACE = 1.0
"""Seconds an async worker's event loop may go unmarked beyond ``request_timeout`` before it
is taken for stuck: the loop marks itself at least every second (tines.asgi.TICK)."""


def drains_after_timeout(cfg: Config) -> bool:
    """Whether a WSGI worker of ``cfg`` has a loop thread apart from its app threads, which
    answers a stuck request and drains the worker (``thread``; ``event`` with ``threads`` >
    0), rather than being killed once dumped (prefork; ``event`` with ``threads = 0``)."""
    threads: int = cfg.threads
    return cfg.mpm == "thread" or (cfg.mpm == "event" and threads > 0)


def scoreboard_threads(cfg: Config) -> int:
    """Sub-slots per scoreboard slot: one per app thread (prefork and ``event`` with
    ``threads = 0`` run the app on one thread)."""
    if cfg.mpm == "prefork":
        return 1
    threads: int = cfg.threads
    return max(1, threads)


@dataclass
class PendingKill:
    """A worker that was sent ``DUMP_SIGNAL`` and is to be killed (or, when it ``drains``,
    may still exit by itself)."""

    reason: str
    deadline: float
    """The kill is due then: ``DUMP_WAIT``, or ``graceful_timeout`` for a draining worker,
    after the dump."""
    killed: bool = False
    """SIGKILL was sent; the worker waits to be reaped (``forget``)."""
    drains: bool = False
    """The worker answers its stuck requests from its loop and drains (``drain_verdict``
    decides the kill)."""
    dumped_ns: int = 0
    """When the dump was sent, CLOCK_MONOTONIC nanoseconds."""
    stuck: frozenset[int] = frozenset()
    """The app threads judged stuck (their sub-slot indexes)."""
    drained_since: float | None = None
    """When the drain was first seen done (``EXIT_WAIT`` counts from there)."""


def drain_verdict(pending: PendingKill, reading: dict[str, Any], now: float) -> str | None:
    """Why a dumped worker that drains must be killed now, or None while it may still finish
    and exit by itself. ``reading`` is its scoreboard slot; ``now`` is ``time.monotonic()``.

    - ``graceful_timeout``: that long since the dump, the drain is over whatever is left.
    - ``gil``: ``GIL_WAIT`` seconds after the dump, the interpreter probe has not reported
      for ``GIL_WAIT`` seconds (``interpreter_seen_ns``: it takes the GIL every half second
      from the dump on, so a stale record means it could not), whether or not other app
      threads are busy. A stuck thread holding the GIL stops them all, and the idle ones could
      not start a queued request; the loop still answered the stuck client, as it needs no
      GIL. Other app threads' progress is not judged: a neighbour computing for seconds with
      no output looks the same as one the GIL stopped, and only the probe tells them apart.
    - ``drained``: no other app thread busy and no connection open but the stuck ones' for
      ``EXIT_WAIT`` seconds, and the worker still lives (it exits by itself once drained).
    """
    if now >= pending.deadline:
        return "graceful_timeout"
    others = [thread for thread in reading["threads"]
              if thread["state"] == "busy" and thread["thread"] not in pending.stuck]
    # Counted from the dump while the probe has not reported since (it starts there).
    silent = now - max(reading["interpreter_seen_ns"], pending.dumped_ns) / 1e9
    if silent >= GIL_WAIT:
        return "gil"
    stuck_busy = sum(1 for thread in reading["threads"]
                     if thread["state"] == "busy" and thread["thread"] in pending.stuck)
    if others or reading["connections"] > stuck_busy:
        pending.drained_since = None
        return None
    if pending.drained_since is None:
        pending.drained_since = now
    return "drained" if now - pending.drained_since >= EXIT_WAIT else None


class Watchdog:
    """Judges stuck requests and slow boots; ``check`` once per turn of the master's loop."""

    def __init__(self, cfg: Config, scoreboard: Any) -> None:
        self.request_timeout: float = cfg.request_timeout
        self.boot_timeout: float = cfg.boot_timeout
        self.graceful_timeout: float = cfg.graceful_timeout
        self.drains: bool = drains_after_timeout(cfg)
        """A WSGI worker of this configuration answers a stuck request from its loop and
        drains (an ASGI worker never reaches that path: its loop is the one judged)."""
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
                if not pending.killed and pending.drains and self.request_timeout > 0:
                    # A request may overrun after the dump too (one that the stuck thread's GIL
                    # stopped): it gets its 503 the same way.
                    self.check_requests(worker, now)
                if not pending.killed:
                    self.judge_dumped(worker, pending, now)
                continue
            if not worker.ready:
                self.check_boot(worker, now)
            elif self.request_timeout > 0:
                self.check_requests(worker, now)

    def judge_dumped(self, worker: WorkerRecord, pending: PendingKill, now: float) -> None:
        """Kill a dumped worker when its time came: a draining one by ``drain_verdict``, any
        other once its dump is done (the flag) or overdue."""
        reading = self.scoreboard.read(worker.slot)
        if not pending.drains:
            if now >= pending.deadline or reading["dumped"]:
                self.kill(worker, pending)
            return
        if reading["pid"] != worker.pid:
            # Not its slot any more: only the deadline can be judged.
            if now >= pending.deadline:
                self.kill(worker, pending)
            return
        why = drain_verdict(pending, reading, now)
        if why is None:
            return
        if why == "gil":
            log.error("worker %d (slot %d): the GIL was not free for %g s after the dump (its "
                      "interpreter probe could not take it): the stuck request holds it; killing "
                      "it", worker.pid, worker.slot, GIL_WAIT)
        elif why == "graceful_timeout":
            log.warning("worker %d (slot %d) still draining %g s (graceful_timeout) after its "
                        "request_timeout dump: killing it", worker.pid, worker.slot,
                        self.graceful_timeout)
        else:
            log.warning("worker %d (slot %d) drained after its request_timeout dump but did not "
                        "exit: killing it", worker.pid, worker.slot)
        self.kill(worker, pending)

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
        """Every app thread of ``worker`` that overran ``request_timeout`` (and was not judged
        yet): log, mark; then dump the worker, to drain or be killed (its replacement starts at
        once); a draining worker dumped already is signalled again for the new ones."""
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
                # The loop is the stuck thread: no drain.
                worker.stopping = True
                self.dump(worker, "request_timeout", now)
            return
        pending = self.pending.get(worker.pid)
        judged = pending.stuck if pending is not None else frozenset()
        now_ns = int(now * 1e9)
        limit_ns = int(self.request_timeout * 1e9)
        overdue = [thread for thread in reading["threads"]
                   if thread["state"] == "busy" and not thread["waiting_on_client"]
                   and now_ns - thread["progress_ns"] >= limit_ns and thread["thread"] not in judged]
        if not overdue:
            return
        fate = "draining it" if self.drains else "killing it"
        for thread in overdue:
            log.error("worker %d (slot %d) thread %d: request %s %s made no progress for %.1f s "
                      "(request_timeout %g s, %.1f s since dispatch): dumping the worker's stacks "
                      "to the error log and %s",
                      worker.pid, worker.slot, thread["thread"], thread["method"], thread["target"],
                      (now_ns - thread["progress_ns"]) / 1e9, self.request_timeout,
                      (now_ns - thread["dispatch_ns"]) / 1e9, fate)
            self.scoreboard.mark_timed_out(worker.slot, thread["thread"], thread["request"])
        # Stopping: the loop starts the replacement now, and the exit is no crash.
        worker.stopping = True
        stuck = frozenset(thread["thread"] for thread in overdue)
        if pending is None:
            self.dump(worker, "request_timeout", now, stuck if self.drains else None)
            return
        # A draining worker, dumped already: its loop pays the new ones on this signal too.
        pending.stuck = judged | stuck
        try:
            os.kill(worker.pid, DUMP_SIGNAL)
        except ProcessLookupError:
            pass

    def dump(self, worker: WorkerRecord, reason: str, now: float,
             stuck: frozenset[int] | None = None) -> None:
        """Record the exit reason, send the dump signal, note the kill deadline: ``stuck``
        names the app threads of a worker that drains (see ``drain_verdict``); None for one
        that is killed once dumped."""
        self.scoreboard.set_exit_reason(worker.slot, reason)
        if stuck is None:
            self.pending[worker.pid] = PendingKill(reason, now + DUMP_WAIT)
        else:
            self.pending[worker.pid] = PendingKill(reason, now + self.graceful_timeout, drains=True,
                                                   dumped_ns=int(now * 1e9), stuck=stuck)
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
                    due(min(pending.deadline, now + (DRAIN_POLL if pending.drains else DUMP_POLL)))
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
