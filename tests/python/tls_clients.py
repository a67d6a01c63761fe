"""TLS clients for the end-to-end tests (tests/python/e2e/test_tls_*.py): Python's ``ssl``
over real sockets, ``curl`` and ``openssl s_client``, each verifying the server against the
test root (tests/python/tls_certs.py) and reporting what the server presented, so that a test
asserts the certificate, not only that some response came.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509

from tls_certs import Leaf, TlsCerts

REQUEST_TIMEOUT = 20.0
MPMS = [("prefork",), ("thread", "--threads", "2"), ("event", "--threads", "1")]
"""``--mpm`` and its options, for the tests run on every MPM."""
MPM_IDS = ["prefork", "thread", "event"]


def tls_args(leaf: Leaf, key: Path | None = None) -> list[str]:
    """The flags that serve ``leaf``'s chain with its key (or ``key``)."""
    return ["--certfile", str(leaf.chain), "--keyfile", str(key or leaf.key)]


def bind_port(ready: dict[str, Any], index: int) -> int:
    """The port of the ``index``-th bind of a server's ready line (``plain:`` or not)."""
    return int(str(ready["binds"][index]).rpartition(":")[2])


def client_context(certs: TlsCerts, client: Leaf | None = None, minimum: ssl.TLSVersion | None = None,
                   maximum: ssl.TLSVersion | None = None) -> ssl.SSLContext:
    """A client context that trusts the test root only (and checks the host name), presenting
    ``client``'s certificate (with its chain) when given."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cafile=str(certs.root))
    if client is not None:
        context.load_cert_chain(str(client.chain), str(client.key))
    if minimum is not None:
        context.minimum_version = minimum
    if maximum is not None:
        context.maximum_version = maximum
    return context


def tls_connect(port: int, context: ssl.SSLContext, server_hostname: str | None = "localhost",
                session: ssl.SSLSession | None = None, ragged_eofs: bool = False) -> ssl.SSLSocket:
    """A TLS connection to 127.0.0.1:``port``, handshake done. ``ragged_eofs=False``: a close
    without close_notify raises ``SSLEOFError`` instead of reading as a clean end."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=REQUEST_TIMEOUT)
    try:
        return context.wrap_socket(raw, server_hostname=server_hostname, session=session,
                                   suppress_ragged_eofs=ragged_eofs)
    except BaseException:
        raw.close()
        raise


@dataclass
class TlsResponse:
    """One response and what the TLS connection that carried it said."""

    status: int
    headers: dict[str, str]
    body: bytes
    peer: x509.Certificate
    """The certificate the server presented."""
    version: str
    """``TLSv1.2`` or ``TLSv1.3``."""
    cipher: str
    session: ssl.SSLSession | None
    """The session after the response was read (a TLS 1.3 ticket comes after the handshake)."""
    session_reused: bool

    def json(self) -> Any:
        return json.loads(self.body)


def peer_certificate(sock: ssl.SSLSocket) -> x509.Certificate:
    der = sock.getpeercert(binary_form=True)
    assert der is not None, "the server presented no certificate"
    return x509.load_der_x509_certificate(der)


def request_on(sock: ssl.SSLSocket, path: str = "/", headers: dict[str, str] | None = None,
               method: str = "GET") -> tuple[http.client.HTTPResponse, bytes]:
    """Sends one request on ``sock`` and reads its response whole (the socket stays open):
    the response and its body."""
    fields = {"Host": "localhost", **(headers or {})}
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields.items()) + "\r\n"
    sock.sendall(head.encode())
    return read_response(sock, method)


def read_response(sock: ssl.SSLSocket, method: str = "GET") -> tuple[http.client.HTTPResponse, bytes]:
    """The response to the request already sent on ``sock``, read whole, and its body."""
    response = http.client.HTTPResponse(sock, method=method)
    response.begin()
    return response, response.read()


def tls_request(port: int, path: str = "/", context: ssl.SSLContext | None = None, *,
                server_hostname: str | None = "localhost", headers: dict[str, str] | None = None,
                session: ssl.SSLSession | None = None) -> TlsResponse:
    """One request on a new TLS connection (closed by the client after the response)."""
    assert context is not None, "a client context (client_context) is required"
    with tls_connect(port, context, server_hostname, session, ragged_eofs=True) as sock:
        response, body = request_on(sock, path, headers)
        cipher = sock.cipher()
        return TlsResponse(status=response.status, headers={k.lower(): v for k, v in response.getheaders()},
                           body=body, peer=peer_certificate(sock),
                           version=str(sock.version()), cipher=cipher[0] if cipher else "",
                           session=sock.session, session_reused=bool(sock.session_reused))


def refused(port: int, context: ssl.SSLContext, server_hostname: str | None = "localhost") -> OSError:
    """The error a connection gets when the server refuses it in the handshake. Under TLS 1.3
    the client's side of the handshake may end before the server judged its certificate: the
    refusal (an alert) then comes on the first read. Nothing is sent meanwhile (a request the
    server never read would turn its close into a reset, which may discard the alert). Fails
    if the handshake is accepted (the read then waits for the header timeout, or times out)."""
    try:
        with tls_connect(port, context, server_hostname, ragged_eofs=False) as sock:
            data = sock.recv(65536)
    except TimeoutError:
        raise AssertionError("the server accepted the handshake (it waits for a request)") from None
    except (ssl.SSLError, ConnectionResetError, BrokenPipeError) as error:
        return error
    raise AssertionError(f"the server did not refuse the handshake: it sent {data[:200]!r}")


def serial_of(pem_text: str) -> int:
    """The serial number of a PEM certificate (as an app or a tool printed it)."""
    return x509.load_pem_x509_certificate(pem_text.encode()).serial_number


def client_hello(server_hostname: str = "localhost") -> bytes:
    """The bytes of a real ClientHello (Python's ``ssl``, TLS 1.2 and 1.3 offered)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    session = context.wrap_bio(incoming, outgoing, server_hostname=server_hostname)
    try:
        session.do_handshake()
    except ssl.SSLWantReadError:
        pass
    hello = outgoing.read()
    assert hello[:1] == b"\x16", "a TLS handshake record"
    return hello


def curl(certs: TlsCerts, port: int, path: str = "/", name: str = "localhost",
         *extra: str) -> subprocess.CompletedProcess[str]:
    """``curl --cacert ROOT https://NAME:PORT/PATH``, NAME resolved to 127.0.0.1; its stdout is
    the body then a line ``verify=N version=V`` (curl's ssl_verify_result: 0 is verified)."""
    return subprocess.run(
        ["curl", "-sS", "--max-time", "20", "--cacert", str(certs.root), "--resolve", f"{name}:{port}:127.0.0.1",
         "-w", "\nverify=%{ssl_verify_result} status=%{http_code}", *extra, f"https://{name}:{port}{path}"],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def s_client(certs: TlsCerts, port: int, *extra: str, name: str = "localhost",
             request: bytes = b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
             ) -> subprocess.CompletedProcess[str]:
    """``openssl s_client -verify_return_error`` against 127.0.0.1:``port`` with SNI ``name``:
    it sends ``request`` and prints everything until the server closes (``-ign_eof``)."""
    return subprocess.run(
        ["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-servername", name, "-CAfile", str(certs.root),
         "-verify_return_error", "-verify_hostname", name, "-ign_eof", *extra],
        input=request.decode(), capture_output=True, text=True, timeout=60)


def leaf_of_s_client(output: str) -> x509.Certificate:
    """The first certificate ``s_client`` printed (the leaf)."""
    begin = output.index("-----BEGIN CERTIFICATE-----")
    end = output.index("-----END CERTIFICATE-----", begin) + len("-----END CERTIFICATE-----")
    return x509.load_pem_x509_certificate(output[begin:end].encode())
