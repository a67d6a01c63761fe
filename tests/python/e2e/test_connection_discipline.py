"""Which worker takes a connection, and how a connection ends.

- A worker takes a new connection only while it can start serving it (prefork: one at a time;
  thread/event: while an app thread is free), so a busy worker does not hoard connections that
  an idle worker could serve. Made deterministic with SIGSTOP/SIGCONT: the connections wait in
  the listen backlog until the test lets one worker, then the other, run.
- At the keep-alive request limit the last response says `Connection: close`, and a pipelining
  client still reads every response, then EOF (no reset destroys answers the app produced).
"""

from __future__ import annotations

import os
import signal
import socket
import threading
from typing import Any

import pytest

from conftest import wait_until

MPMS = [("prefork",), ("thread", "--threads", "1"), ("event", "--threads", "1")]
MPM_IDS = ["prefork", "thread", "event"]
MPMS_ALL = [*MPMS, ("event", "--threads", "0")]
MPM_IDS_ALL = [*MPM_IDS, "event-inline"]


def read_response(sock: socket.socket) -> bytes:
    sock.settimeout(30)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


@pytest.mark.parametrize("mpm", MPMS, ids=MPM_IDS)
def test_a_busy_worker_leaves_queued_connections_to_an_idle_worker(tines_server: Any, mpm: tuple[str, ...]) -> None:
    server = tines_server("streaming:app", "-w", "2", "--mpm", *mpm)
    workers = wait_until(lambda: len(server.worker_pids()) == 2 and server.worker_pids(), what="two workers")
    first, second = workers  # type: ignore[misc]
    with socket.create_server(("127.0.0.1", 0)) as gate_listener:
        gate_listener.settimeout(20)
        port = gate_listener.getsockname()[1]
        clients: list[socket.socket] = []
        gates: list[socket.socket] = []
        for pid in (first, second):
            os.kill(pid, signal.SIGSTOP)
        try:
            # Three requests wait, whole, in the listen backlog while no worker runs.
            for _ in range(3):
                client = socket.create_connection(("127.0.0.1", server.port), timeout=20)
                client.sendall(f"GET /hold?port={port} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode())
                clients.append(client)
            os.kill(first, signal.SIGCONT)
            gates.append(gate_listener.accept()[0])  # the first worker serves one request...
            os.kill(second, signal.SIGCONT)
            try:
                # ...and the second worker, idle, serves another while the first is still held.
                gates.append(gate_listener.accept()[0])
            except socket.timeout:
                raise AssertionError("the busy worker took the queued connections: the idle worker got none") from None
            served_by = set()
            for gate in gates:
                gate.sendall(b"g")
            gates.append(gate_listener.accept()[0])  # the third request, once a worker is free
            gates[-1].sendall(b"g")
            for client in clients:
                response = read_response(client)
                assert response.startswith(b"HTTP/1.1 200 "), response
                served_by.add(int(response.rpartition(b"\r\n\r\n")[2]))
            assert served_by <= {first, second} and len(served_by) == 2
        finally:
            for pid in (first, second):
                try:
                    os.kill(pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
            for sock in clients + gates:
                sock.close()


@pytest.mark.parametrize("mpm", MPMS_ALL, ids=MPM_IDS_ALL)
def test_a_pipelining_client_gets_every_response_up_to_the_keepalive_limit_then_eof(
        tines_server: Any, mpm: tuple[str, ...]) -> None:
    limit, sent = 100, 5000
    server = tines_server("examples/hello.py:app", "-w", "1", "--mpm", *mpm,
                          "--max-keepalive-requests", str(limit))
    request = b"GET / HTTP/1.1\r\nHost: t\r\n\r\n"
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:

        def write_all_requests() -> None:
            # Keeps writing while the server answers; the server may close the read side first.
            try:
                for _ in range(sent // 50):
                    sock.sendall(request * 50)
            except OSError:
                pass

        writer = threading.Thread(target=write_all_requests)
        writer.start()
        try:
            received = b""
            sock.settimeout(30)
            while chunk := sock.recv(65536):  # a reset raises here: answers would be lost
                received += chunk
        finally:
            writer.join(60)
    assert received.count(b"HTTP/1.1 200 OK\r\n") == limit
    last_head = received.rpartition(b"HTTP/1.1 200 OK\r\n")[2].partition(b"\r\n\r\n")[0]
    assert b"connection: close" in last_head.lower()
    assert received.endswith(b"OK")


@pytest.mark.parametrize("mpm", MPMS_ALL, ids=MPM_IDS_ALL)
def test_a_client_still_uploading_after_an_early_413_finishes_its_upload_and_reads_the_answer(
        tines_server: Any, mpm: tuple[str, ...]) -> None:
    # The 413 goes out before the body is read; the connection lingers until the client closes
    # (not merely until the 413 is acknowledged), so the upload is never cut by a reset.
    server = tines_server("examples/hello.py:app", "-w", "1", "--mpm", *mpm,
                          "--max-body-size", "1000", "--linger-timeout", "60")
    body = b"x" * (8 << 20)
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % len(body))
        sock.sendall(body)  # a reset would raise here
        sock.shutdown(socket.SHUT_WR)
        response = read_response(sock)
    assert response.startswith(b"HTTP/1.1 413 ")


@pytest.mark.parametrize("mpm", MPMS_ALL, ids=MPM_IDS_ALL)
def test_a_bad_pipelined_request_gets_its_400_after_the_earlier_answers_then_eof(
        tines_server: Any, mpm: tuple[str, ...]) -> None:
    server = tines_server("examples/hello.py:app", "-w", "1", "--mpm", *mpm)
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        # Served, served, refused; the client keeps sending after the bad one.
        sock.sendall(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n" * 2 + b"GET / HTTP/1.1\r\nHost: t\r\nBad Header\r\n\r\n")

        def keep_sending() -> None:
            try:
                for _ in range(200):
                    sock.sendall(b"y" * 16384)
                sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass

        writer = threading.Thread(target=keep_sending)
        writer.start()
        try:
            response = read_response(sock)  # a reset raises here
        finally:
            writer.join(60)
    assert response.count(b"HTTP/1.1 200 OK\r\n") == 2
    assert response.rpartition(b"HTTP/1.1 ")[2].startswith(b"400 ")


def server_socket_copy(pid: int, client: socket.socket) -> socket.socket:
    """A duplicate, in this process, of the server's end of ``client`` held by ``pid``
    (pidfd_getfd(2): Linux 5.6+, same user)."""
    import ctypes

    from conftest import server_side_inode

    inode = server_side_inode(client)
    target = f"socket:[{inode}]"
    fd = next(int(name) for name in os.listdir(f"/proc/{pid}/fd")
              if os.readlink(f"/proc/{pid}/fd/{name}") == target)
    pidfd = os.pidfd_open(pid)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        sys_pidfd_getfd = 438  # x86_64 and aarch64 alike (the generic syscall table)
        copy = libc.syscall(sys_pidfd_getfd, pidfd, fd, 0)
        if copy < 0:
            errno = ctypes.get_errno()
            pytest.skip(f"pidfd_getfd failed: {os.strerror(errno)}")
    finally:
        os.close(pidfd)
    return socket.socket(fileno=copy)


@pytest.mark.parametrize("mpm", MPMS_ALL, ids=MPM_IDS_ALL)
def test_accepted_connections_have_nagle_off(tines_server: Any, mpm: tuple[str, ...]) -> None:
    # TCP_NODELAY is set once on the listening socket and inherited by every connection the
    # worker accepts (no setsockopt per connection): a response's last segment is never held
    # back waiting for the client's ACK.
    server = tines_server("streaming:app", "-w", "1", "--mpm", *mpm)
    (worker,) = server.worker_pids()
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as client:
        client.sendall(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
        assert client.recv(65536).startswith(b"HTTP/1.1 ")
        with server_socket_copy(worker, client) as served:
            assert served.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


@pytest.mark.parametrize("mpm", MPMS_ALL, ids=MPM_IDS_ALL)
def test_a_request_that_comes_with_the_clients_fin_is_answered_then_the_connection_closes(
    tines_server: Any, mpm: tuple[str, ...]
) -> None:
    # The client sends its request and shuts its side at once (`nc -N`, HTTP/1.0 tools): the
    # FIN arrives with the request and raises no readiness of its own. It must still be seen
    # after the response, on a new connection and on a kept-alive one, not when the
    # keep-alive timeout (far longer than the read timeout here) runs out.
    server = tines_server("examples/hello.py:app", "-w", "1", "--keepalive-timeout", "300", "--mpm", *mpm)
    request = b"GET / HTTP/1.1\r\nHost: t\r\n\r\n"
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(request)
        sock.shutdown(socket.SHUT_WR)
        data = read_response(sock)
    assert data.startswith(b"HTTP/1.1 200 ") and data.endswith(b"\r\n\r\nOK"), data
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(request)
        first = b""
        while not first.endswith(b"\r\n\r\nOK"):
            chunk = sock.recv(65536)
            assert chunk, f"closed after {first!r}"
            first += chunk
        sock.sendall(request)
        sock.shutdown(socket.SHUT_WR)
        rest = read_response(sock)
    assert rest.startswith(b"HTTP/1.1 200 ") and rest.count(b"HTTP/1.1 ") == 1, rest
