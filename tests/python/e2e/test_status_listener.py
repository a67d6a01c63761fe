"""The status listener under hostile clients (issue 41, item 2): many connections at once from
one poll loop, a fixed number of slots with the oldest dropped when they are full, one deadline
per connection from its accept, the allow list for everything but the probes, and the redaction
of request paths (docs/status.md)."""

from __future__ import annotations

import http.client
import json
import random
import select
import socket
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from conftest import APPS, ROOT, children, holds_connection, wait_until

STATUS_SLOTS = 64
"""The status process's connection slots (``SLOTS`` in crates/server/src/status/mod.rs)."""


def status_port(server: Any, host: str = r"127\.0\.0\.1") -> int:
    return int(server.wait_for_log(rf"Status at: http://{host}:(\d+)")[0].group(1))


def fetch(port: int, path: str, timeout: float = 20) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def status_pid(master: int) -> int:
    def find() -> int | None:
        for pid in children(master):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as handle:
                    if handle.read().startswith(b"tines: status"):
                        return pid
            except OSError:
                pass
        return None

    return wait_until(find, what="the status process")  # type: ignore[return-value]


def closed_by_server(client: socket.socket) -> bool:
    """True when the server closed ``client`` without a byte of a response (EOF or reset)."""
    try:
        return client.recv(4096) == b""
    except ConnectionResetError:
        return True


class Attack(threading.Thread):
    """``drippers`` connections that each send a never-ending request head a byte every 0.5 to
    1.5 s, and ``idle`` connections that send nothing; one the server closes is opened again at
    once, so the attack holds its connections for as long as it runs. The drip is the attack's
    pace, not a synchronisation: ``rounds`` counts how many times every dripper has sent."""

    def __init__(self, port: int, drippers: int, idle: int) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.stop = threading.Event()
        self.progress = threading.Condition()
        self.rounds = 0
        self.reopened = 0
        self.drippers = [self.open(dripping=True) for _ in range(drippers)]
        self.idle = [self.open(dripping=False) for _ in range(idle)]
        self.next_drip = {id(sock): 0.0 for sock in self.drippers}
        self.drips = {id(sock): 0 for sock in self.drippers}

    def open(self, dripping: bool) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=20)
        sock.setblocking(False)
        if dripping:
            sock.send(b"GET /status.json HTTP/1.1\r\nX-Drip: ")
        return sock

    def reopen(self, sock: socket.socket) -> None:
        sock.close()
        self.reopened += 1
        dripping = any(sock is other for other in self.drippers)
        fresh = self.open(dripping)
        group = self.drippers if dripping else self.idle
        group[group.index(sock)] = fresh
        if dripping:
            self.next_drip[id(fresh)] = self.next_drip.pop(id(sock))
            self.drips[id(fresh)] = self.drips.pop(id(sock))

    def run(self) -> None:
        start = time.monotonic()
        while not self.stop.is_set():
            clock = time.monotonic() - start
            wait = max(0.0, min(self.next_drip.values()) - clock)
            readable, _, _ = select.select(self.drippers + self.idle, [], [], wait)
            for sock in readable:
                try:
                    data = sock.recv(4096)
                except OSError:
                    data = b""
                assert not data, f"the attack got an answer: {data!r}"
                self.reopen(sock)
            clock = time.monotonic() - start
            for sock in list(self.drippers):
                if self.next_drip[id(sock)] <= clock:
                    try:
                        sock.send(b"a")
                    except OSError:
                        self.reopen(sock)
                        continue
                    self.next_drip[id(sock)] = clock + random.uniform(0.5, 1.5)
                    self.drips[id(sock)] += 1
            with self.progress:
                rounds = min(self.drips.values())
                if rounds != self.rounds:
                    self.rounds = rounds
                    self.progress.notify_all()
        for sock in self.drippers + self.idle:
            sock.close()

    def wait_round(self, after: int) -> int:
        with self.progress:
            assert self.progress.wait_for(lambda: self.rounds > after, timeout=30), "the attack stalled"
            return self.rounds


def test_healthz_answers_every_probe_while_clients_drip_and_idle(tines_server: Any) -> None:
    # Before the poll loop: the status process served one connection at a time, 2 s per read,
    # so a dripping client held it for as long as it dripped (0 of 15 answered).
    server = tines_server("examples/hello.py:app", "-w", "1", "--status-bind", "127.0.0.1:0")
    port = status_port(server)
    attack = Attack(port, drippers=5, idle=50)
    attack.start()
    answered = 0
    try:
        seen = attack.wait_round(0)
        for _ in range(15):
            seen = attack.wait_round(seen)  # one probe per round of drips: the attack goes on
            try:
                if fetch(port, "/healthz", timeout=1) == (200, b"ok\n"):
                    answered += 1
            except OSError:
                pass
    finally:
        attack.stop.set()
        attack.join(30)
    assert answered == 15


def test_the_oldest_connection_is_dropped_when_every_slot_is_taken(tines_server: Any) -> None:
    server = tines_server("examples/hello.py:app", "-w", "1", "--status-bind", "127.0.0.1:0",
                          "--status-timeout", "600")
    port = status_port(server)
    holder = status_pid(server.pid)
    idle = [socket.create_connection(("127.0.0.1", port), timeout=20) for _ in range(STATUS_SLOTS)]
    try:
        # The kernel hands connections over in the order they came: the first is the oldest.
        wait_until(lambda: all(holds_connection(holder, sock) for sock in idle), what="every slot taken")
        for oldest in range(2):
            assert fetch(port, "/healthz") == (200, b"ok\n")  # answered: it took the oldest's slot
            assert closed_by_server(idle[oldest])
            assert all(holds_connection(holder, sock) for sock in idle[oldest + 1:])  # the others kept
            # The probe's slot is free again once it is answered: one more idle client fills it.
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=20))
            wait_until(lambda: holds_connection(holder, idle[-1]), what="every slot taken again")
    finally:
        for sock in idle:
            sock.close()


def test_a_dripping_client_is_closed_at_its_deadline(tines_server: Any) -> None:
    server = tines_server("examples/hello.py:app", "-w", "1", "--status-bind", "127.0.0.1:0",
                          "--status-timeout", "1")
    port = status_port(server)
    with socket.create_connection(("127.0.0.1", port), timeout=20) as client:
        client.sendall(b"GET /healthz HTTP/1.1\r\nX-Drip: ")
        # A byte every half second would keep a per-read timeout from ever firing; the head
        # stays far below the 8 KiB limit for all 60 of them.
        closed = False
        for _ in range(60):
            try:
                client.sendall(b"a")
            except OSError:
                closed = True  # the server is gone from this connection
                break
            readable, _, _ = select.select([client], [], [], 0.5)
            if readable:
                closed = closed_by_server(client)
                break
        assert closed
    assert fetch(port, "/healthz") == (200, b"ok\n")


def test_only_allowed_peers_see_the_status_while_anyone_may_probe(tines_server: Any) -> None:
    server = tines_server("examples/hello.py:app", "-w", "1", "--status-bind", "127.0.0.1:0",
                          "--status-allow", "10.0.0.0/8")
    port = status_port(server)
    assert fetch(port, "/healthz") == (200, b"ok\n")
    assert fetch(port, "/readyz") == (200, b"ready\n")
    for path in ("/status.json", "/metrics", "/", "/?refresh=1"):
        code, body = fetch(port, path)
        assert (code, body) == (403, b"forbidden: this peer is not in status_allow\n"), path


def test_tines_status_says_why_it_is_refused(tines_server: Any) -> None:
    server = tines_server("examples/hello.py:app", "-w", "1", "--status-bind", "127.0.0.1:0",
                          "--status-allow", "10.0.0.0/8")
    port = status_port(server)
    result = subprocess.run([sys.executable, "-m", "tines", "status", "--once", "--status-bind", f"127.0.0.1:{port}"],
                            capture_output=True, text=True, timeout=60, cwd=ROOT, stdin=subprocess.DEVNULL,
                            env={"PYTHONPATH": str(APPS), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 1
    assert result.stderr == (f"tines: error: the status listener at 127.0.0.1:{port} answered 403: "
                             "forbidden: this peer is not in status_allow\n")


def test_the_allow_list_admits_its_networks(tines_server: Any) -> None:
    server = tines_server("examples/hello.py:app", "-w", "1", "--status-bind", "127.0.0.1:0",
                          "--status-allow", "10.0.0.0/8,127.0.0.1/32")
    port = status_port(server)
    code, body = fetch(port, "/status.json")
    assert code == 200 and json.loads(body)["schema"] == "tines-status/1"
    assert fetch(port, "/metrics")[0] == 200


@pytest.mark.parametrize(("allow", "shown"), [("127.0.0.0/8,::1", 200), ("127.0.0.0/8", 403), ("::/0", 200)])
def test_an_ipv6_peer_is_matched_against_the_allow_list(tines_server: Any, allow: str, shown: int) -> None:
    server = tines_server("examples/hello.py:app", "-w", "1", "--status-bind", "[::1]:0", "--status-allow", allow)
    port = status_port(server, host=r"\[::1\]")

    def get(path: str) -> int:
        connection = http.client.HTTPConnection("::1", port, timeout=20)
        try:
            connection.request("GET", path)
            return connection.getresponse().status
        finally:
            connection.close()

    assert (get("/healthz"), get("/status.json")) == (200, shown)


def test_request_paths_are_redacted_when_asked(tines_server: Any, gate: tuple[socket.socket, str]) -> None:
    listener, path = gate
    # Redaction wins over --status-show-query.
    server = tines_server("gate:app", "-w", "1", "--status-bind", "127.0.0.1:0", "--status-redact-paths",
                          "--status-show-query", env={"GATE_SOCKET": path})
    port = status_port(server)
    with socket.create_connection(("127.0.0.1", server.port), timeout=20) as client:
        client.sendall(b"GET /hold?customer=4711 HTTP/1.1\r\nHost: a\r\n\r\n")
        held, _ = listener.accept()
        assert held.recv(64)  # the only worker is in the app
        code, body = fetch(port, "/status.json")
        thread = json.loads(body)["workers"][0]["threads"][0]
        assert (code, thread["state"], thread["method"], thread["target"]) == (200, "app", "GET", "-")
        page = fetch(port, "/")[1]
        for shown in (body, page):
            assert b"/hold" not in shown and b"4711" not in shown
        held.close()
        assert client.recv(4096).startswith(b"HTTP/1.1 200 ")


def test_a_status_listener_on_every_interface_warns_what_it_exposes(tines_server: Any) -> None:
    server = tines_server("examples/hello.py:app", "-w", "1", "--status-bind", "0.0.0.0:0")
    line = server.wait_for_log(r"WARNING.*status_bind 0\.0\.0\.0:\d+ .*")[0].group(0)
    assert "/healthz and /readyz answer any peer" in line and "status_allow (127.0.0.0/8, ::1)" in line
    port = status_port(server, host=r"0\.0\.0\.0")
    assert fetch(port, "/status.json")[0] == 200  # this test's peer is loopback
