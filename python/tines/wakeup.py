"""How the master sleeps, and what wakes it: the signal queue and the wake-up fd.

Owns: the master's signal handlers, which only queue the signal (the only work done in signal
context), the wake-up pipe that ``signal.set_wakeup_fd`` writes so that a signal ends the sleep
at once, and the sleep itself (``select`` over the wake-up fd and the fds the caller watches).
The loop (``Arbiter.loop``) takes the queued signals and calls ``handle_<name>()`` for each.

Must not: act on a signal (the arbiter does, outside signal context) or start threads.
"""

from __future__ import annotations

import os
import select
import signal
from collections import deque
from collections.abc import Sequence

HANDLED_SIGNALS = ("CHLD", "TERM", "INT", "QUIT", "HUP", "TTIN", "TTOU", "USR1", "USR2", "WINCH")

SIGNAL_QUEUE_LIMIT = 8
"""Signals queued beyond this are dropped (a burst of the same signal means the same thing)."""


class Wakeup:
    """The master's queued signals and its wake-up pipe."""

    def __init__(self) -> None:
        self.signals: deque[int] = deque()
        """Signals received and not yet handled, oldest first."""
        self.read = self.write = -1

    def open(self) -> None:
        """The wake-up pipe (close-on-exec, both ends non-blocking)."""
        self.read, self.write = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)

    def install(self) -> None:
        """From now on every handled signal is queued and wakes the sleep."""
        signal.set_wakeup_fd(self.write, warn_on_full_buffer=False)
        for name in HANDLED_SIGNALS:
            signal.signal(getattr(signal, f"SIG{name}"), self.on_signal)

    def on_signal(self, signum: int, frame: object) -> None:
        """The only work done in signal context: queue it (the wake-up fd wakes the loop)."""
        if len(self.signals) < SIGNAL_QUEUE_LIMIT:
            self.signals.append(signum)

    def sleep(self, timeout: float, watched: Sequence[int]) -> list[int] | None:
        """Wait for a signal or for one of ``watched`` to be readable, at most ``timeout``:
        the readable fds (empty when only a signal came), or None when the whole timeout
        passed with neither."""
        if self.signals:
            return []
        try:
            ready, _, _ = select.select([self.read, *watched], [], [], timeout)
        except InterruptedError:
            return []
        if not ready:
            return None
        if self.read in ready:
            try:
                while os.read(self.read, 4096):
                    pass
            except BlockingIOError:
                pass
        return ready

    def fds(self) -> list[int]:
        """The pipe's ends (a forked child closes them; the master, at exit, after ``uninstall``)."""
        return [fd for fd in (self.read, self.write) if fd >= 0]

    def uninstall(self) -> None:
        """Signals no longer write the wake-up pipe (it is about to be closed)."""
        try:
            signal.set_wakeup_fd(-1)
        except ValueError:
            pass
