"""tines.pidfile, the parts of tines.upgrade that need no running master (the upgrade itself
is tested end to end in tests/python/e2e/test_upgrade.py; its decisions in test_upgrade_policy.py),
and the privilege switch a new master makes (tines.preflight.drop_privileges)."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

from tines import preflight, upgrade
from tines.errors import ConfigError
from tines.pidfile import PidFile, read_pid


def dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_pid_file_is_written_exclusively_and_removed_only_by_its_holder(tmp_path: Path) -> None:
    path = tmp_path / "tines.pid"
    pid_file = PidFile(str(path))
    pid_file.write(os.getpid())
    assert path.read_bytes() == f"{os.getpid()}\n".encode()
    assert [entry.name for entry in tmp_path.iterdir()] == ["tines.pid"]  # no temp file left
    holder = subprocess.Popen(["sleep", "60"])
    try:
        path.write_text(f"{holder.pid}\n")
        with pytest.raises(ConfigError, match=f"is held by running process {holder.pid}"):
            PidFile(str(path)).write(os.getpid())
        assert read_pid(str(path)) == holder.pid
        # The old master of an upgrade may be replaced (its rename to .oldbin failed).
        PidFile(str(path)).write(os.getpid(), may_replace=holder.pid)
        assert read_pid(str(path)) == os.getpid()
    finally:
        holder.kill()
        holder.wait()
    pid_file.remove(os.getpid() + 1)
    assert path.exists()
    pid_file.remove(os.getpid())
    assert not path.exists()


def test_stale_or_garbled_pid_file_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "tines.pid"
    for content in (f"{dead_pid()}\n", "", "not a pid\n"):
        path.write_text(content)
        PidFile(str(path)).write(os.getpid())
        assert read_pid(str(path)) == os.getpid()


def test_pid_file_moves_to_oldbin_and_back_only_when_it_holds_this_pid(tmp_path: Path) -> None:
    path = tmp_path / "tines.pid"
    pid_file = PidFile(str(path))
    pid_file.write(os.getpid())
    pid_file.to_oldbin(os.getpid())
    assert not path.exists() and read_pid(f"{path}.oldbin") == os.getpid()
    path.write_text("12345\n")  # what a failed new master left
    pid_file.from_oldbin(os.getpid())
    assert read_pid(str(path)) == os.getpid() and not Path(f"{path}.oldbin").exists()
    path.write_text("12345\n")
    pid_file.to_oldbin(os.getpid())  # not ours: left alone
    assert read_pid(str(path)) == 12345 and not Path(f"{path}.oldbin").exists()


def test_new_master_command_runs_this_interpreter_with_the_recorded_arguments() -> None:
    invocation = upgrade.Invocation(("serve", "app:app", "-w", "2"), "/srv")
    assert invocation.command() == [sys.executable, "-m", "tines", "serve", "app:app", "-w", "2"]


def test_upgrade_takes_what_the_old_master_passed_out_of_the_environment(tmp_path: Path) -> None:
    read, write = os.pipe()
    try:
        environ = {upgrade.ENV_READY_FD: str(write), upgrade.ENV_OLD_MASTER: "4242",
                   upgrade.ENV_UNLINK: '["/run/a.sock", "/run/b.sock"]', "OTHER": "kept",
                   upgrade.ENV_CONNECTIONS: f"{read}:1"}
        os.set_inheritable(read, True)
        state = upgrade.Upgrade(upgrade.Invocation((), str(tmp_path)), "tines.pid", environ)
        assert environ == {"OTHER": "kept"}
        assert state.old_master == 4242 and state.ready_write == write
        assert not os.get_inheritable(write)
        # The connection counts' fd and the old master's side (the fd made close-on-exec).
        assert state.client_connections == (read, 1) and not os.get_inheritable(read)
        assert upgrade.take_counts(f"{read}:2") is None and upgrade.take_counts(str(read)) is None
        # The old master (this test's parent stands in for it) is alive: not left.
        state.old_master = os.getppid()
        assert not state.old_master_left()
        state.old_master = 4242
        assert state.old_master_left() and not state.old_master_left()  # said once
        assert state.unlink_paths == ["/run/a.sock", "/run/b.sock"]
        assert state.pid_file is not None and state.pid_file.path == str(tmp_path / "tines.pid")
        state.tell_old_master_ready()
        assert os.read(read, 16) == upgrade.READY_BYTE
    finally:
        os.close(read)


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
def test_privilege_changes_already_in_effect_are_skipped() -> None:
    nobody = pwd.getpwnam("nobody")
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.setgid(nobody.pw_gid)
            os.setgroups([nobody.pw_gid])
            os.setuid(nobody.pw_uid)
            # What a new master does after an upgrade from a master that ran as nobody.
            preflight.drop_privileges(nobody.pw_gid, nobody.pw_uid)
            status = 0
        finally:
            os._exit(status)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
