"""Issue 36: a request that arrived on a kept-alive connection is served, never reset, however
long its worker was busy (prefork serves one request at a time, on the loop's own thread) or
stopped (SIGSTOP): the keep-alive deadline measures the client's silence, not the worker's.

Each test keeps four connections alive after one request each; three of them send a next
request while the worker cannot read it, one stays silent. The test then lets the clock pass
the connections' keep-alive deadline (their last response plus ``keepalive_timeout``) before
it lets the worker go on: that wait is the stimulus (a deadline the worker finds past), not a
synchronisation, and waiting longer only makes it stricter. The three get their 200 in full,
none sees a reset, and the silent one is still closed (nothing sent, no reset).

The other deadlines the loop keeps judge the client the same way (ADR 0022): a head or a body
completed in time while a prefork worker was busy is served, one still incomplete is answered
408; a response the poller writes is not cut off at the send timeout when its client read
meanwhile.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import time
from typing import Any

import pytest

from conftest import holds_connection, read_until_closed, wait_until

KEEPALIVE_S = 2.0
"""``--keepalive-timeout``: long enough that the kept-alive connections are all still open when
the worker goes busy or is stopped (that takes milliseconds), even on a loaded machine (the test
checks it)."""
PAST_S = 0.5
"""How far past the latest keep-alive deadline the test lets the clock run before the worker
goes on: any margin would do (the worker's deadline is at most its last write plus
``keepalive_timeout``, and the test read that write after it was made)."""
TALKERS = 3
IO_TIMEOUT_S = 20.0

MPMS = ["prefork", "thread", "event"]
SERVERS = [pytest.param(("gate:app", "--mpm", mpm), id=mpm) for mpm in MPMS] + [
    pytest.param(("asgi_app:app", "--mpm", "event"), id="asgi"),
]


def read_response(sock: socket.socket) -> tuple[int, bytes]:
    """One response on ``sock`` (Content-Length framed): its status and body. A reset fails the
    test saying so."""
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            assert chunk, f"the server closed the connection before a whole response: {data!r}"
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        match = re.search(rb"(?im)^content-length:\s*(\d+)\r?$", head)
        assert match, f"no Content-Length: {head!r}"
        while len(body) < int(match.group(1)):
            chunk = sock.recv(65536)
            assert chunk, f"the server closed the connection mid-body: {data!r}"
            body += chunk
    except ConnectionResetError:
        raise AssertionError("the server reset a connection whose request it had not read") from None
    return int(head.split(b" ", 2)[1]), body


def kept_alive(port: int, count: int) -> list[socket.socket]:
    """``count`` connections that each had one request answered and stay open."""
    clients = []
    for _ in range(count):
        client = socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT_S)
        client.sendall(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
        status, _ = read_response(client)
        assert status == 200
        clients.append(client)
    return clients


def let_the_keepalive_deadline_pass(last_response: float, timeout: float = KEEPALIVE_S) -> None:
    """Lets the clock pass the connections' deadline, ``timeout`` after ``last_response`` (the
    stimulus, see above)."""
    remaining = last_response + timeout + PAST_S - time.monotonic()
    if remaining > 0:
        time.sleep(remaining)


def assert_served_and_silent_closed(talkers: list[socket.socket], silent: socket.socket) -> None:
    for talker in talkers:
        status, body = read_response(talker)
        assert status == 200 and body, body
    try:
        assert silent.recv(1) == b"", "the silent connection was closed, with nothing sent"
    except ConnectionResetError:
        raise AssertionError("the silent connection was reset, not closed") from None


def is_stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().rsplit(")", 1)[1].split()[0] == "T"


@pytest.mark.parametrize("stopped", [False, True], ids=["busy", "busy-and-stopped"])
@pytest.mark.parametrize("mpm", MPMS)
def test_requests_sent_while_the_worker_is_busy_past_the_deadline_are_served(
        tines_server: Any, gate: tuple[socket.socket, str], mpm: str, stopped: bool) -> None:
    gate_listener, gate_path = gate
    # One worker with one app thread: on prefork the loop itself is busy in the app.
    server = tines_server("gate:app", "-w", "1", "--mpm", mpm, "--threads", "1",
                          "--keepalive-timeout", str(KEEPALIVE_S), env={"GATE_SOCKET": gate_path})
    [worker] = server.worker_pids()
    *talkers, silent = clients = kept_alive(server.port, TALKERS + 1)
    last_response = time.monotonic()
    holder = socket.create_connection(("127.0.0.1", server.port), timeout=IO_TIMEOUT_S)
    try:
        holder.sendall(b"GET /hold HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        held, _ = gate_listener.accept()
        with held:
            held.settimeout(IO_TIMEOUT_S)
            assert held.recv(64).startswith(str(worker).encode())  # read: the close is a FIN
            if stopped:
                # Under load, a stop finds the worker in a request (issue 36's SIGSTOP).
                os.kill(worker, signal.SIGSTOP)
                wait_until(lambda: is_stopped(worker), what="the worker stopped")
            assert all(holds_connection(worker, client) for client in clients), \
                "every kept-alive connection was open when the worker went busy"
            for talker in talkers:
                talker.sendall(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
            let_the_keepalive_deadline_pass(last_response)
        # The gate closed: the long request ends (once the worker runs again).
        if stopped:
            os.kill(worker, signal.SIGCONT)
        assert read_response(holder)[0] == 200
        assert_served_and_silent_closed(talkers, silent)
    finally:
        if stopped:
            os.kill(worker, signal.SIGCONT)
        holder.close()
        for client in clients:
            client.close()


@pytest.mark.parametrize("app", SERVERS)
def test_requests_sent_while_the_worker_is_stopped_past_the_deadline_are_served(
        tines_server: Any, app: tuple[str, ...]) -> None:
    server = tines_server(app[0], "-w", "1", *app[1:], "--keepalive-timeout", str(KEEPALIVE_S))
    [worker] = server.worker_pids()
    *talkers, silent = clients = kept_alive(server.port, TALKERS + 1)
    last_response = time.monotonic()
    os.kill(worker, signal.SIGSTOP)
    try:
        wait_until(lambda: is_stopped(worker), what="the worker stopped")
        assert all(holds_connection(worker, client) for client in clients), \
            "every kept-alive connection was open when the worker stopped"
        for talker in talkers:
            talker.sendall(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
        let_the_keepalive_deadline_pass(last_response)
    finally:
        os.kill(worker, signal.SIGCONT)
    try:
        assert_served_and_silent_closed(talkers, silent)
    finally:
        for client in clients:
            client.close()


def start_holding(port: int, gate_listener: socket.socket, worker: int) -> tuple[socket.socket, socket.socket]:
    """Sends ``/hold`` and waits until the worker runs it: the client and the app's gate
    connection (close it to end the request; its line was read, so the close is a FIN)."""
    holder = socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT_S)
    holder.sendall(b"GET /hold HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    held, _ = gate_listener.accept()
    held.settimeout(IO_TIMEOUT_S)
    assert held.recv(64).startswith(str(worker).encode())
    return holder, held


def test_heads_and_bodies_completed_while_a_prefork_worker_is_busy_are_served(
        tines_server: Any, gate: tuple[socket.socket, str]) -> None:
    gate_listener, gate_path = gate
    timeout = KEEPALIVE_S
    server = tines_server("gate:app", "-w", "1", "--mpm", "prefork", "--header-timeout", str(timeout),
                          "--body-timeout", str(timeout), env={"GATE_SOCKET": gate_path})
    [worker] = server.worker_pids()
    first_parts = {
        "head": b"GET / HTTP/1.1\r\n",
        "body": b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n12345",
        "slow head": b"GET / HTTP/1.1\r\n",
    }
    rest = {"head": b"Host: t\r\n\r\n", "body": b"67890", "slow head": b"X-Slow: 1\r\n"}
    clients = {name: socket.create_connection(("127.0.0.1", server.port), timeout=IO_TIMEOUT_S)
               for name in first_parts}
    holder = held = None
    try:
        for name, client in clients.items():
            client.sendall(first_parts[name])
        # The worker took them: their deadlines run from no later than now.
        wait_until(lambda: all(holds_connection(worker, client) for client in clients.values()),
                   what="the worker holding the partial requests")
        started = time.monotonic()
        holder, held = start_holding(server.port, gate_listener, worker)
        for name, client in clients.items():
            client.sendall(rest[name])
        let_the_keepalive_deadline_pass(started, timeout)
        held.close()
        assert read_response(holder)[0] == 200
        assert read_response(clients["head"])[0] == 200, "the head came whole in time"
        assert read_response(clients["body"])[0] == 200, "the body came whole in time"
        answer = read_until_closed(clients["slow head"])
        assert answer.startswith(b"HTTP/1.1 408 "), answer
    finally:
        for sock in (holder, held, *clients.values()):
            if sock is not None:
                sock.close()


def test_a_response_whose_client_read_while_a_prefork_worker_was_busy_is_not_cut_off(
        tines_server: Any, gate: tuple[socket.socket, str]) -> None:
    gate_listener, gate_path = gate
    timeout = KEEPALIVE_S
    server = tines_server("held_or_big:app", "-w", "1", "--mpm", "prefork", "--send-timeout", str(timeout),
                          env={"GATE_SOCKET": gate_path})
    [worker] = server.worker_pids()
    reader = socket.socket()
    reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    reader.settimeout(IO_TIMEOUT_S)
    reader.connect(("127.0.0.1", server.port))
    holder = held = None
    try:
        reader.sendall(b"GET /big HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        # /hold is served after /big, whose rest the worker left to its poller by then (its send
        # timeout runs from before the hold starts).
        holder, held = start_holding(server.port, gate_listener, worker)
        started = time.monotonic()
        # The client reads what reached it while the worker is busy: not a client that stopped
        # reading.
        received = reader.recv(65536)
        reader.setblocking(False)
        try:
            while chunk := reader.recv(65536):
                received += chunk
        except BlockingIOError:
            pass
        reader.settimeout(IO_TIMEOUT_S)
        let_the_keepalive_deadline_pass(started, timeout)
        held.close()
        assert read_response(holder)[0] == 200
        received += read_until_closed(reader)
        head, _, body = received.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 "), head
        assert len(body) == 8 << 20, f"the response was cut off after {len(body)} bytes"
    finally:
        for sock in (holder, held, reader):
            if sock is not None:
                sock.close()
