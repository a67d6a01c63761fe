"""The TLS tests' PKI (tests/python/tls_certs.py) and clients (tests/python/tls_clients.py) are
what the end-to-end tests assume: checked against OpenSSL through Python's own ``ssl`` server,
so that a TLS test failing against Tines points at Tines, not at its certificates."""

from __future__ import annotations

import shutil
import socket
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from cryptography.hazmat.primitives import serialization
from tls_certs import TlsCerts
from tls_clients import client_context, client_hello, curl, leaf_of_s_client, refused, s_client, tls_request

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"


@contextmanager
def python_server(context: ssl.SSLContext) -> Iterator[int]:
    """An HTTPS server of Python's ``ssl`` on 127.0.0.1 answering ``ok`` to every request
    until the block ends; its port."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                raw, _ = listener.accept()
            except OSError:
                return
            try:
                with context.wrap_socket(raw, server_side=True) as sock:
                    data = b""
                    while b"\r\n\r\n" not in data and (chunk := sock.recv(4096)):
                        data += chunk
                    sock.sendall(ANSWER)
                    sock.unwrap().close()  # close_notify, then the TCP close
            except (ssl.SSLError, OSError):
                continue  # a refused handshake: serve the next connection

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        listener.shutdown(socket.SHUT_RDWR)  # wakes the accept (a close alone does not)
        listener.close()
        thread.join(10)


def server_context(chain: str, key: str, password: str | None = None) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(chain, key, password)
    return context


def test_the_server_leaves_verify_against_the_root_through_the_intermediate_they_carry(
        tls_certs: TlsCerts) -> None:
    for leaf, name in ((tls_certs.localhost, "localhost"), (tls_certs.localhost, "127.0.0.1"),
                       (tls_certs.a_test, "a.test"), (tls_certs.b_test_wildcard, "x.b.test"),
                       (tls_certs.rsa, "localhost"), (tls_certs.p384, "localhost")):
        with python_server(server_context(str(leaf.chain), str(leaf.key))) as port:
            response = tls_request(port, "/", client_context(tls_certs), server_hostname=name)
        assert (response.status, response.body, response.peer.serial_number) == (200, b"ok", leaf.serial)
    # The leaf alone does not verify: the chain file is what makes it whole.
    with python_server(server_context(str(tls_certs.localhost.cert), str(tls_certs.localhost.key))) as port:
        assert isinstance(refused(port, client_context(tls_certs)), ssl.SSLCertVerificationError)


def test_every_key_format_is_what_its_name_says_and_holds_the_leafs_key(tls_certs: TlsCerts) -> None:
    headers = {"pkcs8": "-----BEGIN PRIVATE KEY-----", "sec1": "-----BEGIN EC PRIVATE KEY-----",
               "pkcs1": "-----BEGIN RSA PRIVATE KEY-----"}
    assert set(tls_certs.key_formats) == {"p256-pkcs8", "p256-sec1", "p384-pkcs8", "p384-sec1", "rsa-pkcs8",
                                          "rsa-pkcs1", "ed25519-pkcs8"}
    for label, (leaf, path) in tls_certs.key_formats.items():
        text = path.read_text()
        assert text.startswith(headers[label.split("-")[1]]) and "ENCRYPTED" not in text, label
        key = serialization.load_pem_private_key(text.encode(), None)
        assert key.public_key() == leaf.certificate.public_key(), label
    encrypted = tls_certs.encrypted_key.read_text()
    assert encrypted.startswith("-----BEGIN ENCRYPTED PRIVATE KEY-----")
    legacy = tls_certs.legacy_encrypted_key.read_text()
    assert legacy.startswith("-----BEGIN EC PRIVATE KEY-----") and "Proc-Type: 4,ENCRYPTED" in legacy
    for path in (tls_certs.encrypted_key, tls_certs.legacy_encrypted_key):
        key = serialization.load_pem_private_key(path.read_bytes(), tls_certs.password.encode())
        assert key.public_key() == tls_certs.localhost.certificate.public_key()
    assert tls_certs.password_file.read_text() == tls_certs.password + "\n"
    mismatched = serialization.load_pem_private_key(tls_certs.mismatched_key.read_bytes(), None)
    assert mismatched.public_key() != tls_certs.localhost.certificate.public_key()
    # OpenSSL reads the encrypted PKCS#8 key with its password.
    with python_server(server_context(str(tls_certs.localhost.chain), str(tls_certs.encrypted_key),
                                      tls_certs.password)) as port:
        assert tls_request(port, "/", client_context(tls_certs)).peer.serial_number == tls_certs.localhost.serial


def test_client_certificates_the_crl_and_the_expired_leaf(tls_certs: TlsCerts) -> None:
    context = server_context(str(tls_certs.localhost.chain), str(tls_certs.localhost.key))
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_verify_locations(cafile=str(tls_certs.client_ca))
    context.load_verify_locations(cafile=str(tls_certs.client_crl))
    context.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
    with python_server(context) as port:
        good = tls_request(port, "/", client_context(tls_certs, tls_certs.client_good))
        assert (good.status, good.body) == (200, b"ok")
        assert "revoked" in str(refused(port, client_context(tls_certs, tls_certs.client_revoked))).lower()
        assert isinstance(refused(port, client_context(tls_certs, tls_certs.client_other_ca)), OSError)
        assert isinstance(refused(port, client_context(tls_certs)), OSError)
    assert tls_certs.client_good.certificate.subject.rfc4514_string() == "CN=alice,O=Tines Tests"
    with python_server(server_context(str(tls_certs.expired.chain), str(tls_certs.expired.key))) as port:
        error = refused(port, client_context(tls_certs))
    assert isinstance(error, ssl.SSLCertVerificationError) and "expired" in str(error)


def test_the_client_hello_is_a_handshake_record_that_a_server_answers(tls_certs: TlsCerts) -> None:
    hello = client_hello()
    assert hello[:3] in (b"\x16\x03\x01", b"\x16\x03\x03") and hello[5] == 1  # record, ClientHello
    assert len(hello) == 5 + int.from_bytes(hello[3:5], "big")
    with python_server(server_context(str(tls_certs.localhost.chain), str(tls_certs.localhost.key))) as port:
        with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
            sock.sendall(hello)
            assert sock.recv(5)[:1] == b"\x16", "a ServerHello"


@pytest.mark.parametrize("tool", ["curl", "openssl"])
def test_curl_and_s_client_verify_against_the_root_and_report_the_leaf(tls_certs: TlsCerts, tool: str) -> None:
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed")
    with python_server(server_context(str(tls_certs.localhost.chain), str(tls_certs.localhost.key))) as port:
        if tool == "curl":
            result = curl(tls_certs, port)
            assert result.returncode == 0 and result.stdout == "ok\nverify=0 status=200", result
        else:
            result = s_client(tls_certs, port, "-showcerts")
            assert result.returncode == 0, result.stderr
            assert "Verify return code: 0 (ok)" in result.stdout and "HTTP/1.1 200 OK\n" in result.stdout
            assert "\n\nok" in result.stdout
            assert leaf_of_s_client(result.stdout).serial_number == tls_certs.localhost.serial
    with python_server(server_context(str(tls_certs.localhost.cert), str(tls_certs.localhost.key))) as port:
        # Without the intermediate both refuse.
        failed = curl(tls_certs, port) if tool == "curl" else s_client(tls_certs, port)
        assert failed.returncode != 0
