"""``tines._core.TlsMaterial``: the master reads and checks the TLS files once (ADR 0032); a
problem is one line naming the setting, the file and what is wrong; what the master logs and
checks (files read, names served, expiry) is exposed; the worker settings' ``"tls"`` carries it
to the worker's config. The test PEMs are crates/server/tests/tls-material (its make.sh remakes
them with openssl)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tines import _core
from tines.config import load
from tines.worker import worker_settings

PEMS = Path(__file__).resolve().parents[3] / "crates" / "server" / "tests" / "tls-material"
SECRET = os.urandom(32)


def tls_settings(**overrides: object) -> dict[str, object]:
    settings: dict[str, object] = {
        "certfile": str(PEMS / "ec256.pem"),
        "keyfile": str(PEMS / "ec256.key"),
        "keyfile_password_file": None,
        "keyfile_password": None,
        "sni_certificates": (),
        "tls_unknown_server_name": "default",
        "tls_min_version": "1.2",
        "tls_cipher_suites": (),
        "alpn": ("http/1.1",),
        "client_cert": "none",
        "client_ca": None,
        "client_crl": (),
        "tls_tickets": True,
        "tls_ticket_rotation": 3600.0,
    }
    settings.update(overrides)
    return settings


def refusal(**overrides: object) -> str:
    with pytest.raises(ValueError) as caught:
        _core.TlsMaterial(tls_settings(**overrides), SECRET)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_the_material_tells_the_files_read_the_names_and_the_expiry() -> None:
    sni = f"{PEMS / 'ec384.pem'}:{PEMS / 'ec384.key'}"
    material = _core.TlsMaterial(
        tls_settings(sni_certificates=(sni,), keyfile_password_file=str(PEMS / "password.txt"),
                     keyfile=str(PEMS / "ec256.enc.key")), SECRET)
    assert material.files == [str(PEMS / name) for name in (
        "password.txt", "ec256.pem", "ec256.enc.key", "ec384.pem", "ec384.key")]
    assert material.names == ["localhost", "a.test", "*.b.test"]
    assert material.not_after > time.time() + 50 * 365 * 86400
    assert [(path, names) for path, names, _ in material.certificates] == [
        (str(PEMS / "ec256.pem"), ["localhost", "a.test"]), (str(PEMS / "ec384.pem"), ["*.b.test"])]


def test_a_problem_is_one_line_naming_the_file() -> None:
    key = PEMS / "ec384.key"
    assert refusal(keyfile=str(key)).startswith(
        f"keyfile {key}: the key does not match the first certificate of {PEMS / 'ec256.pem'}")
    legacy = PEMS / "ec256.legacy.key"
    message = refusal(keyfile=str(legacy), keyfile_password="secret")
    assert message.startswith(f"keyfile {legacy}: ")
    assert "openssl pkcs8 -topk8" in message
    missing = PEMS / "nothing-here.pem"
    assert refusal(certfile=str(missing)).startswith(f"certfile {missing}: cannot read it")
    assert refusal(alpn=("spdy/3",)).startswith("alpn: 'spdy/3' is not a protocol Tines serves (")
    assert refusal(client_cert="required").startswith("client_ca: client_cert required needs client_ca")
    assert refusal(tls_ticket_rotation=0).startswith("tls_ticket_rotation: ")
    with pytest.raises(ValueError, match="ticket_secret: 32 bytes expected, got 3"):
        _core.TlsMaterial(tls_settings(), b"abc")


def test_the_worker_settings_carry_the_material_to_the_config() -> None:
    settings = worker_settings(load({}, {}))
    assert dict(_core.worker_config_fields(settings))["tls"] == "None"
    settings["tls"] = _core.TlsMaterial(tls_settings(), SECRET)
    assert dict(_core.worker_config_fields(settings))["tls"].startswith("Some(ServerConfig")
    settings["tls"] = "cert.pem"
    with pytest.raises(ValueError, match="worker setting 'tls': None or a tines._core.TlsMaterial"):
        _core.check_worker_settings(settings)
