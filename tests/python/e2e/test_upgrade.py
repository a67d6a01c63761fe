"""Binary upgrade (USR2) with rollback, HUP with --preload, WINCH and TERM during the overlap,
and --pid-file (tines.upgrade, tines.pidfile; docs/signals.md "Upgrade").

Real masters: the new master is forked and exec'd by the old one and stays in the test's
process group, so the fixture's group kill ends it too. Each test waits on the pid file's
content, on log lines and on responses, never on a sleep.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from client_load import ClientLoad
from conftest import APPS, alive, children, http_get, wait_until

MPMS = ["prefork", "thread", "event"]

VERSIONED_APP = '''import os

VERSION = "{version}"


def app(environ, start_response):
    body = f"{{VERSION}} {{os.getpid()}}".encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
'''


def read_pid(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def new_master(pid_file: Path, old: int) -> int:
    """Wait until the pid file names a master other than ``old``; that pid."""
    return wait_until(lambda: (read_pid(pid_file) or old) != old and read_pid(pid_file),
                      what="the new master's pid in the pid file")  # type: ignore[return-value]


def gone(pids: list[int]) -> bool:
    return not any(alive(pid) for pid in pids)


def versioned_app(tmp_path: Path, version: str) -> dict[str, str]:
    """Write the versioned app into ``tmp_path``; the env to import it from there."""
    (tmp_path / "versioned_app.py").write_text(VERSIONED_APP.format(version=version))
    return {"PYTHONPATH": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1"}


def release_gate(gate: Path, word: str) -> None:
    """Let the new master's (single) worker, held at the gate, import on: ``go`` or fail."""
    with open(gate, "w") as writer:  # returns once the worker has opened the gate
        os.unlink(gate)  # the workers started after this one import at once
        writer.write(word)


@pytest.mark.parametrize("mpm", MPMS)
def test_usr2_under_keep_alive_load_hands_over_to_a_new_master_without_a_failed_request(
        tines_server: Any, tmp_path: Path, mpm: str) -> None:
    pid_file = tmp_path / "tines.pid"
    server = tines_server("hello_pid:app", "-w", "2", "--mpm", mpm, "--pid-file", str(pid_file),
                          "--drain-timeout", "1")
    assert read_pid(pid_file) == server.pid
    old_workers = server.worker_pids()
    with ClientLoad(server.port, keep_alive=True) as load:
        load.wait_more(50, "responses before the upgrade")
        server.signal(signal.SIGUSR2)
        master = new_master(pid_file, server.pid)
        assert server.wait() == 0
        new_workers = wait_until(lambda: len(children(master)) == 2 and children(master),
                                 what="the new master's workers")
        load.wait_for_body(lambda body: int(body) in new_workers, count=50,  # type: ignore[operator]
                           what="responses from the new master's workers")
        load.finish()
    print(f"USR2 under keep-alive load, mpm {mpm}: sent {load.sent}, "
          f"failed {load.failed + load.bad_status}")
    load.assert_nothing_lost()
    assert load.seen(lambda body: int(body) in old_workers) > 0
    assert read_pid(pid_file) == master and alive(master)
    assert not Path(f"{pid_file}.oldbin").exists()
    assert gone(old_workers)
    log = server.log_text()
    assert f"USR2: started new master {master}" in log
    assert f"upgrade: new master {master} is ready: this master {server.pid} retires its 2 worker(s)" in log
    server.kill()
    wait_until(lambda: gone([master, *new_workers]), what="no process left")  # type: ignore[list-item]


def test_usr2_with_a_broken_app_rolls_back_and_the_old_master_keeps_serving(
        tines_server: Any, tmp_path: Path) -> None:
    pid_file = tmp_path / "tines.pid"
    server = tines_server("versioned_app:app", "-w", "2", "--pid-file", str(pid_file),
                          env=versioned_app(tmp_path, "1"))
    old_workers = server.worker_pids()
    with ClientLoad(server.port, keep_alive=True) as load:
        load.wait_more(20, "responses before the upgrade")
        (tmp_path / "versioned_app.py").write_text("raise RuntimeError('this deploy is broken')\n")
        server.signal(signal.SIGUSR2)
        match = server.wait_for_log(
            rf"upgrade failed: new master (\d+) exited with status 2 before ready; "
            rf"this master \({server.pid}\) keeps serving")[0]
        load.wait_more(50, "responses after the rollback")
        load.finish()
    print(f"USR2 with a broken app: sent {load.sent}, failed {load.failed + load.bad_status}")
    load.assert_nothing_lost()
    failed_master = int(match.group(1))
    assert not alive(failed_master)
    assert alive(server.pid) and server.worker_pids() == old_workers
    assert read_pid(pid_file) == server.pid
    assert not Path(f"{pid_file}.oldbin").exists()
    assert load.seen(lambda body: body.startswith(b"1 ")) == load.ok
    log = server.log_text()
    assert "this deploy is broken" in log  # the new master's own error, in the same log
    assert len(re.findall("upgrade failed", log)) == 1


def test_hup_with_preload_re_executes_the_master_and_serves_the_changed_code(
        tines_server: Any, tmp_path: Path) -> None:
    pid_file = tmp_path / "tines.pid"
    server = tines_server("versioned_app:app", "-w", "2", "--preload", "--pid-file", str(pid_file),
                          env=versioned_app(tmp_path, "1"))
    with ClientLoad(server.port, keep_alive=True) as load:
        load.wait_for_body(lambda body: body.startswith(b"1 "), count=20, what="version 1")
        versioned_app(tmp_path, "2")
        server.signal(signal.SIGHUP)
        master = new_master(pid_file, server.pid)
        load.wait_for_body(lambda body: body.startswith(b"2 "), count=20, what="version 2")
        assert server.wait() == 0
        load.finish()
    print(f"HUP with --preload under keep-alive load: sent {load.sent}, failed {load.failed + load.bad_status}")
    load.assert_nothing_lost()
    served_by = {int(body.split()[1]) for body in load.bodies if body.startswith(b"2 ")}
    assert served_by <= set(children(master))
    assert "HUP with --preload: started new master" in server.log_text()


def test_pid_file_held_by_a_live_process_is_refused_and_a_stale_one_replaced(
        tines_server: Any, tmp_path: Path) -> None:
    pid_file = tmp_path / "tines.pid"
    server = tines_server("hello_pid:app", "-w", "1", "--pid-file", str(pid_file))
    command = [sys.executable, "-m", "tines", "serve", "hello_pid:app", "-b", "127.0.0.1:0",
               "--pid-file", str(pid_file)]
    environment = {**os.environ, "PYTHONPATH": str(APPS)}
    refused = subprocess.run(command, capture_output=True, text=True, timeout=60, env=environment,
                             stdin=subprocess.DEVNULL)
    assert refused.returncode == 2
    # One error line, the last thing said (the master's log lines may come before it).
    assert [line for line in refused.stderr.splitlines() if "error" in line] == [
        f"tines: error: pid file {pid_file} is held by running process {server.pid} (another tines "
        "master?); stop it, or remove the file if that process is not tines"]
    assert refused.stderr.splitlines()[-1].startswith("tines: error: pid file")
    assert read_pid(pid_file) == server.pid
    server.signal(signal.SIGTERM)
    assert server.wait() == 0
    assert not pid_file.exists()  # removed at exit

    stale = tmp_path / "stale.pid"
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale.write_text(f"{dead.pid}\n")
    replaced = tines_server("hello_pid:app", "-w", "1", "--pid-file", str(stale))
    assert read_pid(stale) == replaced.pid
    assert f"replacing stale pid file {stale} (process {dead.pid} is gone)" in replaced.log_text()


def test_winch_during_an_upgrade_stops_the_old_workers_and_a_failed_new_master_brings_them_back(
        tines_server: Any, tmp_path: Path) -> None:
    pid_file = tmp_path / "tines.pid"
    gate = tmp_path / "gate"
    server = tines_server("upgrade_gate:app", "-w", "1", "--pid-file", str(pid_file),
                          env={"UPGRADE_GATE": str(gate)})
    old_workers = server.worker_pids()
    server.signal(signal.SIGWINCH)  # outside an overlap: ignored
    assert http_get(server.port)[1] == str(old_workers[0]).encode()
    os.mkfifo(gate)
    server.signal(signal.SIGUSR2)
    master = new_master(pid_file, server.pid)
    server.signal(signal.SIGWINCH)
    server.wait_for_log(rf"WINCH during the upgrade: stopping this master's 1 worker\(s\); this master "
                        rf"stays for a rollback until new master {master} is ready")
    wait_until(lambda: gone(old_workers), what="the old workers gone")
    assert alive(server.pid) and server.worker_pids() == [master]
    release_gate(gate, "fail")
    server.wait_for_log(rf"upgrade failed: new master {master} exited with status 2 before ready; "
                        rf"this master \({server.pid}\) keeps serving")
    server.wait_for_log("upgrade: starting this master's workers again")
    restarted = wait_until(lambda: server.worker_pids() if len(server.worker_pids()) == 1
                           and server.worker_pids() != old_workers else None,
                           what="a new worker of the old master")
    status, body = http_get(server.port)
    assert status == 200 and [int(body)] == restarted
    assert read_pid(pid_file) == server.pid
    assert not alive(master)


def test_term_on_the_old_master_during_an_upgrade_leaves_the_new_master_serving(
        tines_server: Any, tmp_path: Path) -> None:
    pid_file = tmp_path / "tines.pid"
    gate = tmp_path / "gate"
    server = tines_server("upgrade_gate:app", "-w", "1", "--pid-file", str(pid_file),
                          env={"UPGRADE_GATE": str(gate)})
    old_workers = server.worker_pids()
    os.mkfifo(gate)
    with ClientLoad(server.port, keep_alive=True) as load:
        load.wait_more(20, "responses before the upgrade")
        server.signal(signal.SIGUSR2)
        master = new_master(pid_file, server.pid)
        server.signal(signal.SIGTERM)
        assert server.wait() == 0  # before the new master is ready
        assert gone(old_workers) and alive(master)
        assert read_pid(pid_file) == master
        assert not Path(f"{pid_file}.oldbin").exists()
        release_gate(gate, "go")
        new_workers = wait_until(lambda: children(master), what="the new master's worker")
        load.wait_for_body(lambda body: int(body) in new_workers, count=20,  # type: ignore[operator]
                           what="responses from the new master")
        load.finish()
    print(f"TERM on the old master during an upgrade: sent {load.sent}, failed {load.failed + load.bad_status}")
    load.assert_nothing_lost()
    log = server.log_text()
    assert f"stopping during an upgrade: new master {master} goes on without this master" in log
    wait_until(lambda: f"upgrade: the old master {server.pid} is gone" in server.log_text(),
               what="the new master's line about the old one")
    server.kill()
    wait_until(lambda: gone([master, *new_workers]), what="no process left")  # type: ignore[list-item]


def get_over_unix(path: Path) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(20)
        client.connect(str(path))
        client.sendall(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        response = b""
        while chunk := client.recv(65536):
            response += chunk
    return response


def test_usr2_hands_the_unix_socket_files_over_to_the_new_master(tines_server: Any, tmp_path: Path) -> None:
    pid_file = tmp_path / "tines.pid"
    paths = [tmp_path / "a.sock", tmp_path / "b.sock"]
    server = tines_server("hello_pid:app", "-w", "1", "--pid-file", str(pid_file),
                          "-b", f"unix:{paths[0]}", "-b", f"unix:{paths[1]}")
    server.signal(signal.SIGUSR2)
    master = new_master(pid_file, server.pid)
    assert server.wait() == 0
    assert all(path.exists() for path in paths)  # the old master left them to the new one
    workers = wait_until(lambda: children(master), what="the new master's worker")
    for path in paths:
        head, _, body = get_over_unix(path).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200") and int(body) in workers  # type: ignore[operator]
    assert "Listening at: unix:" in server.log_text()
    os.kill(master, signal.SIGTERM)
    wait_until(lambda: not alive(master), what="the new master's exit")
    assert not any(path.exists() for path in paths)  # and it removed them at its exit
    assert not pid_file.exists()


@pytest.fixture
def nobody_directory() -> Iterator[Path]:
    """A directory the user nobody owns (the pid file's, as docs/signals.md asks)."""
    path = Path(tempfile.mkdtemp(prefix="tines-upgrade-"))
    nobody = pwd.getpwnam("nobody")
    os.chown(path, nobody.pw_uid, nobody.pw_gid)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def runs_as_nobody() -> bool:
    """Whether this interpreter can start as nobody (not when it lives under /root, say)."""
    if os.geteuid() != 0:
        return False
    try:
        return subprocess.run([sys.executable, "-c", "import tines"], user="nobody", cwd="/",
                              capture_output=True, env={**os.environ, "PYTHONPATH": str(APPS)}).returncode == 0
    except PermissionError:
        return False


@pytest.mark.skipif(not runs_as_nobody(), reason="needs root and an interpreter the user nobody can run")
def test_usr2_after_dropping_privileges_skips_the_changes_already_in_effect(
        tines_server: Any, nobody_directory: Path) -> None:
    nobody = pwd.getpwnam("nobody")
    pid_file = nobody_directory / "tines.pid"
    server = tines_server("hello_pid:app", "-w", "1", "--user", "nobody", "--group", str(nobody.pw_gid),
                          "--pid-file", str(pid_file))
    server.signal(signal.SIGUSR2)
    master = new_master(pid_file, server.pid)
    assert server.wait() == 0
    with open(f"/proc/{master}/status") as status:
        uid_line = next(line for line in status if line.startswith("Uid:"))
    assert uid_line.split()[1:] == [str(nobody.pw_uid)] * 4
    workers = wait_until(lambda: children(master), what="the new master's worker")
    assert int(http_get(server.port)[1]) in workers  # type: ignore[operator]
