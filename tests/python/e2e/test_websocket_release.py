"""Clients that stop reading while an ASGI app floods them (issue 41, item 1): when they vanish,
when they stay past `send_timeout`, and when the server stops, the app's waiting `send` raises
and the worker lets the connection go (its fd, its queued output), whatever `send_timeout` says.

Gates, not sleeps: the app records in a file when its `send` starts waiting and when it raised
(tests/python/e2e/apps/asgi_flood.py); the test waits for those lines, for the worker's fds
and for the status page's connection count.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import re
import signal
import socket
import struct
from collections.abc import Callable
from pathlib import Path

from conftest import Server, fd_targets, server_side_inode, wait_until

APP = "asgi_flood:app"
CLIENTS = 20


def status_port(server: Server) -> int:
    return int(server.wait_for_log(r"Status at: http://127\.0\.0\.1:(\d+)")[0].group(1))


def worker_pid(server: Server) -> int:
    """The one worker (not the status process, also the master's child)."""
    def workers() -> list[int]:
        found = []
        for pid in server.worker_pids():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as handle:
                    if handle.read().startswith(b"tines: worker"):
                        found.append(pid)
            except OSError:
                continue
        return found
    [pid] = wait_until(lambda: (found := workers()) and len(found) == 1 and found, 20, "one worker")  # type: ignore[misc]
    return pid


def open_connections(port: int) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    try:
        connection.request("GET", "/status.json")
        return int(json.loads(connection.getresponse().read())["totals"]["connections"])
    finally:
        connection.close()


def records(path: Path) -> list[list[str]]:
    try:
        return [line.split() for line in path.read_text().splitlines()]
    except FileNotFoundError:
        return []


def lines(path: Path, kind: str) -> dict[str, list[str]]:
    """The recorded lines of one kind (``waiting``, ``raised``), by client."""
    return {fields[1]: fields[2:] for fields in records(path) if fields[0] == kind}


def reader_that_stops(server: Server, target: bytes) -> socket.socket:
    """A client with a small receive buffer that sends its request and never reads after it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(20)
    sock.connect(("127.0.0.1", server.port))
    sock.sendall(target)
    return sock


def websocket_request(name: int) -> bytes:
    key = base64.b64encode(os.urandom(16))
    return (b"GET /flood?" + str(name).encode() + b" HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " + key
            + b"\r\n\r\n")


def stream_request(name: int) -> bytes:
    return b"GET /stream?" + str(name).encode() + b" HTTP/1.1\r\nHost: x\r\n\r\n"


def vanish(sock: socket.socket, how: int) -> None:
    """The client goes without reading, one of three ways: it closes its socket (a reset, as
    bytes it did not read wait in it), it closes with `SO_LINGER` 0 (a reset at once), or it
    shuts its side (an EOF: the socket stays open, unread, until the test ends)."""
    if how == 0:
        sock.close()
    elif how == 1:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    else:
        sock.shutdown(socket.SHUT_WR)


def start(tines_server: Callable[..., Server], tmp_path: Path, *args: str) -> tuple[Server, Path]:
    record = tmp_path / "record"
    server = tines_server(APP, "-w", "1", "--ws-ping-interval", "0", *args,
                          env={"FLOOD_RECORD": str(record)})
    return server, record


def flood_all(server: Server, record: Path, request: Callable[[int], bytes]
              ) -> tuple[list[socket.socket], list[str]]:
    """CLIENTS clients that stop reading, each with its app's `send` waiting for it; their
    connections' sockets in the worker (``socket:[inode]``)."""
    socks = [reader_that_stops(server, request(name)) for name in range(CLIENTS)]
    wait_until(lambda: len(lines(record, "waiting")) == CLIENTS, 30, "every send waiting")
    held = [f"socket:[{server_side_inode(sock)}]" for sock in socks]
    return socks, held


def test_vanished_websocket_clients_are_released_and_their_waiting_sends_raise(
        tines_server: Callable[..., Server], tmp_path: Path) -> None:
    server, record = start(tines_server, tmp_path, "--send-timeout", "60",
                           "--status-bind", "127.0.0.1:0")
    port = status_port(server)
    worker = worker_pid(server)
    socks, held = flood_all(server, record, websocket_request)
    assert all(fd in fd_targets(worker) for fd in held)
    assert open_connections(port) >= CLIENTS
    for index, sock in enumerate(socks):
        vanish(sock, index % 3)
    # Released at once, not at send_timeout (60 s). The bound is 5 s, and it takes
    # milliseconds here; the test allows 30 s so that a loaded machine cannot fail it, still
    # well short of the send_timeout that released nothing before.
    wait_until(lambda: len(lines(record, "raised")) == CLIENTS, 30, "every send raised")
    wait_until(lambda: not set(held) & set(fd_targets(worker)), 30, "every fd closed")
    wait_until(lambda: open_connections(port) == 0, 30, "no connection open")
    raised = lines(record, "raised")
    # The send that waited raised, and the next receive told how the client went: 1006.
    assert all(fields == ["waiting", "websocket.disconnect", "1006"] for fields in raised.values()), raised
    assert "Traceback" not in server.log_text()


def test_a_websocket_client_that_never_reads_is_let_go_at_send_timeout(
        tines_server: Callable[..., Server], tmp_path: Path) -> None:
    server, record = start(tines_server, tmp_path, "--send-timeout", "1")
    worker = worker_pid(server)
    sock = reader_that_stops(server, websocket_request(0))
    try:
        wait_until(lambda: "0" in lines(record, "waiting"), 30, "the send waiting")
        held = f"socket:[{server_side_inode(sock)}]"
        # The client stays connected and never reads: the send timeout ends the wait.
        wait_until(lambda: "0" in lines(record, "raised"), 30, "the send raised")
        assert lines(record, "raised")["0"] == ["waiting", "websocket.disconnect", "1006"]
        wait_until(lambda: held not in fd_targets(worker), 30, "the fd closed")
    finally:
        sock.close()


def test_an_http_stream_that_never_reads_is_let_go_at_send_timeout(
        tines_server: Callable[..., Server], tmp_path: Path) -> None:
    server, record = start(tines_server, tmp_path, "--send-timeout", "1")
    worker = worker_pid(server)
    sock = reader_that_stops(server, stream_request(0))
    try:
        wait_until(lambda: "0" in lines(record, "waiting"), 30, "the send waiting")
        held = f"socket:[{server_side_inode(sock)}]"
        wait_until(lambda: "0" in lines(record, "raised"), 30, "the send raised")
        assert lines(record, "raised")["0"] == ["waiting", "http.disconnect"]
        wait_until(lambda: held not in fd_targets(worker), 30, "the fd closed")
    finally:
        sock.close()


def test_vanished_http_stream_clients_are_released(
        tines_server: Callable[..., Server], tmp_path: Path) -> None:
    """Mostly a regression test: clients that reset were let go before (`Request::on_gone`);
    one that only shut its side was held until `send_timeout`."""
    server, record = start(tines_server, tmp_path, "--send-timeout", "60",
                           "--status-bind", "127.0.0.1:0")
    port = status_port(server)
    worker = worker_pid(server)
    socks, held = flood_all(server, record, stream_request)
    for index, sock in enumerate(socks):
        vanish(sock, index % 3)
    wait_until(lambda: len(lines(record, "raised")) == CLIENTS, 30, "every send raised")
    wait_until(lambda: not set(held) & set(fd_targets(worker)), 30, "every fd closed")
    wait_until(lambda: open_connections(port) == 0, 30, "no connection open")
    assert all(fields == ["waiting", "http.disconnect"] for fields in lines(record, "raised").values())
    # A client that went away is no error of the app's.
    assert "Error handling" not in server.log_text()


def test_term_with_websocket_clients_that_do_not_read_ends_within_the_linger_timeout(
        tines_server: Callable[..., Server], tmp_path: Path) -> None:
    # send_timeout and graceful_timeout far beyond the wait below: only the linger timeout
    # (1 s) can end these connections in time.
    server, record = start(tines_server, tmp_path, "--send-timeout", "120",
                           "--graceful-timeout", "120", "--linger-timeout", "1")
    socks, _ = flood_all(server, record, websocket_request)
    try:
        server.signal(signal.SIGTERM)
        # A generous wait for the server's own deadline (linger_timeout + 1 s).
        assert server.wait(60) == 0
        log = server.log_text()
        # The worker ended on its own (no kill at graceful_timeout), and the master after it.
        assert re.search(r"worker \d+ \(slot 0\) exited with code 0", log), log
        assert "did not stop in time" not in log, log
        raised = lines(record, "raised")
        assert len(raised) == CLIENTS, raised
        assert all(fields == ["waiting", "websocket.disconnect", "1001"] for fields in raised.values()), raised
    finally:
        for sock in socks:
            sock.close()


def test_two_tasks_sending_to_a_vanished_client_both_raise(
        tines_server: Callable[..., Server], tmp_path: Path) -> None:
    # A handler and a broadcaster send on one WebSocket whose client stopped reading: both
    # wait, and both raise when it goes (the second send used to take the first one's place,
    # which then waited for ever).
    server, record = start(tines_server, tmp_path, "--send-timeout", "60")
    sock = reader_that_stops(server, websocket_request(0).replace(b"/flood?", b"/flood-pair?"))
    wait_until(lambda: set(lines(record, "waiting")) == {"0a", "0b"}, 30, "both sends waiting")
    vanish(sock, 1)
    wait_until(lambda: set(lines(record, "raised")) == {"0a", "0b"}, 30, "both sends raised")
    assert all(fields == ["waiting"] for fields in lines(record, "raised").values()), records(record)
