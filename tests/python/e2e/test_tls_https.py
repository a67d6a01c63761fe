"""HTTPS and ``wss://`` answered on every MPM and on ASGI (issue 37), by real clients that trust
only the test root (tests/python/tls_certs.py): ``httpx``, Python's ``ssl`` with ``http.client``,
``curl --cacert`` and ``openssl s_client -verify_return_error``, and ``websockets``. Each test
asserts the certificate the server presented (its serial) and the chain it sent, and what the
app saw: ``https``/``wss`` and ``HTTPS=on`` whatever ``X-Forwarded-Proto`` says, the protocol and
cipher, and the ASGI ``tls`` extension."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import ssl
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography import x509
from tls_certs import TlsCerts
from tls_clients import (MPM_IDS, MPMS, client_context, curl, leaf_of_s_client, peer_certificate, request_on, s_client,
                         serial_of, tls_args, tls_connect, tls_request)
from websockets.sync.client import connect

from conftest import Server

WSGI = "tls_env:app"
ASGI = "tls_scope:app"
TLS_VERSIONS = {"TLSv1.2": 0x0303, "TLSv1.3": 0x0304}


def serve(tines_server: Any, certs: TlsCerts, app: str, *args: str) -> Server:
    server: Server = tines_server(app, "-w", "1", *tls_args(certs.localhost), *args)
    return server


@pytest.mark.parametrize("mpm", MPMS, ids=MPM_IDS)
def test_python_ssl_sees_the_leaf_and_the_app_sees_https(tines_server: Any, tls_certs: TlsCerts,
                                                          mpm: tuple[str, ...]) -> None:
    server = serve(tines_server, tls_certs, WSGI, "--mpm", *mpm)
    for version in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
        context = client_context(tls_certs, minimum=version, maximum=version)
        response = tls_request(server.port, "/", context, headers={"X-Forwarded-Proto": "http"})
        assert response.status == 200
        assert response.peer.serial_number == tls_certs.localhost.serial
        seen = response.json()
        # 127.0.0.1 is a trusted proxy by default: its X-Forwarded-Proto would win on a plain
        # listener; on a TLS listener the connection itself says https.
        assert seen["wsgi.url_scheme"] == "https" and seen["HTTPS"] == "on", seen
        assert seen["SSL_PROTOCOL"] == response.version, seen
        assert seen["SSL_CIPHER"], seen
        assert seen["SSL_TLS_SNI"] == "localhost", seen
        assert seen.get("SSL_CLIENT_VERIFY", "NONE") == "NONE" and "SSL_CLIENT_CERT" not in seen, seen
    # Many requests on one kept-alive TLS connection, and a request with a body.
    with httpx.Client(verify=client_context(tls_certs), timeout=20) as client:
        for _ in range(20):
            response_ = client.get(f"https://127.0.0.1:{server.port}/")
            assert response_.status_code == 200 and response_.json()["wsgi.url_scheme"] == "https"
        # A body the app does not read, under max_body_drain: the connection stays usable.
        posted = client.post(f"https://127.0.0.1:{server.port}/", content=b"x" * 10_000)
        assert posted.status_code == 200
        ssl_object = posted.extensions["network_stream"].get_extra_info("ssl_object")
        der = ssl_object.getpeercert(True)
        assert x509.load_der_x509_certificate(der).serial_number == tls_certs.localhost.serial


@pytest.mark.parametrize("mpm", [*MPMS, ("asgi",)], ids=[*MPM_IDS, "asgi"])
def test_curl_and_openssl_s_client_verify_the_full_chain(tines_server: Any, tls_certs: TlsCerts,
                                                         mpm: tuple[str, ...]) -> None:
    if mpm == ("asgi",):
        server, said = serve(tines_server, tls_certs, ASGI), '"scheme": "https"'
    else:
        server, said = serve(tines_server, tls_certs, WSGI, "--mpm", *mpm), '"wsgi.url_scheme": "https"'
    if shutil.which("curl") is not None:  # curl is optional here; openssl is what the server is judged by
        result = curl(tls_certs, server.port)
        assert result.returncode == 0, result.stderr
        body, _, trailer = result.stdout.rpartition("\n")
        assert trailer == "verify=0 status=200" and said in body, result.stdout
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    result = s_client(tls_certs, server.port, "-showcerts")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Verify return code: 0 (ok)" in result.stdout
    assert "HTTP/1.1 200 OK" in result.stdout and said in result.stdout
    assert leaf_of_s_client(result.stdout).serial_number == tls_certs.localhost.serial
    # The full chain: the leaf (0) and the intermediate (1), not the root.
    chain = [line for line in result.stdout.splitlines() if line[:3] in (" 0 ", " 1 ", " 2 ") and " s:" in line]
    assert len(chain) == 2 and "Intermediate" in chain[1], chain


@pytest.mark.parametrize("mpm", MPMS, ids=MPM_IDS)
def test_a_file_body_and_a_large_response_arrive_whole_over_tls(tines_server: Any, tls_certs: TlsCerts,
                                                                tmp_path: Path, mpm: tuple[str, ...]) -> None:
    # wsgi.file_wrapper: no sendfile under TLS (read, encrypted and written in blocks).
    data = os.urandom(12 << 20)
    served = tmp_path / "served.bin"
    served.write_bytes(data)
    files = tines_server("file_serving:app", "-w", "1", "--mpm", *mpm, *tls_args(tls_certs.localhost),
                         env={"SERVED_FILE": str(served)})
    big = tines_server("big_body:app", "-w", "1", "--mpm", *mpm, *tls_args(tls_certs.localhost))
    for server, expected in ((files, data), (big, b"x" * (8 << 20))):
        with tls_connect(server.port, client_context(tls_certs), ragged_eofs=False) as sock:
            for _ in range(2):  # the kept-alive connection stays in step after a large body
                response, body = request_on(sock, "/")
                assert response.status == 200 and len(body) == len(expected)
                assert hashlib.sha256(body).digest() == hashlib.sha256(expected).digest()
            assert peer_certificate(sock).serial_number == tls_certs.localhost.serial


def test_asgi_sees_https_and_the_tls_extension(tines_server: Any, tls_certs: TlsCerts) -> None:
    server = serve(tines_server, tls_certs, ASGI)
    for version in ("TLSv1.2", "TLSv1.3"):
        pinned = getattr(ssl.TLSVersion, version.replace(".", "_"))
        response = tls_request(server.port, "/", client_context(tls_certs, minimum=pinned, maximum=pinned),
                               headers={"X-Forwarded-Proto": "http"})
        assert response.status == 200 and response.version == version
        seen = response.json()
        assert seen["scheme"] == "https", seen
        tls = seen["tls"]
        assert tls is not None, "the scope has the tls extension on a TLS connection"
        assert serial_of(tls["server_cert"]) == tls_certs.localhost.serial
        assert tls["tls_version"] == TLS_VERSIONS[version]
        assert isinstance(tls["cipher_suite"], int) and tls["cipher_suite"] > 0
        assert tls["client_cert_chain"] == [] and tls["client_cert_name"] is None
        assert tls["client_cert_error"] is None
    with httpx.Client(verify=client_context(tls_certs), timeout=20) as client:
        for _ in range(10):  # one kept-alive connection
            seen = client.get(f"https://127.0.0.1:{server.port}/").json()
            assert seen["scheme"] == "https" and serial_of(seen["tls"]["server_cert"]) == tls_certs.localhost.serial


def test_wss_is_answered_and_the_websocket_scope_says_wss(tines_server: Any, tls_certs: TlsCerts) -> None:
    server = serve(tines_server, tls_certs, ASGI)
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=20)
    with connect(f"wss://localhost:{server.port}/ws", sock=sock, ssl=client_context(tls_certs),
                 server_hostname="localhost", open_timeout=20, close_timeout=20) as websocket:
        peer = websocket.socket.getpeercert(binary_form=True)  # type: ignore[attr-defined]
        assert x509.load_der_x509_certificate(peer).serial_number == tls_certs.localhost.serial
        seen = json.loads(websocket.recv(timeout=20))
        assert seen["scheme"] == "wss" and serial_of(seen["tls"]["server_cert"]) == tls_certs.localhost.serial
        for message in ("hello", "x" * 70_000):
            websocket.send(message)
            assert websocket.recv(timeout=20) == message
        websocket.send(b"\x00\x01 bytes")
        assert websocket.recv(timeout=20) == b"\x00\x01 bytes"
