"""TLS sessions and connections over time (issue 37): a session ticket made by one worker resumes
on another (keys made before fork, shared) and on the workers of the master a USR2 upgrade
started; ``close_notify`` on every close the server makes
(after ``Connection: close``, at the keep-alive timeout, at a graceful stop), seen by Python's
``ssl`` (an EOF without it raises ``SSLEOFError``) and by ``openssl s_client``; a ClientHello
sent a byte at a time is closed at the header deadline while a normal client is served; a stuck
request's 503 goes through TLS."""

from __future__ import annotations

import http.client
import select
import shutil
import signal
import socket
import ssl
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
from tls_certs import TlsCerts
from tls_clients import (MPM_IDS, MPMS, client_context, client_hello, read_response, request_on, s_client, tls_args,
                         tls_connect, tls_request)

from client_load import ClientLoad
from conftest import children, read_until_closed, wait_until
from test_upgrade import new_master

APP = "tls_env:app"
VERSIONS = [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3]
HOLD_ATTEMPTS = 8
"""Bound on the /hold requests it takes to hold one given worker (2 workers: 2 suffice)."""


@contextmanager
def holding(port: int, context: ssl.SSLContext, gate: socket.socket, worker: int) -> Iterator[None]:
    """While the block runs, ``worker`` (a prefork worker: its only thread) is in the app on
    ``/hold`` and accepts nothing, so a new connection goes to another worker. A /hold that
    lands on another worker is released at once (bounded in attempts)."""
    with ExitStack() as stack:
        others = []
        for _ in range(HOLD_ATTEMPTS):
            sock = stack.enter_context(tls_connect(port, context))
            sock.sendall(b"GET /hold HTTP/1.1\r\nHost: localhost\r\n\r\n")
            gate_connection, _ = gate.accept()
            stack.enter_context(gate_connection)
            held_by = int(gate_connection.recv(64).split()[0])
            if held_by == worker:
                break
            others.append((sock, gate_connection))
        else:
            raise AssertionError(f"no /hold reached worker {worker} in {HOLD_ATTEMPTS} attempts")
        for sock, gate_connection in others:
            gate_connection.close()
            assert read_response(sock)[0].status == 200
        yield


@pytest.mark.parametrize("version", VERSIONS, ids=["tls1.2", "tls1.3"])
@pytest.mark.parametrize("tickets", [True, False], ids=["tickets", "no-tickets"])
def test_a_session_resumes_on_another_worker(tines_server: Any, tls_certs: TlsCerts, gate: tuple[socket.socket, str],
                                             version: ssl.TLSVersion, tickets: bool) -> None:
    listener, path = gate
    server = tines_server("gate:app", "-w", "2", "--mpm", "prefork", *tls_args(tls_certs.localhost),
                          *([] if tickets else ["--no-tls-tickets"]), env={"GATE_SOCKET": path})
    context = client_context(tls_certs, minimum=version, maximum=version)
    first = tls_request(server.port, "/", context)
    issuer = int(first.body)
    assert first.session is not None and not first.session_reused
    with holding(server.port, context, listener, issuer):
        resumed = tls_request(server.port, "/", context, session=first.session)
    assert int(resumed.body) != issuer, "another worker answered"
    assert resumed.peer.serial_number == tls_certs.localhost.serial
    # With tickets (keys shared by the workers) the other worker resumes; without, it cannot.
    assert resumed.session_reused is tickets


@pytest.mark.parametrize("version", VERSIONS, ids=["tls1.2", "tls1.3"])
def test_a_session_made_before_a_usr2_upgrade_resumes_on_the_new_masters_workers(
        tines_server: Any, tls_certs: TlsCerts, tmp_path: Path, version: ssl.TLSVersion) -> None:
    pid_file = tmp_path / "tines.pid"
    server = tines_server("hello_pid:app", "-w", "2", "--pid-file", str(pid_file), "--drain-timeout", "1",
                          *tls_args(tls_certs.localhost))
    context = client_context(tls_certs, minimum=version, maximum=version)
    first = tls_request(server.port, "/", context)
    assert first.session is not None and not first.session_reused
    with ClientLoad(server.port, keep_alive=True, ssl_context=context) as load:
        load.wait_more(20, "TLS responses before the upgrade")
        server.signal(signal.SIGUSR2)
        master = new_master(pid_file, server.pid)
        assert server.wait() == 0
        workers = wait_until(lambda: len(children(master)) == 2 and children(master), what="the new workers")
        load.wait_for_body(lambda body: int(body) in workers, count=20,  # type: ignore[operator]
                           what="TLS responses from the new master's workers")
    load.assert_nothing_lost()
    resumed = tls_request(server.port, "/", context, session=first.session)
    assert int(resumed.body) in workers  # type: ignore[operator]
    assert resumed.session_reused, "the ticket keys came across the upgrade"
    assert resumed.peer.serial_number == tls_certs.localhost.serial


def closes_with_close_notify(sock: ssl.SSLSocket) -> bool:
    """True when the server's close came with close_notify (``recv`` gives b""; an EOF
    without it raises ``SSLEOFError``, the socket being made with ragged EOFs reported), after
    which our ``unwrap`` ends the TLS session cleanly."""
    try:
        if sock.recv(1) != b"":
            return False
    except ssl.SSLEOFError:
        return False
    try:
        sock.unwrap().close()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server's socket is gone already: our own close_notify had nowhere to go
    return True


@pytest.mark.parametrize("mpm", MPMS, ids=MPM_IDS)
@pytest.mark.parametrize("close", ["connection-close", "keepalive-timeout", "graceful-stop"])
def test_every_close_the_server_makes_sends_close_notify(tines_server: Any, tls_certs: TlsCerts,
                                                         mpm: tuple[str, ...], close: str) -> None:
    keepalive = "1" if close == "keepalive-timeout" else "30"
    server = tines_server(APP, "-w", "1", "--mpm", *mpm, "--keepalive-timeout", keepalive, "--drain-timeout", "0",
                          *tls_args(tls_certs.localhost))
    with tls_connect(server.port, client_context(tls_certs), ragged_eofs=False) as sock:
        headers = {"Connection": "close"} if close == "connection-close" else {}
        response, _ = request_on(sock, "/", headers)
        assert response.status == 200
        if close == "graceful-stop":
            server.signal(signal.SIGTERM)
        assert closes_with_close_notify(sock)
    if close == "graceful-stop":
        assert server.wait() == 0


@pytest.mark.parametrize("close", ["connection-close", "keepalive-timeout"])
def test_s_client_reads_close_notify(tines_server: Any, tls_certs: TlsCerts, close: str) -> None:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    server = tines_server(APP, "-w", "1", "--keepalive-timeout", "1", *tls_args(tls_certs.localhost))
    connection = "close" if close == "connection-close" else "keep-alive"
    result = s_client(tls_certs, server.port, "-msg",
                      request=f"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: {connection}\r\n\r\n".encode())
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    assert "HTTP/1.1 200 OK" in result.stdout
    received = [line for line in result.stdout.splitlines() if line.startswith("<<<") and "Alert" in line]
    assert received and received[-1].endswith("warning close_notify"), received


PACE = 0.05
"""Seconds each byte of the slow ClientHello waits for its turn (a ``select`` on the socket: the
server's close ends the wait at once). Only the order of events is asserted."""


@pytest.mark.parametrize("mpm", MPMS, ids=MPM_IDS)
def test_a_client_hello_sent_a_byte_at_a_time_is_closed_at_the_deadline_while_others_are_served(
        tines_server: Any, tls_certs: TlsCerts, mpm: tuple[str, ...]) -> None:
    # One worker with one app slot; no extension of the deadline for a client that trickles.
    server = tines_server(APP, "-w", "1", "--mpm", *mpm, "--header-timeout", "1", "--header-timeout-max", "1",
                          "--header-min-rate", "0", *tls_args(tls_certs.localhost))
    hello = client_hello()
    served = None
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as slow:
        slow.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        closed = False
        for index, byte in enumerate(hello[:-1]):  # never the whole ClientHello
            try:
                slow.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            if index == 3:
                # A normal client, while the slow one is in its handshake.
                served = tls_request(server.port, "/", client_context(tls_certs))
            if select.select([slow], [], [], PACE)[0]:
                closed = True  # the server closed it (or wrote an alert, then closed)
                break
        if not closed:
            assert select.select([slow], [], [], 30)[0], "the slow ClientHello was never closed"
        answer = read_until_closed(slow)
    assert answer == b"" or answer[:1] == b"\x15", f"closed, at most with an alert: {answer[:64]!r}"
    assert served is not None and served.status == 200
    assert served.peer.serial_number == tls_certs.localhost.serial
    # The worker serves on.
    assert tls_request(server.port, "/", client_context(tls_certs)).json()["pid"] == served.json()["pid"]


@pytest.mark.parametrize("mpm", ["prefork", "thread", "event"])
def test_a_stuck_request_is_answered_503_through_tls(tines_server: Any, tls_certs: TlsCerts, tmp_path: Path,
                                                     mpm: str) -> None:
    marker = tmp_path / "stuck.pid"
    server = tines_server("stuck_app:app", "-w", "2", "--mpm", mpm, "--request-timeout", "1",
                          *tls_args(tls_certs.localhost), env={"STUCK_MARKER": str(marker)})
    context = client_context(tls_certs)
    with tls_connect(server.port, context, ragged_eofs=False) as stuck:
        stuck.sendall(b"GET /sleep HTTP/1.1\r\nHost: localhost\r\n\r\n")
        stuck_pid = int(str(wait_until(lambda: marker.exists() and marker.read_text(), what="the stuck request")))
        try:
            response, _ = read_response(stuck)
        except (ConnectionResetError, ssl.SSLEOFError, http.client.RemoteDisconnected):
            # prefork: the stuck loop is the worker's only thread, killed with it (ADR 0020);
            # the connection ends, but never with bytes that are not TLS.
            assert mpm == "prefork", "thread and event answer through the loop"
        else:
            assert response.status == 503 and response.getheader("Connection") == "close"
            assert closes_with_close_notify(stuck)
    server.wait_for_log(rf"worker {stuck_pid} \(slot \d+\) .*\(request_timeout\)")
    assert tls_request(server.port, "/", context).status == 200
