"""The TLS settings (issue 37), declared once in the registry: their converters, the checks that
span several of them, the password that never is a flag, the ``plain:`` binds and which
listeners speak TLS, the dict the master hands ``tines._core.TlsMaterial``, the certificate
expiry warning and the ticket secret a USR2 hands over."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tines import tls, upgrade
from tines.cli import _unknown_message, build_parser
from tines.config import SETTINGS, ignored_settings, load
from tines.errors import ConfigError
from tines.sockets import PLAIN_FDNAME, bind_all, tls_flags
from tines.worker import WorkerSpec

ROOT = Path(__file__).resolve().parents[3]

NAMES = ("certfile", "keyfile", "keyfile_password_file", "keyfile_password", "sni_certificates",
         "tls_unknown_server_name", "tls_min_version", "tls_cipher_suites", "alpn", "client_cert",
         "client_ca", "client_crl", "tls_tickets", "tls_ticket_rotation")
"""The names the brief fixed (decision 9): role C's ``TlsMaterial`` reads them."""


def error_of(overrides: dict[str, object], environ: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as caught:
        load(overrides, environ or {})
    return str(caught.value)


# --- the registry ---------------------------------------------------------------------------------


def test_the_tls_section_holds_the_names_of_the_contract_and_their_flags() -> None:
    assert tuple(name for name, setting in SETTINGS.items() if setting.section == "TLS") == NAMES
    flags = {name: SETTINGS[name].flags for name in NAMES}
    assert flags["certfile"] == ("--certfile", "--ssl-certfile")
    assert flags["keyfile"] == ("--keyfile", "--ssl-keyfile")
    assert flags["sni_certificates"] == ("--sni-certificate",) and SETTINGS["sni_certificates"].multiple
    assert flags["tls_tickets"] == ("--tls-tickets",) and SETTINGS["tls_tickets"].is_flag
    assert flags["keyfile_password"] == ()
    assert not any(SETTINGS[name].worker for name in NAMES)  # the material goes, not the settings


def test_the_defaults() -> None:
    cfg = load({}, {})
    assert (cfg.certfile, cfg.keyfile, cfg.sni_certificates, cfg.tls_unknown_server_name) == (None, None, (), "default")
    assert (cfg.tls_min_version, cfg.tls_cipher_suites, cfg.alpn, cfg.client_cert) == ("1.2", (), ("h2", "http/1.1"), "none")
    assert (cfg.client_ca, cfg.client_crl, cfg.tls_tickets, cfg.tls_ticket_rotation) == (None, (), True, 3600)


@pytest.mark.parametrize("raw, value", [("1.2", "1.2"), ("1.3", "1.3"), ("TLSv1.3", "1.3"), (1.2, "1.2"), (" 1.3 ", "1.3")])
def test_min_version_reads_the_spellings_of_two_versions(raw: object, value: str) -> None:
    assert load({"tls_min_version": raw}, {}).tls_min_version == value


@pytest.mark.parametrize("raw", ["1.1", "1.0", "TLSv1", "1.4", 1.1])
def test_min_version_refuses_what_is_not_offered(raw: object) -> None:
    assert error_of({"tls_min_version": raw}) == (
        f"tls_min_version must be 1.2 or 1.3 (TLS 1.0 and 1.1 are not offered), got {raw!r}")


def test_cipher_suites_are_iana_names_and_rustls_spelling_is_read_as_iana() -> None:
    cfg = load({"tls_cipher_suites": "tls13_aes_128_gcm_sha256, TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"}, {})
    assert cfg.tls_cipher_suites == ("TLS_AES_128_GCM_SHA256", "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256")


def test_an_openssl_cipher_string_is_refused_with_the_reason() -> None:
    assert error_of({"tls_cipher_suites": "ECDHE-RSA-AES128-GCM-SHA256"}) == (
        "tls_cipher_suites must be IANA cipher suite names: ECDHE-RSA-AES128-GCM-SHA256 is "
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, got 'ECDHE-RSA-AES128-GCM-SHA256'")
    message = error_of({"tls_cipher_suites": "ECDHE+AESGCM:!aNULL"})
    assert message.startswith("tls_cipher_suites must be IANA cipher suite names such as TLS_AES_128_GCM_SHA256")
    assert "not an OpenSSL cipher string, got 'ECDHE+AESGCM:!aNULL'" in message
    assert "one of TLS_AES_256_GCM_SHA384" in error_of({"tls_cipher_suites": "TLS_RSA_WITH_RC4_128_MD5"})


def test_alpn_offers_h2_first_by_default_and_not_while_http2_is_off() -> None:
    assert load({"alpn": ["HTTP/1.1", "http/1.0"]}, {}).alpn == ("http/1.1", "http/1.0")
    assert load({"alpn": ""}, {}).alpn == ()
    assert load({"alpn": "H2,http/1.1"}, {}).alpn == ("h2", "http/1.1")
    assert error_of({"alpn": "spdy/3"}) == "alpn must be h2, http/1.1, http/1.0, got 'spdy/3'"
    assert tls.offered_alpn(load({"certfile": "c.pem"}, {})) == ["h2", "http/1.1"]
    assert tls.offered_alpn(load({"certfile": "c.pem", "http2": False}, {})) == ["http/1.1"]
    assert tls.offered_alpn(load({"certfile": "c.pem", "http2": "off", "alpn": "h2"}, {})) == []
    assert tls.offered_alpn(load({"certfile": "c.pem", "alpn": "http/1.1,h2"}, {})) == ["http/1.1", "h2"]
    assert tls.material_settings(load({"certfile": "c.pem", "http2": False}, {}), "/srv")["alpn"] == ["http/1.1"]
    assert ignored_settings(load({"certfile": "c.pem", "http2": False, "alpn": "h2,http/1.1"}, {})) == [
        "h2 in alpn (cli) is not offered while http2 is off (cli)"]


def test_sni_certificates_take_a_certificate_and_maybe_its_key() -> None:
    cfg = load({"sni_certificates": ["a.pem", "b.pem:b.key"]}, {"TINES_CERTFILE": "c.pem"})
    assert cfg.sni_certificates == ("a.pem", "b.pem:b.key")
    assert error_of({"sni_certificates": "a.pem:b.key:c"}) == (
        "sni_certificates must be CERT.pem or CERT.pem:KEY.pem (paths without a colon), got 'a.pem:b.key:c'")
    assert "got ':b.key'" in error_of({"sni_certificates": ":b.key"})


def test_choices_and_the_rotation() -> None:
    assert error_of({"client_cert": "request"}) == "client_cert must be one of none, optional, required, got 'request'"
    assert error_of({"tls_unknown_server_name": "drop"}) == (
        "tls_unknown_server_name must be one of default, refuse, got 'drop'")
    assert error_of({"tls_ticket_rotation": "0"}) == "tls_ticket_rotation must be a positive integer, got '0'"
    assert load({"tls_ticket_rotation": "600", "tls_tickets": "off"}, {}).tls_tickets is False


def test_a_client_certificate_needs_the_ca_that_verifies_it() -> None:
    assert error_of({"client_cert": "optional"}) == (
        "client_cert optional (cli) needs client_ca, the CA bundle client certificates are verified against")
    assert load({"client_cert": "required", "client_ca": "ca.pem"}, {}).client_cert == "required"


# --- the password, never a flag ------------------------------------------------------------------


def test_keyfile_password_has_no_flag_and_comes_from_the_environment_or_the_file(tmp_path: Path) -> None:
    flags = {option for action in build_parser()._subparsers._group_actions[0].choices["serve"]._actions  # type: ignore[union-attr]
             for option in action.option_strings}
    assert "--keyfile-password-file" in flags and "--certfile" in flags
    assert not {flag for flag in flags if "password" in flag} - {"--keyfile-password-file"}
    assert load({}, {"TINES_KEYFILE_PASSWORD": "s3cret"}).keyfile_password == "s3cret"
    (tmp_path / "tines.toml").write_text('keyfile_password = "from-file"\n')
    cfg = load({"config": str(tmp_path / "tines.toml")}, {})
    assert (cfg.keyfile_password, cfg.source("keyfile_password")) == ("from-file", f"file {tmp_path / 'tines.toml'}")


def test_the_password_flag_is_answered_with_where_it_goes() -> None:
    assert _unknown_message(["--keyfile-password", "x"]) == (
        "unknown option '--keyfile-password': keyfile_password is never given on the command line (every "
        "user of the machine can read it): set TINES_KEYFILE_PASSWORD, or keyfile_password in the config file")


def test_the_password_is_never_shown(tmp_path: Path) -> None:
    cfg = load({}, {"TINES_KEYFILE_PASSWORD": "s3cret"})
    assert "s3cret" not in repr(cfg)
    assert dict((name, value) for name, value, _ in cfg.rows())["keyfile_password"] == '"(hidden)"'
    (tmp_path / "tines.toml").write_text("keyfile_password = 1234\n")
    message = error_of({"config": str(tmp_path / "tines.toml")})
    assert "1234" not in message and message.endswith("keyfile_password must be a string, got '(hidden)'")
    assert error_of({"keyfile_password_file": "p.txt"}, {"TINES_KEYFILE_PASSWORD": "x"}) == (
        "keyfile_password (env TINES_KEYFILE_PASSWORD) and keyfile_password_file (cli) are both set: give one")


def test_settings_that_need_certfile_are_said_to_be_ignored_without_it() -> None:
    assert ignored_settings(load({"keyfile": "k.pem", "client_cert": "none"}, {})) == [
        "keyfile (cli) is ignored without certfile (--certfile), which turns TLS on",
        "client_cert (cli) is ignored without certfile (--certfile), which turns TLS on"]
    assert ignored_settings(load({"certfile": "c.pem", "keyfile": "k.pem"}, {})) == []
    assert ignored_settings(load({"certfile": "c.pem", "bind": ["plain:127.0.0.1:80", "unix:/x"]}, {})) == [
        "certfile (cli) is ignored: every bind is unix: or cleartext (plain:, h2c:, http1+h2c:), so none speaks TLS"]
    assert ignored_settings(load({"certfile": "c.pem", "bind": ["h2c:127.0.0.1:80", "http1+h2c:127.0.0.1:81"]}, {})) == [
        "certfile (cli) is ignored: every bind is unix: or cleartext (plain:, h2c:, http1+h2c:), so none speaks TLS"]


# --- plain: binds ------------------------------------------------------------------------------------


@pytest.mark.parametrize("address", ["plain:127.0.0.1:8080", "plain:[::1]:80", "plain:fd://3", "plain:localhost:0"])
def test_a_tcp_bind_may_be_marked_plain(address: str) -> None:
    assert load({"bind": [address]}, {}).bind == (address,)


@pytest.mark.parametrize("address, reason", [
    ("plain:unix:/run/x.sock", "needs no plain: before unix: (Unix sockets are always plain)"),
    ("plain:plain:127.0.0.1:80", "must be HOST:PORT, [IPv6]:PORT, unix:/path or fd://N"),
    ("plain:", "must be HOST:PORT, [IPv6]:PORT, unix:/path or fd://N"),
    ("plain:127.0.0.1:99999", "port must be a number in 0..65535"),
])
def test_a_bad_plain_bind_is_refused(address: str, reason: str) -> None:
    assert error_of({"bind": [address]}) == f"bind {reason}, got {address!r}"


def test_the_status_listener_takes_no_plain_mark() -> None:
    assert error_of({"status_bind": "plain:127.0.0.1:9000"}) == (
        "status_bind needs no plain: (the status listener always speaks plain HTTP), got 'plain:127.0.0.1:9000'")
    assert load({"status_bind": ""}, {}).status_bind is None


def test_tcp_listeners_speak_tls_unless_plain_and_unix_ones_never(tmp_path: Path) -> None:
    listeners = bind_all(["127.0.0.1:0", "plain:127.0.0.1:0", f"unix:{tmp_path / 's.sock'}"], 16)
    try:
        assert [listener.plain for listener in listeners] == [False, True, False]
        assert not listeners[1].address.startswith("plain:")  # the address as bound
        assert tls_flags(listeners, True) == [True, False, False]
        assert tls_flags(listeners, False) == [False, False, False]
    finally:
        for listener in listeners:
            listener.close()


def test_an_inherited_fd_is_plain_when_its_bind_says_so() -> None:
    inherited = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    inherited.bind(("127.0.0.1", 0))
    inherited.listen(4)
    other = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    other.bind(("127.0.0.1", 0))
    other.listen(4)
    listeners = bind_all([f"plain:fd://{inherited.detach()}", f"fd://{other.detach()}"], 16)
    try:
        assert tls_flags(listeners, True) == [False, True]
    finally:
        for listener in listeners:
            listener.close()


SOCKET_ACTIVATION = """
import fcntl, os, socket, sys
from tines.sockets import bind_all, tls_flags
sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(3)]
moved = []
for sock in sockets:
    sock.bind(("127.0.0.1", 0))
    sock.listen(4)
    moved.append(fcntl.fcntl(sock.fileno(), fcntl.F_DUPFD, 100))
    sock.close()
for number, fd in zip((3, 4, 5), moved):
    os.dup2(fd, number)
    os.close(fd)
os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS="3", LISTEN_FDNAMES=sys.argv[1])
address = socket.socket(fileno=os.dup(5)).getsockname()
listeners = bind_all(["plain:%s:%d" % address, "0.0.0.0:1"], 16)
print(tls_flags(listeners, True), "LISTEN_FDS" in os.environ)
"""


def test_socket_activation_marks_plain_by_name_or_by_a_plain_bind_of_the_address() -> None:
    """The rule (docs/tls.md): an inherited socket is plain when LISTEN_FDNAMES names it ``plain``
    (systemd's FileDescriptorName=, or an old master's on USR2) or when a ``plain:`` bind names its
    address; the others speak TLS."""
    result = subprocess.run([sys.executable, "-c", SOCKET_ACTIVATION, f"web:{PLAIN_FDNAME}:web"],
                            capture_output=True, text=True, timeout=60,
                            env={**os.environ, "PYTHONPATH": str(ROOT / "python")})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[0] == "[True, False, False] False"


def test_the_worker_spec_carries_a_flag_per_listener() -> None:
    spec = WorkerSpec(settings={}, listeners=[5, 6], scoreboard=None, slot=0, tls_listeners=[True, False])
    assert spec.tls_listeners == [True, False]
    assert WorkerSpec({}, [5, 6], None, 0).tls_listeners == [False, False]
    with pytest.raises(ValueError, match="tls_listeners has 1 flags for 2 listeners"):
        WorkerSpec(settings={}, listeners=[5, 6], scoreboard=None, slot=0, tls_listeners=[True])


# --- what the material is made from ----------------------------------------------------------------


def test_the_material_settings_are_the_section_with_absolute_paths() -> None:
    cfg = load({"certfile": "c.pem", "keyfile": "/etc/k.pem", "sni_certificates": ["a.pem:a.key", "/b.pem"],
                "client_cert": "optional", "client_ca": "ca.pem", "client_crl": "r1.pem,r2.pem"},
               {"TINES_KEYFILE_PASSWORD": "pw"})
    settings = tls.material_settings(cfg, "/srv")
    assert settings == {
        "certfile": "/srv/c.pem", "keyfile": "/etc/k.pem", "keyfile_password_file": None,
        "keyfile_password": "pw", "sni_certificates": ["/srv/a.pem:/srv/a.key", "/b.pem"],
        "tls_unknown_server_name": "default", "tls_min_version": "1.2", "tls_cipher_suites": [],
        "alpn": ["h2", "http/1.1"], "client_cert": "optional", "client_ca": "/srv/ca.pem",
        "client_crl": ["/srv/r1.pem", "/srv/r2.pem"], "tls_tickets": True, "tls_ticket_rotation": 3600}
    assert tls.files(cfg, "/srv") == [
        ("certfile", "/srv/c.pem"), ("keyfile", "/etc/k.pem"), ("client_ca", "/srv/ca.pem"),
        ("sni_certificates", "/srv/a.pem"), ("sni_certificates", "/srv/a.key"), ("sni_certificates", "/b.pem"),
        ("client_crl", "/srv/r1.pem"), ("client_crl", "/srv/r2.pem")]
    assert tls.files(load({"keyfile": "k.pem"}, {}), "/srv") == []  # TLS off: nothing is read
    assert tls.make_material(load({}, {}), "/srv", tls.new_ticket_secret()) is None


def test_a_file_that_cannot_be_read_is_one_line_naming_the_setting_and_the_file(tmp_path: Path) -> None:
    present = tmp_path / "cert.pem"
    present.write_text("x")
    tls.check_readable([("certfile", str(present))])
    with pytest.raises(ConfigError) as caught:
        tls.check_readable([("certfile", str(present)), ("keyfile", str(tmp_path / "nope.pem"))])
    assert str(caught.value) == f"keyfile: cannot read {tmp_path / 'nope.pem'}: No such file or directory"


class Material:
    """What the master reads of a ``tines._core.TlsMaterial``: the chains served."""

    def __init__(self, *certificates: tuple[str, list[str], int]) -> None:
        self.certificates = list(certificates)


def test_a_certificate_that_expires_within_a_week_is_warned_about() -> None:
    now = 1_800_000_000.0
    material = Material(("/etc/tines/default.pem", ["example.com"], int(now + 3 * 86400)),
                        ("/etc/tines/api.pem", ["api.example.com"], int(now + 30 * 86400)))
    assert tls.expiry_warnings(material, now) == [
        "the certificate in /etc/tines/default.pem expires on 2027-01-18 08:00:00 UTC (in 3.0 days): "
        "renew it, then HUP the master"]
    assert tls.expiry_warnings(Material(("/c.pem", [], int(now + 7 * 86400))), now) == []
    assert tls.expiry_warnings(None, now) == []


def test_check_config_describes_what_tls_will_serve() -> None:
    cfg = load({"certfile": "c.pem", "bind": ["0.0.0.0:443", "plain:127.0.0.1:8080", "unix:/run/a.sock"],
                "tls_min_version": "1.3", "client_cert": "optional", "client_ca": "ca.pem",
                "tls_tickets": "off"}, {})
    material = Material(("/srv/c.pem", ["example.com", "*.example.com"], 1_800_000_000), ("/srv/d.pem", [], 1_900_000_000))
    assert tls.describe(cfg, material) == (
        "on for 0.0.0.0:443 (plain: plain:127.0.0.1:8080, unix:/run/a.sock); /srv/c.pem for example.com, "
        "*.example.com, expires 2027-01-15; /srv/d.pem for no DNS name, expires 2030-03-17; TLS 1.3+; "
        "client certificates optional; tickets off")
    assert tls.describe(load({}, {}), None) == "off (no certfile)"


# --- the ticket secret across USR2 ------------------------------------------------------------------


def test_the_ticket_secret_goes_to_the_new_master_in_a_sealed_memfd_and_back_out() -> None:
    secret = tls.new_ticket_secret()
    assert len(secret) == tls.SECRET_SIZE and secret != tls.new_ticket_secret()
    fd = upgrade.secret_fd(secret)
    with pytest.raises(PermissionError):
        os.write(fd, b"x")  # sealed: no one changes it on the way
    assert upgrade.take_secret(str(fd)) == secret
    with pytest.raises(OSError):
        os.fstat(fd)  # taken: closed


def test_a_secret_that_cannot_be_taken_is_none(tmp_path: Path) -> None:
    assert upgrade.take_secret(None) is None
    assert upgrade.take_secret("x") is None
    short = upgrade.secret_fd(b"short")
    assert upgrade.take_secret(str(short)) is None


def test_the_upgrade_takes_the_secret_out_of_the_environment() -> None:
    secret = tls.new_ticket_secret()
    environ = {upgrade.ENV_TICKET_FD: str(upgrade.secret_fd(secret))}
    state = upgrade.Upgrade(upgrade.Invocation(("serve",), "/"), None, environ)
    assert state.ticket_secret == secret and environ == {}
    assert upgrade.Upgrade(upgrade.Invocation(("serve",), "/"), None, {}).ticket_secret is None


def test_the_flags_as_typed() -> None:
    arguments = build_parser().parse_args([
        "serve", "app:app", "--ssl-certfile", "c.pem", "--ssl-keyfile", "k.pem", "--sni-certificate", "a.pem",
        "--sni-certificate", "b.pem:b.key", "--no-tls-tickets", "--tls-min-version", "1.3", "--alpn", "http/1.1",
        "--client-cert", "required", "--client-ca", "ca.pem", "--client-crl", "r.pem", "--tls-ticket-rotation", "60",
        "--keyfile-password-file", "p.txt", "--tls-unknown-server-name", "refuse",
        "--tls-cipher-suites", "TLS_AES_128_GCM_SHA256"])
    cfg = load(arguments, {})
    assert (cfg.certfile, cfg.keyfile, cfg.sni_certificates) == ("c.pem", "k.pem", ("a.pem", "b.pem:b.key"))
    assert (cfg.tls_tickets, cfg.tls_min_version, cfg.client_cert, cfg.client_crl) == (False, "1.3", "required", ("r.pem",))
    assert (cfg.tls_ticket_rotation, cfg.keyfile_password_file, cfg.tls_unknown_server_name) == (60, "p.txt", "refuse")
    assert cfg.tls_cipher_suites == ("TLS_AES_128_GCM_SHA256",) and cfg.source("certfile") == "cli"
