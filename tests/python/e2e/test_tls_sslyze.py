"""sslyze (PyPI; run as a library) scans a real TLS server (issue 37's Done-when): no protocol
below TLS 1.2, no weak cipher suite (TLS 1.2: ECDHE with an AEAD only), the full chain served
and valid against the test root, no insecure or client-initiated renegotiation, no compression
and no 0-RTT."""

from __future__ import annotations

from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from tls_certs import TlsCerts
from sslyze.plugins.certificate_info.implementation import CertificateInfoExtraArgument
from sslyze.plugins.scan_commands import ScanCommand
from sslyze.scanner.models import ScanCommandsExtraArguments, ServerScanRequest, ServerScanStatusEnum
from sslyze.scanner.scan_command_attempt import ScanCommandAttemptStatusEnum
from sslyze.scanner.scanner import Scanner
from sslyze.server_setting import ServerNetworkLocation
from tls_clients import tls_args

pytestmark = pytest.mark.timeout(600)


def scan(port: int, certs: TlsCerts) -> Any:
    """Every result of one sslyze scan of 127.0.0.1:``port`` as ``localhost``."""
    location = ServerNetworkLocation(hostname="localhost", port=port, ip_address="127.0.0.1")
    command = ScanCommand
    request = ServerScanRequest(
        server_location=location,
        scan_commands={command.SSL_2_0_CIPHER_SUITES, command.SSL_3_0_CIPHER_SUITES, command.TLS_1_0_CIPHER_SUITES,
                       command.TLS_1_1_CIPHER_SUITES, command.TLS_1_2_CIPHER_SUITES, command.TLS_1_3_CIPHER_SUITES,
                       command.CERTIFICATE_INFO, command.SESSION_RENEGOTIATION, command.TLS_COMPRESSION,
                       command.TLS_1_3_EARLY_DATA},
        scan_commands_extra_arguments=ScanCommandsExtraArguments(
            certificate_info=CertificateInfoExtraArgument(custom_ca_file=certs.root)))
    scanner = Scanner()
    scanner.queue_scans([request])
    (result,) = list(scanner.get_results())
    assert result.scan_status == ServerScanStatusEnum.COMPLETED, result.connectivity_error_trace
    return result.scan_result


def outcome(results: Any, name: str) -> Any:
    attempt = getattr(results, name)
    assert attempt.status == ScanCommandAttemptStatusEnum.COMPLETED, (name, attempt.error_reason,
                                                                            attempt.error_trace)
    return attempt.result


def is_strong_tls12(name: str) -> bool:
    return name.startswith("TLS_ECDHE_") and ("_GCM_" in name or "CHACHA20_POLY1305" in name)


@pytest.mark.parametrize("mpm", ["prefork", "event"])
def test_sslyze_finds_nothing_weak(tines_server: Any, tls_certs: TlsCerts, mpm: str) -> None:
    server = tines_server("tls_env:app", "-w", "1", "--mpm", mpm, *tls_args(tls_certs.localhost))
    results = scan(server.port, tls_certs)
    for old in ("ssl_2_0_cipher_suites", "ssl_3_0_cipher_suites", "tls_1_0_cipher_suites", "tls_1_1_cipher_suites"):
        accepted = outcome(results, old).accepted_cipher_suites
        assert accepted == [], f"{old}: {[suite.cipher_suite.name for suite in accepted]}"
    tls12 = [suite.cipher_suite.name for suite in outcome(results, "tls_1_2_cipher_suites").accepted_cipher_suites]
    tls13 = [suite.cipher_suite.name for suite in outcome(results, "tls_1_3_cipher_suites").accepted_cipher_suites]
    assert tls12 and all(is_strong_tls12(name) for name in tls12), tls12
    assert tls13 and set(tls13) <= {"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384",
                                    "TLS_CHACHA20_POLY1305_SHA256"}, tls13

    (deployment, *_) = outcome(results, "certificate_info").certificate_deployments
    chain = deployment.received_certificate_chain
    der = [certificate.public_bytes(serialization.Encoding.DER) for certificate in chain]
    assert der == [tls_certs.localhost.der, tls_certs.intermediate_ca.certificate.public_bytes(
        serialization.Encoding.DER)], "the leaf then the intermediate, not the root"
    assert deployment.received_chain_has_valid_order and not deployment.received_chain_contains_anchor_certificate
    custom = [result for result in deployment.path_validation_results if result.trust_store.path == tls_certs.root]
    assert len(custom) == 1 and custom[0].was_validation_successful, custom

    renegotiation = outcome(results, "session_renegotiation")
    assert renegotiation.supports_secure_renegotiation, "RFC 5746: no insecure renegotiation"
    assert not renegotiation.is_vulnerable_to_client_renegotiation_dos
    assert not outcome(results, "tls_compression").supports_compression
    assert not outcome(results, "tls_1_3_early_data").supports_early_data
