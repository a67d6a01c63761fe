"""A gunicorn and a uvicorn command line, as their users type them, run Tines unchanged: ``tines
APP`` (no ``serve``) with ``--host``/``--port``, ``-k gthread``, ``--keep-alive``, ``-e`` and
``--env-file`` answers, the app seeing the environment they set; ``-t`` with ``-k sync`` shows in
``check-config`` as the settings it became; a refused flag is one line, exit 2."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import APPS, ROOT, http_get

READY_DEADLINE = 60.0


def environment() -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("TINES_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(APPS), env.get("PYTHONPATH", "")]))
    return env


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    """The servers a test started; each one's process group is killed at the end."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(10)


def start(procs: list[subprocess.Popen[bytes]], words: list[str], log_path: Path) -> dict[str, object]:
    """Run ``tines WORDS --ready-fd N`` in its own session; its ready line (raises with the log
    when the server exits or says nothing before the deadline)."""
    read_fd, write_fd = os.pipe()
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "tines", *words, "--ready-fd", str(write_fd)],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log, pass_fds=(write_fd,),
                                start_new_session=True, env=environment(), cwd=ROOT)
    procs.append(proc)
    os.close(write_fd)
    data = b""
    try:
        end = time.monotonic() + READY_DEADLINE
        while not data.endswith(b"\n"):
            readable, _, _ = select.select([read_fd], [], [], max(0.0, end - time.monotonic()))
            if not readable:
                raise AssertionError(f"no ready line; log:\n{log_path.read_text(errors='replace')}")
            chunk = os.read(read_fd, 4096)
            if not chunk:
                raise AssertionError(f"exited before ready ({proc.wait(10)}); log:\n"
                                     f"{log_path.read_text(errors='replace')}")
            data += chunk
    finally:
        os.close(read_fd)
    ready: dict[str, object] = json.loads(data)
    return ready


def test_a_gunicorn_and_uvicorn_command_line_serves_the_app(tmp_path: Path,
                                                           started: list[subprocess.Popen[bytes]]) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("# from the deploy\nexport DATABASE_URL='postgres://db/shop'\n")
    log = tmp_path / "server.log"
    ready = start(started, ["peer_env:app", "--host", "127.0.0.1", "--port", "0", "-k", "gthread", "--threads", "2",
                            "-w", "1", "--keep-alive", "3", "-e", "GREETING=hello", "--env-file", str(env_file),
                            "--worker-tmp-dir", "/dev/shm", "--error-logfile", "-"], log)
    assert ready["mpm"] == "thread" and ready["workers"] == 1
    binds = ready["binds"]
    assert isinstance(binds, list) and str(binds[0]).startswith("127.0.0.1:")
    status, body = http_get(int(str(binds[0]).rpartition(":")[2]), "/")
    assert (status, body) == (200, b"GREETING=hello\nDATABASE_URL=postgres://db/shop\n")
    text = log.read_text(errors="replace")
    assert "tines: warning: gunicorn's --worker-tmp-dir: nothing to do" in text


def test_gunicorn_timeout_with_sync_becomes_boot_and_request_timeouts() -> None:
    result = subprocess.run([sys.executable, "-m", "tines", "check-config", "peer_env:app", "-k", "sync", "-t", "45",
                             "--access-logfile", "-", "-b", "127.0.0.1:0"],
                            capture_output=True, text=True, env=environment(), cwd=ROOT, timeout=60)
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines() if line.strip()}
    assert rows["boot_timeout"] == ["45", "cli"] and rows["request_timeout"] == ["45", "cli"]
    assert rows["mpm"] == ['"prefork"', "cli"] and rows["access_log"] == ['"-"', "cli"]
    assert result.stderr.startswith("tines: warning: gunicorn's -t: in gunicorn a worker silent this long is killed")


def test_a_refused_flag_is_one_line_naming_what_tines_has() -> None:
    result = subprocess.run([sys.executable, "-m", "tines", "peer_env:app", "--statsd-host", "localhost:8125"],
                            capture_output=True, text=True, env=environment(), cwd=ROOT, timeout=60)
    assert result.returncode == 2
    assert result.stderr == ("tines: error: unknown option '--statsd-host' (gunicorn): none: Tines has no StatsD "
                             "client; it serves Prometheus /metrics (and /status.json) on --status-bind\n")


def test_gunicorn_sync_with_threads_runs_gthread_and_its_timeout_bounds_no_request(
        tmp_path: Path, started: list[subprocess.Popen[bytes]]) -> None:
    """gunicorn runs ``-k sync --threads 2`` as gthread, where ``-t`` is no request's bound."""
    log = tmp_path / "server.log"
    ready = start(started, ["peer_env:app", "-b", "127.0.0.1:0", "-k", "sync", "--threads", "2", "-w", "1",
                            "-t", "45", "--error-logfile", "-"], log)
    assert (ready["mpm"], ready["workers"]) == ("thread", 1)
    status, _ = http_get(int(str(ready["binds"][0]).rpartition(":")[2]), "/")  # type: ignore[index]
    assert status == 200
    text = log.read_text(errors="replace")
    assert "ignored by mpm" not in text
    result = subprocess.run([sys.executable, "-m", "tines", "check-config", "peer_env:app", "-k", "sync",
                             "--threads", "2", "-t", "45", "-b", "127.0.0.1:0"],
                            capture_output=True, text=True, env=environment(), cwd=ROOT, timeout=60)
    rows = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines() if line.strip()}
    assert result.returncode == 0, result.stderr
    assert rows["boot_timeout"] == ["45", "cli"] and rows["request_timeout"] == ["60", "default"]
    assert rows["mpm"] == ['"thread"', "cli"] and rows["threads"] == ["2", "cli"]
