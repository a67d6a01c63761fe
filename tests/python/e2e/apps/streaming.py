"""Streaming apps for tests/python/e2e/test_streaming.py.

``/gated?port=P&blocks=N`` yields ``tick i`` blocks; before each block after the first it
connects to 127.0.0.1:P once (the test's gate) and waits for one byte per block, so the test
decides when the app may produce the next block and can check that each block reached it before
it let the app go on. ``length=1`` declares the total length (Content-Length framing);
otherwise the body is chunked. ``/list`` answers a small list body (one write with the head),
``/generator?blocks=N`` yields N blocks without waiting. ``/hold?port=P`` connects to the
test's gate, waits for one byte and answers with the worker's pid (a request the test keeps in
progress for as long as it likes).
"""

from __future__ import annotations

import io
import os
import socket
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from urllib.parse import parse_qs


def block(index: int) -> bytes:
    return f"tick {index}\n".encode()


def gated(port: int, blocks: int) -> Iterator[bytes]:
    gate = socket.create_connection(("127.0.0.1", port), timeout=30)
    try:
        yield block(1)
        for index in range(2, blocks + 1):
            if not gate.recv(1):
                return
            yield block(index)
    finally:
        gate.close()


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    query = {key: values[0] for key, values in parse_qs(environ.get("QUERY_STRING", "")).items()}
    path = environ["PATH_INFO"]
    blocks = int(query.get("blocks", "4"))
    headers = [("Content-Type", "text/plain")]
    if path == "/gated":
        if query.get("length") == "1":
            total = sum(len(block(i)) for i in range(1, blocks + 1))
            headers.append(("Content-Length", str(total)))
        start_response("200 OK", headers)
        return gated(int(query["port"]), blocks)
    if path == "/list":
        start_response("200 OK", headers)
        return [b"first part, ", b"second part"]
    if path == "/generator":
        start_response("200 OK", headers)
        return (block(i) for i in range(1, blocks + 1))
    if path == "/bytesio":
        # wsgi.file_wrapper over an in-memory file: 5 blocks of 4 KiB, read at once.
        start_response("200 OK", headers)
        return environ["wsgi.file_wrapper"](io.BytesIO(b"x" * 20480), 4096)  # type: ignore[no-any-return]
    if path == "/hold":
        with socket.create_connection(("127.0.0.1", int(query["port"])), timeout=60) as gate:
            gate.recv(1)
        body = str(os.getpid()).encode()
        start_response("200 OK", [*headers, ("Content-Length", str(len(body)))])
        return [body]
    start_response("404 Not Found", headers)
    return [b"not found\n"]
