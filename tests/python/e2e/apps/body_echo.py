"""Request bodies as the app sees them, for test_request_bodies.py.

Every path but ``/stream/...``, ``/ignore`` and ``/hold`` reads all of ``wsgi.input`` in blocks (an
upload of any size costs the app no memory) and answers
``<bytes read> <CONTENT_LENGTH or -> <HTTP_TRANSFER_ENCODING or ->``. ``/stream/...`` reads
ten bytes and answers them at once, however its path is spelt (``//stream//up``; with
``--stream-body-paths /stream`` it runs before the
body is complete). ``/ignore`` answers ``ignored`` without reading the body. ``/hold`` first waits at a gate like ``gate.py``'s (``GATE_SOCKET``) until
the test closes it, its body unread (a body in a file keeps its file until read or done).
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Callable, Iterable
from typing import Any

BLOCK = 1 << 20


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    stream = environ["wsgi.input"]
    if re.sub("/+", "/", environ["PATH_INFO"]).startswith("/stream/"):
        body = b"first " + stream.read(10)
    elif environ["PATH_INFO"] == "/ignore":
        body = b"ignored"
    else:
        if environ["PATH_INFO"] == "/hold":
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as gate:
                gate.connect(os.environ["GATE_SOCKET"])
                gate.sendall(f"{os.getpid()}\n".encode())
                while gate.recv(64):
                    pass
        total = 0
        while block := stream.read(BLOCK):
            total += len(block)
        body = (f"{total} {environ.get('CONTENT_LENGTH', '-') or '-'} "
                f"{environ.get('HTTP_TRANSFER_ENCODING', '-')}").encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
