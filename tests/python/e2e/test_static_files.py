"""Static file mounts (``--static PREFIX=DIR``, ADR 0036) served by the worker's Rust code on
every MPM and for an ASGI app, over HTTP/1.1, TLS and h2, checked with real clients: ``curl``
for the headers, ranges and conditional requests (``--http1.1`` on the plain and the TLS bind,
``--http2`` over TLS), raw sockets for the traversal forms no client would send. The app behind
the mount (apps/static_app.py) answers ``app PATH PID``, so a test tells the two apart.
"""

from __future__ import annotations

import ctypes
import errno
import gzip
import hashlib
import json
import os
import socket
import ssl
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tls_certs import TlsCerts
from tls_clients import client_context, tls_args

from conftest import ROOT, Server, debian_tool, wait_until

WSGI = "static_app:app"
ASGI = "static_app:asgi"
SERVED = [(WSGI, "prefork"), (WSGI, "thread", "--threads", "2"), (WSGI, "event", "--threads", "1"), (ASGI,)]
SERVED_IDS = ["prefork", "thread", "event", "asgi"]
CSS = b"body { color: #123456; }\n" * 80
SECRET = b"TOP-SECRET-OUTSIDE-THE-MOUNT"


@dataclass
class Site:
    """The mounted directory and what lies beside it."""

    root: Path
    outside: Path
    big: bytes


def make_site(tmp_path: Path) -> Site:
    root = tmp_path / "public"
    outside = tmp_path / "outside"
    (root / "sub").mkdir(parents=True)
    (root / "nodir").mkdir()
    (root / "3f2a9c1e0b").mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_bytes(SECRET)
    (root / "app.css").write_bytes(CSS)
    # Siblings: their own bytes (a test sees which representation came).
    (root / "app.css.br").write_bytes(b"BROTLI-SIBLING-" + CSS[:100])
    (root / "app.css.gz").write_bytes(gzip.compress(CSS))
    (root / "app.3f2a9c1e.css").write_bytes(CSS)
    (root / "3f2a9c1e0b" / "logo.svg").write_bytes(b"<svg/>")
    (root / "sub" / "index.html").write_bytes(b"<h1>index</h1>\n")
    (root / ".env").write_bytes(SECRET)
    (root / "sub" / ".hidden.txt").write_bytes(SECRET)
    (root / "empty.txt").write_bytes(b"")
    big = os.urandom(8 << 20)
    (root / "big.bin").write_bytes(big)
    os.symlink("app.css", root / "inside.css")
    # An absolute link is refused even when it points inside (RESOLVE_BENEATH): documented.
    os.symlink(root / "app.css", root / "absolute.css")
    os.symlink("../app.css", root / "sub" / "up.css")
    os.symlink(outside / "secret.txt", root / "out.txt")
    os.symlink("/etc/passwd", root / "passwd")
    os.symlink(outside, root / "outdir")
    os.symlink("/proc/self/root/etc/passwd", root / "magic")
    os.mkfifo(root / "fifo")
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(str(root / "sock"))
    unix.close()
    return Site(root, outside, big)


def start(tines_server: Any, tls_certs: TlsCerts, site: Site, served: tuple[str, ...], *args: str) -> Server:
    """One worker serving ``served`` with the mount ``/static``: bind 0 speaks TLS (HTTP/1.1 and
    h2 by ALPN), bind 1 plain HTTP/1.1."""
    app, *options = served
    return tines_server(app, "-w", "1", *(["--mpm", *options] if options else []),
                        "-b", "plain:127.0.0.1:0", "--static", f"/static={site.root}",
                        "--static-index", "index.html", *tls_args(tls_certs.localhost), *args)


def plain_port(server: Server) -> int:
    return int(str(server.ready["binds"][1]).rpartition(":")[2])  # type: ignore[index]


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    version: str


class Curl:
    """``curl`` on one of the three transports."""

    def __init__(self, server: Server, tls_certs: TlsCerts, transport: str, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        if transport == "plain":
            self.base = f"http://127.0.0.1:{plain_port(server)}"
            self.options = ["--http1.1"]
        else:
            self.base = f"https://localhost:{server.port}"
            self.options = ["--http1.1" if transport == "tls" else "--http2", "--cacert", str(tls_certs.root),
                            "--resolve", f"localhost:{server.port}:127.0.0.1"]
        self.version = "2" if transport == "h2" else "1.1"

    def get(self, path: str, *args: str) -> Answer:
        body_file = self.tmp_path / "curl-body"
        head_file = self.tmp_path / "curl-head"
        result = subprocess.run(["curl", "-sS", "--max-time", "20", *self.options, "-D", str(head_file),
                                 "-o", str(body_file), "-w", "%{http_version}", *args, self.base + path],
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        lines = head_file.read_bytes().decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if colon:
                headers[name.strip().lower()] = value.strip()
        body = body_file.read_bytes() if body_file.exists() else b""
        body_file.unlink(missing_ok=True)
        return Answer(status, headers, body, result.stdout.strip())


def check_headers(curl: Curl, site: Site) -> None:
    whole = curl.get("/static/app.css")
    assert (whole.status, whole.body, whole.version) == (200, CSS, curl.version)
    headers = whole.headers
    assert "content-type" in headers, headers
    assert headers["content-type"] == "text/css; charset=utf-8"
    assert headers["content-length"] == str(len(CSS))
    assert headers["cache-control"] == "public, max-age=3600"
    assert headers["vary"] == "Accept-Encoding"
    assert headers["accept-ranges"] == "bytes"
    assert "content-encoding" not in headers
    etag, modified = headers["etag"], headers["last-modified"]
    assert etag.startswith('"') and etag.endswith('"') and not etag.startswith("W/")
    assert modified.endswith(" GMT")
    # Conditional requests: 304 without a body, with the validators.
    for condition in (f"If-None-Match: {etag}", f"If-None-Match: \"x\", W/{etag}", "If-None-Match: *",
                      f"If-Modified-Since: {modified}"):
        again = curl.get("/static/app.css", "-H", condition)
        assert (again.status, again.body) == (304, b""), condition
        assert again.headers["etag"] == etag and again.headers["vary"] == "Accept-Encoding"
    for condition in ("If-None-Match: \"other\"", "If-Modified-Since: Thu, 01 Jan 1970 00:00:00 GMT"):
        assert curl.get("/static/app.css", "-H", condition).status == 200, condition
    # If-None-Match wins over If-Modified-Since (RFC 9110 13.2.2).
    assert curl.get("/static/app.css", "-H", "If-None-Match: \"other\"", "-H",
                    f"If-Modified-Since: {modified}").status == 200
    # Ranges: one, several, suffix, unsatisfiable, If-Range.
    one = curl.get("/static/app.css", "-r", "0-9")
    assert (one.status, one.body) == (206, CSS[:10])
    assert one.headers["content-range"] == f"bytes 0-9/{len(CSS)}"
    suffix = curl.get("/static/app.css", "-r", "-5")
    assert (suffix.status, suffix.body) == (206, CSS[-5:])
    several = curl.get("/static/app.css", "-r", "0-1,10-12")
    assert several.status == 206
    content_type = several.headers["content-type"]
    assert content_type.startswith("multipart/byteranges; boundary=")
    boundary = content_type.partition("boundary=")[2].encode()
    assert several.headers["content-length"] == str(len(several.body))
    parts = [part for part in several.body.split(b"--" + boundary) if part.strip(b"\r\n-")]
    assert len(parts) == 2 and several.body.endswith(b"--" + boundary + b"--\r\n")
    for part, (first, last) in zip(parts, ((0, 1), (10, 12))):
        head, _, data = part.partition(b"\r\n\r\n")
        assert f"Content-Range: bytes {first}-{last}/{len(CSS)}".encode() in head
        assert b"Content-Type: text/css; charset=utf-8" in head
        assert data.removesuffix(b"\r\n") == CSS[first:last + 1]
    beyond = curl.get("/static/app.css", "-r", f"{len(CSS)}-")
    assert beyond.status == 416 and beyond.headers["content-range"] == f"bytes */{len(CSS)}"
    assert CSS not in beyond.body
    assert curl.get("/static/app.css", "-r", "0-9", "-H", f"If-Range: {etag}").status == 206
    assert curl.get("/static/app.css", "-r", "0-9", "-H", f"If-Range: {modified}").status == 206
    stale = curl.get("/static/app.css", "-r", "0-9", "-H", "If-Range: \"old\"")
    assert (stale.status, stale.body) == (200, CSS)
    # HEAD: the length, no body.
    head = curl.get("/static/app.css", "-I")
    # (curl -I writes the head where the body would go.)
    assert head.status == 200 and head.headers["content-length"] == str(len(CSS)) and CSS[:30] not in head.body
    # Precompressed siblings by a browser's Accept-Encoding, each with its own ETag; Range
    # applies to the representation chosen.
    brotli_bytes = (site.root / "app.css.br").read_bytes()
    browser = curl.get("/static/app.css", "-H", "Accept-Encoding: gzip, deflate, br, zstd")
    assert (browser.status, browser.body) == (200, brotli_bytes)
    assert browser.headers["content-encoding"] == "br" and browser.headers["vary"] == "Accept-Encoding"
    assert browser.headers["etag"] not in (etag,) and browser.headers["content-type"] == "text/css; charset=utf-8"
    assert curl.get("/static/app.css", "-H", "Accept-Encoding: br", "-H",
                    f"If-None-Match: {browser.headers['etag']}").status == 304
    assert curl.get("/static/app.css", "-H", "Accept-Encoding: br", "-H", f"If-None-Match: {etag}").status == 200
    ranged = curl.get("/static/app.css", "-H", "Accept-Encoding: br", "-r", "0-6")
    assert (ranged.status, ranged.body) == (206, brotli_bytes[:7])
    assert ranged.headers["content-range"] == f"bytes 0-6/{len(brotli_bytes)}"
    gz = curl.get("/static/app.css", "-H", "Accept-Encoding: gzip;q=1, br;q=0.5")
    assert gz.headers["content-encoding"] == "gzip" and gzip.decompress(gz.body) == CSS
    assert curl.get("/static/app.css", "-H", "Accept-Encoding: zstd").headers.get("content-encoding") is None
    assert curl.get("/static/app.css", "-H", "Accept-Encoding: br;q=0").body == CSS
    # Names with a content hash are cached for ever; other types have no Vary.
    assert curl.get("/static/app.3f2a9c1e.css").headers["cache-control"] == "public, max-age=31536000, immutable"
    svg = curl.get("/static/3f2a9c1e0b/logo.svg")
    assert svg.headers["cache-control"].endswith("immutable") and svg.headers["content-type"] == "image/svg+xml"
    big = curl.get("/static/big.bin", "-r", "1000000-1000009")
    assert big.body == site.big[1000000:1000010] and "vary" not in big.headers
    assert big.headers["content-type"] == "application/octet-stream"
    empty = curl.get("/static/empty.txt")
    assert (empty.status, empty.body, empty.headers["content-length"]) == (200, b"", "0")
    # Index, the redirect to it, no listing, other methods, a miss, outside the mount.
    assert curl.get("/static/sub/").body == b"<h1>index</h1>\n"
    moved = curl.get("/static/sub?x=1")
    assert moved.status == 301 and moved.headers["location"] == "/static/sub/?x=1"
    assert curl.get("/static/nodir/").status == 404
    posted = curl.get("/static/app.css", "-X", "POST", "-d", "x")
    assert posted.status == 405 and posted.headers["allow"] == "GET, HEAD"
    missing = curl.get("/static/missing.css")
    assert missing.status == 404 and not missing.body.startswith(b"app")
    assert curl.get("/static/inside.css").body == CSS, "a symlink inside the mount is followed"
    assert curl.get("/static/sub/up.css").body == CSS
    assert curl.get("/staticfiles/x").body.startswith(b"app /staticfiles/x")


@pytest.mark.parametrize("served", SERVED, ids=SERVED_IDS)
def test_every_header_rule_over_http1_tls_and_h2(tines_server: Any, tls_certs: TlsCerts, tmp_path: Path,
                                                  served: tuple[str, ...]) -> None:
    debian_tool("curl")
    site = make_site(tmp_path)
    server = start(tines_server, tls_certs, site, served)
    for transport in ("plain", "tls", "h2"):
        check_headers(Curl(server, tls_certs, transport, tmp_path), site)


def test_static_answers_are_never_compressed_on_the_fly(tines_server: Any, tls_certs: TlsCerts,
                                                        tmp_path: Path) -> None:
    """With ``--compression`` on, a static file still goes out as it is on disk (sendfile on
    plain HTTP/1.1): the identity with its strong ETag, or the precompressed sibling; a 304 says
    the ETag the 200 said."""
    debian_tool("curl")
    site = make_site(tmp_path)
    server = start(tines_server, tls_certs, site, (WSGI, "prefork"), "--compression", "gzip,br")
    browser = ("-H", "Accept-Encoding: gzip, deflate, br")
    for transport in ("plain", "tls", "h2"):
        curl = Curl(server, tls_certs, transport, tmp_path)
        assert curl.get("/static/app.css", *browser).headers["content-encoding"] == "br", "the sibling"
        plain = curl.get("/static/app.3f2a9c1e.css", *browser)
        assert (plain.status, plain.body) == (200, CSS), transport
        assert "content-encoding" not in plain.headers and plain.headers["content-length"] == str(len(CSS))
        etag = plain.headers["etag"]
        assert etag.startswith('"') and not etag.endswith('-gz"'), etag
        again = curl.get("/static/app.3f2a9c1e.css", *browser, "-H", f"If-None-Match: {etag}")
        assert (again.status, again.body, again.headers["etag"]) == (304, b"", etag)
        sibling = curl.get("/static/app.css", "-H", "Accept-Encoding: gzip")
        assert (sibling.status, sibling.body) == (200, (site.root / "app.css.gz").read_bytes())
        assert sibling.headers["content-encoding"] == "gzip" and sibling.headers["etag"].endswith('-gz"')
        assert sibling.headers["content-length"] == str(len(sibling.body))
        revalidated = curl.get("/static/app.css", "-H", "Accept-Encoding: gzip", "-H",
                               f"If-None-Match: {sibling.headers['etag']}")
        assert (revalidated.status, revalidated.headers["etag"]) == (304, sibling.headers["etag"])
        # A range applies to the identity, not to a compressed stream.
        part = curl.get("/static/app.3f2a9c1e.css", *browser, "-r", "0-9")
        assert (part.status, part.body) == (206, CSS[:10]) and "content-encoding" not in part.headers


TRAVERSALS = [
    "/static/../outside/secret.txt",
    "/static/%2e%2e/outside/secret.txt",
    "/static/%2E%2E/outside/secret.txt",
    "/static/.%2e/outside/secret.txt",
    "/static/%252e%252e/outside/secret.txt",
    "/static/sub/..%2f..%2foutside/secret.txt",
    "/static/%2f..%2f..%2foutside/secret.txt",
    "/static/..%5c..%5coutside%5csecret.txt",
    "/static/..\\..\\outside\\secret.txt",
    "/static/app.css%00.png",
    "/static/%00",
    "/static/%c0%ae%c0%ae/outside/secret.txt",
    "/static/%c0%af..%c0%afoutside/secret.txt",
    "/static//etc/passwd",
    "/static/%2fetc%2fpasswd",
    "http://localhost/static/../outside/secret.txt",
    "/static/./../outside/secret.txt",
    "/static/out.txt",
    "/static/passwd",
    "/static/outdir/secret.txt",
    "/static/outdir/",
    "/static/magic",
    "/static/absolute.css",
    "/static/.env",
    "/static/%2eenv",
    "/static/sub/.hidden.txt",
    "/static/fifo",
    "/static/sock",
    "/static/nodir/",
    "/static/app.css/",
    "/static/sub/index.html/../../../outside/secret.txt",
]


def raw_get(port: int, target: str) -> bytes:
    """Sends ``GET target`` as given (no client normalizes it) and reads the whole answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(f"GET {target} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
        return data


@pytest.mark.parametrize("served", SERVED, ids=SERVED_IDS)
def test_traversal_forms_and_symlinks_leaving_the_mount_never_give_the_file(
        tines_server: Any, tls_certs: TlsCerts, tmp_path: Path, served: tuple[str, ...]) -> None:
    site = make_site(tmp_path)
    server = start(tines_server, tls_certs, site, served)
    passwd = Path("/etc/passwd").read_bytes()[:40]
    for target in TRAVERSALS:
        answer = raw_get(plain_port(server), target)
        status = int(answer.split(b" ", 2)[1])
        assert status in (400, 404), (target, answer[:200])
        assert SECRET not in answer and passwd not in answer, target
        assert b"\r\n\r\napp " not in answer, f"{target}: a refused path is a 404 from Rust"
    assert len(TRAVERSALS) >= 20
    # The server still serves what is allowed.
    assert raw_get(plain_port(server), "/static/app.css").endswith(CSS)
    # The same paths as HTTP/2 `:path`s (curl sends them as given: `--path-as-is`). A path h2
    # itself refuses ends the stream instead: never the file either way.
    debian_tool("curl")
    for target in TRAVERSALS:
        if not target.startswith("/"):
            continue
        result = subprocess.run(["curl", "-sS", "--http2", "--path-as-is", "--max-time", "20", "--cacert",
                                 str(tls_certs.root), "--resolve", f"localhost:{server.port}:127.0.0.1",
                                 "-w", "\n%{http_version} %{http_code}", f"https://localhost:{server.port}{target}"],
                                capture_output=True, timeout=60)
        assert SECRET not in result.stdout and passwd not in result.stdout, target
        if result.returncode == 0:
            assert result.stdout.endswith((b"2 404", b"2 400")), (target, result.stdout[-200:])


def test_settings_open_what_the_defaults_refuse(tines_server: Any, tls_certs: TlsCerts, tmp_path: Path) -> None:
    site = make_site(tmp_path)
    server = start(tines_server, tls_certs, site, (WSGI, "prefork"), "--static-follow-symlinks", "--static-hidden")
    port = plain_port(server)
    for target in ("/static/out.txt", "/static/outdir/secret.txt", "/static/.env"):
        assert raw_get(port, target).endswith(SECRET), target
    for target in ("/static/../outside/secret.txt", "/static/%2e%2e/outside/secret.txt", "/static/fifo"):
        assert SECRET not in raw_get(port, target), target


IN_OPEN = 0x20


class OpenWatch:
    """Counts the opens of one file with inotify (``IN_OPEN``): an ``O_PATH`` lookup opens
    nothing and makes no event, a real open does."""

    def __init__(self, path: Path) -> None:
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        assert self.fd >= 0, os.strerror(ctypes.get_errno())
        assert self.libc.inotify_add_watch(self.fd, os.fsencode(path), IN_OPEN) >= 0

    def opens(self) -> int:
        count = 0
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return count
            offset = 0
            while offset < len(data):
                _, mask, _, length = struct.unpack_from("iIII", data, offset)
                count += bool(mask & IN_OPEN)
                offset += 16 + length

    def close(self) -> None:
        os.close(self.fd)


@pytest.mark.parametrize("follow", [False, True], ids=["beneath", "follow-symlinks"])
def test_a_file_that_is_not_regular_is_never_opened(tines_server: Any, tls_certs: TlsCerts, tmp_path: Path,
                                                    follow: bool) -> None:
    site = make_site(tmp_path)
    os.symlink("/dev/null", site.root / "null")
    server = start(tines_server, tls_certs, site, (WSGI, "prefork"), *(["--static-follow-symlinks"] if follow else []))
    port = plain_port(server)
    watch = OpenWatch(site.root / "fifo")
    try:
        for target in ("/static/fifo", "/static/null", "/static/sock"):
            answer = raw_get(port, target)
            assert answer.startswith(b"HTTP/1.1 404 "), (target, answer[:200])
        assert watch.opens() == 0, "the FIFO was opened"
        # The watch sees an open: ours.
        os.close(os.open(site.root / "fifo", os.O_RDONLY | os.O_NONBLOCK))
        assert watch.opens() == 1
    finally:
        watch.close()
    assert raw_get(port, "/static/app.css").endswith(CSS)


def refuse_openat2() -> None:
    """In the child before exec: a seccomp filter that answers ``openat2`` (437 on every
    architecture) with ENOSYS, as an old kernel or a container's profile would; inherited by
    the server and its workers."""

    class SockFilter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                    ("k", ctypes.c_uint32)]

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]

    program = (SockFilter * 4)(SockFilter(0x20, 0, 0, 0),  # load the syscall number
                               SockFilter(0x15, 0, 1, 437),  # openat2?
                               SockFilter(0x06, 0, 0, 0x00050000 | errno.ENOSYS),  # SECCOMP_RET_ERRNO
                               SockFilter(0x06, 0, 0, 0x7FFF0000))  # SECCOMP_RET_ALLOW
    fprog = SockFprog(len(program), program)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0 or libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # NO_NEW_PRIVS, SECCOMP
        raise OSError(ctypes.get_errno(), "seccomp")


def test_without_openat2_the_master_stops_with_one_line(tmp_path: Path) -> None:
    errors = []
    for command in ("check-config", "serve"):
        result = subprocess.run([sys.executable, "-m", "tines", command, "static_app:app", "--static",
                                 f"/static={tmp_path}"], capture_output=True, text=True, timeout=60, cwd=ROOT,
                                env={**os.environ, "PYTHONPATH": str(ROOT / "tests/python/e2e/apps")},
                                preexec_fn=refuse_openat2)
        assert result.returncode == 2, result.stderr
        errors.append([line for line in result.stderr.splitlines() if line.startswith("tines: error:")])
        if command == "check-config":
            assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    for lines in errors:
        assert len(lines) == 1 and "static" in lines[0] and "openat2 is unavailable" in lines[0], lines
        assert os.strerror(errno.ENOSYS) in lines[0], lines


@pytest.mark.parametrize("served", [SERVED[0], SERVED[3]], ids=["prefork", "asgi"])
def test_a_miss_goes_to_the_app_when_asked(tines_server: Any, tls_certs: TlsCerts, tmp_path: Path,
                                           served: tuple[str, ...]) -> None:
    site = make_site(tmp_path)
    server = start(tines_server, tls_certs, site, served, "--static-miss", "app")
    port = plain_port(server)
    assert b"\r\n\r\napp /static/missing.css " in raw_get(port, "/static/missing.css")
    assert b"\r\n\r\napp /static/nodir/ " in raw_get(port, "/static/nodir/")
    # A refused path is a miss too: the app's, as without the mount; never the file.
    for target in ("/static/%2e%2e/outside/secret.txt", "/static/out.txt", "/static/.env"):
        answer = raw_get(port, target)
        assert b"\r\n\r\napp /static/" in answer and SECRET not in answer, target
    assert raw_get(port, "/static/app.css").endswith(CSS)
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(b"POST /static/app.css HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert b"\r\n\r\napp /static/app.css " in data


def app_pid(port: int) -> int:
    return int(raw_get(port, "/pid").rpartition(b" ")[2])


@pytest.mark.parametrize("served", SERVED, ids=SERVED_IDS)
def test_static_answers_do_not_count_toward_max_requests(tines_server: Any, tls_certs: TlsCerts, tmp_path: Path,
                                                         served: tuple[str, ...]) -> None:
    site = make_site(tmp_path)
    server = start(tines_server, tls_certs, site, served, "--max-requests", "2")
    port = plain_port(server)
    first = app_pid(port)
    workers = server.worker_pids()
    etag = raw_get(port, "/static/app.css").partition(b"ETag: ")[2].partition(b"\r\n")[0].decode()
    for index in range(10):
        if index % 3 == 0:
            answer = raw_get(port, "/static/missing")
            assert b" 404 " in answer.split(b"\r\n")[0]
        elif index % 3 == 1:
            with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
                sock.sendall(f"GET /static/app.css HTTP/1.1\r\nHost: x\r\nIf-None-Match: {etag}\r\n"
                             "Connection: close\r\n\r\n".encode())
                assert sock.recv(100).startswith(b"HTTP/1.1 304 ")
        else:
            assert raw_get(port, "/static/app.css").endswith(CSS)
    # The budget's second request is this worker's, and so was every static answer before it.
    assert server.worker_pids() == workers
    assert app_pid(port) == first


def read_head(sock: socket.socket | ssl.SSLSocket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(1)
        assert chunk, "closed before the head"
        data += chunk
    return data


@pytest.mark.parametrize("served", SERVED, ids=SERVED_IDS)
@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_a_slow_reader_of_a_large_file_holds_no_slot(tines_server: Any, tls_certs: TlsCerts, tmp_path: Path,
                                                     served: tuple[str, ...], tls: bool) -> None:
    site = make_site(tmp_path)
    server = start(tines_server, tls_certs, site, served)
    port = server.port if tls else plain_port(server)
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    raw.settimeout(20)
    raw.connect(("127.0.0.1", port))
    slow: socket.socket | ssl.SSLSocket = (client_context(tls_certs).wrap_socket(raw, server_hostname="localhost")
                                           if tls else raw)
    with slow:
        slow.sendall(b"GET /static/big.bin HTTP/1.1\r\nHost: localhost\r\n\r\n")
        head = read_head(slow)
        assert head.startswith(b"HTTP/1.1 200 ") and f"Content-Length: {8 << 20}".encode() in head
        # The slow client has read only the head of 8 MiB: its worker (one, one slot on
        # prefork) still answers another client at once.
        assert raw_get(plain_port(server), "/static/app.css").endswith(CSS)
        assert b"app /pid" in raw_get(plain_port(server), "/pid")
        digest = hashlib.sha256()
        left = 8 << 20
        while left:
            chunk = slow.recv(min(left, 65536))
            assert chunk, "closed before the end of the file"
            digest.update(chunk)
            left -= len(chunk)
    assert digest.hexdigest() == hashlib.sha256(site.big).hexdigest()


@pytest.mark.parametrize("mount, fragment", [
    ("/static=/nonexistent/tines-dir", "must be an existing directory"),
    ("/static=" + str(ROOT / "README.md"), "must be an existing directory"),
    ("static=/tmp", "must start with /"),
    ("/a/../b=/tmp", "must start with /"),
    ("/static", "must be PREFIX=DIR"),
])
def test_a_bad_mount_stops_the_master_with_one_line(mount: str, fragment: str) -> None:
    result = subprocess.run([sys.executable, "-m", "tines", "serve", "static_app:app", "--static", mount],
                            capture_output=True, text=True, timeout=60, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT / "tests/python/e2e/apps")})
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0] and "static" in lines[0], result.stderr


def test_a_bad_static_miss_stops_the_master_with_one_line() -> None:
    result = subprocess.run([sys.executable, "-m", "tines", "serve", "static_app:app", "--static-miss", "500"],
                            capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "static_miss" in result.stderr


@pytest.mark.parametrize("served", [SERVED[0], SERVED[3]], ids=["prefork", "asgi"])
def test_static_answers_have_their_access_log_lines(tines_server: Any, tls_certs: TlsCerts, tmp_path: Path,
                                                    served: tuple[str, ...]) -> None:
    site = make_site(tmp_path)
    log = tmp_path / "access.log"
    server = start(tines_server, tls_certs, site, served, "--access-log", str(log), "--access-log-format", "json")
    port = plain_port(server)
    etag = raw_get(port, "/static/app.css").partition(b"ETag: ")[2].partition(b"\r\n")[0].decode()
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(f"GET /static/app.css HTTP/1.1\r\nHost: x\r\nIf-None-Match: {etag}\r\n"
                     "Connection: close\r\n\r\n".encode())
        assert sock.recv(100).startswith(b"HTTP/1.1 304 ")
    raw_get(port, "/static/missing.css")
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(b"GET /static/big.bin HTTP/1.1\r\nHost: x\r\nRange: bytes=10-19\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
        assert data.endswith(site.big[10:20])
    wait_until(lambda: log.exists() and len(log.read_text().splitlines()) >= 4, what="4 access log lines")
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(entry["path"], entry["status"], entry["bytes"]) for entry in entries] == [
        ("/static/app.css", 200, len(CSS)), ("/static/app.css", 304, 0), ("/static/missing.css", 404, 10),
        ("/static/big.bin", 206, 10)]
