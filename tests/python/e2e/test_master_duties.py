"""A duty of the master that fails is logged with its name and traceback, and the master goes
on serving (tines.duties). The failure here is a real one: log rotation that left a directory
where the error log file was, so USR1's reopen cannot open it."""

from __future__ import annotations

import re
import signal
from pathlib import Path
from typing import Any

from conftest import alive, http_get, wait_until

HELLO = "examples/hello.py:app"


def wait_for(path: Path, pattern: str, count: int = 1) -> str:
    """Wait until ``pattern`` matches ``count`` times in the file at ``path``; its text."""
    def found() -> str | None:
        text = path.read_text(errors="replace") if path.exists() and path.is_file() else ""
        return text if len(re.findall(pattern, text)) >= count else None
    return str(wait_until(found, what=f"{pattern!r} in {path.name}"))


def test_a_failing_log_reopen_is_logged_and_the_master_goes_on_serving(tines_server: Any, tmp_path: Path) -> None:
    error_log = tmp_path / "error.log"
    server = tines_server(HELLO, "-w", "2", "--error-log", str(error_log), "--log-level", "debug")
    rotated = tmp_path / "error.log.1"
    error_log.rename(rotated)
    error_log.mkdir()  # the file's path is now a directory: opening it fails with EISDIR

    server.signal(signal.SIGUSR1)
    text = wait_for(rotated, r"master duty 'reopen the error log' failed, the master goes on: "
                             r"ConfigError: cannot open error log .*Is a directory")
    assert "Traceback (most recent call last)" in text.split("master duty 'reopen the error log' failed")[1]
    assert http_get(server.port) == (200, b"OK")
    assert alive(server.pid)

    # A second failure soon after is counted, and logged without its traceback at debug level only.
    server.signal(signal.SIGUSR1)
    wait_for(rotated, r"\[DEBUG\] master duty 'reopen the error log' failed again \(2 failures in a row")
    assert http_get(server.port) == (200, b"OK")

    error_log.rmdir()
    server.signal(signal.SIGUSR1)
    wait_for(error_log, r"master duty 'reopen the error log' works again after 2 failures")
    assert rotated.read_text().count("master duty 'reopen the error log' failed, the master goes on") == 1
    assert http_get(server.port) == (200, b"OK")
