"""Slow clients hold no worker slot: incomplete heads wait in the worker's poller, and the
header timeout closes them with 408 (bounded: loopback only, a few hundred connections, and
every socket has a deadline)."""

from __future__ import annotations

import http.client
import socket
from typing import Any

import pytest

from conftest import holds_connection, wait_until

TRICKLERS = 200


def read_until_eof(sock: socket.socket) -> bytes:
    sock.settimeout(20)
    data = b""
    try:
        while chunk := sock.recv(4096):
            data += chunk
    except ConnectionResetError:
        pass
    return data


@pytest.mark.parametrize("mpm", ["prefork", "thread", "event"])
def test_a_slowloris_crowd_does_not_delay_a_normal_client(tines_server: Any, mpm: str) -> None:
    # One worker with one slot: if a trickler held the slot, the normal client would wait for
    # the header timeout.
    server = tines_server("examples/hello.py:app", "-w", "1", "--mpm", mpm, "--threads", "1",
                          "--header-timeout", "2")
    tricklers = [socket.create_connection(("127.0.0.1", server.port), timeout=20) for _ in range(TRICKLERS)]
    try:
        for sock in tricklers:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: slow\r\n")
        for sock in tricklers:
            sock.sendall(b"X-Slow: 1")  # still no end of head
        normal = http.client.HTTPConnection("127.0.0.1", server.port, timeout=20)
        normal.request("GET", "/")
        response = normal.getresponse()
        assert (response.status, response.read()) == (200, b"OK")
        normal.close()
        # The crowd was still held when the normal client got its answer...
        tricklers[-1].setblocking(False)
        with pytest.raises(BlockingIOError):
            tricklers[-1].recv(1)
        tricklers[-1].setblocking(True)
        # ...and then each trickler is answered 408 and closed by the header timeout.
        for sock in tricklers:
            assert read_until_eof(sock).startswith(b"HTTP/1.1 408 ")
    finally:
        for sock in tricklers:
            sock.close()


@pytest.mark.parametrize("mpm", ["prefork", "thread", "event"])
def test_a_connection_that_sends_nothing_is_closed_at_the_header_timeout(tines_server: Any, mpm: str) -> None:
    server = tines_server("examples/hello.py:app", "-w", "1", "--mpm", mpm, "--header-timeout", "1")
    with socket.create_connection(("127.0.0.1", server.port), timeout=20) as sock:
        assert read_until_eof(sock) == b"", "nothing was sent, so nothing is answered"


@pytest.mark.parametrize("mpm", ["prefork", "thread", "event"])
def test_an_idle_keep_alive_connection_is_closed_at_the_keepalive_timeout(tines_server: Any, mpm: str) -> None:
    server = tines_server("examples/hello.py:app", "-w", "1", "--mpm", mpm, "--keepalive-timeout", "1")
    with socket.create_connection(("127.0.0.1", server.port), timeout=20) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        data = read_until_eof(sock)
    assert data.startswith(b"HTTP/1.1 200 OK") and data.endswith(b"OK")


@pytest.mark.parametrize("mpm", ["prefork", "thread", "event"])
def test_a_client_that_stops_reading_is_cut_off_at_the_send_timeout(tines_server: Any, mpm: str) -> None:
    # One worker, one slot: the stuck client's response is handed to the poller (ADR 0009),
    # which cuts it off at the send timeout; the slot serves others meanwhile.
    server = tines_server("big_body:app", "-w", "1", "--mpm", mpm, "--threads", "1", "--send-timeout", "1")
    stuck = socket.socket()
    stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stuck.connect(("127.0.0.1", server.port))
    try:
        stuck.sendall(b"GET /big HTTP/1.1\r\nHost: a\r\n\r\n")
        normal = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        normal.request("GET", "/small")
        response = normal.getresponse()
        assert (response.status, response.read()) == (200, b"small")
        normal.close()
        [worker] = server.worker_pids()
        wait_until(lambda: not holds_connection(worker, stuck), what="the stuck client cut off")
        received = read_until_eof(stuck)
        assert 0 < len(received) < 8 << 20, "the stuck client got a cut response, then the close"
    finally:
        stuck.close()
