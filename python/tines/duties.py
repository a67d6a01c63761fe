"""The guard around the master's duties: a failing duty is logged and the master goes on.

Owns: running one duty of the master's loop (the pool check, reopening the error log, starting
workers; later the memory sampling and the request watchdog) so that an exception in it is
logged with the duty's name and its traceback and never ends the master; and keeping a duty
that fails on every turn (once a second) from flooding the log: one traceback per
``REPORT_INTERVAL`` per duty, the failures in between counted, and one line when it works again.

Must not: swallow the exceptions that are how the master stops (``passes``: the arbiter's
``Stop``), or anything that is not an ``Exception`` (KeyboardInterrupt, SystemExit).
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

REPORT_INTERVAL = 60.0
"""Seconds between two tracebacks of the same failing duty: a duty that fails on every check
(once a second) logs one a minute, with the count of the failures not logged between."""


@dataclass
class Failing:
    """One duty's run of failures."""

    failures: int = 0
    """Failures since it last worked."""
    unreported: int = 0
    """Failures since the last logged traceback."""
    reported_at: float = 0.0
    """time.monotonic() of the last logged traceback."""


class Duties:
    """``Duties(log, passes=(Stop,)).run("pool", check)``: runs the duty, logs what it raised."""

    def __init__(self, log: logging.Logger, passes: tuple[type[BaseException], ...] = (),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.log = log
        self.passes = passes
        self.clock = clock
        self.failing: dict[str, Failing] = {}

    def run(self, name: str, duty: Callable[[], object]) -> bool:
        """Run ``duty``; True when it returned, False when it raised (and was logged)."""
        try:
            duty()
        except self.passes:
            raise
        except Exception as error:  # noqa: BLE001 - the point: no duty ends the master
            self.failed(name, error)
            return False
        record = self.failing.pop(name, None)
        if record is not None:
            self.log.info("master duty %r works again after %d failure%s", name, record.failures,
                          "" if record.failures == 1 else "s")
        return True

    def failed(self, name: str, error: Exception) -> None:
        """Count the failure; log it with its traceback unless one was logged in the last
        REPORT_INTERVAL seconds."""
        now = self.clock()
        record = self.failing.get(name)
        if record is None:
            record = self.failing[name] = Failing()
        elif now - record.reported_at < REPORT_INTERVAL:
            record.failures += 1
            record.unreported += 1
            self.log.debug("master duty %r failed again (%d failures in a row; its traceback is logged "
                           "at most once a minute): %s: %s", name, record.failures, type(error).__name__, error)
            return
        record.failures += 1
        skipped = (f" ({record.unreported} more failure{'' if record.unreported == 1 else 's'} not logged "
                   f"since the last report)" if record.unreported else "")
        record.unreported = 0
        record.reported_at = now
        trace = "".join(traceback.format_exception(type(error), error, error.__traceback__)).rstrip()
        self.log.error("master duty %r failed, the master goes on%s: %s: %s\n%s", name, skipped,
                       type(error).__name__, error, trace)
