"""Responses for the compression tests (tests/python/e2e/test_compression.py), the same routes
as WSGI (``app``) and ASGI (``asgi``):

- ``/page``: a 20 KB HTML page as one body (length known), with a strong ETag and ``Vary: Cookie``;
- ``/stream``: a text body in several blocks, length unknown;
- ``/sse?gate=FIFO``: five server-sent events; before each event after the first, the app
  reads one byte from the FIFO, which the test writes only once it has decoded the previous
  event, so an event held back by compression would stall the test, not pass it;
- ``/encoded``: a body the app compressed itself (``Content-Encoding: gzip``);
- ``/partial``: a 206; ``/png``: an ``image/png``; ``/small``: 100 bytes of text;
- ``/private/page``: the page again, on a path the test excludes;
- ``/file``: a ``wsgi.file_wrapper`` over a text file (WSGI; sendfile, never compressed);
- ``/written``: ``/stream``'s blocks through PEP 3333's ``write()`` (WSGI);
- ``/short`` and ``/short-whole``: ``Content-Length: 10000`` and only ``SHORT`` (5000 bytes of
  HTML) sent, streamed (a generator; ASGI: ``more_body``) or as the whole body (a list; ASGI: one
  last body message);
- ``/not-modified`` and ``/private/not-modified``: a 304 as frameworks send it (``ETag``,
  ``Vary``, no ``Content-Type``).

ASGI only (issue 39's follow-up: compression off the loop):

- ``/offloop``: ``LARGE`` (512 KiB of text) in one body message; ``/offloop-stream``: two
  ``more_body`` blocks sent before either is awaited, then the end. Before the first body
  ``send``, each schedules a callback on its loop (``call_soon``) and notes, once its sends
  returned, whether that callback ran while they were pending (so the loop ran while the
  blocks compressed) or not yet (the sends never gave the loop back);
- ``/offloop-trailers``: ``BLOCKS`` as ``more_body`` messages, an empty last one, then two
  ``http.response.trailers`` messages (``x-one``, then ``x-two``);
- ``/observed``: those notes in order, as ``ran``/``held`` words (then forgotten).
"""

import asyncio
import gzip
import tempfile
from urllib.parse import parse_qs

from fifo_gate import gated, gated_async

PAGE = "".join(f"<p>line {n}: the quick brown fox jumps over the lazy dog</p>\n" for n in range(400)).encode()
BLOCKS = [f"block {n}: {'lorem ipsum dolor sit amet ' * 40}\n".encode() for n in range(6)]
EVENTS = [f"id: {n}\ndata: event {n} {'payload ' * 20}\n\n".encode() for n in range(5)]
SMALL = b"s" * 100
SHORT = PAGE[:5000]
FILE_BODY = PAGE

_file = tempfile.NamedTemporaryFile(prefix="compress-app-", suffix=".txt", delete=False)
_file.write(FILE_BODY)
_file.close()


def route(path, query):
    """``(status, headers, body blocks, gated)`` for ``path``."""
    if path in ("/page", "/private/page"):
        return "200 OK", [("Content-Type", "text/html; charset=utf-8"), ("ETag", '"page-v1"'),
                          ("Vary", "Cookie")], [PAGE], None
    if path == "/stream":
        return "200 OK", [("Content-Type", "text/plain")], BLOCKS, None
    if path == "/sse":
        return "200 OK", [("Content-Type", "text/event-stream"), ("Cache-Control", "no-cache")], EVENTS, \
            parse_qs(query)["gate"][0]
    if path == "/encoded":
        return "200 OK", [("Content-Type", "text/html"), ("Content-Encoding", "gzip")], [gzip.compress(PAGE)], None
    if path == "/partial":
        part = PAGE[:5000]
        return "206 Partial Content", [("Content-Type", "text/html"),
                                       ("Content-Range", f"bytes 0-4999/{len(PAGE)}")], [part], None
    if path == "/png":
        return "200 OK", [("Content-Type", "image/png")], [PAGE], None
    if path == "/small":
        return "200 OK", [("Content-Type", "text/plain")], [SMALL], None
    if path in ("/short", "/short-whole"):
        return "200 OK", [("Content-Type", "text/html"), ("Content-Length", "10000")], [SHORT], None
    if path in ("/not-modified", "/private/not-modified"):
        return "304 Not Modified", [("ETag", '"page-v1"'), ("Vary", "Cookie")], [], None
    return "404 Not Found", [("Content-Type", "text/plain")], [b"not found\n"], None


def app(environ, start_response):
    path = environ["PATH_INFO"]
    if path == "/file":
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(FILE_BODY)))])
        return environ["wsgi.file_wrapper"](open(_file.name, "rb"))
    if path == "/written":
        write = start_response("200 OK", [("Content-Type", "text/plain")])
        for block in BLOCKS:
            write(block)
        return []
    status, headers, blocks, gate = route(path, environ.get("QUERY_STRING", ""))
    if path == "/short":
        start_response(status, headers)
        return gated(blocks, None)
    if path == "/short-whole" or not blocks:
        start_response(status, headers)
        return blocks
    if len(blocks) == 1:
        headers.append(("Content-Length", str(len(blocks[0]))))
        start_response(status, headers)
        return blocks
    start_response(status, headers)
    return gated(blocks, gate)


LARGE = b"".join(f"line {n}: the quick brown fox jumps over the lazy dog\n".encode() for n in range(10_000))[:512 * 1024]
OBSERVED = []


async def off_loop(path, send):
    """``/offloop`` and ``/offloop-stream`` (see the module's docstring)."""
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    state = {"pending": True, "seen": "held"}

    def look():
        if state["pending"]:
            state["seen"] = "ran"

    asyncio.get_running_loop().call_soon(look)
    if path == "/offloop":
        await send({"type": "http.response.body", "body": LARGE})
    else:
        half = len(LARGE) // 2
        first = send({"type": "http.response.body", "body": LARGE[:half], "more_body": True})
        second = send({"type": "http.response.body", "body": LARGE[half:], "more_body": True})
        await first
        await second
    state["pending"] = False
    OBSERVED.append(state["seen"])
    if path != "/offloop":
        await send({"type": "http.response.body", "body": b""})


async def asgi(scope, receive, send):
    if scope["type"] != "http":
        return
    if scope["path"] in ("/offloop", "/offloop-stream"):
        await off_loop(scope["path"], send)
        return
    if scope["path"] == "/offloop-trailers":
        await send({"type": "http.response.start", "status": 200, "trailers": True,
                    "headers": [(b"content-type", b"text/plain")]})
        for block in BLOCKS:
            await send({"type": "http.response.body", "body": block, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        await send({"type": "http.response.trailers", "headers": [(b"x-one", b"1")], "more_trailers": True})
        await send({"type": "http.response.trailers", "headers": [(b"x-two", b"2")]})
        return
    if scope["path"] == "/observed":
        body = " ".join(OBSERVED).encode()
        OBSERVED.clear()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": body})
        return
    status, headers, blocks, gate = route(scope["path"], scope["query_string"].decode())
    code = int(status.split()[0])
    fields = [(name.lower().encode(), value.encode()) for name, value in headers]
    if scope["path"] == "/short":
        await send({"type": "http.response.start", "status": code, "headers": fields})
        await send({"type": "http.response.body", "body": SHORT, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        return
    if scope["path"] == "/short-whole" or not blocks:
        await send({"type": "http.response.start", "status": code, "headers": fields})
        await send({"type": "http.response.body", "body": b"".join(blocks)})
        return
    if len(blocks) == 1:
        fields.append((b"content-length", str(len(blocks[0])).encode()))
        await send({"type": "http.response.start", "status": code, "headers": fields})
        await send({"type": "http.response.body", "body": blocks[0]})
        return
    await send({"type": "http.response.start", "status": code, "headers": fields})
    async for block in gated_async(blocks, gate):
        await send({"type": "http.response.body", "body": block, "more_body": True})
    await send({"type": "http.response.body", "body": b""})
