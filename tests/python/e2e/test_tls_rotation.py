"""Certificates rotated with nothing lost (issue 37; rotation is the HUP generation swap): while
4 client threads load the server over TLS (2 on kept-alive connections, 2 with a new connection
per request; every response counted, none retried), the certificate and key files are replaced
by rename and the master gets HUP; the load loses nothing, and new handshakes then present the
new certificate. Again under ``--user nobody`` (the master re-reads the files as that user). A
HUP with a key that does not match keeps the old certificate serving and says so in one line.
Readiness from the log and the load's counts, never a sleep."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from tls_certs import Leaf, TlsCerts
from tls_clients import MPM_IDS, MPMS, client_context, tls_request

from client_load import ClientLoad
from conftest import NOBODY_REACHES_THE_APPS, NOBODY_SKIP_REASON, Server, alive, wait_until

APP = "hello_pid:app"


def install(directory: Path, leaf: Leaf, key: Path | None = None, owner: int | None = None) -> None:
    """Puts ``leaf``'s chain and key (or ``key``) at DIRECTORY/server.pem and server.key as a
    deploy tool does: written aside, then renamed over (a reader sees the old file or the new
    one, never half of one). ``owner``: the uid that owns them (mode 0600)."""
    for source, target in ((leaf.chain, directory / "server.pem"), (key or leaf.key, directory / "server.key")):
        staged = target.with_suffix(target.suffix + ".new")
        shutil.copyfile(source, staged)
        if owner is not None:
            os.chown(staged, owner, -1)
        os.chmod(staged, 0o600)
        staged.replace(target)


def start(tines_server: Any, directory: Path, certs: TlsCerts, *args: str) -> Server:
    cert, key = directory / "server.pem", directory / "server.key"
    server: Server = tines_server(APP, "--certfile", str(cert), "--keyfile", str(key), *args)
    assert tls_request(server.port, "/", client_context(certs)).peer.serial_number == certs.localhost.serial
    return server


def rotate_under_load(server: Server, certs: TlsCerts, directory: Path, owner: int | None = None) -> None:
    """The rotation under a load of 2 kept-alive and 2 new-connection clients; asserts that
    nothing was lost and that the new certificate is what new handshakes get."""
    context = client_context(certs)
    old_workers = set(server.worker_pids())
    old, new = certs.localhost, certs.localhost_next
    with ClientLoad(server.port, clients=2, keep_alive=True, ssl_context=context) as kept, \
            ClientLoad(server.port, clients=2, keep_alive=False, ssl_context=context) as fresh:
        kept.wait_more(30, "kept-alive load before the rotation")
        fresh.wait_more(30, "new-connection load before the rotation")
        install(directory, new, owner=owner)
        server.signal(signal.SIGHUP)
        server.wait_for_log(r"reload done: generation 2 serves with \d+ workers")
        wait_until(lambda: not set(server.worker_pids()) & old_workers, what="the old workers to exit")
        fresh.wait_for_certificate(new.der, count=30, what="new connections shown the new certificate")
        kept.wait_for_certificate(new.der, what="a kept-alive client reconnected to the new certificate")
        kept.wait_more(30, "kept-alive load after the rotation")
    for load in (kept, fresh):
        print(f"\nrotation: {load.summary()}; certificates {[load.shown(old.der), load.shown(new.der)]}")
        load.assert_nothing_lost()
        assert set(load.peer_certificates) <= {old.der, new.der}
        assert load.shown(old.der) > 0, "the old certificate served before the rotation"
    # Every handshake from now on presents the new certificate.
    for _ in range(5):
        assert tls_request(server.port, "/", context).peer.serial_number == new.serial
    assert all(not alive(pid) for pid in old_workers)


@pytest.mark.parametrize("mpm", MPMS, ids=MPM_IDS)
def test_a_rotation_under_load_loses_nothing_and_new_handshakes_get_the_new_certificate(
        tines_server: Any, tls_certs: TlsCerts, tmp_path: Path, mpm: tuple[str, ...]) -> None:
    install(tmp_path, tls_certs.localhost)
    server = start(tines_server, tmp_path, tls_certs, "-w", "2", "--mpm", *mpm)
    rotate_under_load(server, tls_certs, tmp_path)


@contextmanager
def shared_directory() -> Iterator[Path]:
    """A directory any user can enter (under /tmp, mode 0755, root's), removed at the end."""
    directory = Path(tempfile.mkdtemp(prefix="tines-tls-", dir="/tmp"))
    try:
        os.chmod(directory, 0o755)
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def readable_by(user: str, path: Path) -> bool:
    return subprocess.run(["test", "-r", str(path)], user=user, capture_output=True).returncode == 0


@pytest.mark.skipif(not NOBODY_REACHES_THE_APPS, reason=NOBODY_SKIP_REASON)
def test_a_rotation_under_user_nobody_reads_the_new_files_as_nobody(tines_server: Any, tls_certs: TlsCerts) -> None:
    nobody = pwd.getpwnam("nobody")
    with shared_directory() as directory:
        install(directory, tls_certs.localhost, owner=nobody.pw_uid)
        if not readable_by("nobody", directory / "server.key"):
            pytest.skip(f"the user nobody cannot read files in {directory}")
        server = start(tines_server, directory, tls_certs, "-w", "2", "--user", "nobody",
                       "--group", str(nobody.pw_gid))
        for pid in server.worker_pids():
            with open(f"/proc/{pid}/status") as handle:
                uid = next(line for line in handle if line.startswith("Uid:"))
            assert uid.split()[1:] == [str(nobody.pw_uid)] * 4
        rotate_under_load(server, tls_certs, directory, owner=nobody.pw_uid)


def mismatch_lines(server: Server, directory: Path) -> list[str]:
    """The log lines that say the new key does not match, naming the key or the certificate
    (``directory`` is left out of the search: pytest names it after the test)."""
    lines = [line.replace(str(directory), "DIR") for line in server.log_text().splitlines()]
    return [line for line in lines if ("DIR/server.key" in line or "DIR/server.pem" in line) and "match" in line]


def test_a_hup_with_a_key_that_does_not_match_keeps_the_old_certificate_serving(
        tines_server: Any, tls_certs: TlsCerts, tmp_path: Path) -> None:
    install(tmp_path, tls_certs.localhost)
    server = start(tines_server, tmp_path, tls_certs, "-w", "2")
    context = client_context(tls_certs)
    workers = set(server.worker_pids())
    with ClientLoad(server.port, clients=2, keep_alive=False, ssl_context=context) as load:
        load.wait_more(20, "load before the failed rotation")
        # The new certificate with a key of no certificate: the pair does not match.
        install(tmp_path, tls_certs.localhost_next, key=tls_certs.mismatched_key)
        server.signal(signal.SIGHUP)
        wait_until(lambda: mismatch_lines(server, tmp_path), what="the line saying the key does not match")
        load.wait_more(20, "service after the failed rotation")
    load.assert_nothing_lost()
    assert set(load.peer_certificates) == {tls_certs.localhost.der}, "the old certificate kept serving"
    assert set(server.worker_pids()) == workers and server.proc.poll() is None
    assert len(mismatch_lines(server, tmp_path)) == 1, server.log_text()[-3000:]
    assert tls_request(server.port, "/", context).peer.serial_number == tls_certs.localhost.serial

    # Fixed: the next HUP installs it.
    install(tmp_path, tls_certs.localhost_next)
    server.signal(signal.SIGHUP)
    server.wait_for_log(r"reload done: generation \d+ serves with 2 workers")
    wait_until(lambda: not set(server.worker_pids()) & workers, what="the old workers to exit")
    assert tls_request(server.port, "/", context).peer.serial_number == tls_certs.localhost_next.serial
    assert len(mismatch_lines(server, tmp_path)) == 1
