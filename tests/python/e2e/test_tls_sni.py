"""SNI picks the certificate (issue 37): ``--sni-certificate CERT.pem:KEY.pem`` beside the
default ``--certfile``; an exact name, a wildcard, and an unknown name or none (the default
certificate), or, with ``--tls-unknown-server-name refuse``, the ``unrecognized_name`` alert.
Every answer is judged by the certificate the client was shown and by ``SSL_TLS_SNI``."""

from __future__ import annotations

import shutil
import ssl
from typing import Any

import pytest
from tls_certs import Leaf, TlsCerts
from tls_clients import MPM_IDS, MPMS, client_context, curl, leaf_of_s_client, refused, s_client, tls_args, tls_request

from conftest import Server

APP = "tls_env:app"


def sni_args(certs: TlsCerts) -> list[str]:
    return [*tls_args(certs.localhost),
            "--sni-certificate", f"{certs.a_test.chain}:{certs.a_test.key}",
            "--sni-certificate", f"{certs.b_test_wildcard.chain}:{certs.b_test_wildcard.key}"]


def shown(server: Server, certs: TlsCerts, name: str | None, check_hostname: bool = True) -> tuple[int, Any]:
    """The serial of the certificate a client asking for ``name`` was shown, and what the app saw."""
    context = client_context(certs)
    context.check_hostname = check_hostname
    response = tls_request(server.port, "/", context, server_hostname=name)
    assert response.status == 200
    return response.peer.serial_number, response.json()


@pytest.mark.parametrize("mpm", MPMS, ids=MPM_IDS)
def test_the_server_name_picks_the_certificate_and_an_unknown_one_gets_the_default(
        tines_server: Any, tls_certs: TlsCerts, mpm: tuple[str, ...]) -> None:
    server = tines_server(APP, "-w", "1", "--mpm", *mpm, *sni_args(tls_certs))
    expected: list[tuple[str | None, Leaf, bool]] = [
        ("a.test", tls_certs.a_test, True),
        ("www.b.test", tls_certs.b_test_wildcard, True),
        ("api.b.test", tls_certs.b_test_wildcard, True),
        ("localhost", tls_certs.localhost, True),
        (None, tls_certs.localhost, False),  # no SNI at all (check_hostname needs a name)
        ("unknown.test", tls_certs.localhost, False),  # the default does not name it: chain checked only
        ("a.b.c.b.test", tls_certs.localhost, False),  # a wildcard covers one label only
    ]
    for name, leaf, check in expected:
        serial, seen = shown(server, tls_certs, name, check)
        assert serial == leaf.serial, f"{name}: shown {serial}, expected {leaf.certificate.subject}"
        assert seen["wsgi.url_scheme"] == "https"
        if name is not None:
            assert seen.get("SSL_TLS_SNI") == name, seen
        else:
            assert seen.get("SSL_TLS_SNI") in (None, ""), seen


def test_curl_and_s_client_are_shown_the_certificate_of_the_name_they_ask_for(
        tines_server: Any, tls_certs: TlsCerts) -> None:
    server = tines_server(APP, "-w", "1", *sni_args(tls_certs))
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    for name, leaf in (("a.test", tls_certs.a_test), ("x.b.test", tls_certs.b_test_wildcard),
                       ("localhost", tls_certs.localhost)):
        result = s_client(tls_certs, server.port, name=name, request=f"GET / HTTP/1.1\r\nHost: {name}\r\n"
                          "Connection: close\r\n\r\n".encode())
        assert result.returncode == 0 and "Verify return code: 0 (ok)" in result.stdout, result.stdout[-2000:]
        assert leaf_of_s_client(result.stdout).serial_number == leaf.serial
        assert f'"SSL_TLS_SNI": "{name}"' in result.stdout
        if shutil.which("curl") is not None:
            fetched = curl(tls_certs, server.port, "/", name)
            assert fetched.returncode == 0 and fetched.stdout.endswith("verify=0 status=200"), fetched


@pytest.mark.parametrize("mpm", ["prefork", "event"])
def test_refuse_ends_the_handshake_of_an_unknown_name_with_an_alert(
        tines_server: Any, tls_certs: TlsCerts, mpm: str) -> None:
    server = tines_server(APP, "-w", "1", "--mpm", mpm, *sni_args(tls_certs), "--tls-unknown-server-name", "refuse")
    context = client_context(tls_certs)
    context.check_hostname = False
    error = refused(server.port, context, "unknown.test")
    # rustls chooses the alert for a resolver that serves nothing: access_denied.
    assert isinstance(error, ssl.SSLError) and "alert" in str(error).lower(), error
    # The names it knows are served, by the same worker.
    assert shown(server, tls_certs, "a.test")[0] == tls_certs.a_test.serial
    assert shown(server, tls_certs, "localhost")[0] == tls_certs.localhost.serial
