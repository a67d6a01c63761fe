"""Python threads an app starts keep running while the worker serves.

The prefork loop holds the GIL while it works and releases it only while it sleeps in its
poller (ADR 0012); the thread and event MPMs' app threads hold it only while the app runs.
Either way a thread the app started (a metrics flusher, a poller) must get its turns: while
the worker is idle, and while it is kept busy by a load generator.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import http_get, wait_until

APP = "background_thread:app"


def counted(port: int) -> int:
    status, body = http_get(port)
    assert status == 200, body
    return int(body)


@pytest.mark.parametrize("mpm", ["prefork", "thread", "event"])
def test_a_thread_the_app_started_runs_while_the_worker_idles_and_while_it_is_busy(
        tines_server: Any, mpm: str, tmp_path: Path) -> None:
    count_file = tmp_path / "count"
    server = tines_server(APP, "-w", "1", "--mpm", mpm, env={"COUNT_FILE": str(count_file)})
    start = counted(server.port)  # the first request starts the thread

    def written() -> int:
        try:
            return int(count_file.read_text() or 0)
        except FileNotFoundError:
            return 0

    # Idle: no request comes, the worker sleeps in its poller; the count is read from the file.
    idle = int(wait_until(lambda: (n := written()) >= start + 20 and n,
                          what="the app's thread to count while the worker idles"))
    # Busy: a load generator keeps the worker serving; the count must go on meanwhile.
    load = subprocess.Popen([sys.executable, "-m", "tines", "bench", "-c", "16", "-t", "1",
                             "-n", "400000", f"http://127.0.0.1:{server.port}/"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        advanced_under_load = False
        while load.poll() is None:
            if counted(server.port) >= idle + 50:
                advanced_under_load = load.poll() is None
                break
    finally:
        load.kill()
        load.wait()
    assert advanced_under_load, "the app's thread stood still while the worker was busy"
