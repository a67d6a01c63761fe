"""The event MPM (issue 4) with real `tines serve` processes on real loopback sockets.

One loop thread per worker owns every socket; app threads only run the app. What must follow:
idle keep-alive connections cost a few kilobytes and no thread, a slow reader holds no app
thread (the loop finishes its response), admission counts requests (503 at once when the queue
is full, never because of idle connections), small request bodies are read by the loop before
the app runs, and `--threads 0` runs the app on the loop itself.

Bounded: loopback only, every socket has a timeout or a deadline, every server is killed at the
end (conftest). The app is tests/python/e2e/apps/event_app.py.
"""

from __future__ import annotations

import errno
import http.client
import os
import resource
import selectors
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conftest import APPS, ROOT, load_app_module, wait_until


_APP_MODULE = load_app_module("event_app")
BIG_SIZE: int = _APP_MODULE.BIG_SIZE
PATTERN: bytes = _APP_MODULE.PATTERN

APP = "event_app:app"
IO_TIMEOUT = 20.0
"""Per socket operation: generous for a loaded 2-core machine; nothing waits this long when
the server behaves."""


# ----- a small HTTP/1.1 client over a raw socket -----


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes


class Reader:
    """Reads responses from a socket, keeping bytes that follow one response for the next
    (pipelining)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()

    def _fill(self) -> bool:
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            return False
        self.buf += chunk
        return True

    def _need(self, size: int) -> None:
        while len(self.buf) < size:
            if not self._fill():
                raise EOFError(f"EOF with {len(self.buf)} of {size} bytes")

    def _line(self) -> bytes:
        while (end := self.buf.find(b"\r\n")) < 0:
            if not self._fill():
                raise EOFError("EOF in a line")
        line = bytes(self.buf[:end])
        del self.buf[:end + 2]
        return line

    def response(self, head_only: bool = False) -> Response:
        while (end := self.buf.find(b"\r\n\r\n")) < 0:
            if not self._fill():
                raise EOFError(f"EOF before a response head; got {bytes(self.buf)!r}")
        head = bytes(self.buf[:end]).decode("latin-1")
        del self.buf[:end + 4]
        lines = head.split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if head_only or status in (204, 304) or 100 <= status < 200:
            return Response(status, headers, b"")
        if "content-length" in headers:
            length = int(headers["content-length"])
            self._need(length)
            body = bytes(self.buf[:length])
            del self.buf[:length]
        elif headers.get("transfer-encoding") == "chunked":
            parts = bytearray()
            while True:
                size = int(self._line().split(b";")[0], 16)
                if size == 0:
                    while self._line():
                        pass  # trailers, up to the empty line
                    break
                self._need(size + 2)
                parts += self.buf[:size]
                assert self.buf[size:size + 2] == b"\r\n", "chunk not followed by CRLF"
                del self.buf[:size + 2]
            body = bytes(parts)
        else:
            while self._fill():
                pass
            body = bytes(self.buf)
            self.buf.clear()
        return Response(status, headers, body)


def connect(port: int, rcvbuf: int | None = None) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        # Before connect: the window the client advertises is fixed from it.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(IO_TIMEOUT)
    sock.connect(("127.0.0.1", port))
    return sock


def get(port: int, path: str = "/hello", timeout: float = IO_TIMEOUT) -> Response:
    """One request on a new connection."""
    with connect(port) as sock:
        sock.settimeout(timeout)
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
        return Reader(sock).response()


def nothing_received(sock: socket.socket) -> bool:
    """True when no byte (and no EOF) waits on ``sock``."""
    sock.setblocking(False)
    try:
        sock.recv(1, socket.MSG_PEEK)
    except BlockingIOError:
        return True
    finally:
        sock.settimeout(IO_TIMEOUT)
    return False


def wait_readable(sock: socket.socket, deadline: float = IO_TIMEOUT) -> None:
    with selectors.DefaultSelector() as selector:
        selector.register(sock, selectors.EVENT_READ)
        assert selector.select(deadline), "no byte arrived in time"


def worker_pid(server: Any) -> int:
    """The only worker of a ``-w 1`` server (the master's child, from /proc)."""
    path = f"/proc/{server.pid}/task/{server.pid}/children"
    with open(path) as handle:
        pids = [int(pid) for pid in handle.read().split()]
    assert len(pids) == 1, f"expected one worker, the master has children {pids}"
    return pids[0]


def proc_status(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def open_files_limit(pid: int) -> tuple[int, int]:
    with open(f"/proc/{pid}/limits") as handle:
        for line in handle:
            if line.startswith("Max open files"):
                soft, hard = line.split()[3:5]
                return int(soft), int(hard)
    raise AssertionError("no open-files limit")


def open_keepalive_connections(port: int, count: int, into: list[socket.socket],
                               deadline: float = 60.0) -> None:
    """Opens ``count`` connections that each send one request and read its response, so each
    ends as an idle keep-alive connection; non-blocking sockets and a selector, so a batch of a
    thousand takes a fraction of a second. Every socket is appended to ``into`` at once (the
    caller closes them)."""
    request = b"GET /hello HTTP/1.1\r\nHost: idle\r\n\r\n"
    end = time.monotonic() + deadline
    with selectors.DefaultSelector() as selector:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            into.append(sock)
            sock.setblocking(False)
            code = sock.connect_ex(("127.0.0.1", port))
            assert code in (0, errno.EINPROGRESS), os.strerror(code)
            selector.register(sock, selectors.EVENT_WRITE, bytearray())
        left = count
        while left:
            remaining = end - time.monotonic()
            assert remaining > 0, f"{left} of {count} connections not answered in time"
            for key, mask in selector.select(min(remaining, 5.0)):
                ready = key.fileobj
                assert isinstance(ready, socket.socket)
                received: bytearray = key.data
                if mask & selectors.EVENT_WRITE:
                    error = ready.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                    assert error == 0, f"connect failed: {os.strerror(error)}"
                    assert ready.send(request) == len(request)
                    selector.modify(ready, selectors.EVENT_READ, received)
                    continue
                chunk = ready.recv(4096)
                assert chunk, f"the server closed a new connection; got {bytes(received)!r}"
                received += chunk
                if received.endswith(b"\r\n\r\nhello"):
                    assert received.startswith(b"HTTP/1.1 200 "), bytes(received)
                    assert b"\r\nconnection: close" not in received.lower(), bytes(received)
                    selector.unregister(ready)
                    left -= 1


def close_all(socks: list[socket.socket]) -> None:
    for sock in socks:
        sock.close()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


SCHED_OTHER, SCHED_BATCH = 0, 3


def thread_policies(pid: int) -> dict[str, list[int]]:
    """Scheduling policy (field 41 of /proc/PID/task/TID/stat) of each thread, by name."""
    policies: dict[str, list[int]] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/comm") as handle:
            name = handle.read().strip()
        with open(f"/proc/{pid}/task/{tid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        # Fields after the name start at field 3 (state): field 41 is at index 38.
        policies.setdefault("loop" if int(tid) == pid else name, []).append(int(fields[38]))
    return policies


@pytest.mark.parametrize("mpm", ["thread", "event"])
@pytest.mark.parametrize("threads", ["1", "3"])
def test_the_loop_thread_never_preempts_app_threads(tines_server: Any, mpm: str, threads: str) -> None:
    """The loop thread runs under SCHED_BATCH (no wake-up preemption: it handles every ready
    connection in one go once the app thread blocks, docs/mpm.md); app threads keep the
    default policy. With threads 0 the loop runs the app itself and keeps the default. The
    thread MPM runs the same pool (ADR 0010)."""
    server = tines_server(APP, "-w", "1", "--mpm", mpm, "--threads", threads)
    assert get(server.port).status == 200
    worker = worker_pid(server)

    def named_app_threads() -> dict[str, list[int]] | None:
        # Each thread names itself once it runs (pthread_setname_np from the new thread), so
        # the names may lag the worker's ready line by a moment: wait for all of them.
        found = thread_policies(worker)
        named = sum(len(policies) for name, policies in found.items() if name.startswith("tines-app"))
        return found if named == int(threads) and "loop" in found else None

    policies: dict[str, list[int]] = wait_until(named_app_threads, what="the named threads")  # type: ignore[assignment]
    assert policies["loop"] == [SCHED_BATCH], policies
    app_threads = [policy for name, found in policies.items() if name.startswith("tines-app")
                   for policy in found]
    assert app_threads == [SCHED_OTHER] * int(threads), policies


def test_an_inline_loop_keeps_the_default_policy(tines_server: Any) -> None:
    server = tines_server(APP, "-w", "1", "--mpm", "event", "--threads", "0")
    assert get(server.port).status == 200
    assert thread_policies(worker_pid(server))["loop"] == [SCHED_OTHER]


def test_emfile_on_accept_neither_spins_nor_stalls_the_loop(tines_server: Any) -> None:
    """With too few file descriptors, accept fails with EMFILE: the loop must pause accepting
    (not spin on the level-triggered listener), keep serving the connections it has, and take
    the waiting ones as soon as descriptors free up."""
    server = tines_server(APP, "-w", "1", "--mpm", "event", "--keepalive-timeout", "120",
                          open_files=64)
    worker = worker_pid(server)
    held: list[socket.socket] = []
    waiting: list[socket.socket] = []
    try:
        # Fill the worker's descriptor table with idle keep-alive connections until a new
        # connection is not accepted (it completes in the kernel's backlog, unanswered).
        while True:
            sock = connect(server.port)
            sock.sendall(b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\n")
            with selectors.DefaultSelector() as selector:
                selector.register(sock, selectors.EVENT_READ)
                answered = bool(selector.select(2.0))
            if not answered:
                waiting.append(sock)
                break
            Reader(sock).response()
            held.append(sock)
            assert len(held) < 64, "the worker accepted more connections than it has descriptors"
        server.wait_for_log(r"accept failed: .*Too many open files")
        for _ in range(4):
            sock = connect(server.port)
            sock.sendall(b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\n")
            waiting.append(sock)
        # The connections it holds are still served while accept fails.
        held[0].sendall(b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\n")
        assert Reader(held[0]).response().status == 200
        # It retries accept now and then instead of spinning: while stalled, the worker uses
        # a small part of one CPU (a spinning loop would use all of it).
        cpu_before, wall_before = cpu_seconds(worker), time.monotonic()
        failures = len(server.wait_for_log(r"accept failed: .*Too many open files"))
        server.wait_for_log(r"accept failed: .*Too many open files", count=failures + 3)
        cpu_used = cpu_seconds(worker) - cpu_before
        wall = time.monotonic() - wall_before
        assert cpu_used < 0.5 * wall, f"the worker used {cpu_used:.2f} s of CPU in {wall:.2f} s"
        assert all(nothing_received(sock) for sock in waiting)
        # Free descriptors: every waiting connection is then accepted and answered.
        close_all(held[: len(waiting) + 2])
        for sock in waiting:
            assert Reader(sock).response().status == 200
    finally:
        close_all(held)
        close_all(waiting)


# ----- a. ten thousand idle keep-alive connections -----

IDLE = 10_000


def test_ten_thousand_idle_keepalive_connections_cost_little_and_block_nobody(tines_server: Any) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < IDLE + 100:
        pytest.skip(f"RLIMIT_NOFILE hard limit is {hard}: {IDLE} client sockets need {IDLE + 100}")
    socks: list[socket.socket] = []
    normal: http.client.HTTPConnection | None = None
    try:
        # Start the server with a small soft limit (inherited), so the worker must raise its
        # own; then this process takes the hard limit for its ten thousand client sockets.
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))
        try:
            server = tines_server(APP, "-w", "1", "--mpm", "event", "--threads", "2",
                                  "--max-connections", "20000", "--keepalive-timeout", "120",
                                  "--header-timeout", "60")
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        normal = http.client.HTTPConnection("127.0.0.1", server.port, timeout=IO_TIMEOUT)
        worker = worker_pid(server)

        def normal_answer() -> None:
            assert normal is not None
            normal.request("GET", "/hello")
            response = normal.getresponse()
            assert (response.status, response.read()) == (200, b"hello")

        for _ in range(3):  # warm up: app threads, buffers
            normal_answer()
        # Checked once the worker serves (it raises the limit as its runtime starts, which may
        # be just after the master's ready line).
        worker_soft, worker_hard = open_files_limit(worker)
        assert worker_soft == worker_hard, "the worker raises its soft RLIMIT_NOFILE to the hard limit"
        rss_before = proc_status(worker, "VmRSS")
        while len(socks) < IDLE:
            open_keepalive_connections(server.port, min(1000, IDLE - len(socks)), socks)
            normal_answer()  # another client is answered between batches
        rss_after = proc_status(worker, "VmRSS")
        for _ in range(5):
            normal_answer()
        # Every connection is still open and idle: no EOF and no stray byte on any of them.
        with selectors.DefaultSelector() as selector:
            for sock in socks:
                selector.register(sock, selectors.EVENT_READ)
            ready = selector.select(0)
            assert ready == [], f"{len(ready)} idle connections were closed or got bytes"
        # And they are live keep-alive connections: a sample asks again and is answered.
        for sock in socks[::100]:
            sock.settimeout(IO_TIMEOUT)
            sock.sendall(b"GET /hello HTTP/1.1\r\nHost: again\r\n\r\n")
            response = Reader(sock).response()
            assert (response.status, response.body) == (200, b"hello")
        growth_kib = rss_after - rss_before
        print(f"worker RSS {rss_before} KiB -> {rss_after} KiB with {IDLE} idle connections "
              f"({growth_kib * 1024 / IDLE:.0f} bytes per connection)")
        assert growth_kib < 64 * 1024, f"RSS grew by {growth_kib} KiB for {IDLE} idle connections"
    finally:
        if normal is not None:
            normal.close()
        close_all(socks)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


# ----- b. the keep-alive timeout -----


def test_idle_connections_are_closed_at_the_keepalive_timeout(tines_server: Any) -> None:
    server = tines_server(APP, "-w", "1", "--mpm", "event", "--threads", "1", "--keepalive-timeout", "1")
    socks: list[socket.socket] = []
    try:
        open_keepalive_connections(server.port, 100, socks)
        answered = time.monotonic()
        # Keep-alive is on: each is still open right after its response...
        for sock in socks[:5]:
            assert nothing_received(sock)
        # ...and every one of them then sees the server's silent close (EOF, no bytes).
        with selectors.DefaultSelector() as selector:
            for sock in socks:
                selector.register(sock, selectors.EVENT_READ)
            left = len(socks)
            end = time.monotonic() + IO_TIMEOUT
            while left:
                assert time.monotonic() < end, f"{left} idle connections were not closed"
                for key, _ in selector.select(1.0):
                    closed = key.fileobj
                    assert isinstance(closed, socket.socket)
                    assert closed.recv(1) == b"", "an idle connection got bytes instead of a close"
                    selector.unregister(closed)
                    left -= 1
        # Not before the timeout (a lower bound with a margin; the server cannot be early).
        assert time.monotonic() - answered >= 0.5
        # The worker is fine afterwards.
        assert get(server.port).body == b"hello"
    finally:
        close_all(socks)


# ----- c. a slow reader holds no app thread -----


@pytest.fixture
def big_file(tmp_path: Path) -> Path:
    path = tmp_path / "big.bin"
    path.write_bytes(PATTERN)
    return path


@contextmanager
def stalled_reader(port: int, path: str) -> Iterator[socket.socket]:
    """A client with a 4 KiB receive buffer that asks for ``path`` and reads nothing until the
    caller is done; it waits until the first response bytes arrived (so the app has run)."""
    sock = connect(port, rcvbuf=4096)
    try:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: slow\r\n\r\n".encode())
        wait_readable(sock)
        yield sock
    finally:
        sock.close()


def assert_big(response: Response) -> None:
    assert response.status == 200
    assert len(response.body) == BIG_SIZE
    assert response.body == PATTERN, "the 8 MiB body arrived corrupted or out of order"


@pytest.mark.parametrize(("mpm", "threads", "path"), [
    ("event", "1", "/big-bytes"), ("event", "1", "/big-gen"), ("event", "1", "/big-file"),
    ("event", "0", "/big-bytes"), ("event", "0", "/big-file"),
    ("thread", "1", "/big-bytes"), ("thread", "1", "/big-gen"), ("thread", "1", "/big-file"),
    ("prefork", "1", "/big-bytes"), ("prefork", "1", "/big-gen"), ("prefork", "1", "/big-file"),
])
def test_a_slow_reader_holds_no_app_thread(tines_server: Any, big_file: Path, mpm: str, threads: str,
                                           path: str) -> None:
    """One app slot (one app thread, or none: the app runs on the loop): the slow client has
    not read its 8 MiB, and others are answered because the poller finishes that response
    (every MPM since ADR 0009; the thread MPM used to hold its only app thread until the send
    timeout)."""
    server = tines_server(APP, "-w", "1", "--mpm", mpm, "--threads", threads,
                          "--max-response-buffer", "16777216", "--send-timeout", "60",
                          env={"EVENT_APP_FILE": str(big_file)})
    with stalled_reader(server.port, path) as slow:
        for _ in range(5):
            response = get(server.port, timeout=10)
            assert (response.status, response.body) == (200, b"hello")
        reader = Reader(slow)
        assert_big(reader.response())
        assert reader.buf == b"", "nothing follows the response"
        # The connection is kept after the loop finished the write.
        slow.sendall(b"GET /hello HTTP/1.1\r\nHost: slow\r\n\r\n")
        assert reader.response().body == b"hello"


# ----- d. admission: 503 when the queue is full, never for idle connections -----


def blocked_at_gate(listener: socket.socket, sock: socket.socket, request: bytes) -> socket.socket:
    """Sends ``request`` (event_app's ``/block?A``) on ``sock`` and returns the app's connection
    to the gate once an app thread runs it and waits there (released by a byte on it)."""
    sock.sendall(request)
    held, _ = listener.accept()
    held.settimeout(IO_TIMEOUT)
    assert held.recv(16) == b"A\n"
    return held


@pytest.mark.parametrize("mpm", ["thread", "event"])
def test_a_full_queue_answers_503_at_once_while_the_app_is_busy(tines_server: Any, gate: tuple[socket.socket, str],
                                                                mpm: str) -> None:
    """Admission on both names of the one pool (ADR 0010): `--mpm thread` used to queue
    without bound."""
    listener, gate_path = gate
    server = tines_server(APP, "-w", "1", "--mpm", mpm, "--threads", "1",
                          "--max-queued-requests", "1", env={"EVENT_APP_GATE": gate_path})
    a, b, c = (connect(server.port) for _ in range(3))
    held = None
    try:
        held = blocked_at_gate(listener, a, b"GET /block?A HTTP/1.1\r\nHost: t\r\n\r\n")
        b.sendall(b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\n")  # waits in the queue
        c.sendall(b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\n")  # the queue is full
        refused = Reader(c).response()
        assert refused.status == 503, refused
        assert refused.headers.get("retry-after") == "1", refused.headers
        assert refused.headers.get("connection") == "close", refused.headers
        assert c.recv(1) == b"", "a refused connection is closed"
        # The 503 came while A was still running: neither A nor B has an answer yet.
        assert nothing_received(a), "A answered before C's 503 was read"
        assert nothing_received(b), "B answered before A was released"
        held.sendall(b"x")
        answer_a = Reader(a).response()
        assert (answer_a.status, answer_a.body) == (200, b"released A")
        answer_b = Reader(b).response()
        assert (answer_b.status, answer_b.body) == (200, b"hello")
        # Admission is restored once the queue drains.
        assert get(server.port).status == 200
    finally:
        for sock in (a, b, c):
            sock.close()
        if held is not None:
            held.close()


def test_idle_connections_never_trigger_503(tines_server: Any) -> None:
    server = tines_server(APP, "-w", "1", "--mpm", "event", "--threads", "1", "--max-queued-requests", "1",
                          "--keepalive-timeout", "60")
    socks: list[socket.socket] = []
    try:
        # One after another (fifty requests at once could rightly fill the one queue place).
        for _ in range(50):
            sock = connect(server.port)
            socks.append(sock)
            sock.sendall(b"GET /hello HTTP/1.1\r\nHost: idle\r\n\r\n")
            response = Reader(sock).response()
            assert (response.status, response.body) == (200, b"hello")
        # Fifty idle connections and one queue place: a new client is answered every time...
        fresh = connect(server.port)
        socks.append(fresh)
        reader = Reader(fresh)
        for _ in range(20):
            fresh.sendall(b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\n")
            response = reader.response()
            assert (response.status, response.body) == (200, b"hello")
        # ...and so is each idle connection when it asks again, one after another.
        for sock in socks[:50]:
            sock.settimeout(IO_TIMEOUT)
            sock.sendall(b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\n")
            response = Reader(sock).response()
            assert (response.status, response.body) == (200, b"hello")
    finally:
        close_all(socks)


# ----- e. request bodies -----


def body_pattern(size: int) -> bytes:
    return bytes((i * 7 + i // 251) & 0xFF for i in range(size))


def test_a_slow_small_upload_is_read_by_the_loop_and_echoed(tines_server: Any) -> None:
    server = tines_server(APP, "-w", "1", "--mpm", "event", "--threads", "1",
                          "--request-buffer-memory", "65536")
    body = body_pattern(32 << 10)
    with connect(server.port) as sock:
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % len(body))
        pieces = [body[i:i + 4096] for i in range(0, len(body), 4096)]
        for index, piece in enumerate(pieces):
            sock.sendall(piece)
            if index == len(pieces) // 2:
                # Half the body is in: the loop holds the upload, so the only app thread is
                # free for another client (under the thread MPM it would be reading wsgi.input).
                assert nothing_received(sock)
                response = get(server.port, timeout=10)
                assert (response.status, response.body) == (200, b"hello")
            else:
                time.sleep(0.02)  # a slow client: pieces some time apart
        response = Reader(sock).response()
        assert response.status == 200
        assert response.body == body


def test_a_large_body_streams_through_the_app_intact(tines_server: Any) -> None:
    server = tines_server(APP, "-w", "1", "--mpm", "event", "--threads", "1",
                          "--request-buffer-memory", "65536")
    body = body_pattern(1 << 20)
    client = http.client.HTTPConnection("127.0.0.1", server.port, timeout=IO_TIMEOUT)
    try:
        client.request("POST", "/echo", body=body)
        response = client.getresponse()
        assert response.status == 200
        assert response.read() == body
        client.request("GET", "/hello")  # same connection
        assert client.getresponse().read() == b"hello"
    finally:
        client.close()


def test_chunked_and_100_continue_bodies_are_echoed(tines_server: Any) -> None:
    server = tines_server(APP, "-w", "1", "--mpm", "event", "--threads", "1")
    with connect(server.port) as sock:
        reader = Reader(sock)
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"5\r\nhello\r\n")
        sock.sendall(b"7;ext=1\r\n, world\r\n0\r\nX-Trailer: t\r\n\r\n")
        response = reader.response()
        assert (response.status, response.body) == (200, b"hello, world")
        # 100-continue: nothing is sent before the interim response asks for the body.
        body = body_pattern(32 << 10)
        sock.sendall(b"PUT /echo HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n"
                     b"Expect: 100-continue\r\n\r\n" % len(body))
        interim = reader.response()
        assert interim.status == 100, interim
        sock.sendall(body)
        response = reader.response()
        assert response.status == 200
        assert response.body == body
        # Chunked with 100-continue as well.
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
                     b"Expect: 100-continue\r\n\r\n")
        assert reader.response().status == 100
        sock.sendall(b"3\r\nabc\r\n0\r\n\r\n")
        response = reader.response()
        assert (response.status, response.body) == (200, b"abc")


# ----- f. threads 0: the app on the loop thread -----


def test_threads_0_serves_keepalive_and_pipelining(tines_server: Any) -> None:
    server = tines_server(APP, "-w", "1", "--mpm", "event", "--threads", "0")
    client = http.client.HTTPConnection("127.0.0.1", server.port, timeout=IO_TIMEOUT)
    try:
        client.connect()
        first = client.sock
        for _ in range(3):
            client.request("GET", "/hello")
            response = client.getresponse()
            assert (response.status, response.read()) == (200, b"hello")
        assert client.sock is first, "the three requests shared one keep-alive connection"
    finally:
        client.close()
    with connect(server.port) as sock:
        sock.sendall(b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\n"
                     b"HEAD /hello HTTP/1.1\r\nHost: t\r\n\r\n"
                     b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nabcde"
                     b"GET /hello HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        reader = Reader(sock)
        first_response = reader.response()
        assert (first_response.status, first_response.body) == (200, b"hello")
        head = reader.response(head_only=True)
        assert (head.status, head.headers.get("content-length")) == (200, "5")
        echo = reader.response()
        assert (echo.status, echo.body) == (200, b"abcde")
        last = reader.response()
        assert (last.status, last.body, last.headers.get("connection")) == (200, b"hello", "close")
        assert reader.buf == b"" and sock.recv(1) == b"", "nothing after the last response, then EOF"


def test_threads_0_needs_the_event_mpm() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tines", "serve", "examples/hello.py:app", "-b", "127.0.0.1:0",
         "--mpm", "thread", "--threads", "0"],
        capture_output=True, text=True, timeout=60, cwd=ROOT, stdin=subprocess.DEVNULL,
        env={"PYTHONPATH": str(APPS), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("tines: error:") and "threads" in lines[0] and "event" in lines[0], lines[0]


# ----- review regressions: streaming, send timeout, admission with idle threads -----


def test_a_streamed_block_keeps_flowing_while_the_app_produces_the_next(
        tines_server: Any, gate: tuple[socket.socket, str]) -> None:
    """PEP 3333: transmission continues while the app produces its next block. The app yields
    4 MiB, then blocks until the test releases it; the client reads steadily through a small
    window, so most of the block is still queued when the app blocks: the loop must deliver
    it all while the app thread still holds the request."""
    listener, path = gate
    server = tines_server(APP, "-w", "1", "--mpm", "event", "--threads", "1",
                          env={"EVENT_APP_GATE": path})
    with connect(server.port, rcvbuf=65536) as client:
        client.sendall(b"GET /stream-block?s HTTP/1.1\r\nHost: t\r\n\r\n")
        holder, _ = listener.accept()
        with holder:
            holder.settimeout(IO_TIMEOUT)
            assert holder.recv(64) == b"s\n", "the app thread holds the request"
            reader = Reader(client)
            while b"\r\n\r\n" not in reader.buf:
                assert reader._fill(), "closed before the head"
            head, _, rest = bytes(reader.buf).partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200 ")
            received = len(rest)
            while received < 4 << 20:
                chunk = client.recv(1 << 16)  # times out (fails) if the block stalls
                assert chunk, "closed mid-body"
                received += len(chunk)
            assert received == 4 << 20, "nothing past the first block before the release"
            holder.sendall(b"x")
        tail = b""
        while len(tail) < 3:
            chunk = client.recv(16)
            assert chunk
            tail += chunk
        assert tail == b"end"


def test_a_client_that_sends_but_never_reads_is_cut_off_at_the_send_timeout(tines_server: Any) -> None:
    """Bytes from the client do not renew the send timeout of a response it does not read."""
    server = tines_server(APP, "-w", "1", "--mpm", "event", "--send-timeout", "1",
                          "--max-response-buffer", str(16 << 20))
    with connect(server.port, rcvbuf=4096) as stuck:
        stuck.sendall(b"GET /big-bytes HTTP/1.1\r\nHost: t\r\n\r\n")
        closed = False
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not closed:
            try:
                stuck.send(b"x")  # a trickle of bytes, never a read
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            with selectors.DefaultSelector() as selector:
                selector.register(stuck, selectors.EVENT_READ)
                selector.select(0.2)
            if _peer_closed(stuck):
                closed = True
        assert closed, "the server kept a client that never reads past the send timeout"


def _peer_closed(sock: socket.socket) -> bool:
    """True once the server has closed its end (reads reach EOF or a reset after the data)."""
    sock.setblocking(False)
    try:
        while True:
            chunk = sock.recv(1 << 20)
            if not chunk:
                return True
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True
    finally:
        sock.settimeout(IO_TIMEOUT)


def test_requests_idle_threads_take_at_once_never_count_as_queued(tines_server: Any) -> None:
    """--max-queued-requests 1 with 4 idle app threads: bursts of 3 simultaneous requests are
    all taken by idle threads, so none is refused. Each burst starts once the server closed
    the previous burst's connections (`Connection: close`): the app threads are then done
    with them. (A request that arrives while every thread still finishes its previous
    response does wait, and counts.)"""
    server = tines_server(APP, "-w", "1", "--mpm", "event", "--threads", "4",
                          "--max-queued-requests", "1")
    for _ in range(20):
        socks = [connect(server.port) for _ in range(3)]
        try:
            for sock in socks:
                sock.sendall(b"GET /hello HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            assert [Reader(sock).response().status for sock in socks] == [200, 200, 200]
            for sock in socks:
                wait_readable(sock)
                assert sock.recv(1) == b"", "the server did not close after Connection: close"
        finally:
            close_all(socks)


def listener_watched(pid: int, port: int) -> bool:
    """Whether the loop of worker ``pid`` watches the listening socket on ``port`` (the
    listener's fd is in the worker's epoll set: /proc/PID/fdinfo of its eventpoll fd)."""
    inode = None
    with open("/proc/net/tcp") as table:
        for line in table.readlines()[1:]:
            fields = line.split()
            if int(fields[1].split(":")[1], 16) == port and fields[3] == "0A":
                inode = fields[9]
    assert inode is not None, f"nothing listens on {port}"
    fds = {name: os.readlink(f"/proc/{pid}/fd/{name}") for name in os.listdir(f"/proc/{pid}/fd")}
    listener_fd = next(name for name, target in fds.items() if target == f"socket:[{inode}]")
    polls = [name for name, target in fds.items() if target == "anon_inode:[eventpoll]"]
    assert len(polls) == 1, fds
    with open(f"/proc/{pid}/fdinfo/{polls[0]}") as info:
        return any(line.split()[:2] == ["tfd:", listener_fd] for line in info)


@pytest.mark.parametrize("mpm", ["thread", "event"])
def test_a_connection_its_app_thread_closes_lets_a_full_loop_listen_again(
        tines_server: Any, gate: tuple[socket.socket, str], mpm: str) -> None:
    """`--max-connections 1`: a `Connection: close` request runs while a second connection
    arrives, so the loop stops listening (full). The app thread closes the first connection
    itself (its client sees the response, then EOF) and hands back only its token; since the
    loop is not listening, that return must wake it, or the second connection would wait for
    the loop's one-second heartbeat (150 such waits pass the test's time limit)."""
    listener, gate_path = gate
    server = tines_server(APP, "-w", "1", "--mpm", mpm, "--threads", "1",
                          "--max-connections", "1", env={"EVENT_APP_GATE": gate_path})
    pid = worker_pid(server)
    for index in range(150):
        a = connect(server.port)
        b = connect(server.port)
        held = None
        try:
            held = blocked_at_gate(listener, a,
                                   b"GET /block?A HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            b.sendall(b"GET /hello HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            wait_until(lambda: not listener_watched(pid, server.port),
                       what="the full loop to stop listening")
            held.sendall(b"x")
            for sock, body in ((a, b"released A"), (b, b"hello")):
                response = Reader(sock).response()
                assert (response.status, response.body) == (200, body), index
                wait_readable(sock)
                assert sock.recv(1) == b"", "the server did not close after Connection: close"
        finally:
            close_all([a, b])
            if held is not None:
                held.close()


@pytest.mark.parametrize("mpm", ["prefork", "thread", "event"])
def test_an_error_response_reaches_a_client_still_sending_its_body(tines_server: Any, mpm: str) -> None:
    """A 413 refused before the body is read, sent while the client is still uploading: the
    server shuts its side and drains (lingering close) instead of closing with unread bytes,
    which would make the kernel answer with a reset that can destroy the 413 before the
    client reads it."""
    server = tines_server(APP, "-w", "1", "--mpm", mpm, "--max-body-size", "1048576")
    body = b"x" * (8 << 20)
    for _ in range(5):
        with connect(server.port) as sock:
            sock.sendall(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % len(body))
            try:
                sock.sendall(body)  # the server refuses it; it may stop reading meanwhile
            except (BrokenPipeError, ConnectionResetError):
                pass
            response = Reader(sock).response()
            assert response.status == 413
            assert response.headers.get("connection") == "close"
