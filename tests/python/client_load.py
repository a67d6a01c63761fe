"""A load that counts every response: client threads in the test process sending GETs until
stopped, for tests that run a deploy operation (reload, upgrade, stop) under load.

Each client keeps one connection (``keep_alive=True``; http.client opens a new one after a
response with ``Connection: close``, as a browser or requests does) or opens one per request.
Every request ends as exactly one of: ``ok`` (a 200), ``bad_status`` (any other status) or a
failure (a reset, an EOF before the response, a timeout), recorded with its reason in
``failures``. Nothing is retried: a request lost to a reset counts, which is the point.

Failures are also counted by where they happened: ``failed_new`` on a connection's first
request (it may never have been accepted: a reset from a closing listener, a refused connect)
and ``failed_reused`` on a connection that had already served a response. With
``stop_when_refused=True`` a client ends at its first refused connection (the server is gone),
so a load can run through a stop.

The bodies are counted too (``bodies``), so an app that answers with its pid or its code
version shows which generation served what. With ``ssl_context`` the clients speak HTTPS and
count the certificate each new connection was shown (``peer_certificates``, DER), so a test sees
which certificate served what. Wait on ``wait_more`` / ``wait_for_body`` (they
poll the counts), never on a sleep.
"""

from __future__ import annotations

import collections
import http.client
import ssl
import threading
from collections.abc import Callable

from conftest import wait_until

FAILURES_KEPT = 50
"""Failure reasons kept for the assertion message (the count is always exact)."""


class ClientLoad:
    """``with ClientLoad(port) as load: ...``; then ``load.failed == 0``."""

    def __init__(self, port: int, clients: int = 4, keep_alive: bool = True, path: str = "/",
                 host: str = "127.0.0.1", timeout: float = 30.0, stop_when_refused: bool = False,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.port = port
        self.ssl_context = ssl_context
        self.host = host
        self.path = path
        self.timeout = timeout
        self.headers = {} if keep_alive else {"Connection": "close"}
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.sent = 0
        self.ok = 0
        self.bad_status = 0
        self.failed = 0
        self.failures: list[str] = []
        self.failure_kinds: collections.Counter[str] = collections.Counter()
        """Failures by exception class name (``ConnectionResetError``...), exact counts."""
        self.failed_new = 0
        self.failed_reused = 0
        self.refused = 0
        self.stop_when_refused = stop_when_refused
        self.bodies: collections.Counter[bytes] = collections.Counter()
        self.peer_certificates: collections.Counter[bytes] = collections.Counter()
        """HTTPS: the certificate (DER) each new connection that served a 200 was shown."""
        self.threads = [threading.Thread(target=self.client, daemon=True) for _ in range(clients)]

    def connection(self) -> http.client.HTTPConnection:
        if self.ssl_context is not None:
            return http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout, context=self.ssl_context)
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)

    def client(self) -> None:
        connection = self.connection()
        while not self.stop.is_set():
            with self.lock:
                self.sent += 1
            reused = connection.sock is not None
            peer = None
            try:
                connection.request("GET", self.path, headers=self.headers)
                if not reused and isinstance(connection.sock, ssl.SSLSocket):
                    peer = connection.sock.getpeercert(binary_form=True)
                response = connection.getresponse()
                body = response.read()
            except (OSError, http.client.HTTPException) as error:
                refused = isinstance(error, ConnectionRefusedError)
                with self.lock:
                    self.failed += 1
                    self.refused += refused
                    self.failure_kinds[type(error).__name__] += 1
                    if reused:
                        self.failed_reused += 1
                    else:
                        self.failed_new += 1
                    if len(self.failures) < FAILURES_KEPT:
                        self.failures.append(repr(error))
                connection.close()
                if refused and self.stop_when_refused:
                    break
                connection = self.connection()
                continue
            with self.lock:
                if response.status == 200:
                    self.ok += 1
                    self.bodies[body] += 1
                    if peer is not None:
                        self.peer_certificates[peer] += 1
                else:
                    self.bad_status += 1
                    if len(self.failures) < FAILURES_KEPT:
                        self.failures.append(f"status {response.status}: {body[:200]!r}")
        connection.close()

    def __enter__(self) -> "ClientLoad":
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()

    def finish(self) -> None:
        """Stop the clients; each ends the request it is in first (counted)."""
        self.stop.set()
        for thread in self.threads:
            thread.join(self.timeout + 10)

    def count(self) -> int:
        """Successful responses so far."""
        with self.lock:
            return self.ok

    def wait_more(self, more: int, what: str = "more responses", deadline: float = 30.0) -> None:
        """Wait until ``more`` responses succeeded after now."""
        target = self.count() + more
        wait_until(lambda: self.count() >= target, deadline, what)

    def seen(self, predicate: Callable[[bytes], bool]) -> int:
        """How many successful responses had a body matching ``predicate``."""
        with self.lock:
            return sum(n for body, n in self.bodies.items() if predicate(body))

    def wait_for_body(self, predicate: Callable[[bytes], bool], count: int = 1,
                      what: str = "a matching response", deadline: float = 30.0) -> None:
        """Wait until ``count`` successful responses had a body matching ``predicate``."""
        wait_until(lambda: self.seen(predicate) >= count, deadline, what)

    def shown(self, certificate: bytes) -> int:
        """HTTPS: how many new connections that served a 200 were shown ``certificate`` (DER)."""
        with self.lock:
            return self.peer_certificates[certificate]

    def wait_for_certificate(self, certificate: bytes, count: int = 1, what: str = "a certificate",
                             deadline: float = 30.0) -> None:
        """HTTPS: wait until ``count`` new connections that served a 200 were shown ``certificate``."""
        wait_until(lambda: self.shown(certificate) >= count, deadline, what)

    def summary(self) -> str:
        """Sent / ok / failed, with the first failure reasons (for assertion messages)."""
        with self.lock:
            return (f"sent {self.sent}, ok {self.ok}, bad status {self.bad_status}, "
                    f"failed {self.failed} (on a new connection {self.failed_new}, of them refused "
                    f"{self.refused}; on a kept-alive one {self.failed_reused}): {self.failures[:10]}")

    def assert_nothing_lost(self) -> None:
        """Every request got a 200 (call after ``finish``)."""
        with self.lock:
            clean = self.failed == 0 and self.bad_status == 0 and self.ok == self.sent
        assert clean, self.summary()
