"""Logging set-up for the master and the workers.

Owns: the error-log format, which the Rust core writes too
(``[2026-11-22 10:20:00 +0000] [pid] [LEVEL] message``, UTC), and where lines go.

The error log is file descriptor 2 in every process: with ``--error-log PATH`` the master opens
the file (append mode) and puts it on fd 2 before forking, so Python tracebacks, Rust error
lines and anything a C extension prints all land in one place. ``reopen()`` (USR1) does that
again after log rotation. No handler threads, no queue: the master starts no threads.
"""

from __future__ import annotations

import logging
import os
import sys
import time

from tines.errors import ConfigError

FORMAT = "[%(asctime)s] [%(process)d] [%(levelname)s] %(message)s"
DATE_FORMAT = "%Y-%m-%d %H:%M:%S +0000"

LOGGER_NAME = "tines"
"""Parent of every Tines logger (``tines.arbiter``, ``tines.worker``, ``tines.error``)."""


class _UTCFormatter(logging.Formatter):
    # The Rust core writes UTC; so does Python (logging's documented way to switch).
    converter = time.gmtime  # type: ignore[assignment]


def open_for_append(path: str, what: str) -> int:
    """Open (creating) a log file for appending; its fd. ConfigError (one line) if it cannot be.

    ``what`` names the setting in the message (``error log``, ``access log``).
    """
    try:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
    except OSError as error:
        raise ConfigError(f"cannot open {what} {path!r}: [Errno {error.errno}] {error.strerror}") from None


def check_access_log(path: str | None) -> None:
    """Open the access log file once, as each worker will (Rust opens it again by path), so a
    path no worker could open stops the start with one line instead of failing every worker."""
    if path is not None and path != "-":
        os.close(open_for_append(path, "access log"))


def _point_stderr_at(path: str) -> None:
    fd = open_for_append(path, "error log")
    try:
        sys.stderr.flush()
        os.dup2(fd, 2)
    finally:
        os.close(fd)


def configure(error_log: str, level: str) -> None:
    """Send Tines' log records to fd 2 (after pointing it at ``error_log`` unless it is "-").

    Raises ConfigError when the error log file cannot be opened.
    """
    if error_log != "-":
        _point_stderr_at(error_log)
    logger = logging.getLogger(LOGGER_NAME)
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_UTCFormatter(FORMAT, DATE_FORMAT))
    logger.addHandler(handler)
    logger.setLevel(level.upper())
    logger.propagate = False


def reopen(error_log: str) -> None:
    """Reopen the error-log file (USR1, after rotation); nothing to do for stderr."""
    if error_log != "-":
        _point_stderr_at(error_log)


def get(name: str) -> logging.Logger:
    """The logger ``tines.<name>``."""
    return logging.getLogger(f"{LOGGER_NAME}.{name}")
