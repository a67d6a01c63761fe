"""The slow-client attack of issue 14, for the e2e tests and the benchmark suite alike.

``SlowUploaders(port, count)``: each client sends a POST head (``Content-Length``, or chunked)
and then trickles its body, one byte per ``1 / rate`` seconds. ``NonReaders(port, count,
path)``: each client sends a GET for a large response and never reads a byte of it (a small
``SO_RCVBUF``, set before connecting, keeps the kernel from taking most of it off the server).

Both are context managers: entering starts one background thread that connects every client
and sends its head (``wait_ready`` waits for that: a readiness condition, never a sleep);
leaving closes every socket. The uploaders' thread then feeds all of them from one selector
(never a thread per client) and reads what the server answers. Everything is bounded: loopback
only (127.0.0.1), connects time out, and the trickle stops after ``lifetime`` seconds.

How each client ended, as ``outcomes()`` counts it (a ``collections.Counter``):

- ``"408"`` (any status code, as a string): the server answered; for an uploader that is the
  end of it, whether or not the server then closed;
- ``"closed"``: the server closed the connection without answering (an uploader read EOF; for
  a non-reader, the server's end of the connection is no longer ESTABLISHED);
- ``"reset"``: the connection was reset (a send or read failed with ECONNRESET / EPIPE);
- ``"connected"``: none of these yet. ``connected()`` counts these.

A non-reader cannot learn from its own socket that the server closed it: the server's FIN
queues behind response bytes that a full receive window never lets through. Its outcome is
therefore read from the kernel's table of TCP sockets (``/proc/net/tcp``): the server's socket
of that connection (local port = the server's, remote port = the client's) has left
ESTABLISHED (FIN_WAIT1 behind the unsent bytes, or gone) once the server closed it. Nothing is
read from the non-reader's socket but a one-byte peek, which consumes nothing.

This module imports nothing from the tests (``benches/run.py`` imports it too).
"""

from __future__ import annotations

import abc
import collections
import selectors
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

HOST = "127.0.0.1"
CONNECTED = "connected"
CLOSED = "closed"
RESET = "reset"
CONNECT_TIMEOUT_S = 10.0
# Kept of what the server answers an uploader: the status line is all that is read from it.
ANSWER_KEPT = 4096
# The non-readers' receive buffer (the kernel doubles it and keeps a floor): small, so that
# the server cannot hand most of a multi-MiB response to the kernel and forget it.
NON_READER_RCVBUF = 4096
# How often the selector loop wakes when no byte is due (to notice ``close``).
WAKE_S = 0.1
# /proc/net/tcp's state code of an established connection.
TCP_ESTABLISHED = 0x01
PROC_NET_TCP = Path("/proc/net/tcp")


class AttackNotReady(Exception):
    """The attackers could not all connect and send their heads in time; says how many did."""


@dataclass
class _Client:
    sock: socket.socket
    sent: int = 0  # body bytes sent
    status: int | None = None
    end: str = CONNECTED
    answer: bytes = b""

    @property
    def outcome(self) -> str:
        return str(self.status) if self.status is not None else self.end


def server_socket_states(port: int) -> dict[int, int]:
    """``{client port: TCP state}`` of the server's sockets on 127.0.0.1:``port`` (from
    /proc/net/tcp; the listening socket is left out)."""
    states = {}
    for line in PROC_NET_TCP.read_text().splitlines()[1:]:
        fields = line.split()
        local_port = int(fields[1].rsplit(":", 1)[1], 16)
        remote_port = int(fields[2].rsplit(":", 1)[1], 16)
        if local_port == port and remote_port != 0:
            states[remote_port] = int(fields[3], 16)
    return states


class _Attackers(abc.ABC):
    """What both kinds share: the clients, the connecting thread, readiness, outcomes."""

    def __init__(self, port: int, count: int, lifetime: float) -> None:
        self.port = port
        self.count = count
        self.lifetime = lifetime
        self.clients: list[_Client] = []
        self.error: BaseException | None = None
        self._changed = threading.Condition()
        self._ready = False
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=type(self).__name__, daemon=True)

    # -- what each kind says
    def _socket(self) -> socket.socket:
        return socket.socket(socket.AF_INET, socket.SOCK_STREAM)

    @abc.abstractmethod
    def _head(self) -> bytes:
        """The request head each client of this kind sends."""

    def _after_ready(self) -> None:
        """The thread's work once every head is sent (the uploaders' trickle)."""

    # -- the thread
    def _run(self) -> None:
        try:
            for _ in range(self.count):
                if self._stopping.is_set():
                    return
                sock = self._socket()
                self.clients.append(_Client(sock))  # appended first: closed at exit whatever happens
                sock.settimeout(CONNECT_TIMEOUT_S)
                sock.connect((HOST, self.port))
                sock.sendall(self._head())
                sock.setblocking(False)
            with self._changed:
                self._ready = True
                self._changed.notify_all()
            self._after_ready()
        except BaseException as error:  # noqa: BLE001 - reported to the waiter, not lost
            with self._changed:
                self.error = error
                self._changed.notify_all()

    def __enter__(self) -> "_Attackers":
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the thread and close every client's socket."""
        self._stopping.set()
        self._thread.join(CONNECT_TIMEOUT_S + 5)
        for client in self.clients:
            client.sock.close()

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Return once every client is connected and has sent its head; raise AttackNotReady
        if that does not happen within ``timeout`` or connecting failed."""
        with self._changed:
            self._changed.wait_for(lambda: self._ready or self.error is not None, timeout)
            if not self._ready:
                raise AttackNotReady(f"{len(self.clients)} of {self.count} "
                                     f"{type(self).__name__} connected: {self.error or 'timed out'}")

    def outcomes(self) -> collections.Counter[str]:
        """How many clients ended each way (see the module's doc), now."""
        return collections.Counter(self._outcome(client) for client in self.clients)

    def _outcome(self, client: _Client) -> str:
        return client.outcome

    def connected(self) -> int:
        """How many clients are still connected (no answer, no close, no reset)."""
        return self.outcomes()[CONNECTED]

    def wait_ended(self, timeout: float) -> collections.Counter[str]:
        """Wait (polling, at most ``timeout`` seconds) until no client is connected any more;
        the outcomes then, or as they stand at the deadline."""
        end = time.monotonic() + timeout
        while (found := self.outcomes())[CONNECTED] and time.monotonic() < end:
            time.sleep(WAKE_S)
        return found


class SlowUploaders(_Attackers):
    """``count`` clients each POSTing ``body_size`` bytes to ``path`` at ``rate`` bytes per
    second (``Content-Length``, or ``chunked``: one chunk per byte)."""

    def __init__(self, port: int, count: int, body_size: int = 1_000_000, rate: float = 1.0,
                 chunked: bool = False, path: str = "/upload", lifetime: float = 300.0) -> None:
        super().__init__(port, count, lifetime)
        self.body_size = body_size
        self.interval = 1.0 / rate
        self.chunked = chunked
        self.path = path

    def __enter__(self) -> "SlowUploaders":
        super().__enter__()
        return self

    def _head(self) -> bytes:
        framing = ("Transfer-Encoding: chunked" if self.chunked
                   else f"Content-Length: {self.body_size}")
        return (f"POST {self.path} HTTP/1.1\r\nHost: {HOST}\r\n"
                f"Content-Type: application/octet-stream\r\n{framing}\r\n\r\n").encode()

    def _after_ready(self) -> None:
        selector = selectors.DefaultSelector()
        try:
            for client in self.clients:
                selector.register(client.sock, selectors.EVENT_READ, client)
            started = time.monotonic()
            next_byte = started + self.interval
            while not self._stopping.is_set() and time.monotonic() - started < self.lifetime:
                if not any(c.end == CONNECTED and c.status is None for c in self.clients):
                    return
                for key, _ in selector.select(max(0.0, min(WAKE_S, next_byte - time.monotonic()))):
                    self._readable(key.data, selector)
                if time.monotonic() >= next_byte:
                    next_byte += self.interval
                    for client in self.clients:
                        self._send_byte(client, selector)
        finally:
            selector.close()

    def _send_byte(self, client: _Client, selector: selectors.BaseSelector) -> None:
        if client.end != CONNECTED or client.status is not None or client.sent >= self.body_size:
            return
        data = b"1\r\nx\r\n" if self.chunked else b"x"
        if self.chunked and client.sent + 1 == self.body_size:
            data += b"0\r\n\r\n"
        try:
            client.sock.send(data)
        except BlockingIOError:
            return  # the server is not reading: the byte is due again at the next tick
        except OSError:
            self._ended(client, RESET, selector)
            return
        client.sent += 1

    def _readable(self, client: _Client, selector: selectors.BaseSelector) -> None:
        try:
            data = client.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            self._ended(client, RESET, selector)
            return
        if not data:
            self._ended(client, CLOSED, selector)
            return
        client.answer = (client.answer + data)[:ANSWER_KEPT]
        if client.status is None and b"\r\n" in client.answer:
            line = client.answer.split(b"\r\n", 1)[0].split()
            with self._changed:
                client.status = int(line[1]) if len(line) > 1 and line[1].isdigit() else 0

    def _ended(self, client: _Client, how: str, selector: selectors.BaseSelector) -> None:
        selector.unregister(client.sock)
        with self._changed:
            client.end = how


class NonReaders(_Attackers):
    """``count`` clients each sending ``GET path`` and never reading the response."""

    def __init__(self, port: int, count: int, path: str = "/big",
                 lifetime: float = 300.0) -> None:
        super().__init__(port, count, lifetime)
        self.path = path

    def __enter__(self) -> "NonReaders":
        super().__enter__()
        return self

    def _socket(self) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, NON_READER_RCVBUF)
        return sock

    def _head(self) -> bytes:
        return f"GET {self.path} HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode()

    def outcomes(self) -> collections.Counter[str]:
        states = server_socket_states(self.port)
        found: collections.Counter[str] = collections.Counter()
        for client in list(self.clients):
            found[self._non_reader_outcome(client, states)] += 1
        return found

    def _non_reader_outcome(self, client: _Client, states: dict[int, int]) -> str:
        try:
            client_port = client.sock.getsockname()[1]
            peeked = client.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            peeked = None  # nothing arrived yet
        except OSError:
            return RESET
        if peeked == b"":
            return CLOSED
        return CONNECTED if states.get(client_port) == TCP_ESTABLISHED else CLOSED

    def responding(self) -> int:
        """How many clients have response bytes waiting (the server began writing to them)."""
        waiting = 0
        for client in self.clients:
            try:
                waiting += bool(client.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
            except OSError:
                pass
        return waiting
