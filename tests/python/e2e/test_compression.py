"""Response compression (issue 39, ADR 0037) end to end: every MPM and an ASGI app, each over
HTTP/1.1, HTTP/1.1 over TLS and HTTP/2 over TLS, with httpx reading the raw bytes (its own
decoding bypassed) and the test decoding them: the coding chosen by a browser-like
``Accept-Encoding`` and by q-values, the bytes decoded equal to what the app sent, the header
rules (``Content-Encoding``, ``Vary`` merged, a weak ``ETag``, ``Content-Length`` the
compressed one or none), the responses left alone (an app's own ``Content-Encoding``, a 206,
an ``image/png``, a small body, an excluded path, a file body), HEAD's headers, and a stream of
server-sent events received compressed, event by event: the app sends event N+1 only once
the test has decoded event N (a FIFO gate, no sleep)."""

from __future__ import annotations

import gzip
import os
import socket
import subprocess
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import brotli
import httpx
import pytest
import zstandard
from h2_tools import MPM_IDS, MPMS, serve_h2c
from tls_certs import TlsCerts
from tls_clients import client_context, tls_args

from conftest import debian_tool

BROWSER = "gzip, deflate, br, zstd"
PAGE = "".join(f"<p>line {n}: the quick brown fox jumps over the lazy dog</p>\n" for n in range(400)).encode()
BLOCKS = [f"block {n}: {'lorem ipsum dolor sit amet ' * 40}\n".encode() for n in range(6)]
EVENTS = [f"id: {n}\ndata: event {n} {'payload ' * 20}\n\n".encode() for n in range(5)]
TRANSPORTS = ("http/1.1", "https/1.1", "h2")
WSGI = "compress_app:app"
ASGI = "compress_app:asgi"
SERVED = [(WSGI, *mpm) for mpm in MPMS] + [(ASGI,)]
"""The app and its MPM options: every MPM, and an ASGI app."""
SERVED_IDS = [*MPM_IDS, "asgi"]


class Decoder:
    """An incremental decoder of one content coding (``None``: identity)."""

    def __init__(self, coding: str | None) -> None:
        self.coding = coding
        if coding == "gzip":
            self.inner: Any = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif coding == "br":
            self.inner = brotli.Decompressor()
        elif coding == "zstd":
            self.inner = zstandard.ZstdDecompressor().decompressobj()

    def feed(self, data: bytes) -> bytes:
        if self.coding is None:
            return data
        if self.coding == "br":
            return bytes(self.inner.process(data))
        return bytes(self.inner.decompress(data))


def decode(coding: str | None, raw: bytes) -> bytes:
    return Decoder(coding).feed(raw)


@pytest.fixture
def served_server(request: pytest.FixtureRequest, tines_server: Any, tls_certs: TlsCerts) -> Iterator[Any]:
    """One worker of ``request.param`` with compression on (``/private/`` excluded): TLS (h2 and
    HTTP/1.1 by ALPN) on its first bind, plain HTTP/1.1 on its second."""
    served = request.param
    server, plain_port = serve_h2c(tines_server, served, *tls_args(tls_certs.localhost), "--compression",
                                   "gzip,br,zstd", "--compression-exclude-paths", "/private/", mode="http1+h2c")
    yield served, server, plain_port


def client(transport: str, tls_certs: TlsCerts, server: Any, plain_port: int) -> tuple[httpx.Client, str]:
    if transport == "http/1.1":
        return httpx.Client(timeout=20), f"http://127.0.0.1:{plain_port}"
    return (httpx.Client(http1=transport != "h2", http2=transport == "h2", verify=client_context(tls_certs),
                         timeout=20), f"https://localhost:{server.port}")


def fetch(http: httpx.Client, method: str, url: str, accept: str | None) -> tuple[httpx.Response, bytes]:
    """The response and its body's bytes as they came (not decoded by httpx)."""
    headers = {"Accept-Encoding": accept} if accept is not None else {"Accept-Encoding": ""}
    with http.stream(method, url, headers=headers) as response:
        return response, b"".join(response.iter_raw())


def check_version(response: httpx.Response, transport: str) -> None:
    assert response.http_version == ("HTTP/2" if transport == "h2" else "HTTP/1.1")


@pytest.mark.parametrize("served_server", SERVED, ids=SERVED_IDS, indirect=True)
def test_negotiated_codings_and_header_rules(served_server: Any, tls_certs: TlsCerts) -> None:
    served, server, plain_port = served_server
    cases = [(BROWSER, "gzip"), ("gzip;q=0.5, br;q=0.8, zstd;q=0.1", "br"), ("zstd", "zstd"), ("*", "gzip"),
             ("br;q=0, *;q=0.3", "gzip"), ("gzip;q=0, br;q=0, zstd;q=0", None), ("identity", None),
             ("gzip;q=0.5, identity", None), (None, None)]
    for transport in TRANSPORTS:
        http, base = client(transport, tls_certs, server, plain_port)
        with http:
            for accept, coding in cases:
                what = f"{transport} Accept-Encoding {accept!r}"
                response, raw = fetch(http, "GET", f"{base}/page", accept)
                check_version(response, transport)
                assert response.status_code == 200, what
                assert response.headers.get("content-encoding") == coding, what
                assert decode(coding, raw) == PAGE, what
                # Vary merged into the app's, whether or not this client took a coding.
                assert response.headers.get_list("vary") == ["Cookie, Accept-Encoding"], what
                assert response.headers["etag"] == ('W/"page-v1"' if coding else '"page-v1"'), what
                if transport != "h2" or "content-length" in response.headers:
                    assert int(response.headers["content-length"]) == len(raw), what
                if coding:
                    assert len(raw) < len(PAGE) // 4, what
                # HEAD: the headers GET would get, no body.
                head, nothing = fetch(http, "HEAD", f"{base}/page", accept)
                assert nothing == b"", what
                assert head.headers.get("content-encoding") == coding, what
                assert head.headers.get_list("vary") == ["Cookie, Accept-Encoding"], what
                assert head.headers["etag"] == response.headers["etag"], what

            # A streamed body: compressed as it streams, chunked on HTTP/1.1.
            response, raw = fetch(http, "GET", f"{base}/stream", BROWSER)
            assert response.headers["content-encoding"] == "gzip"
            assert response.headers["vary"] == "Accept-Encoding"
            assert "content-length" not in response.headers
            if transport != "h2":
                assert response.headers["transfer-encoding"] == "chunked"
            assert decode("gzip", raw) == b"".join(BLOCKS)

            # Left alone: the app's own coding, a 206, an image, a small body, an excluded path.
            response, raw = fetch(http, "GET", f"{base}/encoded", BROWSER)
            assert response.headers["content-encoding"] == "gzip" and "vary" not in response.headers
            assert gzip.decompress(raw) == PAGE
            for path, status, length in (("/partial", 206, 5000), ("/png", 200, len(PAGE)), ("/small", 200, 100),
                                         ("/private/page", 200, len(PAGE))):
                response, raw = fetch(http, "GET", f"{base}{path}", BROWSER)
                assert response.status_code == status, path
                assert "content-encoding" not in response.headers, path
                assert "Accept-Encoding" not in response.headers.get("vary", ""), path
                assert len(raw) == length, path
                if transport != "h2" or "content-length" in response.headers:
                    assert int(response.headers["content-length"]) == length, path
            # The excluded prefix holds for the path the app routes on, however it is spelled
            # (percent-encoded: decoded once, as PATH_INFO and ASGI's path are).
            for path in ("/%70rivate/page", "/%70%72ivate/page?x=1"):
                response, raw = fetch(http, "GET", f"{base}{path}", BROWSER)
                assert response.status_code == 200, path
                assert "content-encoding" not in response.headers, path
                assert raw == PAGE, path
            if served[0] != ASGI:
                # A wsgi.file_wrapper body keeps sendfile: never compressed.
                response, raw = fetch(http, "GET", f"{base}/file", BROWSER)
                assert "content-encoding" not in response.headers and raw == PAGE
                assert "vary" not in response.headers
                # PEP 3333's write(): each call compressed and sent before it returns.
                response, raw = fetch(http, "GET", f"{base}/written", "zstd")
                assert response.headers["content-encoding"] == "zstd"
                assert decode("zstd", raw) == b"".join(BLOCKS)


@pytest.mark.parametrize("served_server", SERVED, ids=SERVED_IDS, indirect=True)
def test_curl_decodes_what_it_asked_for(served_server: Any, tls_certs: TlsCerts, tmp_path: Path) -> None:
    """curl (built with zlib, brotli and zstd) sends a browser's Accept-Encoding over HTTP/1.1, TLS
    and h2, and its own decoding gives the page back."""
    curl = debian_tool("curl")
    _, server, plain_port = served_server
    tls = ["--cacert", str(tls_certs.root), "--resolve", f"localhost:{server.port}:127.0.0.1"]
    for options, url in ((["--http1.1"], f"http://127.0.0.1:{plain_port}/page"),
                         (["--http1.1", *tls], f"https://localhost:{server.port}/page"),
                         (["--http2", *tls], f"https://localhost:{server.port}/page")):
        for accept, coding in ((BROWSER, "gzip"), ("br", "br"), ("zstd;q=1, gzip;q=0.5", "zstd")):
            headers = tmp_path / "headers"
            result = subprocess.run([curl, "-sS", "--max-time", "20", *options, "--compressed", "-H",
                                     f"Accept-Encoding: {accept}", "-D", str(headers), url],
                                    capture_output=True, timeout=60, check=False)
            assert result.returncode == 0, result.stderr
            assert result.stdout == PAGE, (options, accept)
            fields = headers.read_text().lower().splitlines()
            assert f"content-encoding: {coding}" in fields, (options, accept, fields)


@pytest.mark.parametrize("served_server", SERVED, ids=SERVED_IDS, indirect=True)
def test_an_http10_stream_is_compressed_and_ends_with_the_connection(served_server: Any) -> None:
    _, _, plain_port = served_server
    with socket.create_connection(("127.0.0.1", plain_port), timeout=20) as conn:
        conn.sendall(b"GET /stream HTTP/1.0\r\nHost: x\r\nAccept-Encoding: br\r\n\r\n")
        answer = b""
        while piece := conn.recv(65536):
            answer += piece
    head, _, body = answer.partition(b"\r\n\r\n")
    fields = head.lower().split(b"\r\n")
    assert fields[0].startswith(b"http/1.1 200")
    assert b"content-encoding: br" in fields and b"connection: close" in fields
    assert not any(field.startswith((b"content-length", b"transfer-encoding")) for field in fields)
    assert decode("br", body) == b"".join(BLOCKS)


@pytest.mark.parametrize("served_server", SERVED, ids=SERVED_IDS, indirect=True)
def test_server_sent_events_arrive_compressed_event_by_event(served_server: Any, tls_certs: TlsCerts,
                                                             tmp_path: Path) -> None:
    _, server, plain_port = served_server
    for number, (transport, accept, coding) in enumerate((("http/1.1", BROWSER, "gzip"), ("https/1.1", "br", "br"),
                                                          ("h2", "zstd", "zstd"))):
        gate = tmp_path / f"gate-{number}"
        os.mkfifo(gate)
        # Read and write ends held by the test: the app's open never blocks, its reads do.
        gate_fd = os.open(gate, os.O_RDWR)
        http, base = client(transport, tls_certs, server, plain_port)
        try:
            with http, http.stream("GET", f"{base}/sse", params={"gate": str(gate)},
                                   headers={"Accept-Encoding": accept}) as response:
                check_version(response, transport)
                assert response.headers["content-encoding"] == coding
                assert response.headers["content-type"] == "text/event-stream"
                decoder = Decoder(coding)
                received = b""
                raw = response.iter_raw()
                for index, event in enumerate(EVENTS):
                    expected = b"".join(EVENTS[:index + 1])
                    # Event N decodes from what arrived before the app may send event N+1.
                    while len(received) < len(expected):
                        received += decoder.feed(next(raw))
                    assert received == expected, f"{transport}: event {index}"
                    os.write(gate_fd, b"x")
                received += b"".join(decoder.feed(piece) for piece in raw)
                assert received == b"".join(EVENTS)
        finally:
            os.close(gate_fd)


def read_to_close(port: int, request: bytes) -> bytes:
    """Everything the server sends on a new connection for ``request``, up to its close."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as conn:
        conn.sendall(request)
        answer = b""
        while piece := conn.recv(65536):
            answer += piece
    return answer


def dechunk(body: bytes) -> tuple[bytes, bool]:
    """The chunks' data of a chunked body, and whether its last chunk came."""
    data = b""
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return data, rest == b"\r\n"
        data, body = data + rest[:size], rest[size + 2:]
    return data, False


@pytest.mark.parametrize("served_server", SERVED, ids=SERVED_IDS, indirect=True)
def test_a_body_short_of_its_content_length_arrives_incomplete(served_server: Any, tls_certs: TlsCerts) -> None:
    """The app declares ``Content-Length: 10000`` and sends 5000 bytes: compressed, the length is
    dropped, so the response must end unended (no coding trailer, no last chunk, the connection
    closed; an h2 stream reset), as truncation would show it uncompressed."""
    short = PAGE[:5000]
    _, server, plain_port = served_server
    # Streamed: what the app sent arrives (a sync-flushed block), but neither the last chunk nor
    # the gzip trailer does.
    for version in (b"HTTP/1.1", b"HTTP/1.0"):
        answer = read_to_close(plain_port, b"GET /short " + version + b"\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n")
        head, _, body = answer.partition(b"\r\n\r\n")
        fields = head.lower().split(b"\r\n")
        assert fields[0].startswith(b"http/1.1 200") and b"content-encoding: gzip" in fields, version
        assert not any(field.startswith(b"content-length") for field in fields), version
        if version == b"HTTP/1.1":
            assert b"transfer-encoding: chunked" in fields
            body, ended = dechunk(body)
            assert not ended, "a complete chunked body"
        decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
        assert decoder.decompress(body) == short, version
        assert not decoder.eof, f"{version!r}: a complete gzip stream"
    # A whole body waits for its end to get its compressed length: nothing of it is sent.
    answer = read_to_close(plain_port, b"GET /short-whole HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n")
    assert answer == b""
    # HTTP/2: the stream is reset instead of ended.
    http, base = client("h2", tls_certs, server, plain_port)
    with http:
        for path in ("/short", "/short-whole"):
            with pytest.raises(httpx.RemoteProtocolError):
                fetch(http, "GET", f"{base}{path}", "gzip")
        # The connection serves on.
        response, raw = fetch(http, "GET", f"{base}/page", "gzip")
        assert response.status_code == 200 and decode("gzip", raw) == PAGE


@pytest.mark.parametrize("served_server", SERVED, ids=SERVED_IDS, indirect=True)
def test_a_304_carries_the_etag_and_vary_its_200_would(served_server: Any, tls_certs: TlsCerts) -> None:
    """RFC 9110 15.4.5: the app's 304 (no Content-Type, as frameworks send it) gets the ``Vary``
    and, for a client taking a coding, the weak ``ETag`` of the 200; no coding of its own; an
    excluded path's 304 is left alone."""
    _, server, plain_port = served_server
    for transport in ("http/1.1", "h2"):
        http, base = client(transport, tls_certs, server, plain_port)
        with http:
            for accept, etag in ((BROWSER, 'W/"page-v1"'), ("identity", '"page-v1"')):
                what = f"{transport} {accept!r}"
                response, _ = fetch(http, "GET", f"{base}/not-modified", accept)
                assert response.status_code == 304, what
                assert response.headers["etag"] == etag, what
                assert response.headers.get_list("vary") == ["Cookie, Accept-Encoding"], what
                assert "content-encoding" not in response.headers, what
            response, _ = fetch(http, "GET", f"{base}/private/not-modified", BROWSER)
            assert response.status_code == 304
            assert response.headers["etag"] == '"page-v1"'
            assert response.headers.get_list("vary") == ["Cookie"]


LARGE = b"".join(f"line {n}: the quick brown fox jumps over the lazy dog\n".encode() for n in range(10_000))[:512 * 1024]


def pool_threads(pid: int) -> list[str]:
    """The names of ``pid``'s threads of the compression pool (``tines-pool-N``)."""
    names = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/comm") as handle:
            name = handle.read().strip()
        if name.startswith("tines-pool"):
            names.append(name)
    return sorted(names)


def test_asgi_compresses_off_its_loop(tines_server: Any) -> None:
    """Issue 39's follow-up: an ASGI worker compresses on its pool's threads, never on its loop.
    The app schedules a callback on its loop just before a large compressed ``send`` (one 512
    KiB message; then two streamed blocks sent before either is awaited): the callback runs
    while the send is pending, so the loop was free while the block compressed. Uncompressed
    (identity), the same sends never give the loop back (no hand-off). The pool's threads live
    in the worker only, never in the master; without compression there is no pool."""
    server = tines_server(ASGI, "-w", "1", "--compression", "gzip,br,zstd")
    [worker] = server.worker_pids()
    base = f"http://127.0.0.1:{server.port}"
    with httpx.Client(timeout=20) as http:
        order = []
        for path in ("/offloop", "/offloop-stream"):
            for accept, coding in (("gzip", "gzip"), ("br", "br"), ("zstd", "zstd"), ("identity", None)):
                response, raw = fetch(http, "GET", f"{base}{path}", accept)
                assert response.status_code == 200
                assert response.headers.get("content-encoding") == coding, (path, accept)
                assert decode(coding, raw) == LARGE, (path, accept)
                if path == "/offloop" and coding:
                    # A body in one message: compressed whole, its length in the head.
                    assert int(response.headers["content-length"]) == len(raw) < len(LARGE) // 4
                order.append((path, coding))
        observed = http.get(f"{base}/observed").text.split()
    expected = ["ran" if coding else "held" for _, coding in order]
    assert list(zip(order, observed)) == list(zip(order, expected))
    assert pool_threads(worker) == ["tines-pool-0", "tines-pool-1"]
    assert pool_threads(server.pid) == []
    plain = tines_server(ASGI, "-w", "1")
    [plain_worker] = plain.worker_pids()
    with httpx.Client(timeout=20) as http:
        assert http.get(f"http://127.0.0.1:{plain.port}/page").status_code == 200
    assert pool_threads(plain_worker) == []


def test_asgi_compressed_blocks_then_trailers_end_the_stream(tines_server: Any) -> None:
    """A compressed ASGI stream with trailers (the blocks, then the stream's end with the
    trailer section, made off the loop): each block arrives as its own chunk, the gzip stream
    decodes whole and is complete, and the trailers follow the last chunk; the connection then
    serves the next request."""
    server = tines_server(ASGI, "-w", "1", "--compression", "gzip")
    with socket.create_connection(("127.0.0.1", server.port), timeout=20) as conn:
        conn.sendall(b"GET /offloop-trailers HTTP/1.1\r\nHost: x\r\nTE: trailers\r\nAccept-Encoding: gzip\r\n\r\n")
        answer = b""
        while not answer.endswith(b"x-two: 2\r\n\r\n"):
            piece = conn.recv(65536)
            assert piece, answer
            answer += piece
        head, _, body = answer.partition(b"\r\n\r\n")
        fields = head.lower().split(b"\r\n")
        assert b"content-encoding: gzip" in fields and b"transfer-encoding: chunked" in fields
        chunks = []
        while True:
            size_line, _, body = body.partition(b"\r\n")
            size = int(size_line, 16)
            if size == 0:
                break
            chunks.append(body[:size])
            body = body[size + 2:]
        assert body == b"x-one: 1\r\nx-two: 2\r\n\r\n"
        decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
        # One chunk per block, each decoding to the app's block alone (a sync flush); the last
        # chunk ends the gzip stream.
        decoded = [decoder.decompress(chunk) for chunk in chunks]
        assert decoded == [*BLOCKS, b""] and decoder.eof
        conn.sendall(b"GET /small HTTP/1.1\r\nHost: x\r\n\r\n")
        reply = b""
        while not reply.endswith(b"s" * 100):
            piece = conn.recv(65536)
            assert piece, reply
            reply += piece
        assert reply.startswith(b"HTTP/1.1 200")
