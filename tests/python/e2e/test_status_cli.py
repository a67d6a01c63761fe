"""``tines status``: the status listener's table, printed once into a pipe (80 columns, no
colour), as JSON, and refreshing like ``top`` in a real terminal (tmux), where ``q`` quits."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from conftest import APPS, ROOT, debian_tool, wait_until
from test_status import status, status_port

ENV = {"PYTHONPATH": str(APPS), "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}


def tines_status(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tines", "status", *args], capture_output=True,
                          text=True, timeout=60, cwd=ROOT, env={**ENV, **(env or {})},
                          stdin=subprocess.DEVNULL)


@pytest.fixture
def held(tines_server: Any, gate: tuple[socket.socket, str]) -> Iterator[tuple[Any, int]]:
    """A server whose only worker is stuck in the app on ``GET /hold?token=secret``."""
    listener, path = gate
    server = tines_server("gate:app", "-w", "1", "--status-bind", "127.0.0.1:0", env={"GATE_SOCKET": path})
    port = status_port(server)
    with socket.create_connection(("127.0.0.1", server.port), timeout=20) as client:
        client.sendall(b"GET /hold?token=secret HTTP/1.1\r\nHost: a\r\n\r\n")
        gate_connection, _ = listener.accept()
        assert gate_connection.recv(64)
        yield server, port
        gate_connection.close()
        assert client.recv(4096).startswith(b"HTTP/1.1 200 ")


def test_the_table_shows_a_stuck_request_in_80_plain_columns(held: tuple[Any, int]) -> None:
    server, port = held
    result = tines_status("--status-bind", f"127.0.0.1:{port}")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "\x1b[" not in out  # no colour into a pipe
    assert all(len(line) <= 80 for line in out.splitlines()), out
    assert out.startswith(f"tines  master {server.pid}  gen 1  prefork")
    worker = status(port)["workers"][0]
    row = next(line for line in out.splitlines() if f" {worker['pid']} " in line)
    assert " busy " in row and "GET /hold?... " in row, row
    assert "secret" not in out


def test_json_prints_the_document_once(held: tuple[Any, int]) -> None:
    server, port = held
    result = tines_status("--status-bind", f"127.0.0.1:{port}", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["schema"] == "tines-status/1" and report["master_pid"] == server.pid
    assert report["workers"][0]["threads"][0]["target"] == "/hold?..."


def test_the_address_comes_from_the_environment_or_the_config_file(held: tuple[Any, int], tmp_path: Path) -> None:
    _, port = held
    by_env = tines_status(env={"TINES_STATUS_BIND": f"127.0.0.1:{port}"})
    assert by_env.returncode == 0 and "GET /hold?..." in by_env.stdout, by_env.stderr
    config = tmp_path / "tines.toml"
    config.write_text(f'status_bind = "127.0.0.1:{port}"\n')
    by_file = tines_status("-c", str(config))
    assert by_file.returncode == 0 and "GET /hold?..." in by_file.stdout, by_file.stderr


def test_errors_are_one_line() -> None:
    missing = tines_status()
    assert missing.returncode == 2
    assert missing.stderr.splitlines() == [
        "tines: error: no status listener: pass --status-bind ADDRESS, or set status_bind "
        "(TINES_STATUS_BIND, or the config file)"]
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]  # bound, not listening: connections are refused
        refused = tines_status("--status-bind", f"127.0.0.1:{port}")
    assert refused.returncode == 1
    assert len(refused.stderr.splitlines()) == 1
    assert refused.stderr.startswith(f"tines: error: cannot reach the status listener at 127.0.0.1:{port}")
    inherited = tines_status("--status-bind", "fd://3")
    assert inherited.returncode == 2 and "inherited socket" in inherited.stderr


@pytest.fixture(scope="module")
def tmux() -> str:
    """tmux, installed with apt-get when missing (or the test skips, saying why)."""
    return debian_tool("tmux")


def test_in_a_terminal_it_refreshes_in_colour_until_q(held: tuple[Any, int], tmux: str, tmp_path: Path) -> None:
    server, port = held
    socket_name = f"tines-test-{os.getpid()}"
    base = [tmux, "-L", socket_name, "-f", "/dev/null"]
    command = (f"cd {ROOT} && PYTHONPATH={APPS} {sys.executable} -m tines status "
               f"--status-bind 127.0.0.1:{port} --interval 0.2; echo exited $? > {tmp_path / 'rc'}")
    subprocess.run([*base, "new-session", "-d", "-x", "80", "-y", "24", command], check=True, timeout=30)

    def pane(colour: bool = False) -> str:
        return subprocess.run([*base, "capture-pane", "-p", *(["-e"] if colour else []), "-t", "0"],
                              capture_output=True, text=True, timeout=30).stdout

    try:
        worker = status(port)["workers"][0]["pid"]
        wait_until(lambda: "GET /hold?..." in pane(), what="the held request on the screen")
        screen = pane()
        assert screen.startswith(f"tines  master {server.pid}")
        assert all(len(line) <= 80 for line in screen.splitlines())
        assert f" {worker} " in screen and "q quits" in screen
        assert "\x1b[" in pane(colour=True)  # colour on a terminal
        # It refreshes: the held request's elapsed time moves on the screen.
        row = next(line for line in screen.splitlines() if "GET /hold?..." in line)
        wait_until(lambda: row not in pane(), what="the screen to refresh the elapsed time")
        subprocess.run([*base, "send-keys", "-t", "0", "q"], check=True, timeout=30)
        wait_until(lambda: (tmp_path / "rc").exists(), what="tines status to quit on q")
        assert (tmp_path / "rc").read_text().strip() == "exited 0"
    finally:
        subprocess.run([*base, "kill-server"], capture_output=True, timeout=30)
