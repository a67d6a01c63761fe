"""How processes end, as the master sees it: its own exit, and its workers'.

Owns: ``Stop`` (raised inside the master's loop to leave it with an exit status; every duty lets
it pass, ``tines.duties``) and the master's exit statuses; the crash-loop guard (``CrashGuard``:
when the next worker may start after deaths before ready and crashes after ready, the floor of
workers it keeps serving through a request of death, and when the master gives up); what a
crashed worker had in flight (``InFlight``, from its scoreboard slot) and the lines that say how
a worker ended (``log_exit``, ``InFlight.describe``).

They live apart from ``tines.arbiter`` because they are rules, not the loop: the guard is tested
without a process (tests/python/unit/test_crash_guard.py), and it raises ``Stop`` itself when
the master gives up, which it could not do if ``Stop`` were the arbiter's.

Must not: fork, signal, or read the clock (the caller passes ``now``).
"""

from __future__ import annotations

import os
import signal
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tines import limits, logs
from tines.config import Config
from tines.generation import Worker

EXIT_OK = 0
EXIT_BOOT_FAILURES = 3
"""Exit status when workers keep dying before ready (gunicorn's WORKER_BOOT_ERROR)."""

BACKOFF_START = 0.1
BACKOFF_MAX = 5.0
"""Respawn delay after a worker died before ready, and after the second and later crashes of
ready workers within CRASH_WINDOW: 0.1 s, doubling, at most 5 s."""

CRASH_WINDOW = 10.0
"""Crashes of ready workers this recent (seconds) count toward the crash backoff. An app that
crashes a worker now and then gets every replacement at once; one whose workers crash on their
own after ready (a crash loop) gets its respawns slowed to about one per 5 s; one whose workers
crash on requests keeps its floor (``crash_floor``) and backs off the rest."""


def crash_floor(workers: int) -> int:
    """The workers the crash backoff keeps serving when they die of requests: half the wanted
    count, rounded up, at least one. The rest wait out the backoff, so a request of death costs
    at most one fork for each deadly request the floor takes, and never the whole service."""
    return max(1, (workers + 1) // 2)


log = logs.get("arbiter")


class Stop(Exception):
    """Raised inside the master's loop to leave it with an exit status."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


def backoff(count: int) -> float:
    """The delay after the ``count``-th death in a row: 0.1 s, doubling, at most 5 s (the
    exponent is capped: a float overflows at 2 ** 1024, and crashes can come faster)."""
    return float(min(BACKOFF_START * 2 ** min(count - 1, 64), BACKOFF_MAX))


@dataclass
class CrashGuard:
    """When the next worker may start (``take_start``), after the deaths and crashes so far.

    Two kinds of crash after ready are told apart by what the worker had in flight. One that
    died serving a request may have been killed by it (a request of death): its replacement is
    paid for by that request, so while fewer than the floor (``crash_floor``) are live it
    starts at once, backoff or not, and the deaths stay bounded by the rate of such requests.
    One that died between requests crashed on its own, and its replacement would too (a crash
    loop): nothing pays for it, so it waits out the backoff like every start beyond the floor.
    The backoff is the fleet's, not a slot's: every worker takes requests from the same
    listeners, so the slot a crash happened in says nothing about the next one.
    """

    next_spawn: float = 0.0
    """No worker starts before this (``time.monotonic()``) beyond the floor's paid starts; 0
    when nothing holds starts back."""
    boot_failures: int = 0
    """Deaths before ready in a row (a worker that becomes ready resets it: ``ready``)."""
    crash_times: deque[float] = field(default_factory=deque)
    """When ready workers crashed, within the last CRASH_WINDOW."""
    paid_starts: int = 0
    """Starts the backoff lets through to keep the floor: one for each crash with a request in
    flight not yet replaced, at most the floor (a death before ready clears them)."""

    def ready(self) -> None:
        """A worker became ready: the deaths before ready stop counting."""
        self.boot_failures = 0

    def crashed_after_ready(self, now: float, serving: bool, floor: int) -> None:
        """The crash backoff: the first crash in CRASH_WINDOW is replaced at once, each
        further one delays the starts beyond the floor (0.1 s doubling up to 5 s); the rate is
        logged. ``serving``: the worker had a request in flight, which pays for one start of
        the ``floor`` (``take_start``)."""
        while self.crash_times and self.crash_times[0] <= now - CRASH_WINDOW:
            self.crash_times.popleft()
        self.crash_times.append(now)
        if serving:
            self.paid_starts = min(self.paid_starts + 1, floor)
        crashes = len(self.crash_times)
        if crashes == 1:
            return
        delay = backoff(crashes - 1)
        self.next_spawn = max(self.next_spawn, now + delay)
        if delay == BACKOFF_MAX and crashes & (crashes - 1):
            return  # at the maximum, said again at each power of two: a line per crash is noise
        log.warning("workers crashed after ready %d times in %.2f s: next start in %.1f s "
                    "(beyond the %d kept serving while requests kill them)",
                    crashes, now - self.crash_times[0], delay, floor)

    def take_start(self, now: float, live: int, floor: int) -> bool:
        """Whether one more worker may start now, with ``live`` workers (ready or booting)
        and ``floor`` to keep: after the backoff, or before it while below the floor with a
        start paid by a request of death (which it uses up)."""
        if now < self.next_spawn and (live >= floor or not self.paid_starts):
            return False
        self.paid_starts = max(0, self.paid_starts - 1)
        return True

    def died_before_ready(self, now: float, limit: int, serving: int, reload_failed: bool) -> None:
        """A worker of the serving generation died before ready: back off (0.1 s doubling up
        to 5 s); at ``limit`` deaths in a row give up (``Stop(EXIT_BOOT_FAILURES)``), unless
        ``reload_failed`` (the code on disk is a deploy a reload could not boot) while
        ``serving`` workers still serve the old code: then keep them, and retry every 5 s. The
        floor's paid starts go: code that cannot boot is no request's doing."""
        self.boot_failures += 1
        self.paid_starts = 0
        if self.boot_failures >= limit and reload_failed and serving:
            self.next_spawn = now + BACKOFF_MAX
            log.error("workers keep dying before they are ready (%d in a row): the code on disk "
                      "cannot boot (the last reload failed too); %d worker(s) still serve the old "
                      "code; next start in %.1f s; deploy a fix and send HUP",
                      self.boot_failures, serving, BACKOFF_MAX)
            return
        if self.boot_failures >= limit:
            log.error("workers keep dying before they are ready (%d in a row): giving up",
                      self.boot_failures)
            raise Stop(EXIT_BOOT_FAILURES)
        delay = backoff(self.boot_failures)
        self.next_spawn = now + delay
        log.warning("worker died before ready (%d in a row): next start in %.1f s",
                    self.boot_failures, delay)


@dataclass(frozen=True)
class InFlight:
    """What a crashed worker had in flight, from its scoreboard slot read before the slot is
    freed: the method and target of the request on each busy app thread (prefork, thread,
    event); an ASGI worker's requests share one thread and are not recorded one by one, so
    only their count is known."""

    requests: tuple[tuple[str, str], ...] = ()
    """(method, target) of each request on an app thread, as recorded (the target cut to the
    scoreboard's 96 bytes; both empty when the worker died while recording them)."""
    asgi_requests: int = 0
    """An ASGI worker's requests in progress."""

    @staticmethod
    def of(reading: Mapping[str, Any]) -> InFlight:
        """From a ``Scoreboard.read`` of the slot (``loop_heartbeat`` set: an ASGI worker)."""
        if reading["loop_heartbeat"] > 0:
            return InFlight(asgi_requests=int(reading["active"]))
        return InFlight(tuple((str(thread["method"]), str(thread["target"]))
                              for thread in reading["threads"] if thread["state"] == "busy"))

    @property
    def serving(self) -> bool:
        """It died with a request in flight (one of them may have killed it)."""
        return bool(self.requests or self.asgi_requests)

    def describe(self) -> str:
        """The words after "worker PID (slot N) crashed" that name what it was serving."""
        named = [f"{printable(method)} {printable(target)}" if method else "a request (not recorded)"
                 for method, target in self.requests]
        if len(named) == 1:
            return f"while serving {named[0]}"
        if named:
            return f"with {len(named)} requests in flight: {', '.join(named)}"
        if self.asgi_requests:
            return (f"with {self.asgi_requests} request(s) in flight (an ASGI worker: which "
                    f"ones is not recorded)")
        return "between requests (none in flight)"


def printable(text: str) -> str:
    """``text`` with every byte outside visible ASCII, and the backslash, as ``\\xNN``: what
    a worker recorded cannot put a line break or a terminal's escape into the log."""
    return "".join(char if "!" <= char <= "~" and char != "\\" else f"\\x{ord(char):02x}"
                   for char in text)


def crashed(status: int) -> bool:
    """A death by signal or a non-zero exit. A worker that stops on its own for a reason
    (max_requests, the master gone) exits 0; one the master stopped is ``stopping``."""
    return os.WIFSIGNALED(status) or (os.WIFEXITED(status) and os.WEXITSTATUS(status) != 0)


def log_exit(cfg: Config, worker: Worker, status: int, cpu_seconds: float = 0.0, reason: str = "none") -> None:
    """One line saying how a worker ended, naming the resource limit that ended it where
    that can be told (``limits.exit_cause``; ``cpu_seconds`` is its user + system time),
    or the exit reason the master or the worker recorded (``request_timeout``...)."""
    # A worker the master was stopping may have been killed by the master itself.
    signalled = worker.stopping and not worker.own_decision
    cause = "" if signalled else limits.exit_cause(cfg, status, cpu_seconds)
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
        # A max_requests recycle's exit (max_requests 1: one per request) is at debug; the
        # master sums them up at info (tines.fleet.RecycleLog). A cpu_limit one names its limit.
        recycled = worker.own_decision and code == 0 and worker.reason == "max_requests"
        (log.debug if recycled else log.info if expected else log.error)(
            "worker %d (slot %d) exited with code %d%s", worker.pid, worker.slot, code, cause)
