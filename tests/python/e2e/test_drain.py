"""The drain every stop shares, and graceful recycling (issue 12).

A worker that stops while the listener stays open (max_requests, the master's retire: TTOU, a
reload) stops accepting at once, answers each kept-alive connection's next request with
``Connection: close``, closes the silent ones after ``drain_timeout``, and exits; the master
starts its replacement before it leaves. Real servers, real sockets; readiness from the log
and from files the app writes, never a sleep.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import http_get, wait_until

MPMS = ["prefork", "thread", "event"]


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One whole response (Content-Length framed) from ``sock``: status, headers, body."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError(f"closed before a response head: {data!r}")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {name.strip().lower(): value.strip()
               for name, _, value in (line.partition(":") for line in lines[1:])}
    length = int(headers["content-length"])
    while len(body) < length:
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError("closed inside a response body")
        body += chunk
    return status, headers, body


def get_on(sock: socket.socket, path: str = "/") -> tuple[int, dict[str, str], bytes]:
    """Send a keep-alive GET on ``sock`` and read its response."""
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
    return read_response(sock)


def keep_alive_connection(port: int) -> tuple[socket.socket, int]:
    """A new keep-alive connection that has served one request; the serving worker's pid."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    status, headers, body = get_on(sock)
    assert status == 200 and headers.get("connection") != "close"
    return sock, int(body)


def closed_by_peer(sock: socket.socket) -> bool:
    """True when the peer closed ``sock`` (an orderly EOF, not a reset) before the timeout."""
    sock.settimeout(30)
    return sock.recv(1) == b""


def bench(*args: str) -> dict[str, Any]:
    """Run ``tines bench --json`` and return its report."""
    result = subprocess.run([sys.executable, "-m", "tines", "bench", "--json", *args],
                            capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def line_index(log: str, pattern: str) -> int:
    """Where ``pattern`` first matches in ``log`` (it must)."""
    match = re.search(pattern, log)
    assert match is not None, f"{pattern!r} not in the log:\n{log}"
    return match.start()


@pytest.mark.parametrize("mpm", MPMS)
def test_max_requests_recycling_under_keep_alive_load_loses_no_request(tines_server: Any, mpm: str) -> None:
    server = tines_server("hello_pid:app", "-w", "2", "--mpm", mpm, "--threads", "2",
                          "--max-requests", "100", "--max-requests-jitter", "20", "--log-level", "debug")
    report = bench("-c", "8", "-t", "2", "-n", "3000", server.url + "/")
    assert report["errors"]["total"] == 0, report["errors"]
    assert report["ok"] == 3000 and report["status_counts"] == {"200": 3000}
    # Each 2 workers serve at most 240 requests before recycling: 3000 took at least 10 recycles
    # (their lines are at debug: with max_requests 1 there is one per request).
    server.wait_for_log(r"draining \(max_requests\): starting its replacement", count=10)
    assert "crashed after ready" not in server.log_text()


@pytest.mark.parametrize("mpm", MPMS)
def test_max_requests_1_serves_each_request_from_a_new_process(tines_server: Any, mpm: str) -> None:
    server = tines_server("hello_pid:app", "-w", "2", "--mpm", mpm, "--max-requests", "1", "--preload")
    pids = []
    for _ in range(30):
        status, body = http_get(server.port)
        assert status == 200
        pids.append(int(body))
    assert len(set(pids)) == 30, pids
    assert "crashed after ready" not in server.log_text()
    assert "died before ready" not in server.log_text()


@pytest.mark.parametrize("mpm", ["prefork", "event"])
def test_a_retired_worker_answers_a_kept_alive_connection_with_close_and_closes_a_silent_one(
        tines_server: Any, mpm: str) -> None:
    # max_connections 2: a worker holding two connections stops accepting, so the first four
    # land two on each worker whichever the kernel wakes (an idle server can hand every new
    # connection to the same worker: left to chance, 50 in a row once missed the youngest).
    server = tines_server("hello_pid:app", "-w", "2", "--mpm", mpm, "--keepalive-timeout", "120",
                          "--drain-timeout", "10", "--max-connections", "2")
    youngest = int(server.wait_for_log(r"worker (\d+) \(slot 1\) ready")[0].group(1))
    # Two idle keep-alive connections on the worker TTOU retires (the youngest).
    held: list[socket.socket] = []
    others: list[socket.socket] = []
    while len(held) < 2:
        sock, pid = keep_alive_connection(server.port)
        (held if pid == youngest else others).append(sock)
        assert len(others) <= 2, "a worker holding max_connections took another"
    talking, silent = held
    server.signal(signal.SIGTTOU)
    server.wait_for_log(rf"retiring worker {youngest} \(slot 1\): fewer workers")
    # The master logs that line before it sends USR2: wait for the worker's own line, written
    # as it starts draining (a request sent before it would be served as usual).
    server.wait_for_log(rf"\[{youngest}\] \[INFO\] retired by the master: draining")
    # The next request on a kept-alive connection is served by the draining worker, with close.
    status, headers, body = get_on(talking)
    assert (status, headers.get("connection"), int(body)) == (200, "close", youngest)
    assert closed_by_peer(talking)
    # The silent one is closed (an orderly close, not a reset) after drain_timeout; then the
    # worker exits 0, logged with its reason.
    assert closed_by_peer(silent)
    server.wait_for_log(rf"worker {youngest} \(slot 1\) exited with code 0 \(retired: fewer workers\)")
    for sock in held + others:
        sock.close()


def test_a_retiring_worker_leaves_the_listen_queue_to_the_others(tines_server: Any, tmp_path: Path) -> None:
    gates = tmp_path / "gates"
    gates.mkdir()
    server = tines_server("gated:app", "-w", "2", env={"TINES_TEST_GATES": str(gates)})
    youngest = int(server.wait_for_log(r"worker (\d+) \(slot 1\) ready")[0].group(1))
    # Both workers (prefork) hold a slow request: nobody accepts. Each connection is opened
    # once the previous request runs (opened together, one worker could take both).
    slow: list[socket.socket] = []
    for count in (1, 2):
        slow.append(socket.create_connection(("127.0.0.1", server.port), timeout=60))
        slow[-1].sendall(b"GET /slow HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        wait_until(lambda: len(list(gates.glob("started-*"))) >= count, what="a slow request")
    busy = sorted(int(path.name.split("-")[1]) for path in gates.glob("started-*"))
    assert youngest in busy and len(busy) == 2
    other = next(pid for pid in busy if pid != youngest)
    server.signal(signal.SIGTTOU)  # retires the youngest, acted on when its request is done
    server.wait_for_log(rf"retiring worker {youngest}")
    queued = [socket.create_connection(("127.0.0.1", server.port), timeout=60) for _ in range(4)]
    for sock in queued:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    # The retiring worker finishes its slow request and leaves without taking the queue.
    (gates / f"release-{youngest}").touch()
    server.wait_for_log(rf"worker {youngest} \(slot 1\) exited with code 0 \(retired: fewer workers\)")
    # Only now is the other worker free: it serves the whole queue.
    (gates / f"release-{other}").touch()
    served_by = [int(read_response(sock)[2]) for sock in queued]
    assert served_by == [other] * 4
    assert sorted(int(read_response(sock)[2]) for sock in slow) == sorted(busy)
    for sock in slow + queued:
        sock.close()


def test_the_replacement_is_ready_before_the_recycled_worker_exits(tines_server: Any) -> None:
    # At debug: a recycle's lines (its replacement's ready line among them) are.
    server = tines_server("hello_pid:app", "-w", "1", "--max-requests", "2", "--keepalive-timeout", "120",
                          "--drain-timeout", "60", "--log-level", "debug")
    first, pid = keep_alive_connection(server.port)
    second, same = keep_alive_connection_or_close(server.port)
    assert same == pid
    # The second request was the last: the worker drains while `first` idles on it, and the
    # master has started the replacement without waiting for it to leave.
    server.wait_for_log(r"ready in [0-9.]+ ms", count=2)
    assert pid in server.worker_pids()
    status, headers, body = get_on(first)
    assert (status, headers.get("connection"), int(body)) == (200, "close", pid)
    server.wait_for_log(rf"worker {pid} \(slot 0\) exited with code 0 \(retired: max_requests\)")
    log = server.log_text()
    draining = line_index(log, rf"worker {pid} \(slot 0\) draining \(max_requests\)")
    replacement_ready = [m.start() for m in re.finditer(r"worker (\d+) \(slot \d\) ready in", log)][1]
    exited = line_index(log, rf"worker {pid} \(slot 0\) exited")
    assert draining < replacement_ready < exited
    assert int(http_get(server.port)[1]) != pid
    first.close()
    second.close()


def keep_alive_connection_or_close(port: int) -> tuple[socket.socket, int]:
    """A new connection's first response (the last of a worker's max_requests: it closes)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    status, headers, body = get_on(sock)
    assert status == 200 and headers.get("connection") == "close"
    return sock, int(body)


def test_a_worker_retired_while_booting_drains_once_booted_instead_of_dying(
        tines_server: Any, tmp_path: Path) -> None:
    gates = tmp_path / "gates"
    gates.mkdir()
    server = tines_server("gated:app", "-w", "1", env={"TINES_TEST_GATES": str(gates)})
    (gates / "boot-gate").touch()
    server.signal(signal.SIGTTIN)
    booting = wait_until(lambda: list(gates.glob("booting-*")), what="a worker held in its boot")
    pid = int(booting[0].name.split("-")[1])  # type: ignore[index]
    server.signal(signal.SIGTTOU)  # the youngest is the booting one
    server.wait_for_log(rf"retiring worker {pid} \(slot \d\): fewer workers")
    (gates / "boot-gate").unlink()
    server.wait_for_log(rf"worker {pid} \(slot \d\) exited with code 0 \(retired: fewer workers\)")
    assert "SIGUSR2" not in server.log_text()
    assert http_get(server.port)[0] == 200
