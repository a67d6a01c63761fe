"""The app of the HTTP/2 tests (tests/python/e2e/test_h2_*.py): ``app`` (WSGI) and ``asgi``
(ASGI 3), with the same routes where both make sense.

- ``/`` answers ``hello over HTTP/2\\n`` whatever the method (h2spec's requests; their bodies
  are left unread, as a WSGI app may).
- ``/env`` (WSGI) and ``/scope`` (ASGI): JSON of what the app saw (protocol, scheme, method,
  the request's headers as the app got them).
- ``/calls``: how many requests this process's app was called for, this one included (so a
  test proves a refused request never reached the app).
- ``/upload``: reads the body in blocks and answers ``<sha256 hex> <length>``.
- ``/gated?port=P&blocks=N``: yields (WSGI) or sends (ASGI) ``block i`` lines; before each
  block after the first it waits for one byte on a TCP connection it made to the test's gate
  at 127.0.0.1:P, so the test decides when the next block may be produced.
- ``/sse?port=P&events=N`` (ASGI): server-sent events, gated the same way.
- ``/hold?port=P`` (WSGI): connects to the test's gate and waits until the test closes it (a
  stuck request, for ``request_timeout``).
- ``/big?mib=N`` (WSGI): N MiB in 1 MiB blocks, each made when the server asks for it;
  ``/made`` says how many blocks were made so far in this process.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from urllib.parse import parse_qs

HELLO = b"hello over HTTP/2\n"
MIB = 1 << 20
calls = 0
made = 0
lock = threading.Lock()


def block(index: int) -> bytes:
    return f"block {index}\n".encode()


def event(index: int) -> bytes:
    return f"id: {index}\nevent: tick\ndata: event {index}\n\n".encode()


def counted() -> int:
    global calls
    with lock:
        calls += 1
        return calls


def query(scope_or_environ: str) -> dict[str, str]:
    return {key: values[0] for key, values in parse_qs(scope_or_environ).items()}


def gated(port: int, count: int, item: Callable[[int], bytes]) -> Iterator[bytes]:
    gate = socket.create_connection(("127.0.0.1", port), timeout=60)
    try:
        yield item(1)
        for index in range(2, count + 1):
            if not gate.recv(1):
                return
            yield item(index)
    finally:
        gate.close()


def big(blocks: int) -> Iterator[bytes]:
    global made
    for _ in range(blocks):
        with lock:
            made += 1
        yield b"z" * MIB


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    number = counted()
    path, args = environ["PATH_INFO"], query(environ.get("QUERY_STRING", ""))
    headers = [("Content-Type", "text/plain")]
    if path == "/env":
        seen = {key: value for key, value in environ.items() if key.startswith("HTTP_")}
        seen.update({key: environ.get(key) for key in ("SERVER_PROTOCOL", "REQUEST_METHOD", "PATH_INFO",
                                                         "QUERY_STRING", "CONTENT_LENGTH", "CONTENT_TYPE",
                                                         "REMOTE_ADDR")})
        seen.update({"wsgi.url_scheme": environ["wsgi.url_scheme"], "HTTPS": environ.get("HTTPS"),
                     "pid": os.getpid()})
        body = json.dumps(seen).encode()
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]
    if path == "/calls":
        start_response("200 OK", headers)
        return [str(number).encode()]
    if path == "/made":
        start_response("200 OK", headers)
        return [str(made).encode()]
    if path == "/upload":
        digest, length, stream = hashlib.sha256(), 0, environ["wsgi.input"]
        while piece := stream.read(65536):
            digest.update(piece)
            length += len(piece)
        start_response("200 OK", headers)
        return [f"{digest.hexdigest()} {length}".encode()]
    if path == "/gated":
        start_response("200 OK", headers)
        return gated(int(args["port"]), int(args.get("blocks", "4")), block)
    if path == "/hold":
        with socket.create_connection(("127.0.0.1", int(args["port"])), timeout=None) as gate:
            while gate.recv(64):
                pass
        start_response("200 OK", headers)
        return [b"released"]
    if path == "/big":
        start_response("200 OK", [*headers, ("Content-Length", str(int(args["mib"]) * MIB))])
        return big(int(args["mib"]))
    start_response("200 OK", [*headers, ("Content-Length", str(len(HELLO)))])
    return [HELLO]


async def asgi(scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    number = counted()
    path, args = scope["path"], query(scope["query_string"].decode())
    more = True
    digest, length = hashlib.sha256(), 0
    while more:
        message = await receive()
        digest.update(message.get("body", b""))
        length += len(message.get("body", b""))
        more = message.get("more_body", False)

    async def answer(body: bytes, content_type: bytes = b"text/plain") -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    if path == "/scope":
        await answer(json.dumps({"http_version": scope["http_version"], "scheme": scope["scheme"],
                                 "method": scope["method"], "pid": os.getpid(),
                                 "client": scope.get("client"),
                                 "headers": [[k.decode("latin-1"), v.decode("latin-1")]
                                             for k, v in scope["headers"]]}).encode(), b"application/json")
    elif path == "/calls":
        await answer(str(number).encode())
    elif path == "/upload":
        await answer(f"{digest.hexdigest()} {length}".encode())
    elif path in ("/gated", "/sse"):
        sse = path == "/sse"
        content_type = b"text/event-stream" if sse else b"text/plain"
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", content_type), (b"cache-control", b"no-cache")]})
        count = int(args.get("events" if sse else "blocks", "4"))
        reader, writer = await asyncio.open_connection("127.0.0.1", int(args["port"]))
        try:
            for index in range(1, count + 1):
                if index > 1 and not await reader.read(1):
                    break
                await send({"type": "http.response.body", "body": (event if sse else block)(index),
                            "more_body": index < count})
        finally:
            writer.close()
    else:
        await answer(HELLO)
