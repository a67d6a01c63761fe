"""The app the metrics tests drive (tests/python/e2e/test_metrics.py).

Routes: ``/status/NNN`` answers with status NNN and a 5-byte body; ``/stream`` streams three
pieces (chunked); ``/raise`` raises (the server answers 500); ``/held-close`` answers at once
and its iterable's ``close()`` (which the server calls after the response is sent, PEP 3333)
waits at the gate of ``GATE_SOCKET`` (tests/python/e2e/apps/gate.py) until the test lets it go.
Any method.
"""

import os
import socket
from http import HTTPStatus


class HeldClose:
    """A body whose close() waits at the test's gate."""

    def __iter__(self):
        yield b"sent\n"

    def close(self):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as gate:
            gate.connect(os.environ["GATE_SOCKET"])
            gate.sendall(b"closing\n")
            while gate.recv(64):
                pass


def app(environ, start_response):
    path = environ["PATH_INFO"]
    environ["wsgi.input"].read()
    if path == "/raise":
        raise RuntimeError("the app failed on purpose")
    if path == "/held-close":
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "5")])
        return HeldClose()
    if path == "/stream":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return iter([b"one ", b"two ", b"three\n"])
    code = int(path.rsplit("/", 1)[-1]) if path.startswith("/status/") else 200
    start_response(f"{code} {HTTPStatus(code).phrase}", [("Content-Type", "text/plain"),
                                                         ("Content-Length", "5")])
    return [b"body\n"]
