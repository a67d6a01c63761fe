"""`defer_accept` (TCP_DEFER_ACCEPT): the kernel queues a connection for accept once its first
bytes came, and the worker reads it as it accepts it.

- A client that connects and sends nothing is not taken by a worker: a later client's request
  is answered while the kernel still holds the silent one; its request, once sent, is answered.
  With `--defer-accept 0` the same worker takes the silent connection first (the accept queue
  is in order), which shows the test can tell the two apart.
- What the first read finds is served as any read's would be: part of a head (the rest comes
  after the worker parked the connection), pipelined requests, a body with its head.
- A connection served as it was accepted is watched by the poller only when it parks: its
  next requests still wake the worker.
"""

from __future__ import annotations

import socket
from typing import Any

import pytest

from conftest import holds_connection, read_until_closed, wait_until

MPMS = [("prefork",), ("event", "--threads", "1"), ("event", "--threads", "0")]
MPM_IDS = ["prefork", "event", "event-inline"]


def only_worker(server: Any) -> int:
    pids = wait_until(lambda: len(server.worker_pids()) == 1 and server.worker_pids(), what="one worker")
    return int(pids[0])  # type: ignore[index]


def request(path: str = "/", close: bool = True) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: t\r\n{'Connection: close' if close else 'X-Keep: 1'}\r\n\r\n".encode()


def answered(client: socket.socket) -> bytes:
    client.settimeout(20)
    return read_until_closed(client)


@pytest.mark.parametrize("defer, taken_first", [("30", False), ("0", True)], ids=["deferred", "not-deferred"])
@pytest.mark.parametrize("mpm", MPMS, ids=MPM_IDS)
def test_a_silent_connection_waits_in_the_kernel_until_its_request_comes(
        tines_server: Any, mpm: tuple[str, ...], defer: str, taken_first: bool) -> None:
    server = tines_server("hello_pid:app", "-w", "1", "--mpm", *mpm, "--defer-accept", defer)
    worker = only_worker(server)
    with socket.create_connection(("127.0.0.1", server.port), timeout=20) as silent:
        # Connected (the handshake is complete for the client), nothing sent. A client that
        # comes later and sends its request is served meanwhile.
        with socket.create_connection(("127.0.0.1", server.port), timeout=20) as later:
            later.sendall(request())
            assert answered(later).startswith(b"HTTP/1.1 200 ")
        # Deferred, the kernel still holds the silent connection; without the deferral the
        # accept queue is in order, and the worker took it before the later one.
        assert holds_connection(worker, silent) == taken_first
        silent.sendall(request())
        response = answered(silent)
        assert response.startswith(b"HTTP/1.1 200 "), response
        assert response.endswith(str(worker).encode())


@pytest.mark.parametrize("mpm", MPMS, ids=MPM_IDS)
def test_a_head_that_comes_in_two_parts_is_served_after_the_first_read_parks_it(tines_server: Any, mpm: tuple[str, ...]) -> None:
    server = tines_server("hello_pid:app", "-w", "1", "--mpm", *mpm)
    worker = only_worker(server)
    with socket.create_connection(("127.0.0.1", server.port), timeout=20) as client:
        client.sendall(b"GET / HTTP/1.1\r\nHost: t\r\n")
        # Queued with its first bytes, accepted, read (part of a head) and parked.
        wait_until(lambda: holds_connection(worker, client), what="the worker holds the connection")
        client.sendall(b"Connection: close\r\n\r\n")
        response = answered(client)
        assert response.startswith(b"HTTP/1.1 200 "), response


@pytest.mark.parametrize("mpm", MPMS, ids=MPM_IDS)
def test_pipelined_requests_and_a_body_in_the_first_bytes_are_all_served(tines_server: Any, mpm: tuple[str, ...]) -> None:
    server = tines_server("body_echo:app", "-w", "1", "--mpm", *mpm)
    with socket.create_connection(("127.0.0.1", server.port), timeout=20) as client:
        client.sendall(b"POST /a HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello"
                       + request("/b", close=False)
                       + b"POST /c HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc")
        responses = answered(client).split(b"HTTP/1.1 ")[1:]
    assert [r.split(b" ", 1)[0] for r in responses] == [b"200", b"200", b"200"]
    assert [r.rpartition(b"\r\n\r\n")[2] for r in responses] == [b"5 5 -", b"0 - -", b"3 3 -"]


@pytest.mark.parametrize("mpm", MPMS, ids=MPM_IDS)
def test_a_connection_served_as_it_was_accepted_then_waits_for_its_next_request(tines_server: Any, mpm: tuple[str, ...]) -> None:
    # Read as it was accepted and served at once, the connection is watched by the poller
    # only when it parks for its next request: that request must still wake the worker.
    server = tines_server("hello_pid:app", "-w", "1", "--mpm", *mpm)
    worker = only_worker(server)
    with socket.create_connection(("127.0.0.1", server.port), timeout=20) as client:
        client.settimeout(20)
        for _ in range(3):
            client.sendall(request(close=False))
            response = b""
            while not response.endswith(str(worker).encode()):
                chunk = client.recv(4096)
                assert chunk, f"closed after {response!r}"
                response += chunk
            assert response.startswith(b"HTTP/1.1 200 ")
        client.sendall(request())
        assert answered(client).startswith(b"HTTP/1.1 200 ")
