"""The access log's formats (combined, common, json, gunicorn-style atoms), its exclusions, and
the responses the server writes itself (400, 414, 503 ...), logged like the app's."""

from __future__ import annotations

import http.client
import json
import re
import socket
import struct
from pathlib import Path
from typing import Any

import pytest

from conftest import wait_until


def log_lines(log: Path, count: int) -> list[str]:
    """The log's lines once there are ``count`` (a worker writes its buffered lines when its
    loop goes idle)."""
    wait_until(lambda: log.exists() and len(log.read_text().splitlines()) >= count,
               what=f"{count} access log lines")
    return log.read_text().splitlines()


def get(port: int, target: str, method: str = "GET", headers: dict[str, str] | None = None) -> bytes:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    try:
        connection.request(method, target, headers=headers or {})
        return connection.getresponse().read()
    finally:
        connection.close()


def exchange_raw(port: int, request: bytes) -> bytes:
    """Sends ``request``, ends the sending side and reads until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as client:
        client.sendall(request)
        # The server lingers after an error response until the client is done sending.
        client.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := client.recv(65536):
            received += chunk
        return received


@pytest.mark.parametrize("mpm", ["prefork", "event"])
def test_json_lines_carry_every_field(tines_server: Any, tmp_path: Path, mpm: str) -> None:
    log = tmp_path / "access.log"
    server = tines_server("hello_pid:app", "-w", "1", "--mpm", mpm, "--access-log", str(log),
                          "--access-log-format", "json")
    body = get(server.port, "/page?x=1&y=%C3%A9", headers={"User-Agent": "agent/1.0"})
    entry = json.loads(log_lines(log, 1)[0])
    assert set(entry) == {"time", "remote_addr", "method", "path", "query", "protocol", "status",
                          "bytes", "duration_us", "queue_us", "pid", "referer", "user_agent"}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", entry["time"]), entry["time"]
    assert entry["remote_addr"] == "127.0.0.1"
    assert (entry["method"], entry["path"], entry["query"], entry["protocol"]) == \
        ("GET", "/page", "x=1&y=%C3%A9", "HTTP/1.1")
    assert (entry["status"], entry["bytes"]) == (200, len(body))
    assert entry["pid"] == int(body)  # the worker that served it
    assert entry["referer"] is None and entry["user_agent"] == "agent/1.0"
    assert isinstance(entry["duration_us"], int) and entry["duration_us"] >= 0
    if mpm == "prefork":
        assert entry["queue_us"] == 0  # served by the thread that read it: no queue
    else:
        assert isinstance(entry["queue_us"], int) and entry["queue_us"] >= 0


def test_a_custom_format_shows_each_atom(tines_server: Any, tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    fmt = ("%(m)s|%(U)s|%(q)s|%(H)s|%(s)s|%(B)s|%(b)s|%({X-Trace}i)s|%({content-type}o)s|"
           "%({X-Absent}o)s|%(f)s|%(p)s|%(l)s %(u)s|100%%")
    server = tines_server("hello_pid:app", "-w", "1", "--access-log", str(log), "--access-log-format", fmt)
    body = get(server.port, "/a?b=1", headers={"X-Trace": 'say "hi"', "Referer": "http://r.example/"})
    get(server.port, "/head", method="HEAD")
    lines = log_lines(log, 2)
    pid = int(body)
    assert lines[0] == (f'GET|/a|b=1|HTTP/1.1|200|{len(body)}|{len(body)}|say \\x22hi\\x22|text/plain|-|'
                        f'http://r.example/|{pid}|- -|100%')
    # A HEAD response sends no body: `b` shows "-", `B` 0.
    assert lines[1] == f"HEAD|/head||HTTP/1.1|200|0|-|-|text/plain|-|-|{pid}|- -|100%"


def test_the_tls_atoms_show_a_dash_on_a_plain_connection(tines_server: Any, tmp_path: Path) -> None:
    """Apache's `%{SSL_PROTOCOL}x` and `%{SSL_CIPHER}x` in gunicorn's spelling: `-` for a
    request that did not come over TLS, whether the app answered it or the server refused it."""
    log = tmp_path / "access.log"
    server = tines_server("examples/hello.py:app", "-w", "1", "--access-log", str(log),
                          "--access-log-format", "%(s)s %({SSL_PROTOCOL}x)s %({SSL_CIPHER}x)s")
    get(server.port, "/", headers={"X-Forwarded-Proto": "https"})
    assert exchange_raw(server.port, b"GET /x HTTP/1.1\r\nBad Header\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    assert log_lines(log, 2) == ["200 - -", "400 - -"]


def test_the_timing_atoms_are_numbers(tines_server: Any, tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    server = tines_server("examples/hello.py:app", "-w", "1", "--access-log", str(log),
                          "--access-log-format", "%(T)s %(M)s %(D)s %(L)s %(W)s")
    get(server.port, "/")
    seconds, millis, micros, decimal, queue = log_lines(log, 1)[0].split()
    assert int(seconds) == int(micros) // 1_000_000 and int(millis) == int(micros) // 1000
    assert decimal == f"{int(micros) // 1_000_000}.{int(micros) % 1_000_000:06d}"
    assert queue == "0"  # prefork serves a request where it reads it


def test_common_and_combined_are_apaches(tines_server: Any, tmp_path: Path) -> None:
    for name, tail in (("common", ""), ("combined", ' "-" "agent/2"')):
        log = tmp_path / f"{name}.log"
        server = tines_server("examples/hello.py:app", "-w", "1", "--access-log", str(log),
                              "--access-log-format", name)
        get(server.port, "/c?d=1", headers={"User-Agent": "agent/2"})
        line = log_lines(log, 1)[0]
        pattern = (r'127\.0\.0\.1 - - \[\d\d/\w{3}/\d{4}:\d\d:\d\d:\d\d \+0000\] '
                   r'"GET /c\?d=1 HTTP/1\.1" 200 2' + re.escape(tail))
        assert re.fullmatch(pattern, line), line


def test_excluded_paths_are_not_logged(tines_server: Any, tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    server = tines_server("examples/hello.py:app", "-w", "1", "--access-log", str(log),
                          "--access-log-format", "%(U)s", "--access-log-exclude", "/healthz,/static/*")
    for target in ("/healthz", "/static/app.css", "/healthz?probe=1", "/healthzz", "/static", "/last"):
        get(server.port, target)
    # One worker writes its lines in order: once "/last" is there, every line before it is.
    wait_until(lambda: log.exists() and "/last" in log.read_text(), what="the last line")
    assert log.read_text().splitlines() == ["/healthzz", "/static", "/last"]


def test_responses_the_server_writes_itself_are_logged(tines_server: Any, tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    server = tines_server("examples/hello.py:app", "-w", "1", "--access-log", str(log),
                          "--max-request-line", "100")
    bad_header = exchange_raw(server.port, b"GET /x HTTP/1.1\r\nHost: a\r\nBad Header\r\n\r\n")
    assert bad_header.startswith(b"HTTP/1.1 400 ")
    too_long = exchange_raw(server.port, b"GET /" + b"a" * 200 + b" HTTP/1.1\r\nHost: a\r\n\r\n")
    assert too_long.startswith(b"HTTP/1.1 414 ")
    head = exchange_raw(server.port, b"HEAD /h HTTP/1.1\r\nHost: a\r\nBad Header\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ") and head.endswith(b"\r\n\r\n")
    garbage = exchange_raw(server.port, b'\x01"GARBAGE\r\n\r\n')
    assert garbage.startswith(b"HTTP/1.1 400 ")
    lines = log_lines(log, 4)
    assert len(lines) == 4
    body_length = len(bad_header.partition(b"\r\n\r\n")[2])
    prefix = r'127\.0\.0\.1 - - \[[^]]+\] '
    assert re.fullmatch(prefix + rf'"GET /x HTTP/1\.1" 400 {body_length} "-" "-"', lines[0]), lines[0]
    assert re.fullmatch(prefix + r'"GET /a{200} HTTP/1\.1" 414 \d+ "-" "-"', lines[1]), lines[1]
    assert re.fullmatch(prefix + r'"HEAD /h HTTP/1\.1" 400 - "-" "-"', lines[2]), lines[2]
    # The raw line is escaped like any logged field: it cannot forge a line.
    assert re.fullmatch(prefix + r'"\\x01\\x22GARBAGE" 400 \d+ "-" "-"', lines[3]), lines[3]


def test_a_request_that_waited_for_an_app_thread_shows_its_queue_wait(
        tines_server: Any, tmp_path: Path, gate: tuple[socket.socket, str]) -> None:
    # One app thread, a queue of one: A holds the thread at the gate, B waits in the queue,
    # C is refused (503, logged too). B's wait spans C's refusal and A's release.
    listener, path = gate
    log = tmp_path / "access.log"
    server = tines_server("gate:app", "-w", "1", "--mpm", "event", "--threads", "1",
                          "--max-queued-requests", "1", "--access-log", str(log),
                          "--access-log-format", "json", env={"GATE_SOCKET": path})
    clients = [socket.create_connection(("127.0.0.1", server.port), timeout=20) for _ in range(3)]
    try:
        clients[0].sendall(b"GET /hold HTTP/1.1\r\nHost: a\r\n\r\n")
        held, _ = listener.accept()
        assert held.recv(64)  # A is in the app
        clients[1].sendall(b"GET /queued HTTP/1.1\r\nHost: a\r\n\r\n")
        clients[2].sendall(b"GET /refused HTTP/1.1\r\nHost: a\r\n\r\n")
        assert clients[2].recv(4096).startswith(b"HTTP/1.1 503 ")  # so B is queued
        held.close()  # A goes on, then B
        for client in clients[:2]:
            assert client.recv(4096).startswith(b"HTTP/1.1 200 ")
    finally:
        for client in clients:
            client.close()
    entries = {entry["path"]: entry for entry in map(json.loads, log_lines(log, 3))}
    assert [entries[p]["status"] for p in ("/hold", "/queued", "/refused")] == [200, 200, 503]
    assert entries["/queued"]["queue_us"] > 0
    assert entries["/refused"]["queue_us"] is None  # never queued: refused by the loop


GIB = 1 << 30


@pytest.fixture
def gigabyte_file(tmp_path: Path) -> Path:
    """A 1 GiB file (sparse: it takes no disk)."""
    path = tmp_path / "big.bin"
    with open(path, "wb") as handle:
        handle.truncate(GIB)
    return path


@pytest.mark.parametrize("mpm", ["prefork", "event"])
def test_a_gigabyte_file_wrapper_response_is_logged_with_its_bytes(
        tines_server: Any, tmp_path: Path, gigabyte_file: Path, mpm: str) -> None:
    log = tmp_path / "access.log"
    server = tines_server("file_serving:app", "-w", "1", "--mpm", mpm, "--access-log", str(log),
                          "--access-log-format", "json", env={"SERVED_FILE": str(gigabyte_file)})
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as client:
        client.sendall(b"GET /big HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        received = 0
        head = b""
        buffer = bytearray(1 << 20)
        while True:
            n = client.recv_into(buffer)
            if not n:
                break
            if not head:
                head = bytes(buffer[:n]).split(b"\r\n\r\n", 1)[0]
                n -= len(head) + 4
            received += n
    assert head.startswith(b"HTTP/1.1 200 ") and received == GIB
    entry = json.loads(log_lines(log, 1)[0])
    assert (entry["status"], entry["bytes"], entry["path"]) == (200, GIB, "/big")


@pytest.mark.parametrize("mpm", ["prefork", "event"])
def test_a_client_gone_mid_response_is_logged_with_the_bytes_it_was_sent(
        tines_server: Any, tmp_path: Path, gigabyte_file: Path, mpm: str) -> None:
    # The app returns its file_wrapper at once and the exchange ends with most of the file
    # queued for the poller (the client reads nothing yet); the line is written when the
    # writing ends (the client reset the connection), with the bytes that went out, not the
    # body's length.
    log = tmp_path / "access.log"
    server = tines_server("file_serving:app", "-w", "1", "--mpm", mpm, "--access-log", str(log),
                          "--access-log-format", "json", "--status-bind", "127.0.0.1:0",
                          env={"SERVED_FILE": str(gigabyte_file)})
    status_port = int(server.wait_for_log(r"Status at: http://127\.0\.0\.1:(\d+)")[0].group(1))
    client = socket.create_connection(("127.0.0.1", server.port), timeout=60)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
    client.sendall(b"GET /big HTTP/1.1\r\nHost: t\r\n\r\n")

    def finished() -> bool:
        report = json.loads(get(status_port, "/status.json"))
        return bool(report["workers"]) and report["workers"][0]["requests"] == 1

    wait_until(finished, what="the exchange to end with the file queued for the poller")
    received = 0
    while received < 1 << 20:
        chunk = client.recv(65536)
        assert chunk
        received += len(chunk)
    # A reset, not a FIN: the server's next write fails.
    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.close()
    entry = json.loads(log_lines(log, 1)[0])
    assert entry["status"] == 200
    assert received - 4096 <= entry["bytes"] < GIB, entry
    assert get(server.port, "/again", method="HEAD") == b""  # the worker lives on
    assert json.loads(log_lines(log, 2)[1])["bytes"] == 0
