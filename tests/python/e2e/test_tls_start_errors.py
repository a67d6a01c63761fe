"""The TLS settings a client can observe (issue 37): ``--tls-min-version``, ``--tls-cipher-suites``
(IANA names; an OpenSSL cipher string is refused), ``--alpn`` (``h2`` first, then ``http/1.1``; ``h2``
left out with ``--no-http2``); each judged by what a real handshake negotiated."""

from __future__ import annotations

import ssl
from typing import Any

import pytest

from tls_certs import TlsCerts
from tls_clients import client_context, refused, tls_args, tls_connect, tls_request

from test_cli_errors import assert_one_line_error
from test_tls_keys import serve_fails

APP = "tls_env:app"


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1:DeprecationWarning")
def test_tls_1_2_is_served_by_default_and_refused_with_min_version_1_3(tines_server: Any, tls_certs: TlsCerts) -> None:
    tls12 = client_context(tls_certs, maximum=ssl.TLSVersion.TLSv1_2)
    default = tines_server(APP, "-w", "1", *tls_args(tls_certs.localhost))
    assert tls_request(default.port, "/", tls12).version == "TLSv1.2"
    # TLS 1.0 and 1.1 are never offered.
    old = client_context(tls_certs, minimum=ssl.TLSVersion.TLSv1, maximum=ssl.TLSVersion.TLSv1_1)
    old.set_ciphers("ALL:@SECLEVEL=0")
    error = refused(default.port, old)
    assert isinstance(error, ssl.SSLError) and any(
        alert in str(error).lower() for alert in ("protocol version", "handshake failure")), error

    strict = tines_server(APP, "-w", "1", *tls_args(tls_certs.localhost), "--tls-min-version", "1.3")
    error = refused(strict.port, tls12)
    # rustls answers a TLS 1.2-only ClientHello with handshake_failure (no common version).
    assert isinstance(error, ssl.SSLError) and any(
        alert in str(error).lower() for alert in ("protocol version", "handshake failure")), error
    response = tls_request(strict.port, "/", client_context(tls_certs))
    assert response.version == "TLSv1.3" and response.json()["SSL_PROTOCOL"] == "TLSv1.3"


def test_cipher_suites_are_named_the_iana_way_and_only_those_are_negotiated(
        tines_server: Any, tls_certs: TlsCerts) -> None:
    server = tines_server(APP, "-w", "1", *tls_args(tls_certs.localhost), "--tls-min-version", "1.3",
                          "--tls-cipher-suites", "TLS_CHACHA20_POLY1305_SHA256")
    # The client offers every TLS 1.3 suite (AES-GCM first): the server's list decides.
    response = tls_request(server.port, "/", client_context(tls_certs))
    assert response.cipher == "TLS_CHACHA20_POLY1305_SHA256", response.cipher
    assert response.json()["SSL_CIPHER"], "the app is told the cipher"

    result = serve_fails(*tls_args(tls_certs.localhost), "--tls-cipher-suites", "ECDHE-ECDSA-AES128-GCM-SHA256")
    assert_one_line_error(result, "ECDHE-ECDSA-AES128-GCM-SHA256")


def test_alpn_offers_h2_first_and_http_1_1_to_a_client_without_it(tines_server: Any, tls_certs: TlsCerts) -> None:
    server = tines_server(APP, "-w", "1", *tls_args(tls_certs.localhost))
    context = client_context(tls_certs)
    context.set_alpn_protocols(["http/1.1", "h2"])  # the server's order decides
    with tls_connect(server.port, context) as sock:
        assert sock.selected_alpn_protocol() == "h2"
    old = client_context(tls_certs)
    old.set_alpn_protocols(["http/1.1"])
    with tls_connect(server.port, old) as sock:
        assert sock.selected_alpn_protocol() == "http/1.1"

    assert_one_line_error(serve_fails(*tls_args(tls_certs.localhost), "--alpn", "spdy/3"), "spdy/3")


def test_no_http2_leaves_h2_out_of_alpn_whatever_alpn_says(tines_server: Any, tls_certs: TlsCerts) -> None:
    server = tines_server(APP, "-w", "1", *tls_args(tls_certs.localhost), "--no-http2", "--alpn", "h2,http/1.1")
    context = client_context(tls_certs)
    context.set_alpn_protocols(["h2", "http/1.1"])
    with tls_connect(server.port, context) as sock:
        assert sock.selected_alpn_protocol() == "http/1.1"
    only_h2 = client_context(tls_certs)
    only_h2.set_alpn_protocols(["h2"])
    error = refused(server.port, only_h2)
    assert isinstance(error, ssl.SSLError) and "application protocol" in str(error).lower(), error
    server.wait_for_log(r"h2 in alpn \(cli\) is not offered while http2 is off \(cli\)")
