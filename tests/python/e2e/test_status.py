"""The status listener (``--status-bind``): a process the master forks and supervises serves
``/healthz``, ``/readyz`` and ``/status.json`` from the scoreboard, off the public port, and
answers while every worker is stuck in the app."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import APPS, ROOT, children, wait_until


def status_port(server: Any) -> int:
    return int(server.wait_for_log(r"Status at: http://127\.0\.0\.1:(\d+)")[0].group(1))


def fetch(port: int, path: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    try:
        connection.request(method, path)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def status(port: int) -> dict[str, Any]:
    code, headers, body = fetch(port, "/status.json")
    assert code == 200 and headers["content-type"] == "application/json"
    return json.loads(body)  # type: ignore[no-any-return]


def status_pids(master: int) -> list[int]:
    """The master's children whose title says they are the status process."""
    found = []
    for pid in children(master):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                if handle.read().startswith(b"tines: status"):
                    found.append(pid)
        except OSError:
            pass
    return found


def test_health_readiness_and_the_workers_counts(tines_server: Any) -> None:
    server = tines_server("hello_pid:app", "-w", "2", "--status-bind", "127.0.0.1:0")
    port = status_port(server)
    assert fetch(port, "/healthz")[::2] == (200, b"ok\n")
    assert fetch(port, "/readyz")[::2] == (200, b"ready\n")
    served = set()
    for _ in range(7):
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=20)
        connection.request("GET", "/")
        served.add(int(connection.getresponse().read()))
        connection.close()
    # Counters are written as each request ends: wait for the seventh.
    report = wait_until(lambda: (r := status(port))["requests"] == 7 and r, what="7 requests counted")
    assert report["schema"] == "tines-status/1"
    assert (report["master_pid"], report["generation"], report["mpm"]) == (server.pid, 1, "prefork")
    assert report["stopping"] is False and report["uptime_s"] >= 0
    workers = report["workers"]
    status_pid = status_pids(server.pid)
    assert sorted(w["pid"] for w in workers) == sorted(set(children(server.pid)) - set(status_pid))
    assert served <= {w["pid"] for w in workers}
    assert sum(w["requests"] for w in workers) == 7
    for worker in workers:
        assert worker["state"] in ("idle", "keepalive", "reading")
        assert worker["memory"]["pss"] > 0 or worker["memory"]["rss"] == 0
        assert [t["state"] for t in worker["threads"]] == ["idle"]


def test_a_request_in_the_app_shows_with_its_target_while_every_worker_is_stuck(
        tines_server: Any, gate: tuple[socket.socket, str]) -> None:
    listener, path = gate
    server = tines_server("gate:app", "-w", "1", "--status-bind", "127.0.0.1:0",
                          env={"GATE_SOCKET": path})
    port = status_port(server)
    client = socket.create_connection(("127.0.0.1", server.port), timeout=20)
    try:
        client.sendall(b"GET /hold?token=secret HTTP/1.1\r\nHost: a\r\n\r\n")
        held, _ = listener.accept()
        assert held.recv(64)  # the only worker is in the app
        report = status(port)
        thread = report["workers"][0]["threads"][0]
        assert report["workers"][0]["state"] == "busy"
        assert (thread["state"], thread["method"], thread["target"]) == ("app", "GET", "/hold?...")
        assert thread["elapsed_ms"] >= 0
        assert b"secret" not in fetch(port, "/status.json")[2]  # query strings are redacted
        assert fetch(port, "/readyz")[0] == 200
        held.close()
        assert client.recv(4096).startswith(b"HTTP/1.1 200 ")
    finally:
        client.close()


def test_query_strings_are_shown_when_asked(tines_server: Any, gate: tuple[socket.socket, str]) -> None:
    listener, path = gate
    server = tines_server("gate:app", "-w", "1", "--status-bind", "127.0.0.1:0", "--status-show-query",
                          env={"GATE_SOCKET": path})
    port = status_port(server)
    with socket.create_connection(("127.0.0.1", server.port), timeout=20) as client:
        client.sendall(b"GET /hold?page=2 HTTP/1.1\r\nHost: a\r\n\r\n")
        held, _ = listener.accept()
        assert held.recv(64)
        assert status(port)["workers"][0]["threads"][0]["target"] == "/hold?page=2"
        held.close()
        assert client.recv(4096).startswith(b"HTTP/1.1 200 ")


def test_readyz_goes_503_at_term_while_the_workers_drain(
        tines_server: Any, gate: tuple[socket.socket, str]) -> None:
    listener, path = gate
    server = tines_server("gate:app", "-w", "1", "--status-bind", "127.0.0.1:0",
                          "--graceful-timeout", "60", env={"GATE_SOCKET": path})
    port = status_port(server)
    with socket.create_connection(("127.0.0.1", server.port), timeout=20) as client:
        client.sendall(b"GET /hold HTTP/1.1\r\nHost: a\r\n\r\n")
        held, _ = listener.accept()
        assert held.recv(64)
        server.signal(signal.SIGTERM)
        server.wait_for_log(r"TERM: graceful stop")
        code, _, body = fetch(port, "/readyz")
        assert (code, body) == (503, b"not ready: the server is stopping\n")
        assert status(port)["stopping"] is True
        assert fetch(port, "/healthz")[0] == 200  # the master is still up
        held.close()  # the held request ends, then the worker, then the status process
        assert client.recv(4096).startswith(b"HTTP/1.1 200 ")
    assert server.wait() == 0
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()


def test_a_killed_status_process_is_started_again(tines_server: Any) -> None:
    server = tines_server("examples/hello.py:app", "-w", "1", "--status-bind", "127.0.0.1:0")
    port = status_port(server)
    first = wait_until(lambda: status_pids(server.pid), what="the status process")[0]  # type: ignore[index]
    os.kill(first, signal.SIGKILL)
    server.wait_for_log(rf"status process {first} killed by SIGKILL: starting another")
    wait_until(lambda: [pid for pid in status_pids(server.pid) if pid != first], what="a new status process")
    assert fetch(port, "/healthz")[0] == 200


def test_other_paths_and_methods(tines_server: Any) -> None:
    server = tines_server("examples/hello.py:app", "-w", "1", "--status-bind", "127.0.0.1:0")
    port = status_port(server)
    assert fetch(port, "/nothing")[0] == 404
    assert fetch(port, "/healthz", method="POST")[0] == 405
    code, headers, body = fetch(port, "/status.json", method="HEAD")
    assert (code, body) == (200, b"") and int(headers["content-length"]) > 0
    # A malformed request gets its 4xx, and the status process goes on.
    with socket.create_connection(("127.0.0.1", port), timeout=20) as raw:
        raw.sendall(b"GET /healthz HTTP/1.1\r\nBad Header\r\n\r\n")
        assert raw.recv(4096).startswith(b"HTTP/1.1 400 ")
    assert fetch(port, "/healthz")[0] == 200


def test_a_status_address_that_is_a_public_one_is_refused() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tines", "serve", "-b", "127.0.0.1:18999", "--status-bind", "127.0.0.1:18999",
         "examples/hello.py:app"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
        env={"PYTHONPATH": str(APPS), "PATH": "/usr/bin:/bin"}, stdin=subprocess.DEVNULL)
    assert result.returncode == 2, result.stderr
    last = result.stderr.rstrip().splitlines()[-1]
    assert last.startswith("tines: error:") and "is also a public bind" in last, last


def fetch_unix(path: Path, target: str) -> tuple[int, bytes]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(20)
        client.connect(str(path))
        client.sendall(f"GET {target} HTTP/1.1\r\nHost: status\r\n\r\n".encode())
        received = b""
        while chunk := client.recv(65536):
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


@pytest.mark.parametrize("kind", ["tcp", "unix"])
def test_a_binary_upgrade_hands_the_status_listener_to_the_new_master(
        tines_server: Any, tmp_path: Path, kind: str) -> None:
    # TCP: the new master serves the very socket (port 0 picked one: binding again would pick
    # another). Unix: the old master leaves the socket file to the new one, which removes it.
    pid_file = tmp_path / "tines.pid"
    status_path = tmp_path / "status.sock"
    bind = f"unix:{status_path}" if kind == "unix" else "127.0.0.1:0"
    server = tines_server("examples/hello.py:app", "-w", "1", "--pid-file", str(pid_file),
                          "--status-bind", bind)

    def get(target: str) -> tuple[int, bytes]:
        if kind == "unix":
            return fetch_unix(status_path, target)
        code, _, body = fetch(port, target)
        return code, body

    port = status_port(server) if kind == "tcp" else 0
    assert json.loads(get("/status.json")[1])["master_pid"] == server.pid
    server.signal(signal.SIGUSR2)
    new = wait_until(lambda: pid_file.exists() and int(pid_file.read_text()) != server.pid
                     and int(pid_file.read_text()), what="the new master")
    assert server.wait() == 0  # the old master handed over and left
    report = wait_until(lambda: (r := json.loads(get("/status.json")[1]))["master_pid"] == new and r,
                        what="the new master's status")
    assert report["workers"] and get("/readyz")[0] == 200
    os.kill(new, signal.SIGTERM)  # type: ignore[arg-type]
    if kind == "unix":
        wait_until(lambda: not status_path.exists(), what="the new master to remove the socket file")
    else:
        wait_until(lambda: not os.path.exists(f"/proc/{new}"), what="the new master's exit")


def test_a_standby_worker_shows_as_standby_and_is_not_counted_ready(tines_server: Any) -> None:
    server = tines_server("hello_pid:app", "-w", "1", "--standby-workers", "1", "--status-bind", "127.0.0.1:0",
                          "--log-level", "debug")
    port = status_port(server)
    standby = int(server.wait_for_log(r"standby (\d+) \(slot \d\) booted")[0].group(1))

    def states() -> dict[int, str] | None:
        seen = {worker["pid"]: worker["state"] for worker in status(port)["workers"]}
        return seen if seen.get(standby) == "standby" and len(seen) == 2 else None

    seen = wait_until(states, what="the standby's slot")
    assert isinstance(seen, dict)
    (worker,) = set(seen) - {standby}
    assert seen[worker] in ("idle", "keepalive", "reading")
    assert fetch(port, "/readyz")[::2] == (200, b"ready\n")
