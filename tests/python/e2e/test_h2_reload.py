"""HUP and USR2 under an HTTP/2 load lose no request: h2load (``-c 4 -m 10``: four
connections, ten streams at a time on each; one on prefork, which allows one) runs while the test sends HUP once the load is in
progress (h2load's own progress line, not a sleep), waits for the reload's log line, then sends
USR2 and waits for the new master's, the load still running; h2load then reports every request
done and 0 failed, 0 errored. The old workers' HTTP/2 connections end by the two-step GOAWAY
(their open streams finish) and h2load goes on with new connections."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
from h2_tools import ASGI, WSGI, h2load_command, one_stream, parse_h2load, serve_h2c

from conftest import alive, children, wait_until

REQUESTS = 100_000
"""Enough that the load outlasts a reload and an upgrade on a loaded 2-core machine (checked:
the test asserts the load was still running after both)."""


def read_pid(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


class Load:
    """h2load in the background, its output collected line by line."""

    def __init__(self, command: list[str]) -> None:
        stdbuf = shutil.which("stdbuf")  # h2load's progress lines, not held in a pipe's buffer
        self.proc = subprocess.Popen([*([stdbuf, "-oL"] if stdbuf else []), *command], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def progress(self) -> int:
        """The last percentage h2load reported."""
        found = [int(m.group(1)) for line in list(self.lines) if (m := re.match(r"progress: (\d+)% done", line))]
        return found[-1] if found else 0

    def finish(self, timeout: float = 240.0) -> str:
        self.proc.wait(timeout)
        self.reader.join(10)
        return "".join(self.lines)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("served", [(WSGI, "prefork"), (WSGI, "thread", "--threads", "4"),
                                    (WSGI, "event", "--threads", "2"), (ASGI,)],
                         ids=["prefork", "thread", "event", "asgi"])
def test_hup_then_usr2_under_an_h2_load_lose_no_request(tines_server: Any, tmp_path: Path,
                                                        served: tuple[str, ...]) -> None:
    pid_file = tmp_path / "tines.pid"
    server, port = serve_h2c(tines_server, served, "--pid-file", str(pid_file), "--drain-timeout", "10",
                             workers=2)
    load = Load(h2load_command(f"http://127.0.0.1:{port}/", REQUESTS, 4, 1 if one_stream(served) else 10))
    master = server.pid
    try:
        wait_until(lambda: load.progress() >= 10 or load.proc.poll() is not None, 60, "h2load's 10% progress")
        assert load.proc.poll() is None, "".join(load.lines)
        server.signal(signal.SIGHUP)
        server.wait_for_log(r"reload done: generation 2 serves with 2 workers", deadline=60)
        assert load.proc.poll() is None, f"the load ended before the reload did: {''.join(load.lines)}"
        server.signal(signal.SIGUSR2)
        master = wait_until(lambda: read_pid(pid_file) not in (None, server.pid) and read_pid(pid_file), 60,
                            "the new master's pid in the pid file")  # type: ignore[assignment]
        server.wait_for_log(rf"upgrade: new master {master} is ready", deadline=60)
        assert load.proc.poll() is None, f"the load ended before the upgrade did: {''.join(load.lines)}"
        assert server.wait(60) == 0
        output = load.finish()
    finally:
        load.kill()
    result = parse_h2load(output)
    print(f"h2load under HUP and USR2 ({served}): {result.done} done, {result.failed} failed, "
          f"{result.errored} errored")
    assert (result.done, result.succeeded, result.ok) == (REQUESTS, REQUESTS, REQUESTS), output[-3000:]
    assert (result.failed, result.errored, result.timeout) == (0, 0, 0), output[-3000:]
    assert alive(master) and len(children(master)) == 2
    server.kill()
    wait_until(lambda: not alive(master), what="the new master gone")
