"""What compression is counted as (issue 39's follow-up): the access log's body bytes are the
bytes of body the client received (after compression, as nginx's ``$body_bytes_sent``), with
the size before compression beside them (json's ``bytes_uncompressed``, mod_deflate's
``{instream}n``/``{outstream}n``/``{ratio}n`` atoms), and the status JSON and ``/metrics`` count
compressed responses by coding, their bytes before and after, and the responses left alone.

Real servers (prefork, thread and an ASGI app), each over plain HTTP/1.1 (sendfile for the
static file), HTTP/1.1 over TLS and HTTP/2 over TLS; httpx reads the body bytes as they came
(``iter_raw``: chunked framing removed, the content coding not decoded) and curl checks a
range and a compressed stream on the plain port; every log line is compared with what the
client received."""

from __future__ import annotations

import base64
import gzip
import json
import random
import re
import socket
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from h2_tools import serve_h2c
from tls_certs import TlsCerts
from tls_clients import client_context, tls_args

from conftest import wait_until

BROWSER = "gzip, deflate, br, zstd"
PAGE = "".join(f"<p>line {n}: the quick brown fox jumps over the lazy dog</p>\n" for n in range(400)).encode()
BLOCKS = [f"block {n}: {'lorem ipsum dolor sit amet ' * 40}\n".encode() for n in range(6)]
BIG = b"".join(f"{n:07d} static bytes of a plain text file\n".encode() for n in range(2000))
STYLE = b"body { color: #333; }\n" * 300
TRANSPORTS = ("http/1.1", "https/1.1", "h2")
SERVED = [("compress_app:app", "prefork"), ("compress_app:app", "thread", "--threads", "4"),
          ("compress_app:asgi",)]
SERVED_IDS = ["prefork", "thread", "asgi"]

# (method, path, Accept-Encoding, extra request headers, the coding expected, the body before
# compression, or None for a response sent as it is).
CASES: list[tuple[str, str, str, dict[str, str], str | None, bytes | None]] = [
    ("GET", "/page", BROWSER, {}, "gzip", PAGE),
    ("GET", "/page", "br", {}, "br", PAGE),
    ("GET", "/page", "zstd", {}, "zstd", PAGE),
    ("GET", "/stream", BROWSER, {}, "gzip", b"".join(BLOCKS)),
    ("GET", "/page", "", {}, None, None),
    ("HEAD", "/page", BROWSER, {}, "gzip", None),
    ("GET", "/png", BROWSER, {}, None, None),
    ("GET", "/small", BROWSER, {}, None, None),
    ("GET", "/static/big.txt", BROWSER, {}, None, None),
    ("GET", "/static/big.txt", BROWSER, {"Range": "bytes=100-1099"}, None, None),
    ("HEAD", "/static/big.txt", BROWSER, {}, None, None),
    ("GET", "/static/style.css", "gzip", {}, "gzip", None),
]
# Per transport: compressed by the server (gzip, br, zstd); left alone by a rule (/png, /small);
# qualifying, to a client that accepted no coding (/page with an empty Accept-Encoding). A HEAD
# is none of these (no body to compress), and static answers are the static files' own.
GZIP, BR, ZSTD, SKIPPED, NOT_ACCEPTED = 2, 1, 1, 2, 1


@pytest.fixture
def served_server(request: pytest.FixtureRequest, tines_server: Any, tls_certs: TlsCerts,
                  tmp_path: Path) -> Iterator[tuple[Any, int, Path]]:
    """One worker of ``request.param`` with compression on, a JSON access log, a status
    listener and a static mount (a text file, and a stylesheet with a ``.gz`` sibling): TLS (h2
    and HTTP/1.1 by ALPN) on its first bind, plain HTTP/1.1 on its second."""
    mount = tmp_path / "static"
    mount.mkdir()
    (mount / "big.txt").write_bytes(BIG)
    (mount / "style.css").write_bytes(STYLE)
    (mount / "style.css.gz").write_bytes(gzip.compress(STYLE))
    log = tmp_path / "access.log"
    server, plain_port = serve_h2c(
        tines_server, request.param, *tls_args(tls_certs.localhost), "--compression", "gzip,br,zstd",
        "--access-log", str(log), "--access-log-format", "json", "--status-bind", "127.0.0.1:0",
        "--static", f"/static={mount}", mode="http1+h2c")
    yield server, plain_port, log


def client(transport: str, tls_certs: TlsCerts, server: Any, plain_port: int) -> tuple[httpx.Client, str]:
    if transport == "http/1.1":
        return httpx.Client(timeout=20), f"http://127.0.0.1:{plain_port}"
    return (httpx.Client(http1=transport != "h2", http2=transport == "h2", verify=client_context(tls_certs),
                         timeout=20), f"https://localhost:{server.port}")


def fetch(http: httpx.Client, method: str, url: str, accept: str,
          headers: dict[str, str]) -> tuple[httpx.Response, bytes]:
    """The response and its body's bytes as they came (the content coding not decoded)."""
    with http.stream(method, url, headers={"Accept-Encoding": accept, **headers}) as response:
        return response, b"".join(response.iter_raw())


def log_entries(log: Path, count: int) -> list[dict[str, Any]]:
    """The log's JSON lines once there are ``count`` (a worker writes its buffered lines when
    its loop goes idle, or once a poller has written a response's last byte)."""
    wait_until(lambda: log.exists() and len(log.read_text().splitlines()) >= count,
               what=f"{count} access log lines")
    return [json.loads(line) for line in log.read_text().splitlines()]


def status_port(server: Any) -> int:
    return int(server.wait_for_log(r"Status at: http://127\.0\.0\.1:(\d+)")[0].group(1))


@pytest.mark.parametrize("served_server", SERVED, ids=SERVED_IDS, indirect=True)
def test_logged_bytes_are_the_bytes_received_and_compression_is_counted(
        served_server: tuple[Any, int, Path], tls_certs: TlsCerts) -> None:
    server, plain_port, log = served_server
    received: dict[str, tuple[int, bytes | None]] = {}
    sent_compressed = 0
    for transport in TRANSPORTS:
        http, base = client(transport, tls_certs, server, plain_port)
        with http:
            for number, (method, path, accept, headers, coding, before) in enumerate(CASES):
                # A query names the request in the log.
                tag = f"{transport}-{number}"
                what = f"{transport} {method} {path} {accept!r} {headers}"
                response, raw = fetch(http, method, f"{base}{path}?n={tag}", accept, headers)
                assert response.http_version == ("HTTP/2" if transport == "h2" else "HTTP/1.1"), what
                assert response.headers.get("content-encoding") == coding, what
                if method == "HEAD":
                    assert raw == b"", what
                elif path == "/static/big.txt":
                    assert raw == (BIG[100:1100] if headers else BIG), what
                elif before is not None:
                    assert len(raw) < len(before), what
                    sent_compressed += len(raw)
                received[tag] = (len(raw), before)

    entries = log_entries(log, len(received))
    logged = {re.sub(r"^n=", "", entry["query"]): entry for entry in entries}
    assert set(logged) == set(received)
    for tag, (length, before) in received.items():
        entry = logged[tag]
        assert entry["bytes"] == length, (tag, entry)
        if before is None:
            assert "bytes_uncompressed" not in entry, (tag, entry)
        else:
            assert entry["bytes_uncompressed"] == len(before), (tag, entry)
        assert entry["protocol"] == ("HTTP/2.0" if tag.startswith("h2") else "HTTP/1.1"), entry

    # No waiting: a compressed response is counted before its last bytes leave.
    port = status_port(server)
    report = httpx.get(f"http://127.0.0.1:{port}/status.json", timeout=20).json()
    runs = len(TRANSPORTS)
    page_and_stream = (GZIP - 1 + BR + ZSTD) * len(PAGE) + len(b"".join(BLOCKS))
    expected = {"responses": {"gzip": GZIP * runs, "br": BR * runs, "zstd": ZSTD * runs},
                "bytes_in": page_and_stream * runs, "bytes_out": sent_compressed,
                "skipped": SKIPPED * runs, "not_accepted": NOT_ACCEPTED * runs}
    assert report["totals"]["compression"] == expected
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=20).text
    for line in [f'tines_compressed_responses_total{{coding="gzip"}} {GZIP * runs}',
                 f'tines_compressed_responses_total{{coding="br"}} {BR * runs}',
                 f'tines_compressed_responses_total{{coding="zstd"}} {ZSTD * runs}',
                 f"tines_compression_in_bytes_total {page_and_stream * runs}",
                 f"tines_compression_out_bytes_total {sent_compressed}",
                 f'tines_compression_skipped_total{{reason="rule"}} {SKIPPED * runs}',
                 f'tines_compression_skipped_total{{reason="not_accepted"}} {NOT_ACCEPTED * runs}']:
        assert f"\n{line}\n" in text, line


def test_curl_sees_the_logged_bytes_and_the_mod_deflate_atoms(tines_server: Any, tmp_path: Path) -> None:
    """curl on the plain port, the transfer's own byte count (``%{size_download}``: the body as it
    came, chunked framing removed, not decoded) against a custom format's ``%(B)s`` and the
    mod_deflate atoms; a range of a static file sent with sendfile logs the range's bytes."""
    mount = tmp_path / "static"
    mount.mkdir()
    (mount / "big.txt").write_bytes(BIG)
    log = tmp_path / "access.log"
    server = tines_server("compress_app:app", "-w", "1", "--compression", "gzip", "--access-log", str(log),
                          "--access-log-format", "%(U)s %(s)s %(b)s %(B)s %({instream}n)s %({outstream}n)s "
                          "%({ratio}n)s", "--static", f"/static={mount}")
    base = f"http://127.0.0.1:{server.port}"

    def curl(*args: str) -> int:
        done = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{size_download}", *args],
                              capture_output=True, text=True, timeout=30, check=True)
        return int(done.stdout)

    stream = curl("-H", "Accept-Encoding: gzip", f"{base}/stream")
    page = curl("-H", "Accept-Encoding: gzip", f"{base}/page")
    ranged = curl("-r", "100-1099", f"{base}/static/big.txt")
    plain = curl(f"{base}/page")
    wait_until(lambda: log.exists() and len(log.read_text().splitlines()) >= 4, what="4 access log lines")
    lines = [line.split() for line in log.read_text().splitlines()]
    assert len(lines) == 4
    total = len(b"".join(BLOCKS))
    assert lines[0] == ["/stream", "200", str(stream), str(stream), str(total), str(stream),
                        str(stream * 100 // total)]
    assert lines[1] == ["/page", "200", str(page), str(page), str(len(PAGE)), str(page),
                        str(page * 100 // len(PAGE))]
    assert ranged == 1000
    assert lines[2] == ["/static/big.txt", "206", "1000", "1000", "-", "-", "-"]
    assert plain == len(PAGE)
    assert lines[3] == ["/page", "200", str(plain), str(plain), "-", "-", "-"]


@pytest.mark.parametrize("served", SERVED + [("accounting_app:app", "event", "--threads", "2")],
                         ids=[*SERVED_IDS, "event"])
def test_large_compressed_bodies_log_what_the_client_received(tines_server: Any, tls_certs: TlsCerts,
                                                              tmp_path: Path, served: tuple[str, ...]) -> None:
    """Compressed bodies larger than the socket takes at once (a stream, and a 3 MiB body given
    whole), in each coding and over each transport: the line is written once the last byte went
    out (by the slot, or by the poller it was handed to) and shows what the client received."""
    app = served[0].replace("compress_app", "accounting_app")
    whole = base64.b64encode(random.Random(39).randbytes(48 * 64 * 1024 * 3 // 4))
    log = tmp_path / "access.log"
    server, plain_port = serve_h2c(tines_server, (app, *served[1:]), *tls_args(tls_certs.localhost),
                                   "--compression", "gzip,br,zstd", "--access-log", str(log),
                                   "--access-log-format", "json", mode="http1+h2c")
    received: dict[str, int] = {}
    for transport in TRANSPORTS:
        http, base = client(transport, tls_certs, server, plain_port)
        with http:
            for path in ("/big", "/big-whole"):
                for coding in ("gzip", "br", "zstd"):
                    tag = f"{transport}-{path}-{coding}"
                    response, raw = fetch(http, "GET", f"{base}{path}?n={tag}", coding, {})
                    assert response.headers["content-encoding"] == coding, tag
                    assert len(raw) < len(whole), tag
                    received[tag] = len(raw)
    entries = log_entries(log, len(received))
    logged = {entry["query"].removeprefix("n="): entry for entry in entries}
    assert {tag: entry["bytes"] for tag, entry in logged.items()} == received
    assert all(entry["bytes_uncompressed"] == len(whole) for entry in entries)


def chunk_payload(raw: bytes) -> bytes:
    """The body bytes (chunk data, framing excluded) in ``raw``, the start of a chunked body,
    with a chunk cut short by what of it was received."""
    payload, at = b"", 0
    while True:
        line_end = raw.find(b"\r\n", at)
        if line_end < 0:
            return payload
        size = int(raw[at:line_end].split(b";")[0], 16)
        data = raw[line_end + 2:line_end + 2 + size]
        payload += data
        if size == 0 or len(data) < size:
            return payload
        at = line_end + 2 + size + 2


@pytest.mark.parametrize("read_all", [True, False], ids=["read-all", "reset"])
def test_a_slow_reader_s_line_counts_only_body_bytes(tines_server: Any, tmp_path: Path,
                                                      read_all: bool) -> None:
    """A chunked gzip stream whose exchange ends with most of it queued for the poller (the
    client reads nothing until then): its deferred line's bytes are body bytes only (chunk
    data, not the head or chunk lines). Read to the end, they are exactly the chunk data the
    client received; reset after 256 KiB, at least the chunk data it received (more went into
    the kernel's buffers) and less than the whole."""
    log = tmp_path / "access.log"
    server = tines_server("accounting_app:app", "-w", "1", "--compression", "gzip", "--access-log", str(log),
                          "--access-log-format", "json", "--status-bind", "127.0.0.1:0")
    port = status_port(server)
    client = socket.create_connection(("127.0.0.1", server.port), timeout=60)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
    client.sendall(b"GET /big HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n")

    def finished() -> bool:
        report = json.loads(httpx.get(f"http://127.0.0.1:{port}/status.json").content)
        return bool(report["workers"]) and report["workers"][0]["requests"] == 1

    wait_until(finished, what="the exchange to end with the stream queued for the poller")
    raw = b""
    while read_all or len(raw) < 256 * 1024:
        chunk = client.recv(65536)
        if not chunk:
            break
        raw += chunk
    if not read_all:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head.lower() and b"content-encoding: gzip" in head.lower()
    data = chunk_payload(body)
    received = len(data)
    entry = log_entries(log, 1)[0]
    assert entry["status"] == 200
    if read_all:
        assert body.endswith(b"\r\n0\r\n\r\n")
        assert entry["bytes"] == received
        assert len(gzip.decompress(data)) == entry["bytes_uncompressed"]
    else:
        assert received <= entry["bytes"] < entry["bytes_uncompressed"], (received, entry)
