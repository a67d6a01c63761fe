"""What the master does with the TLS settings (issue 37, tines.tls): a file it cannot read, or
read as the user the workers run as, stops the start with one line and exit 2; a HUP whose key
does not match its certificate is one log line and the serving generation keeps its
certificate, and the fixed files then go in on the next HUP; a binary upgrade (USR2) hands the
new master the ticket secret (a session resumes across it) and keeps a ``plain:`` listener plain.

Certificates are made with the openssl command (ECDSA P-256, self-signed). The tests that need
the material itself (``tines._core.TlsMaterial``) and a TLS listener skip until the extension
has them.
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from conftest import APPS, ROOT, Server, alive, children, http_get, wait_until
from test_stop_and_notify import ACTIVATE, listening_socket

try:
    from tines import _core

    HAS_MATERIAL = hasattr(_core, "TlsMaterial")
except ImportError:  # pragma: no cover - the extension is not built
    HAS_MATERIAL = False

needs_material = pytest.mark.skipif(not HAS_MATERIAL, reason="tines._core has no TlsMaterial yet (role C)")


def tines(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": str(APPS), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "tines", *args], capture_output=True, text=True,
                          timeout=60, cwd=cwd, env=env, stdin=subprocess.DEVNULL)


def the_error(result: subprocess.CompletedProcess[str]) -> str:
    """The one error line of a start that failed with exit 2 (the last thing said)."""
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("tines: error:")]
    assert len(lines) == 1, result.stderr
    assert result.stderr.rstrip().splitlines()[-1] == lines[0]
    return lines[0]


def make_pair(directory: Path, name: str, days: int = 30) -> tuple[Path, Path]:
    """A self-signed ECDSA P-256 certificate for localhost and its key: (cert, key)."""
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-nodes", "-keyout", str(key), "-out", str(cert), "-days", str(days),
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"],
                   check=True, capture_output=True, timeout=60)
    return cert, key


def replace_file(source: Path, target: Path) -> None:
    """``target`` gets ``source``'s bytes, renamed over it as a deploy tool (certbot) does."""
    staged = target.with_name(target.name + ".new")
    staged.write_bytes(source.read_bytes())
    staged.replace(target)


def client_context() -> ssl.SSLContext:
    """A client that takes any certificate (the tests compare what they were shown)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


class Exchange(NamedTuple):
    response: bytes
    session: ssl.SSLSession | None
    """To resume with (a TLS 1.3 ticket comes after the handshake: read once the response is)."""
    reused: bool
    certificate: bytes
    """The SHA-256 of the certificate the server showed."""


def tls_get(port: int, context: ssl.SSLContext, session: ssl.SSLSession | None = None) -> Exchange:
    """One request over a new TLS connection to 127.0.0.1:``port``, resuming ``session`` when
    given; answered 200."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as raw:
        with context.wrap_socket(raw, server_hostname="localhost", session=session) as tls:
            # What the handshake decided, read before the server's close_notify ends the session.
            der, reused = tls.getpeercert(binary_form=True), bool(tls.session_reused)
            assert der is not None
            tls.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            response, ticketed = b"", None
            while chunk := tls.recv(65536):
                response += chunk
                ticketed = tls.session  # a TLS 1.3 ticket comes after the handshake
            assert response.startswith(b"HTTP/1.1 200 "), response[:200]
            return Exchange(response, ticketed, reused, hashlib.sha256(der).digest())


def served_certificate(port: int) -> bytes:
    """The SHA-256 of the certificate a new TLS handshake with 127.0.0.1:``port`` is shown."""
    return tls_get(port, client_context()).certificate


def body_pid(response: bytes) -> int:
    return int(response.split(b"\r\n\r\n", 1)[1])


def fingerprint(cert: Path) -> bytes:
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(cert.read_text())).digest()


# --- at start ----------------------------------------------------------------------------------


def test_a_certfile_that_does_not_exist_exits_2_with_one_line_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "missing.pem"
    line = the_error(tines("serve", "examples/hello.py:app", "-b", "127.0.0.1:0", "--certfile", str(missing)))
    assert line == f"tines: error: certfile: cannot read {missing}: No such file or directory"
    line = the_error(tines("check-config", "examples/hello.py:app", "--ssl-certfile", str(missing)))
    assert line == f"tines: error: certfile: cannot read {missing}: No such file or directory"


def test_every_tls_file_is_checked_before_the_start(tmp_path: Path) -> None:
    cert, key = make_pair(tmp_path, "server")
    missing = tmp_path / "ca.pem"
    line = the_error(tines("serve", "examples/hello.py:app", "-b", "127.0.0.1:0", "--certfile", str(cert),
                           "--keyfile", str(key), "--client-cert", "optional", "--client-ca", str(missing)))
    assert line == f"tines: error: client_ca: cannot read {missing}: No such file or directory"


def test_a_relative_certfile_is_read_from_where_tines_starts(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    line = the_error(tines("check-config", "examples/hello.py:app", "--chdir", str(elsewhere),
                           "--certfile", "certs/server.pem", cwd=tmp_path))
    assert line == f"tines: error: certfile: cannot read {tmp_path}/certs/server.pem: No such file or directory"


def test_a_tls_file_the_worker_user_cannot_read_is_refused_before_start() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root, to switch to another user")
    try:
        import pwd
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user nobody here")
    private = Path(tempfile.mkdtemp(prefix="tines-tls-private-", dir="/tmp"))  # 0700, root's
    try:
        cert, key = make_pair(private, "server")
        line = the_error(tines("check-config", "--user", "nobody", "--certfile", str(cert), "--keyfile", str(key),
                               "examples/hello.py:app"))
        assert line == (f"tines: error: certfile: cannot read {cert}: Permission denied (as user nobody, whom "
                        "the workers run as, and the master once it has switched: it reads the TLS files "
                        "again on HUP)")
        os.chown(private, nobody.pw_uid, nobody.pw_gid)
        os.chmod(key, 0o600)  # root's: the certificate is readable now, its key is not
        line = the_error(tines("check-config", "--user", "nobody", "--certfile", str(cert), "--keyfile", str(key),
                               "examples/hello.py:app"))
        assert line.startswith(f"tines: error: keyfile: cannot read {key}: Permission denied (as user nobody")
    finally:
        for path in private.iterdir():
            path.unlink()
        private.rmdir()


@needs_material
def test_a_key_that_does_not_match_its_certificate_exits_2_naming_the_file(tmp_path: Path) -> None:
    cert, _ = make_pair(tmp_path, "one")
    _, other_key = make_pair(tmp_path, "two")
    line = the_error(tines("serve", "examples/hello.py:app", "-b", "127.0.0.1:0", "--certfile", str(cert),
                           "--keyfile", str(other_key)))
    assert "keyfile" in line and str(other_key) in line


@needs_material
def test_check_config_reports_tls_and_a_certificate_that_expires_soon(tmp_path: Path) -> None:
    cert, key = make_pair(tmp_path, "server", days=2)
    result = tines("check-config", "examples/hello.py:app", "-b", "127.0.0.1:8443", "-b", "plain:127.0.0.1:8080",
                   "-b", "unix:/tmp/x.sock", "--certfile", str(cert), "--keyfile", str(key))
    assert result.returncode == 0, result.stderr
    tls_line = result.stdout.splitlines()[-2]
    assert re.fullmatch(rf"tls: on for 127\.0\.0\.1:8443 \(plain: plain:127\.0\.0\.1:8080, unix:/tmp/x\.sock\); "
                        rf"{re.escape(str(cert))} for localhost, expires \d{{4}}-\d\d-\d\d; TLS 1\.2\+; "
                        r"client certificates none; tickets on", tls_line), tls_line
    assert re.search(rf"tines: warning: the certificate in {re.escape(str(cert))} expires on .* "
                     r"\(in [12]\.\d days\): renew it, then HUP the master", result.stderr), result.stderr


# --- on HUP -------------------------------------------------------------------------------------


@needs_material
def test_hup_with_a_key_that_does_not_match_keeps_the_old_certificate_serving_then_a_fix_goes_in(
        tines_server: Any, tmp_path: Path) -> None:
    """The certbot deploy hook's case: the files are replaced, then the master is sent HUP. A
    key that does not match its certificate (a half-finished deploy) is refused in the master
    before any worker sees it: one line, the same workers serve the same certificate; once the
    files are right, the next HUP puts the new certificate in, served to new handshakes."""
    live = tmp_path / "live"
    live.mkdir()
    first_cert, first_key = make_pair(tmp_path, "first")
    second_cert, second_key = make_pair(tmp_path, "second")
    cert, key = live / "fullchain.pem", live / "privkey.pem"
    replace_file(first_cert, cert)
    replace_file(first_key, key)
    server: Server = tines_server("examples/hello.py:app", "-w", "2", "--certfile", str(cert), "--keyfile", str(key))
    server.wait_for_log(rf"Listening at: https://127\.0\.0\.1:{server.port} ")
    assert served_certificate(server.port) == fingerprint(first_cert)
    old = set(server.worker_pids())

    replace_file(second_cert, cert)  # the key is still the first one's
    server.signal(signal.SIGHUP)
    failed = server.wait_for_log(r"reload failed: (.*); generation 1 keeps serving")[0]
    assert str(key) in failed.group(1) or str(cert) in failed.group(1), failed.group(0)
    assert server.proc.poll() is None, "the master stays up"
    assert set(server.worker_pids()) == old, "no worker was replaced"
    assert served_certificate(server.port) == fingerprint(first_cert)
    assert len([line for line in server.log_text().splitlines() if "reload failed" in line]) == 1

    replace_file(second_key, key)
    server.signal(signal.SIGHUP)
    server.wait_for_log(r"reload done: generation 2 serves with 2 workers")
    wait_until(lambda: not set(server.worker_pids()) & old, what="the old workers to exit")
    assert served_certificate(server.port) == fingerprint(second_cert)


@needs_material
def test_usr2_hands_the_ticket_secret_over_so_a_session_resumes_on_the_new_master(
        tines_server: Any, tmp_path: Path) -> None:
    cert, key = make_pair(tmp_path, "server")
    pid_file = tmp_path / "tines.pid"
    server: Server = tines_server("hello_pid:app", "-w", "1", "-b", "plain:127.0.0.1:0", "--pid-file", str(pid_file),
                                  "--certfile", str(cert), "--keyfile", str(key), "--drain-timeout", "1")
    plain_port = int(str(server.ready["binds"][1]).rpartition(":")[2])  # type: ignore[index]
    context = client_context()
    first = tls_get(server.port, context)
    assert first.session is not None and first.session.has_ticket
    again = tls_get(server.port, context, first.session)
    assert again.reused, "resumed on the same master"
    old_worker = body_pid(again.response)

    server.signal(signal.SIGUSR2)
    master = wait_until(lambda: pid_file.exists() and (pid := pid_file.read_text().strip()).isdigit()
                        and int(pid) != server.pid and int(pid), what="the new master's pid")
    assert server.wait() == 0, "the old master handed over and left"
    assert not alive(old_worker)
    new_workers = wait_until(lambda: children(master), what="the new master's worker")  # type: ignore[arg-type]
    resumed = tls_get(server.port, context, first.session)
    assert body_pid(resumed.response) in new_workers  # type: ignore[operator]
    assert resumed.reused, "a ticket of the old master's worker resumes on the new master's"
    status, body = http_get(plain_port, close=True)
    assert status == 200 and int(body) in new_workers, "the plain: listener is still plain"  # type: ignore[operator]


@needs_material
def test_socket_activation_marks_plain_sockets_by_name_or_by_a_plain_bind(tines_server: Any, tmp_path: Path) -> None:
    """systemd's sockets: the one named ``plain`` (FileDescriptorName=plain), the one whose
    address a ``plain:`` bind names and the one a ``plain:fd://N`` bind names by its number
    speak plain HTTP; the other speaks TLS."""
    cert, key = make_pair(tmp_path, "server")
    sockets = [listening_socket() for _ in range(4)]
    fds = [sock.fileno() for sock in sockets]
    ports = [sock.getsockname()[1] for sock in sockets]
    server: Server = tines_server(
        "hello_pid:app", "-w", "1", "-b", f"plain:127.0.0.1:{ports[2]}", "-b", "plain:fd://6", "--certfile", str(cert), "--keyfile", str(key),
        program=(sys.executable, "-c", ACTIVATE, ",".join(map(str, fds)), "web:plain:admin:web2"), pass_fds=fds)
    for sock in sockets:
        sock.close()  # the server holds its own copies
    server.wait_for_log(rf"Listening at: https://127\.0\.0\.1:{ports[0]} ")
    server.wait_for_log(rf"Listening at: http://127\.0\.0\.1:{ports[1]} ")
    server.wait_for_log(rf"Listening at: http://127\.0\.0\.1:{ports[2]} ")
    server.wait_for_log(rf"Listening at: http://127\.0\.0\.1:{ports[3]} ")  # fd 6: the fourth passed
    assert tls_get(ports[0], client_context()).certificate == fingerprint(cert)
    for port in ports[1:]:
        assert http_get(port, close=True)[0] == 200
