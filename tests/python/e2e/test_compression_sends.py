"""Compressed ASGI sends that are cancelled, not awaited, or cut short by the client (issue
39's follow-up: each block is compressed in the worker's pool, off the loop; review items 1-3).
The app is tests/python/e2e/apps/compress_cancel_app.py; one worker, so that the next request
is served by the same one. No sleep: the tests wait on the app's log line and on responses."""

from __future__ import annotations

import socket
import struct
import zlib
from typing import Any

import pytest

APP = "compress_cancel_app:app"
ERROR = "Error handling request"


def load_app() -> Any:
    """The app's module, for its blocks (imported from the apps directory)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent / "apps" / "compress_cancel_app.py"
    spec = importlib.util.spec_from_file_location("compress_cancel_app", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


APP_MODULE = load_app()


def read_response(conn: socket.socket) -> tuple[bytes, bytes]:
    """One HTTP/1.1 response from ``conn``: its head (lowercase) and its body (de-chunked, or
    ``Content-Length`` bytes); fails when the connection closes before the response is whole."""
    data = b""
    while b"\r\n\r\n" not in data:
        piece = conn.recv(65536)
        assert piece, data
        data += piece
    head, _, rest = data.partition(b"\r\n\r\n")
    head = head.lower()
    fields = head.split(b"\r\n")
    length = [int(field.split(b":", 1)[1]) for field in fields if field.startswith(b"content-length:")]
    if length:
        while len(rest) < length[0]:
            piece = conn.recv(65536)
            assert piece, (head, len(rest))
            rest += piece
        assert len(rest) == length[0], "nothing after the body"
        return head, rest
    assert b"transfer-encoding: chunked" in fields, head
    body = b""
    while True:
        while b"\r\n" not in rest:
            piece = conn.recv(65536)
            assert piece, (head, len(body))
            rest += piece
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        while len(rest) < size + 2:
            piece = conn.recv(65536)
            assert piece, (head, len(body))
            rest += piece
        if size == 0:
            assert rest == b"\r\n", "no trailers, nothing after the last chunk"
            return head, body
        body, rest = body + rest[:size], rest[size + 2:]


def get(conn: socket.socket, path: str) -> tuple[bytes, bytes]:
    conn.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n".encode())
    return read_response(conn)


def gunzip(body: bytes) -> bytes:
    decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
    data = decoder.decompress(body)
    assert decoder.eof and not decoder.unused_data, "one complete gzip stream"
    return data


@pytest.mark.parametrize(("path", "expected"), [
    ("/cancelled", b"".join(APP_MODULE.BLOCKS)),
    ("/unawaited", b"".join(APP_MODULE.BLOCKS)),
    ("/unawaited-whole", APP_MODULE.WHOLE),
])
def test_a_cancelled_or_unawaited_compressed_send_still_delivers_the_whole_response(
        tines_server: Any, path: str, expected: bytes) -> None:
    """``/cancelled``: a send under ``wait_for(..., 0)`` (timed out while its block is in the
    pool), another whose awaitable is cancelled, then sends awaited: the later sends succeed
    (no CancelledError left over) and the response holds every block, the cancelled ones too (a
    block handed over is sent). ``/unawaited``, ``/unawaited-whole``: the app returns without
    awaiting its last send: the response is delivered whole all the same. The connection then
    serves the next request, and the error log stays quiet."""
    server = tines_server(APP, "-w", "1", "--compression", "gzip")
    with socket.create_connection(("127.0.0.1", server.port), timeout=20) as conn:
        head, body = get(conn, path)
        assert head.startswith(b"http/1.1 200"), head
        assert b"content-encoding: gzip" in head.split(b"\r\n"), head
        assert gunzip(body) == expected
        head, body = get(conn, "/next")
        assert head.startswith(b"http/1.1 200") and body == b"ok"
    assert ERROR not in server.log_text()


def test_a_client_gone_during_a_compressed_send_logs_no_error(tines_server: Any) -> None:
    """The client resets the connection while the app streams large compressed blocks (each
    in the pool in turn): the app's ``send`` raises ``ClientDisconnected``, nothing is logged
    at error level for it (as before the pool), and the worker serves the next request."""
    server = tines_server(APP, "-w", "1", "--compression", "gzip")
    with socket.create_connection(("127.0.0.1", server.port), timeout=20) as conn:
        conn.sendall(b"GET /endless HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n")
        seen = b""
        while b"\r\n\r\n" not in seen or len(seen) < 65536:
            piece = conn.recv(65536)
            assert piece, seen
            seen += piece
        assert seen.startswith(b"HTTP/1.1 200")
        # A reset, not a polite close: the server's next write fails at once.
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    server.wait_for_log(r"compress_cancel_app: endless send raised ClientDisconnected")
    with socket.create_connection(("127.0.0.1", server.port), timeout=20) as conn:
        head, body = get(conn, "/next")
        assert head.startswith(b"http/1.1 200") and body == b"ok"
    log = server.log_text()
    assert ERROR not in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
