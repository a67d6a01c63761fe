"""The graceful stop (TERM, shutdown_delay), sd_notify and socket activation (issue 13).

Real servers on real sockets. The test plays systemd's part itself: it listens on a datagram
socket named in ``NOTIFY_SOCKET`` and reads the master's notifications in order, and it binds
the listening sockets it hands over with ``LISTEN_FDS``. Waits are on notifications, log lines
and responses, never on a sleep.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from client_load import ClientLoad
from conftest import http_get, wait_until
from test_drain import read_response

MPMS = ["prefork", "thread", "event"]


class NotifyListener:
    """The service manager's end of ``NOTIFY_SOCKET``: one datagram socket the test binds."""

    def __init__(self, address: str) -> None:
        self.address = address
        """The ``NOTIFY_SOCKET`` value: a path, or ``@name`` (abstract namespace)."""
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind("\0" + address[1:] if address.startswith("@") else address)
        self.received: list[dict[str, str]] = []

    def next(self, deadline: float = 30.0) -> dict[str, str]:
        """The next notification, as its ``KEY=VALUE`` assignments."""
        self.sock.settimeout(deadline)
        data = self.sock.recv(65536)
        message = dict(line.split("=", 1) for line in data.decode().split("\n") if line)
        self.received.append(message)
        return message

    def nothing_more(self) -> bool:
        """True when no further notification is queued."""
        self.sock.setblocking(False)
        try:
            self.sock.recv(65536)
        except BlockingIOError:
            return True
        finally:
            self.sock.setblocking(True)
        return False

    def close(self) -> None:
        self.sock.close()


def monotonic_usec() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000


def test_the_master_notifies_ready_then_reloading_and_ready_on_hup_then_stopping_on_term(
        tines_server: Any, tmp_path: Path) -> None:
    listener = NotifyListener(str(tmp_path / "notify.sock"))
    server = tines_server("notify_env:app", "-w", "2", env={"NOTIFY_SOCKET": listener.address})
    ready = listener.next()
    assert ready["READY"] == "1"
    assert ready["STATUS"] == f"2 workers, WSGI app on mpm prefork, listening on 127.0.0.1:{server.port}"
    # Workers (and so the app) never see NOTIFY_SOCKET.
    status, body = http_get(server.port)
    assert status == 200 and body.startswith(b"NOTIFY_SOCKET=\n")

    before = monotonic_usec()
    server.signal(signal.SIGHUP)
    reloading = listener.next()
    after = monotonic_usec()
    assert reloading["RELOADING"] == "1" and "READY" not in reloading
    assert before <= int(reloading["MONOTONIC_USEC"]) <= after
    reloaded = listener.next()
    assert reloaded["READY"] == "1" and reloaded["STATUS"].startswith("2 workers")
    # READY=1 came once the new generation was ready and every old worker was retired.
    assert len(server.wait_for_log(r"worker \d+ \(slot \d\) ready in", count=4)) == 4
    assert len(re.findall(r"retiring worker \d+ \(slot \d\): reload", server.log_text())) == 2

    server.signal(signal.SIGTERM)
    stopping = listener.next()
    assert stopping["STOPPING"] == "1"
    assert server.wait() == 0
    assert listener.nothing_more()
    assert [next(iter(m)) for m in listener.received] == ["READY", "RELOADING", "READY", "STOPPING"]
    listener.close()


def test_the_notify_socket_can_be_in_the_abstract_namespace(tines_server: Any) -> None:
    listener = NotifyListener(f"@tines-test-{uuid.uuid4().hex}")
    server = tines_server("hello_pid:app", "-w", "1", env={"NOTIFY_SOCKET": listener.address})
    assert listener.next()["READY"] == "1"
    server.signal(signal.SIGINT)
    assert listener.next()["STOPPING"] == "1"
    assert server.wait() == 0
    listener.close()


def test_an_unusable_notify_socket_is_logged_once_and_the_server_serves_and_stops(
        tines_server: Any, tmp_path: Path) -> None:
    # Nobody listens at the path: every send fails.
    server = tines_server("hello_pid:app", "-w", "1", env={"NOTIFY_SOCKET": str(tmp_path / "nobody")})
    assert http_get(server.port)[0] == 200
    server.signal(signal.SIGHUP)
    server.wait_for_log(r"ready in", count=2)
    server.signal(signal.SIGTERM)
    assert server.wait() == 0
    assert server.log_text().count("cannot notify the service manager") == 1


# ----- shutdown_delay ---------------------------------------------------------------------------


def test_during_shutdown_delay_readiness_is_off_and_requests_are_still_served_until_a_second_term(
        tines_server: Any, tmp_path: Path) -> None:
    listener = NotifyListener(str(tmp_path / "notify.sock"))
    server = tines_server("hello_pid:app", "-w", "2", "--shutdown-delay", "300",
                          env={"NOTIFY_SOCKET": listener.address})
    assert listener.next()["READY"] == "1"
    workers = server.worker_pids()
    server.signal(signal.SIGTERM)
    assert listener.next()["STOPPING"] == "1"
    # Readiness is off, and the workers serve on, on new and kept-alive connections.
    for _ in range(10):
        status, body = http_get(server.port)
        assert status == 200 and int(body) in workers
    with ClientLoad(server.port, clients=2) as load:
        load.wait_more(50)
    load.assert_nothing_lost()
    server.wait_for_log(r"readiness off: workers serve on for 300 s \(shutdown_delay\)")
    # A second TERM ends the delay: the graceful stop now.
    server.signal(signal.SIGTERM)
    assert server.wait() == 0
    log = server.log_text()
    assert "TERM again during shutdown_delay: graceful stop now" in log
    assert "sent SIGTERM to 2 worker(s)" in log
    assert listener.nothing_more()


def test_shutdown_delay_ends_by_itself_with_the_graceful_stop(tines_server: Any) -> None:
    server = tines_server("hello_pid:app", "-w", "1", "--shutdown-delay", "0.5")
    server.signal(signal.SIGTERM)
    assert server.wait() == 0
    log = server.log_text()
    order = [log.index(line) for line in (
        "TERM: graceful stop", "readiness off", "shutdown_delay over: graceful stop",
        "sent SIGTERM to 1 worker(s)", "exited with code 0", "exiting")]
    assert order == sorted(order), log


def test_int_during_shutdown_delay_is_a_quick_stop(tines_server: Any) -> None:
    server = tines_server("hello_pid:app", "-w", "1", "--shutdown-delay", "300")
    server.signal(signal.SIGTERM)
    server.wait_for_log(r"readiness off")
    server.signal(signal.SIGINT)
    assert server.wait() == 0
    # INT's quick stop: the workers get INT (an ASGI app's lifespan shutdown runs), not TERM.
    assert "sent SIGINT to 1 worker(s)" in server.log_text()


# ----- TERM under load, and the listen backlog --------------------------------------------------


@pytest.mark.parametrize("keep_alive", [True, False], ids=["keep-alive", "close"])
@pytest.mark.parametrize("mpm", MPMS)
def test_term_under_load_answers_every_request_a_worker_accepted(tines_server: Any, mpm: str, keep_alive: bool) -> None:
    server = tines_server("hello_pid:app", "-w", "2", "--mpm", mpm, "--threads", "2")
    load = ClientLoad(server.port, clients=8, keep_alive=keep_alive, stop_when_refused=True)
    with load:
        load.wait_more(300)
        server.signal(signal.SIGTERM)
        assert server.wait(120) == 0
    mode = "keep-alive" if keep_alive else "close"
    print(f"\nTERM under {mode} load, {mpm}: {load.summary()}; kinds {dict(load.failure_kinds)}")
    # Every request on a connection a worker had accepted got a full 200 (a truncated or missing
    # response there would be a failure on a kept-alive connection, or a bad status). What may
    # fail is a new connection that came after the last accept: reset when the master closed
    # the listener, or refused once it was closed (ARCHITECTURE.md, stop sequence).
    assert load.bad_status == 0, load.summary()
    assert load.failed_reused == 0, load.summary()
    assert set(load.failure_kinds) <= {"ConnectionResetError", "ConnectionRefusedError"}, load.summary()
    assert load.ok >= 300


class Gate:
    """The gate of apps/gate.py: ``/hold`` requests wait until the test releases them."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen(64)
        self.sock.settimeout(30)
        self.held: list[socket.socket] = []

    def wait_for_holder(self) -> int:
        """The next held request's worker pid (once its app code runs)."""
        connection, _ = self.sock.accept()
        connection.settimeout(30)
        line = b""
        while not line.endswith(b"\n"):
            line += connection.recv(64)
        self.held.append(connection)
        return int(line.split()[0])

    def release(self) -> None:
        for connection in self.held:
            connection.close()
        self.sock.close()


def send_get(port: int, path: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode())
    return sock


@pytest.mark.parametrize("mpm", MPMS)
def test_term_serves_the_requests_queued_while_every_worker_was_busy(
        tines_server: Any, tmp_path: Path, mpm: str) -> None:
    gate = Gate(tmp_path / "gate")
    backlog = 8
    server = tines_server("gate:app", "-w", "2", "--mpm", mpm, "--threads", "1",
                          "--backlog", str(backlog), "--graceful-timeout", "60",
                          env={"GATE_SOCKET": str(gate.path)})
    # Every worker's only app thread holds a request (each opened once the previous one runs).
    held = []
    holders = set()
    for _ in range(2):
        held.append(send_get(server.port, "/hold"))
        holders.add(gate.wait_for_holder())
    assert holders == set(server.worker_pids())
    # A full listen queue of requests nobody can take yet (prefork, thread: in the kernel's
    # queue; event: accepted by the event loop, waiting for an app thread).
    queued = [send_get(server.port, "/") for _ in range(backlog)]
    server.signal(signal.SIGTERM)
    server.wait_for_log(r"sent SIGTERM to 2 worker\(s\)")
    gate.release()
    for sock in held:
        status, _, body = read_response(sock)
        assert status == 200 and int(body) in holders
    for sock in queued:
        status, headers, body = read_response(sock)
        assert status == 200 and int(body) in holders
    assert server.wait(120) == 0
    for sock in held + queued:
        sock.close()


# ----- socket activation ------------------------------------------------------------------------

ACTIVATE = """
import fcntl, os, sys
sources = [int(fd) for fd in sys.argv[1].split(",")]
# Move every inherited socket out of the way first, then onto 3, 4, ... (sd_listen_fds(3)).
moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, 100) for fd in sources]
for fd in sources:
    os.close(fd)
for index, fd in enumerate(moved):
    os.dup2(fd, 3 + index)
    os.close(fd)
# The pid that execs is the pid that reads LISTEN_PID: exec keeps it (a parent cannot know
# the child's pid before the fork, and preexec_fn's os.environ is not what Popen passes).
os.environ["LISTEN_PID"] = str(os.getpid())
os.environ["LISTEN_FDS"] = str(len(sources))
os.environ["LISTEN_FDNAMES"] = sys.argv[2]
os.execv(sys.executable, [sys.executable, "-m", "tines", *sys.argv[3:]])
"""


def listening_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.set_inheritable(True)
    return sock


@pytest.mark.parametrize("count", [1, 2])
def test_socket_activation_serves_on_the_sockets_passed_as_listen_fds(tines_server: Any, count: int) -> None:
    sockets = [listening_socket() for _ in range(count)]
    names = ["web", "admin"][:count]
    fds = [sock.fileno() for sock in sockets]
    assert not set(fds) & set(range(3, 3 + count)), "the test's own fds must not be the targets"
    server = tines_server(
        "notify_env:app", "-w", "2",
        program=(sys.executable, "-c", ACTIVATE, ",".join(map(str, fds)), ":".join(names)),
        pass_fds=fds)
    ports = [sock.getsockname()[1] for sock in sockets]
    # The passed sockets replace the binds (-b 127.0.0.1:0 is not bound).
    assert server.ready["binds"] == [f"127.0.0.1:{port}" for port in ports]
    for index, (port, name) in enumerate(zip(ports, names)):
        server.wait_for_log(rf"socket activation: fd {3 + index} \({name}\) is 127.0.0.1:{port}")
        for _ in range(4):
            status, body = http_get(port)
            # ...and the LISTEN_* variables are gone from what the app sees.
            assert status == 200 and body.startswith(b"NOTIFY_SOCKET=\nLISTEN_FDS=\n")
    for sock in sockets:
        sock.close()  # the server holds its own copies
    assert http_get(ports[-1])[0] == 200
    server.signal(signal.SIGTERM)
    assert server.wait() == 0
