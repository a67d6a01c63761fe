"""How processes end, as the master sees it: its own exit, and its workers'.

Owns: ``Stop`` (raised inside the master's loop to leave it with an exit status; every duty lets
it pass, ``tines.duties``) and the master's exit statuses; the crash-loop guard (``CrashGuard``:
when the next worker may start after deaths before ready and crashes after ready, and when the
master gives up); and the line that says how a worker ended (``log_exit``).

They live apart from ``tines.arbiter`` because they are rules, not the loop: the guard is tested
without a process (tests/python/unit/test_crash_guard.py), and it raises ``Stop`` itself when
the master gives up, which it could not do if ``Stop`` were the arbiter's.

Must not: fork, signal, or read the clock (the caller passes ``now``).
"""

from __future__ import annotations

import os
import signal
from collections import deque
from dataclasses import dataclass, field

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
crashes a worker now and then gets every replacement at once; one that crashes workers on
every request (a crash loop after ready) gets its respawns slowed to about one per 5 s."""

log = logs.get("arbiter")


class Stop(Exception):
    """Raised inside the master's loop to leave it with an exit status."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


@dataclass
class CrashGuard:
    """When the next worker may start (``next_spawn``), after the deaths and crashes so far."""

    next_spawn: float = 0.0
    """No worker starts before this (``time.monotonic()``); 0 when nothing holds starts back."""
    boot_failures: int = 0
    """Deaths before ready in a row (a worker that becomes ready resets it: ``ready``)."""
    crash_times: deque[float] = field(default_factory=deque)
    """When ready workers crashed, within the last CRASH_WINDOW."""

    def ready(self) -> None:
        """A worker became ready: the deaths before ready stop counting."""
        self.boot_failures = 0

    def crashed_after_ready(self, now: float) -> None:
        """The crash backoff: the first crash in CRASH_WINDOW is replaced at once, each
        further one delays the next start (0.1 s doubling up to 5 s); the rate is logged."""
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

    def died_before_ready(self, now: float, limit: int, serving: int, reload_failed: bool) -> None:
        """A worker of the serving generation died before ready: back off (0.1 s doubling up
        to 5 s); at ``limit`` deaths in a row give up (``Stop(EXIT_BOOT_FAILURES)``), unless
        ``reload_failed`` (the code on disk is a deploy a reload could not boot) while
        ``serving`` workers still serve the old code: then keep them, and retry every 5 s."""
        self.boot_failures += 1
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
        delay = min(BACKOFF_START * 2 ** (self.boot_failures - 1), BACKOFF_MAX)
        self.next_spawn = now + delay
        log.warning("worker died before ready (%d in a row): next start in %.1f s",
                    self.boot_failures, delay)


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
