"""Which listeners speak TLS, and what else still works on a TLS server (issue 37): with a
certificate every TCP bind speaks TLS unless written ``plain:HOST:PORT``; a plain HTTP request
on a TLS port gets a plain-text 400 that says HTTPS and costs the worker nothing; a PROXY
protocol header comes first, then the TLS handshake; the status listener stays plain and counts
the TLS requests; ``tines bench --insecure`` loads an ``https://`` URL; garbage is closed and
failed handshakes are logged at info with the peer, not one line each."""

from __future__ import annotations

import http.client
import json
import os
import socket
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tls_certs import TlsCerts
from tls_clients import (MPM_IDS, MPMS, bind_port, client_context, client_hello, request_on, tls_args, tls_connect,
                         tls_request)

from conftest import APPS, ROOT, http_get, read_until_closed, wait_until
from test_proxy_protocol import v1, v2_proxy
from test_status import fetch, status, status_port

APP = "tls_env:app"
PLAIN_REQUEST = b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"


@pytest.mark.parametrize("mpm", MPMS, ids=MPM_IDS)
def test_a_plain_request_on_the_tls_port_gets_a_400_saying_https_and_the_worker_serves_on(
        tines_server: Any, tls_certs: TlsCerts, mpm: tuple[str, ...]) -> None:
    server = tines_server(APP, "-w", "1", "--mpm", *mpm, *tls_args(tls_certs.localhost))
    context = client_context(tls_certs)
    before = tls_request(server.port, "/", context).json()["pid"]
    workers = server.worker_pids()
    for request in (PLAIN_REQUEST, b"POST /form HTTP/1.0\r\nContent-Length: 3\r\n\r\na=b"):
        with socket.create_connection(("127.0.0.1", server.port), timeout=20) as sock:
            sock.sendall(request)
            answer = read_until_closed(sock)
        head = answer.partition(b"\r\n\r\n")[0]
        assert head.startswith(b"HTTP/1.1 400 "), answer
        assert b"connection: close" in head.lower() and b"HTTPS" in answer, answer
    after = tls_request(server.port, "/", context)
    assert after.json()["pid"] == before and server.worker_pids() == workers
    assert after.peer.serial_number == tls_certs.localhost.serial


def test_a_plain_bind_beside_a_tls_bind(tines_server: Any, tls_certs: TlsCerts) -> None:
    # conftest binds 127.0.0.1:0 first (TLS: a certificate is set); the second bind is plain.
    server = tines_server(APP, "-w", "1", "-b", "plain:127.0.0.1:0", *tls_args(tls_certs.localhost))
    tls_port, plain_port = bind_port(server.ready, 0), bind_port(server.ready, 1)
    assert tls_port != plain_port
    status, body = http_get(plain_port, close=True)
    seen = json.loads(body)
    assert status == 200 and seen["wsgi.url_scheme"] == "http" and seen.get("HTTPS") in (None, "off"), seen
    assert not any(key.startswith("SSL_") for key in seen), seen
    secure = tls_request(tls_port, "/", client_context(tls_certs))
    assert secure.json()["wsgi.url_scheme"] == "https" and secure.peer.serial_number == tls_certs.localhost.serial
    # Each port speaks only its own language.
    with pytest.raises(ssl.SSLError):
        tls_connect(plain_port, client_context(tls_certs)).close()
    with socket.create_connection(("127.0.0.1", tls_port), timeout=20) as sock:
        sock.sendall(PLAIN_REQUEST)
        assert read_until_closed(sock).startswith(b"HTTP/1.1 400 ")


def test_a_unix_socket_bind_stays_plain(tines_server: Any, tls_certs: TlsCerts, tmp_path: Path) -> None:
    path = tmp_path / "tines.sock"
    server = tines_server(APP, "-w", "1", "-b", f"unix:{path}", *tls_args(tls_certs.localhost))
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(20)
        sock.connect(str(path))
        sock.sendall(b"GET / HTTP/1.1\r\nHost: local\r\nConnection: close\r\n\r\n")
        answer = read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert json.loads(answer.partition(b"\r\n\r\n")[2])["wsgi.url_scheme"] == "http"
    assert tls_request(server.port, "/", client_context(tls_certs)).json()["wsgi.url_scheme"] == "https"


@pytest.mark.parametrize("mpm", MPMS, ids=MPM_IDS)
def test_a_proxy_protocol_header_comes_first_then_the_tls_handshake(
        tines_server: Any, tls_certs: TlsCerts, mpm: tuple[str, ...]) -> None:
    server = tines_server(APP, "-w", "1", "--mpm", *mpm, "--proxy-protocol", *tls_args(tls_certs.localhost))
    context = client_context(tls_certs)
    for header, address in ((v1("203.0.113.7", 40001), "203.0.113.7"), (v2_proxy("2001:db8::7", 40002), "2001:db8::7")):
        raw = socket.create_connection(("127.0.0.1", server.port), timeout=20)
        raw.sendall(header)
        with context.wrap_socket(raw, server_hostname="localhost") as sock:
            response, body = request_on(sock)
            peer = sock.getpeercert(binary_form=True)
        seen = json.loads(body)
        assert response.status == 200 and seen["REMOTE_ADDR"] == address and seen["wsgi.url_scheme"] == "https"
        assert peer is not None and peer == tls_certs.localhost.der
    # Without the header the connection is refused before any TLS byte is answered.
    with socket.create_connection(("127.0.0.1", server.port), timeout=20) as sock:
        sock.sendall(client_hello())
        assert read_until_closed(sock) == b""


def test_the_status_listener_stays_plain_and_counts_the_tls_requests(tines_server: Any, tls_certs: TlsCerts) -> None:
    server = tines_server(APP, "-w", "2", "--status-bind", "127.0.0.1:0", *tls_args(tls_certs.localhost))
    port = status_port(server)
    context = client_context(tls_certs)
    served = {tls_request(server.port, "/", context).json()["pid"] for _ in range(5)}
    report = wait_until(lambda: (r := status(port))["requests"] == 5 and r, what="5 TLS requests counted")
    assert served <= {worker["pid"] for worker in report["workers"]}  # type: ignore[index]
    code, headers, page = fetch(port, "/")
    assert code == 200 and headers["content-type"].startswith("text/html")
    assert all(str(pid).encode() in page for pid in served)
    with pytest.raises(ssl.SSLError):
        tls_connect(port, context).close()
    result = subprocess.run([sys.executable, "-m", "tines", "status", "--once", "--status-bind", f"127.0.0.1:{port}"],
                            capture_output=True, text=True, timeout=60, cwd=ROOT, stdin=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": str(APPS)})
    assert result.returncode == 0 and f"master {server.pid}" in result.stdout, result.stdout + result.stderr


@pytest.mark.parametrize("mpm", ["prefork", "event"])
def test_tines_bench_loads_https_with_insecure(tines_server: Any, tls_certs: TlsCerts, tmp_path: Path,
                                               mpm: str) -> None:
    log = tmp_path / "access.log"
    server = tines_server("hello_pid:app", "-w", "2", "--mpm", mpm, "--access-log", str(log),
                          *tls_args(tls_certs.localhost))
    env = dict(os.environ, PYTHONPATH=str(APPS))
    url = f"https://127.0.0.1:{server.port}/"
    result = subprocess.run([sys.executable, "-m", "tines", "bench", "-c", "4", "-t", "2", "-n", "300", "--json",
                             "--insecure", url], capture_output=True, text=True, timeout=120, cwd=ROOT, env=env,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["requests"] == 300 and report["ok"] == 300 and report["errors"]["total"] == 0, report
    assert report["status_counts"] == {"200": 300}
    # The server's own count: the load went through TLS (a plain request would be a 400).
    wait_until(lambda: log.exists() and len(log.read_text().splitlines()) >= 300, what="300 access-log lines")
    assert len(log.read_text().splitlines()) == 300


def test_http_client_over_tls_keeps_one_connection_for_many_requests(tines_server: Any, tls_certs: TlsCerts) -> None:
    server = tines_server(APP, "-w", "1", "--mpm", "event", *tls_args(tls_certs.localhost))
    connection = http.client.HTTPSConnection("127.0.0.1", server.port, timeout=20, context=client_context(tls_certs))
    try:
        ports = set()
        for _ in range(30):
            connection.request("GET", "/")
            response = connection.getresponse()
            seen = json.loads(response.read())
            assert response.status == 200 and seen["wsgi.url_scheme"] == "https"
            ports.add(seen["REMOTE_PORT"])
        assert len(ports) == 1, "one kept-alive TLS connection served every request"
    finally:
        connection.close()


FAILED_HANDSHAKES = 100


@pytest.mark.parametrize("mpm", ["prefork", "event"])
def test_garbage_is_closed_and_failed_handshakes_are_logged_with_the_peer_but_not_each_one(
        tines_server: Any, tls_certs: TlsCerts, mpm: str) -> None:
    server = tines_server(APP, "-w", "1", "--mpm", mpm, *tls_args(tls_certs.localhost))
    context = client_context(tls_certs)
    before = tls_request(server.port, "/", context).json()["pid"]
    garbage = b"\x16\x03\x01\x00\x08" + b"\xff" * 8  # a handshake record that holds no ClientHello
    for _ in range(FAILED_HANDSHAKES):
        with socket.create_connection(("127.0.0.1", server.port), timeout=20) as sock:
            sock.sendall(garbage)
            answer = read_until_closed(sock)
        assert answer == b"" or answer[:1] == b"\x15", f"closed, at most with an alert: {answer[:64]!r}"
    # A client that does not trust the certificate aborts its handshake: a failure too.
    with pytest.raises(ssl.SSLCertVerificationError):
        tls_connect(server.port, ssl.create_default_context()).close()

    def logged() -> list[str]:
        return [line for line in server.log_text().splitlines()
                if "[INFO]" in line and "handshake" in line.lower() and "127.0.0.1" in line]

    wait_until(logged, what="an info line naming the peer of a failed handshake")
    # At most one line a second: far fewer lines than failures (they came within seconds).
    assert len(logged()) < FAILED_HANDSHAKES // 2, logged()
    after = tls_request(server.port, "/", context)
    assert after.json()["pid"] == before and after.peer.serial_number == tls_certs.localhost.serial
