"""A duty of the master that fails is logged with its name and traceback, and the master goes
on serving (tines.duties). The failure here is a real one: log rotation that left a directory
where the error log file was, so USR1's reopen cannot open it. And USR1's reopen reaches the
running workers' fd 2 too."""

from __future__ import annotations

import re
import signal
from pathlib import Path
from typing import Any

import pytest

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


STDERR_APP = '''import os
import sys


def app(environ, start_response):
    print(f"answered by {os.getpid()} on {environ['PATH_INFO']}", file=sys.stderr, flush=True)
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
    return [b"OK"]
'''


@pytest.mark.parametrize("mpm", ["prefork", "event"])
def test_after_usr1_a_running_worker_writes_to_the_reopened_error_log(tines_server: Any, tmp_path: Path,
                                                                      mpm: str) -> None:
    # The master reopens its error log on USR1; a worker that was running goes on too, with the
    # new file on its fd 2 (before, it wrote to the rotated file until it exited).
    (tmp_path / "stderr_app.py").write_text(STDERR_APP)
    error_log = tmp_path / "error.log"
    server = tines_server("stderr_app:app", "-w", "1", "--mpm", mpm, "--error-log", str(error_log),
                          env={"PYTHONPATH": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1"})
    assert http_get(server.port, "/before") == (200, b"OK")
    [worker] = server.worker_pids()
    wait_for(error_log, rf"answered by {worker} on /before")
    rotated = tmp_path / "error.log.1"
    error_log.rename(rotated)
    server.signal(signal.SIGUSR1)
    wait_for(rotated, r"USR1: reopening log files")
    # The worker reopens in its loop's next turn after the signal: ask until a line lands in
    # the new file (every answer's line is in one file or the other, whole).
    def answered_in_new_file() -> bool:
        assert http_get(server.port, "/after") == (200, b"OK")
        return error_log.exists() and f"answered by {worker} on /after" in error_log.read_text()
    wait_until(answered_in_new_file, what="a line of the running worker's in the reopened file")
    assert server.worker_pids() == [worker]
