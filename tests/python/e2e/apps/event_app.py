"""The app the event MPM tests drive (tests/python/e2e/test_event.py).

Routes:
- ``/hello``: ``hello``.
- ``/big-bytes``: the 8 MiB ``PATTERN`` as one bytes object in a list.
- ``/big-gen``: the same 8 MiB from a generator of 64 KiB pieces (no Content-Length).
- ``/big-file``: ``wsgi.file_wrapper`` over the file named by ``$EVENT_APP_FILE`` (sendfile).
- ``/echo``: the request body, read to the end from ``wsgi.input``.
- ``/stream-block?ID``: a streamed body (Content-Length known, no chunking): 4 MiB of
  ``PATTERN``, then it blocks like ``/block?ID``, then ``end``.
- ``/block?ID``: connects to the Unix socket ``$EVENT_APP_GATE``, sends ``ID\\n`` (so the test
  knows the app thread holds this request) and waits until the test sends one byte back;
  answers ``released ID``. The test controls it entirely: no sleeps.

``PATTERN`` is the big numbers 0, 1, 2, ... as 4-byte big-endian integers, so a missing,
repeated or reordered piece anywhere in a response is detected.
"""

import os
import socket
import struct
from array import array

BIG_SIZE = 8 << 20
PIECE = 64 << 10


def pattern(size: int = BIG_SIZE) -> bytes:
    words = array("I", range(size // 4))
    if struct.pack("=I", 1) != struct.pack(">I", 1):
        words.byteswap()
    return words.tobytes()


PATTERN = pattern()


def _generate():
    view = memoryview(PATTERN)
    for start in range(0, len(PATTERN), PIECE):
        yield bytes(view[start:start + PIECE])


def _block(ident: str) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as gate:
        gate.connect(os.environ["EVENT_APP_GATE"])
        gate.sendall(ident.encode() + b"\n")
        gate.recv(1)
    return b"released " + ident.encode()


STREAM_SIZE = 4 << 20


def _stream_then_block(ident: str):
    yield PATTERN[:STREAM_SIZE]
    _block(ident)
    yield b"end"


def app(environ, start_response):
    path = environ["PATH_INFO"]
    if path == "/stream-block":
        start_response("200 OK", [("Content-Type", "application/octet-stream"),
                                  ("Content-Length", str(STREAM_SIZE + 3))])
        return _stream_then_block(environ.get("QUERY_STRING", ""))
    if path == "/big-bytes":
        start_response("200 OK", [("Content-Type", "application/octet-stream"),
                                  ("Content-Length", str(len(PATTERN)))])
        return [PATTERN]
    if path == "/big-gen":
        start_response("200 OK", [("Content-Type", "application/octet-stream")])
        return _generate()
    if path == "/big-file":
        handle = open(os.environ["EVENT_APP_FILE"], "rb")
        size = os.fstat(handle.fileno()).st_size
        start_response("200 OK", [("Content-Type", "application/octet-stream"),
                                  ("Content-Length", str(size))])
        return environ["wsgi.file_wrapper"](handle, PIECE)
    if path == "/echo":
        stream = environ["wsgi.input"]
        parts = []
        while True:
            chunk = stream.read(PIECE)
            if not chunk:
                break
            parts.append(chunk)
        body = b"".join(parts)
        start_response("200 OK", [("Content-Type", "application/octet-stream"),
                                  ("Content-Length", str(len(body)))])
        return [body]
    if path == "/block":
        body = _block(environ.get("QUERY_STRING", ""))
    else:
        body = b"hello"
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
