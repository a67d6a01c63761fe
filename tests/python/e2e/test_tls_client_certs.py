"""Client certificates (mTLS, issue 37) on every MPM and on ASGI: ``--client-cert required``
refuses a client without a certificate, with a revoked one (``--client-crl``) or one from
another CA, and shows the app who a good client is; ``optional`` (mod_ssl's ``optional_no_ca``:
accept and report) serves every client and says ``NONE``, ``SUCCESS`` or ``FAILED:<reason>``
(ASGI: ``client_cert_error``). What the app sees is checked against the client's own
certificate."""

from __future__ import annotations

import signal
import ssl
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from tls_certs import Leaf, TlsCerts
from tls_clients import MPM_IDS, MPMS, client_context, refused, tls_args, tls_connect, tls_request

from conftest import Server

WSGI = "tls_env:app"
ASGI = "tls_scope:app"


def mtls_server(tines_server: Any, certs: TlsCerts, app: str, mode: str, *args: str) -> Server:
    server: Server = tines_server(app, "-w", "1", *args, *tls_args(certs.localhost), "--client-cert", mode,
                                  "--client-ca", str(certs.client_ca), "--client-crl", str(certs.client_crl))
    return server


def as_client(server: Server, certs: TlsCerts, client: Leaf | None) -> Any:
    """What the app saw of a request from ``client`` (None: no certificate)."""
    response = tls_request(server.port, "/", client_context(certs, client))
    assert response.status == 200 and response.peer.serial_number == certs.localhost.serial
    return response.json()


def assert_wsgi_sees(seen: dict[str, Any], client: Leaf) -> None:
    assert seen["SSL_CLIENT_VERIFY"] == "SUCCESS", seen
    assert seen["SSL_CLIENT_S_DN"] == client.certificate.subject.rfc4514_string(), seen
    assert seen["SSL_CLIENT_I_DN"] == client.certificate.issuer.rfc4514_string(), seen
    pem = x509.load_pem_x509_certificate(seen["SSL_CLIENT_CERT"].encode())
    assert pem.serial_number == client.serial and pem == client.certificate
    assert int(seen["SSL_CLIENT_M_SERIAL"], 16) == client.serial, seen


@pytest.mark.parametrize("mpm", MPMS, ids=MPM_IDS)
def test_required_refuses_no_revoked_or_foreign_certificates_and_shows_a_good_one(
        tines_server: Any, tls_certs: TlsCerts, mpm: tuple[str, ...]) -> None:
    server = mtls_server(tines_server, tls_certs, WSGI, "required", "--mpm", *mpm)
    refused(server.port, client_context(tls_certs))
    revoked = refused(server.port, client_context(tls_certs, tls_certs.client_revoked))
    assert isinstance(revoked, ssl.SSLError) and "revoked" in str(revoked).lower(), revoked
    refused(server.port, client_context(tls_certs, tls_certs.client_other_ca))
    seen = as_client(server, tls_certs, tls_certs.client_good)
    assert_wsgi_sees(seen, tls_certs.client_good)
    assert seen["wsgi.url_scheme"] == "https"


@pytest.mark.parametrize("mpm", MPMS, ids=MPM_IDS)
def test_optional_serves_everyone_and_reports_none_success_or_failed(
        tines_server: Any, tls_certs: TlsCerts, mpm: tuple[str, ...]) -> None:
    server = mtls_server(tines_server, tls_certs, WSGI, "optional", "--mpm", *mpm)
    anonymous = as_client(server, tls_certs, None)
    assert anonymous["SSL_CLIENT_VERIFY"] == "NONE", anonymous
    assert not anonymous.get("SSL_CLIENT_CERT") and not anonymous.get("SSL_CLIENT_S_DN"), anonymous
    assert_wsgi_sees(as_client(server, tls_certs, tls_certs.client_good), tls_certs.client_good)
    for bad in (tls_certs.client_other_ca, tls_certs.client_revoked):
        seen = as_client(server, tls_certs, bad)
        verify = seen["SSL_CLIENT_VERIFY"]
        assert verify.startswith("FAILED:") and len(verify) > len("FAILED:"), seen
        # The certificate is still shown: the app decides (accept and report).
        assert seen["SSL_CLIENT_S_DN"] == bad.certificate.subject.rfc4514_string(), seen
        assert x509.load_pem_x509_certificate(seen["SSL_CLIENT_CERT"].encode()) == bad.certificate
    assert "revoked" in as_client(server, tls_certs, tls_certs.client_revoked)["SSL_CLIENT_VERIFY"].lower()


def test_without_client_cert_the_server_asks_for_none(tines_server: Any, tls_certs: TlsCerts) -> None:
    server = tines_server(WSGI, "-w", "1", *tls_args(tls_certs.localhost))
    # A client that has a certificate is not asked for it: the app sees none.
    seen = as_client(server, tls_certs, tls_certs.client_good)
    assert seen.get("SSL_CLIENT_VERIFY", "NONE") == "NONE" and not seen.get("SSL_CLIENT_CERT"), seen


def test_asgi_tls_extension_reports_the_client_certificate(tines_server: Any, tls_certs: TlsCerts) -> None:
    required = mtls_server(tines_server, tls_certs, ASGI, "required")
    refused(required.port, client_context(tls_certs))
    tls = as_client(required, tls_certs, tls_certs.client_good)["tls"]
    assert [x509.load_pem_x509_certificate(pem.encode()) for pem in tls["client_cert_chain"]][:1] == [
        tls_certs.client_good.certificate]
    assert tls["client_cert_name"] == tls_certs.client_good.certificate.subject.rfc4514_string()
    assert tls["client_cert_error"] is None

    optional = mtls_server(tines_server, tls_certs, ASGI, "optional")
    anonymous = as_client(optional, tls_certs, None)["tls"]
    assert anonymous["client_cert_chain"] == [] and anonymous["client_cert_name"] is None
    assert anonymous["client_cert_error"] is None
    foreign = as_client(optional, tls_certs, tls_certs.client_other_ca)["tls"]
    assert isinstance(foreign["client_cert_error"], str) and foreign["client_cert_error"], foreign
    assert foreign["client_cert_name"] == tls_certs.client_other_ca.certificate.subject.rfc4514_string()
    shown = x509.load_pem_x509_certificate(foreign["client_cert_chain"][0].encode())
    assert shown == tls_certs.client_other_ca.certificate


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3], ids=["tls1.2", "tls1.3"])
def test_a_ticket_made_before_client_certificates_were_required_does_not_resume_without_one(
        tines_server: Any, tls_certs: TlsCerts, tmp_path: Path, version: ssl.TLSVersion) -> None:
    """rustls resumes a session with the client chain its ticket carries, without asking the
    verifier again: a ticket from before a HUP that turned ``client_cert`` to ``required``
    (same ticket secret: the generations share it) must not let a client in without a
    certificate. The ticket keys depend on the client-certificate settings (ADR 0033)."""
    config = tmp_path / "tines.toml"
    tls = (f'certfile = "{tls_certs.localhost.chain}"\nkeyfile = "{tls_certs.localhost.key}"\n'
           'workers = 1\n')
    config.write_text(tls + 'client_cert = "none"\n')
    server: Server = tines_server(WSGI, "-c", str(config))
    anonymous = client_context(tls_certs, minimum=version, maximum=version)
    before = tls_request(server.port, "/", anonymous)
    assert before.session is not None and before.json()["SSL_CLIENT_VERIFY"] == "NONE"
    # The ticket resumes while the settings are unchanged (what the refusal below is not).
    assert tls_request(server.port, "/", anonymous, session=before.session).session_reused

    config.write_text(tls + f'client_cert = "required"\nclient_ca = "{tls_certs.client_ca}"\n')
    server.signal(signal.SIGHUP)
    server.wait_for_log(r"reload done: generation 2 serves with 1 worker\b")

    try:
        with tls_connect(server.port, anonymous, "localhost", before.session, ragged_eofs=False) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
            data = sock.recv(65536)
            resumed = sock.session_reused
    except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
        pass
    else:
        raise AssertionError(f"served without a certificate (resumed: {resumed}): {data[:300]!r}")
    # A client with its certificate handshakes in full and is judged by the settings of now.
    with_certificate = client_context(tls_certs, tls_certs.client_good, minimum=version, maximum=version)
    judged = tls_request(server.port, "/", with_certificate)
    assert not judged.session_reused and judged.json()["SSL_CLIENT_VERIFY"] == "SUCCESS"
