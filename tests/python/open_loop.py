"""An open-loop load on new connections, paced by the clock: streams of GETs each sent at a
fixed rate whatever the server does (a request is not held back by the previous one's answer,
as a crowd of independent clients is not), every request on its own connection with
``Connection: close``, each stream with its own per-request timeout.

One thread and one ``selectors`` loop hold every connection (hundreds at once), so the pace
does not depend on how many requests are outstanding. The schedule is the clock: request k of
a stream is due at ``start + k / rate``; a late turn of the loop sends every request that fell
due meanwhile. It is bounded: ``rate * duration`` requests per stream, and every request ends
(an answer, a failure or its timeout) by ``duration + timeout``.

Every request ends as exactly one of: ``answered`` (a whole response; its status counted in
``statuses``), ``failed`` (a reset, or the connection closed before a whole response), or
``timed_out`` (no whole response within the stream's timeout; the client closes). Nothing is
retried.
"""

from __future__ import annotations

import collections
import errno
import selectors
import socket
import time
from dataclasses import dataclass, field


@dataclass
class Stream:
    """One kind of request sent at a fixed rate, and how each ended."""

    path: str
    rate: float
    """Requests per second."""
    timeout: float
    """Seconds a request may take, from its due time, before the client gives up on it."""
    sent: int = 0
    answered: int = 0
    failed: int = 0
    timed_out: int = 0
    statuses: collections.Counter[int] = field(default_factory=collections.Counter)
    failures: collections.Counter[str] = field(default_factory=collections.Counter)
    latest: float = 0.0
    """Seconds from due time to the whole answer, the longest seen."""

    def ok(self) -> int:
        """Answers with status 200."""
        return self.statuses[200]

    def summary(self) -> str:
        """One line of counts, for reports and assertion messages."""
        return (f"{self.path}: sent {self.sent}, answered {self.answered} ({self.ok()} x 200), "
                f"failed {self.failed} {dict(self.failures)}, timed out {self.timed_out}, "
                f"slowest answer {self.latest:.2f} s")


@dataclass(eq=False)
class Request:
    """One request on its own connection (hashed by identity: a member of the open set)."""

    stream: Stream
    sock: socket.socket
    due: float
    payload: bytes
    received: bytearray = field(default_factory=bytearray)


def run(port: int, streams: list[Stream], duration: float, host: str = "127.0.0.1") -> None:
    """Send every stream's requests for ``duration`` seconds from now and wait until each has
    ended; the counts are left in the streams."""
    selector = selectors.DefaultSelector()
    start = time.monotonic()
    due_counts = [int(stream.rate * duration) for stream in streams]
    open_requests: set[Request] = set()
    in_order: list[collections.deque[Request]] = [collections.deque() for _ in streams]
    """Each stream's requests in the order they were sent, so in the order they time out."""

    def launch(index: int, due: float) -> None:
        stream = streams[index]
        stream.sent += 1
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        code = sock.connect_ex((host, port))
        payload = (f"GET {stream.path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").encode()
        request = Request(stream, sock, due, payload)
        if code not in (0, errno.EINPROGRESS):
            end(request, failure=errno.errorcode.get(code, str(code)))
            sock.close()
            return
        open_requests.add(request)
        in_order[index].append(request)
        selector.register(sock, selectors.EVENT_WRITE, request)

    def end(request: Request, failure: str | None = None, timed_out: bool = False) -> None:
        stream = request.stream
        if timed_out:
            stream.timed_out += 1
        elif failure is not None:
            stream.failed += 1
            stream.failures[failure] += 1
        else:
            stream.answered += 1
            status_line = bytes(request.received).split(b"\r\n", 1)[0].split()
            stream.statuses[int(status_line[1])] += 1
            stream.latest = max(stream.latest, time.monotonic() - request.due)

    def close(request: Request) -> None:
        open_requests.discard(request)
        selector.unregister(request.sock)
        request.sock.close()

    def complete(received: bytes, closed: bool) -> bool:
        head, separator, body = received.partition(b"\r\n\r\n")
        if not separator:
            return False
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                return len(body) >= int(value)
        return closed  # no length: the close ends the body

    def on_event(request: Request, mask: int) -> None:
        if mask & selectors.EVENT_WRITE:
            error = request.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if error:
                close(request)
                end(request, failure=errno.errorcode.get(error, str(error)))
                return
            try:
                request.sock.send(request.payload)  # a few dozen bytes: an empty socket takes them
            except OSError as error:
                close(request)
                end(request, failure=type(error).__name__)
                return
            selector.modify(request.sock, selectors.EVENT_READ, request)
            return
        try:
            chunk = request.sock.recv(65536)
        except OSError as error:
            close(request)
            end(request, failure=type(error).__name__)
            return
        request.received += chunk
        closed = not chunk
        whole = complete(bytes(request.received), closed)
        if not whole and not closed:
            return
        close(request)
        if whole:
            end(request)
        else:
            end(request, failure="closed before a whole response")

    sent = [0] * len(streams)
    while True:
        now = time.monotonic()
        for index, stream in enumerate(streams):
            while sent[index] < due_counts[index] and start + sent[index] / stream.rate <= now:
                launch(index, start + sent[index] / stream.rate)
                sent[index] += 1
        wakes = [start + sent[i] / s.rate for i, s in enumerate(streams) if sent[i] < due_counts[i]]
        for queue in in_order:
            while queue and (queue[0] not in open_requests or now >= queue[0].due + queue[0].stream.timeout):
                request = queue.popleft()
                if request in open_requests:
                    close(request)
                    end(request, timed_out=True)
            if queue:
                wakes.append(queue[0].due + queue[0].stream.timeout)
        if not wakes:
            return
        for key, mask in selector.select(max(0.0, min(wakes) - time.monotonic())):
            on_event(key.data, mask)
