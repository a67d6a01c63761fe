"""The app the response hand-off tests drive (tests/python/e2e/test_responses.py).

Routes:
- ``/hello``: ``hello``.
- ``/list``: ``SIZE`` bytes of ``PATTERN`` as a list of 1 MiB bytes objects (a complete body:
  Content-Length known up front).
- ``/gen``: the same bytes from a generator of 64 KiB pieces (a body still being produced),
  with the app's Content-Length.
- ``/gen-chunked``: the same generator without a Content-Length (chunked).
- ``/gated?N``: ``GATED_FIRST`` bytes of ``PATTERN`` in one block, then ``N`` blocks ``tick I``
  (Content-Length set), each produced only once the test opened its gate: before block ``I``
  the app connects to the Unix socket ``$RESPONSES_APP_GATE``, sends ``I\n`` and waits for a
  byte.

``PATTERN`` is the numbers 0, 1, 2, ... as 4-byte big-endian integers, so a missing,
repeated or reordered piece anywhere in a response is detected.
"""

import os
import socket
import struct
from array import array

SIZE = 10 << 20
ITEM = 1 << 20
PIECE = 64 << 10
GATED_FIRST = 8 << 20


def pattern(size: int = SIZE) -> bytes:
    words = array("I", range(size // 4))
    if struct.pack("=I", 1) != struct.pack(">I", 1):
        words.byteswap()
    return words.tobytes()


PATTERN = pattern()
ITEMS = [PATTERN[start:start + ITEM] for start in range(0, SIZE, ITEM)]


def _generate():
    view = memoryview(PATTERN)
    for start in range(0, SIZE, PIECE):
        yield bytes(view[start:start + PIECE])


def tick(index):
    return f"tick {index}\n".encode()


def _gated(count):
    yield PATTERN[:GATED_FIRST]
    for index in range(1, count + 1):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as gate:
            gate.connect(os.environ["RESPONSES_APP_GATE"])
            gate.sendall(f"{index}\n".encode())
            gate.recv(1)
        yield tick(index)


def app(environ, start_response):
    path = environ["PATH_INFO"]
    if path == "/gen-chunked":
        start_response("200 OK", [("Content-Type", "application/octet-stream")])
        return _generate()
    if path == "/gated":
        count = int(environ["QUERY_STRING"])
        length = GATED_FIRST + sum(len(tick(index)) for index in range(1, count + 1))
        start_response("200 OK", [("Content-Type", "application/octet-stream"),
                                  ("Content-Length", str(length))])
        return _gated(count)
    if path == "/list":
        start_response("200 OK", [("Content-Type", "application/octet-stream")])
        return list(ITEMS)
    if path == "/gen":
        start_response("200 OK", [("Content-Type", "application/octet-stream"),
                                  ("Content-Length", str(SIZE))])
        return _generate()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "5")])
    return [b"hello"]
