"""Real HTTP/2 clients against Tines on every MPM and an ASGI app: httpx (h2 over TLS by ALPN,
and h2c with prior knowledge), ``curl --http2`` over TLS and ``curl --http2-prior-knowledge``,
nghttp and h2load (Debian's nghttp2-client), and HAProxy (Debian) speaking h2c to an ``h2c:``
listener as its backend (``server s HOST:PORT proto h2``). Each asserts that HTTP/2 carried the
exchange (the client's own report, and what the app saw) and what came back."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import socket
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from h2_tools import ASGI, SERVED, SERVED_IDS, WSGI, one_stream, run_h2load, serve_h2c
from tls_certs import TlsCerts
from tls_clients import client_context, tls_args

from conftest import Server, debian_tool, wait_until

HELLO = b"hello over HTTP/2\n"


def serve_both(tines_server: Any, tls_certs: TlsCerts, served: tuple[str, ...]) -> tuple[Server, int]:
    """One worker: h2 (and HTTP/1.1) over TLS on the first bind, ``h2c:`` on the second."""
    return serve_h2c(tines_server, served, *tls_args(tls_certs.localhost))


def seen_protocol(body: bytes, served: tuple[str, ...]) -> tuple[str, str]:
    """What the app said of the protocol and the scheme (``/env`` or ``/scope``)."""
    seen = json.loads(body)
    if served[0] == ASGI:
        return seen["http_version"], seen["scheme"]
    return seen["SERVER_PROTOCOL"], seen["wsgi.url_scheme"]


def info_path(served: tuple[str, ...]) -> str:
    return "/scope" if served[0] == ASGI else "/env"


def expected(served: tuple[str, ...], scheme: str) -> tuple[str, str]:
    return ("2" if served[0] == ASGI else "HTTP/2"), scheme


@pytest.mark.parametrize("served", SERVED, ids=SERVED_IDS)
def test_httpx_speaks_h2_over_tls_and_h2c_with_prior_knowledge(tines_server: Any, tls_certs: TlsCerts,
                                                               served: tuple[str, ...]) -> None:
    server, h2c_port = serve_both(tines_server, tls_certs, served)
    upload = os.urandom(300_000)
    for base, client in ((f"https://localhost:{server.port}", httpx.Client(http2=True, verify=client_context(tls_certs),
                                                                            timeout=20)),
                         (f"http://127.0.0.1:{h2c_port}", httpx.Client(http1=False, http2=True, timeout=20))):
        scheme = base.partition(":")[0]
        with client:
            for _ in range(5):  # one connection, several streams in turn
                response = client.get(f"{base}{info_path(served)}")
                assert response.http_version == "HTTP/2" and response.status_code == 200
                assert seen_protocol(response.content, served) == expected(served, scheme)
            posted = client.post(f"{base}/upload", content=upload)
            assert posted.http_version == "HTTP/2"
            assert posted.text == f"{hashlib.sha256(upload).hexdigest()} {len(upload)}"


@pytest.mark.parametrize("served", SERVED, ids=SERVED_IDS)
def test_curl_speaks_h2_over_tls_and_with_prior_knowledge(tines_server: Any, tls_certs: TlsCerts,
                                                          served: tuple[str, ...]) -> None:
    debian_tool("curl")
    server, h2c_port = serve_both(tines_server, tls_certs, served)
    path = info_path(served)
    for scheme, options, port in (("https", ["--http2", "--cacert", str(tls_certs.root), "--resolve",
                                             f"localhost:{server.port}:127.0.0.1"], server.port),
                                  ("http", ["--http2-prior-knowledge"], h2c_port)):
        host = "localhost" if scheme == "https" else "127.0.0.1"
        result = subprocess.run(["curl", "-sS", "--max-time", "20", *options, "-w", "\n%{http_version} %{http_code}",
                                 f"{scheme}://{host}:{port}{path}"],
                                capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert result.returncode == 0, result.stderr
        body, _, trailer = result.stdout.rpartition("\n")
        assert trailer == "2 200", result.stdout
        assert seen_protocol(body.encode(), served) == expected(served, scheme)


@pytest.mark.parametrize("served", SERVED, ids=SERVED_IDS)
def test_nghttp_and_h2load_are_answered(tines_server: Any, tls_certs: TlsCerts, served: tuple[str, ...]) -> None:
    nghttp = debian_tool("nghttp", "nghttp2-client")
    server, h2c_port = serve_both(tines_server, tls_certs, served)
    streams = 1 if one_stream(served) else 10
    for url in (f"http://127.0.0.1:{h2c_port}/", f"https://127.0.0.1:{server.port}/"):
        # Two streams at once on one connection (one after the other on prefork).
        batches = [[url], [f"{url}?second"]] if one_stream(served) else [[url, f"{url}?second"]]
        output = ""
        for urls in batches:
            result = subprocess.run([nghttp, "-v", *urls], capture_output=True, text=True, timeout=60,
                                    stdin=subprocess.DEVNULL)
            assert result.returncode == 0, result.stdout[-3000:] + result.stderr
            output += result.stdout
        assert output.count(":status: 200") == 2, output[-3000:]
        assert output.count(HELLO.decode()) == 2, output[-3000:]
        load = run_h2load(url, 1000, 4, streams)
        assert (load.done, load.succeeded, load.ok) == (1000, 1000, 1000), load.output
        assert (load.failed, load.errored, load.timeout) == (0, 0, 0), load.output


HAPROXY_CONFIG = """\
global
    maxconn 100
defaults
    mode http
    timeout connect 20s
    timeout client 60s
    timeout server 60s
frontend front
    bind fd@{fd}
    default_backend tines
backend tines
    server s 127.0.0.1:{port} proto h2
"""


@pytest.mark.parametrize("served", SERVED, ids=SERVED_IDS)
def test_haproxy_speaks_h2c_to_an_h2c_listener(tines_server: Any, tmp_path: Path, served: tuple[str, ...]) -> None:
    haproxy = debian_tool("haproxy")
    access_log = tmp_path / "access.log"
    _, h2c_port = serve_h2c(tines_server, served, "--access-log", str(access_log))
    # HAProxy inherits a socket that already listens: a client's connection waits in its
    # backlog until HAProxy is up, so no readiness wait (and no port picked and freed).
    with socket.create_server(("127.0.0.1", 0)) as front:
        config = tmp_path / "haproxy.cfg"
        config.write_text(HAPROXY_CONFIG.format(fd=front.fileno(), port=h2c_port))
        with open(tmp_path / "haproxy.log", "wb") as log:
            proxy = subprocess.Popen([haproxy, "-db", "-f", str(config)], stdin=subprocess.DEVNULL, stdout=log,
                                     stderr=log, pass_fds=(front.fileno(),))
        front_port = front.getsockname()[1]
    try:
        connection = http.client.HTTPConnection("127.0.0.1", front_port, timeout=20)
        try:
            for _ in range(10):  # HTTP/1.1 keep-alive in front, h2c streams behind
                connection.request("GET", info_path(served))
                response = connection.getresponse()
                body = response.read()
                assert response.status == 200, (body, (tmp_path / "haproxy.log").read_text())
                assert seen_protocol(body, served) == expected(served, "http")
            upload = os.urandom(200_000)
            connection.request("POST", "/upload", body=upload)
            response = connection.getresponse()
            assert response.read().decode() == f"{hashlib.sha256(upload).hexdigest()} {len(upload)}"
        finally:
            connection.close()
    finally:
        proxy.kill()
        proxy.wait(10)
    wait_until(lambda: len(access_log.read_text().splitlines()) >= 11, what="11 access log lines")
    lines = access_log.read_text().splitlines()
    assert len(lines) == 11 and all('HTTP/2.0"' in line for line in lines), lines


def curl_version_and_status(url: str, *options: str) -> str:
    """``HTTP_VERSION STATUS`` as curl reports them for ``url``."""
    result = subprocess.run(["curl", "-sS", "--max-time", "20", "-o", "/dev/null", "-w", "%{http_version} %{http_code}",
                             *options, url], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("served", SERVED, ids=SERVED_IDS)
def test_a_listener_that_speaks_both_tells_the_preface_from_an_http11_request(tines_server: Any,
                                                                              served: tuple[str, ...]) -> None:
    debian_tool("curl")
    _, port = serve_h2c(tines_server, served, mode="http1+h2c")
    url = f"http://127.0.0.1:{port}/"
    assert curl_version_and_status(url, "--http1.1") == "1.1 200"
    assert curl_version_and_status(url, "--http2-prior-knowledge") == "2 200"
    # curl's --http2 on http:// is the Upgrade form, which is not offered: HTTP/1.1 answers.
    assert curl_version_and_status(url, "--http2") == "1.1 200"
    with httpx.Client(http1=False, http2=True, timeout=20) as h2c, httpx.Client(timeout=20) as http11:
        for _ in range(3):
            assert h2c.get(url).http_version == "HTTP/2"
            assert http11.get(url).http_version == "HTTP/1.1"


def test_no_http2_offers_only_http11_by_alpn(tines_server: Any, tls_certs: TlsCerts) -> None:
    debian_tool("curl")
    server = tines_server(WSGI, "-w", "1", "--no-http2", *tls_args(tls_certs.localhost))
    assert curl_version_and_status(f"https://localhost:{server.port}/", "--http2", "--cacert", str(tls_certs.root),
                                   "--resolve", f"localhost:{server.port}:127.0.0.1") == "1.1 200"
    with httpx.Client(http2=True, verify=client_context(tls_certs), timeout=20) as client:
        assert client.get(f"https://localhost:{server.port}/").http_version == "HTTP/1.1"
    # On by default: the same server without the flag negotiates h2.
    default = tines_server(WSGI, "-w", "1", *tls_args(tls_certs.localhost))
    with httpx.Client(http2=True, verify=client_context(tls_certs), timeout=20) as client:
        assert client.get(f"https://localhost:{default.port}/").http_version == "HTTP/2"


def test_h2c_binds_on_unix_sockets(tines_server: Any, tmp_path: Path) -> None:
    debian_tool("curl")
    only, both = tmp_path / "h2c.sock", tmp_path / "both.sock"
    tines_server(WSGI, "-w", "1", "--mpm", "thread", "-b", f"h2c:unix:{only}", "-b", f"http1+h2c:unix:{both}")
    assert curl_version_and_status("http://localhost/env", "--unix-socket", str(only), "--http2-prior-knowledge") == "2 200"
    assert curl_version_and_status("http://localhost/env", "--unix-socket", str(both), "--http2-prior-knowledge") == "2 200"
    assert curl_version_and_status("http://localhost/env", "--unix-socket", str(both), "--http1.1") == "1.1 200"
    # An HTTP/1.1 request on the h2c-only socket is a bad preface: no HTTP/1.1 answer.
    refused = subprocess.run(["curl", "-sS", "--max-time", "20", "--http1.1", "--unix-socket", str(only),
                              "http://localhost/"], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert refused.returncode != 0 and "HTTP/1.1" not in refused.stdout, (refused.stdout, refused.stderr)
