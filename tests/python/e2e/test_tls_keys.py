"""Certificates and keys as the server reads them (issue 37): every key type (RSA, ECDSA
P-256/P-384, Ed25519) in every PEM form (PKCS#1, SEC1, PKCS#8) loads and serves; an encrypted
PKCS#8 key takes its password from ``--keyfile-password-file`` or ``TINES_KEYFILE_PASSWORD``
(never a flag); and bad material stops the start with exit 2 and one line naming the file and
the problem: the legacy ``Proc-Type: 4,ENCRYPTED`` form (naming ``openssl pkcs8 -topk8``), a key
that does not match the certificate, an expired leaf, a missing file, a wrong or missing
password. ``check-config`` says the same."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tls_certs import TlsCerts
from tls_clients import client_context, tls_args, tls_request

from conftest import APPS, ROOT, Server
from test_cli_errors import assert_one_line_error

APP = "tls_env:app"
FORMATS = ["p256-sec1", "p256-pkcs8", "p384-sec1", "p384-pkcs8", "rsa-pkcs1", "rsa-pkcs8", "ed25519-pkcs8"]


def tines(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {"PYTHONPATH": str(APPS), "PATH": "/usr/bin:/bin", **(env or {})}
    return subprocess.run([sys.executable, "-m", "tines", *args], capture_output=True, text=True, timeout=60,
                          cwd=ROOT, env=environment, stdin=subprocess.DEVNULL)


def serve_fails(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``tines serve`` that must not start (a free port: it would serve if it did)."""
    return tines("serve", APP, "-w", "1", "-b", "127.0.0.1:0", *args, env=env)


def assert_serves(server: Server, certs: TlsCerts, serial: int) -> None:
    response = tls_request(server.port, "/", client_context(certs))
    assert response.status == 200 and response.json()["wsgi.url_scheme"] == "https"
    assert response.peer.serial_number == serial


@pytest.mark.parametrize("form", FORMATS)
def test_every_key_type_and_form_loads_and_serves(tines_server: Any, tls_certs: TlsCerts, form: str) -> None:
    leaf, key = tls_certs.key_formats[form]
    server = tines_server(APP, "-w", "1", *tls_args(leaf, key))
    response = tls_request(server.port, "/", client_context(tls_certs))
    assert response.status == 200 and response.peer == leaf.certificate
    assert response.peer.public_key() == leaf.private_key.public_key()


def test_an_encrypted_key_takes_its_password_from_a_file(tines_server: Any, tls_certs: TlsCerts) -> None:
    server = tines_server(APP, "-w", "2", *tls_args(tls_certs.localhost, tls_certs.encrypted_key),
                          "--keyfile-password-file", str(tls_certs.password_file))
    assert_serves(server, tls_certs, tls_certs.localhost.serial)


def test_an_encrypted_key_takes_its_password_from_the_environment(tines_server: Any, tls_certs: TlsCerts) -> None:
    server = tines_server(APP, "-w", "1", *tls_args(tls_certs.localhost, tls_certs.encrypted_key),
                          env={"TINES_KEYFILE_PASSWORD": tls_certs.password})
    assert_serves(server, tls_certs, tls_certs.localhost.serial)
    # ... and never from the command line, where every user of the machine would see it.
    result = tines("serve", APP, *tls_args(tls_certs.localhost, tls_certs.encrypted_key), "--keyfile-password",
                   tls_certs.password)
    assert result.returncode == 2 and "--keyfile-password" in result.stderr, result.stderr
    assert "--keyfile-password " not in tines("serve", "--help").stdout


def test_the_legacy_encrypted_form_is_refused_naming_the_command_that_converts_it(tls_certs: TlsCerts) -> None:
    key = tls_certs.legacy_encrypted_key
    result = serve_fails(*tls_args(tls_certs.localhost, key), env={"TINES_KEYFILE_PASSWORD": tls_certs.password})
    assert_one_line_error(result, str(key), "openssl pkcs8 -topk8")


@pytest.mark.parametrize("problem", ["expired", "missing certfile", "missing keyfile", "wrong password", "no password",
                                     "not a key", "empty certfile"])
def test_bad_material_exits_2_with_one_line_naming_the_file(tls_certs: TlsCerts, tmp_path: Path, problem: str) -> None:
    localhost = tls_certs.localhost
    env: dict[str, str] = {}
    if problem == "expired":
        args, named, fragment = tls_args(tls_certs.expired), tls_certs.expired.chain, "expired"
    elif problem == "missing certfile":
        named = tmp_path / "missing.pem"
        args, fragment = ["--certfile", str(named), "--keyfile", str(localhost.key)], ""
    elif problem == "missing keyfile":
        named = tmp_path / "missing.key"
        args, fragment = tls_args(localhost, named), ""
    elif problem == "wrong password":
        env = {"TINES_KEYFILE_PASSWORD": "not the password"}
        args, named, fragment = tls_args(localhost, tls_certs.encrypted_key), tls_certs.encrypted_key, ""
    elif problem == "no password":
        args, named, fragment = tls_args(localhost, tls_certs.encrypted_key), tls_certs.encrypted_key, "password"
    elif problem == "not a key":
        args, named, fragment = tls_args(localhost, localhost.cert), localhost.cert, ""
    else:
        named = tmp_path / "empty.pem"
        named.write_text("")
        args, fragment = ["--certfile", str(named), "--keyfile", str(localhost.key)], ""
    result = serve_fails(*args, env=env)
    assert_one_line_error(result, str(named), fragment)
    assert "Traceback" not in result.stderr
    assert all(secret not in result.stderr for secret in env.values()), "a password is never printed"


def assert_mismatch_refused(result: subprocess.CompletedProcess[str], certs: TlsCerts) -> None:
    """Exit 2, one line saying the pair does not match, naming the key or the certificate."""
    assert_one_line_error(result, "match")
    line = result.stderr.rstrip().splitlines()[-1]
    assert str(certs.mismatched_key) in line or str(certs.localhost.chain) in line, line


def test_a_key_that_does_not_match_the_certificate_exits_2(tls_certs: TlsCerts) -> None:
    assert_mismatch_refused(serve_fails(*tls_args(tls_certs.localhost, tls_certs.mismatched_key)), tls_certs)


def test_check_config_says_what_serve_would(tls_certs: TlsCerts) -> None:
    bad = tines("check-config", APP, *tls_args(tls_certs.localhost, tls_certs.mismatched_key))
    assert_mismatch_refused(bad, tls_certs)
    good = tines("check-config", APP, *tls_args(tls_certs.localhost, tls_certs.encrypted_key),
                 "--keyfile-password-file", str(tls_certs.password_file))
    assert good.returncode == 0, good.stderr
    assert tls_certs.password not in good.stdout + good.stderr


def test_the_keyfile_password_comes_from_the_config_file_too(tines_server: Any, tls_certs: TlsCerts,
                                                             tmp_path: Path) -> None:
    config = tmp_path / "tines.toml"
    config.write_text(f'certfile = "{tls_certs.localhost.chain}"\nkeyfile = "{tls_certs.encrypted_key}"\n'
                      f'keyfile_password = "{tls_certs.password}"\n')
    os.chmod(config, 0o600)
    server = tines_server(APP, "-w", "1", "-c", str(config))
    assert_serves(server, tls_certs, tls_certs.localhost.serial)
    # check-config shows every setting and where it came from, but not the password.
    for args, env in ((["-c", str(config)], {}), (tls_args(tls_certs.localhost, tls_certs.encrypted_key),
                                                 {"TINES_KEYFILE_PASSWORD": tls_certs.password})):
        checked = tines("check-config", APP, *args, env=env)
        assert checked.returncode == 0, checked.stderr
        rows = [line for line in checked.stdout.splitlines() if line.startswith("keyfile_password ")]
        assert len(rows) == 1 and tls_certs.password not in checked.stdout + checked.stderr, checked.stdout
