"""The fork server (ADR 0026, tines.forkserver): with ``--max-requests 1 --preload`` the workers
are forked by a process that stays at the preloaded state, and are still the master's children.

The app tells who forked the process that answers (an ``os.register_at_fork`` hook records the
forking process's pid before each fork), its pid and its parent's. Every wait is on a log line,
a response or a pid file, never on a sleep.
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path
from typing import Any

from conftest import alive, children, http_get, process_group, wait_until

FORKER_APP = '''import os
import sys

VERSION = "{version}"
forker = None


def remember_forker():
    global forker
    forker = os.getpid()


os.register_at_fork(before=remember_forker)


def app(environ, start_response):
    print(f"answered by {{os.getpid()}}", file=sys.stderr, flush=True)
    body = f"{{VERSION}} {{os.getpid()}} {{os.getppid()}} {{forker}}".encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
'''

PER_REQUEST = ("-w", "1", "--max-requests", "1", "--preload", "--log-level", "debug")


def forker_app(tmp_path: Path, version: str = "1") -> dict[str, str]:
    """Write the app into ``tmp_path``; the env to import it from there."""
    (tmp_path / "forker_app.py").write_text(FORKER_APP.format(version=version))
    return {"PYTHONPATH": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1"}


def ask(port: int) -> tuple[str, int, int, int]:
    """One request: (app version, pid, parent's pid, pid of the process that forked it)."""
    status, body = http_get(port, close=True)
    assert status == 200
    version, pid, parent, forker = body.split()
    return version.decode(), int(pid), int(parent), int(forker)


def fork_server_started(server: Any, count: int = 1) -> int:
    """The pid of the ``count``-th fork server the master started."""
    return int(server.wait_for_log(r"fork server (\d+) started", count=count)[count - 1].group(1))


def test_workers_are_forked_by_the_fork_server_and_are_the_masters_children(
        tines_server: Any, tmp_path: Path) -> None:
    server = tines_server("forker_app:app", *PER_REQUEST, env=forker_app(tmp_path))
    fork_server = fork_server_started(server)
    assert fork_server in children(server.pid)
    answers = [ask(server.port) for _ in range(10)]
    assert len({pid for _, pid, _, _ in answers}) == 10
    assert {parent for _, _, parent, _ in answers} == {server.pid}
    assert {forker for _, _, _, forker in answers} == {fork_server}


def test_a_killed_fork_server_is_restarted_and_requests_go_on(tines_server: Any, tmp_path: Path) -> None:
    server = tines_server("forker_app:app", *PER_REQUEST, env=forker_app(tmp_path))
    first = fork_server_started(server)
    assert ask(server.port)[3] == first
    os.kill(first, signal.SIGKILL)
    # The master learns of it by reaping it, or first by asking it for a fork (a broken pipe).
    server.wait_for_log(rf"fork server {first} (?:killed by SIGKILL|did not answer): forking workers in the master")
    # Meanwhile the master forks by itself: every request is still answered, each by a new
    # process of the master's. The next fork after the restart's backoff (0.1 s) starts the
    # second fork server.
    answers = []
    while len(answers) < 5 or len(re.findall(r"fork server \d+ started", server.log_text())) < 2:
        assert len(answers) < 5000, "no second fork server"
        answers.append(ask(server.port))
    assert len({pid for _, pid, _, _ in answers}) == len(answers)
    assert {parent for _, _, parent, _ in answers} == {server.pid}
    second = fork_server_started(server, count=2)
    assert second != first and second in children(server.pid) and not alive(first)
    # The standby forked before the restart serves one more request; then the new fork server's.
    forkers = [ask(server.port)[3] for _ in range(3)]
    assert forkers[-1] == second
    assert set(forkers) <= {server.pid, second}


def test_the_masters_stop_leaves_no_fork_server_and_no_worker(tines_server: Any, tmp_path: Path) -> None:
    server = tines_server("forker_app:app", *PER_REQUEST, env=forker_app(tmp_path))
    fork_server = fork_server_started(server)
    for _ in range(5):
        ask(server.port)
    server.signal(signal.SIGTERM)
    assert server.wait() == 0
    assert not alive(fork_server)
    assert process_group(server.pid) == []
    assert "fork server" not in "".join(line for line in server.log_text().splitlines()
                                         if "WARNING" in line or "ERROR" in line)


def test_a_killed_master_takes_the_fork_server_and_its_workers_with_it(
        tines_server: Any, tmp_path: Path) -> None:
    server = tines_server("forker_app:app", *PER_REQUEST, env=forker_app(tmp_path))
    fork_server = fork_server_started(server)
    ask(server.port)
    members = [pid for pid in process_group(server.pid) if pid != server.pid]
    assert fork_server in members and len(members) >= 2  # the fork server, a worker, a standby
    os.kill(server.pid, signal.SIGKILL)
    server.wait()
    # PR_SET_PDEATHSIG: the fork server's names the master, and so does each worker's
    # (a worker's parent is the master, not the fork server).
    wait_until(lambda: not any(alive(pid) for pid in members), what="the fork server and workers gone")


def test_hup_with_preload_starts_a_new_master_whose_fork_server_serves_the_new_code(
        tines_server: Any, tmp_path: Path) -> None:
    pid_file = tmp_path / "tines.pid"
    server = tines_server("forker_app:app", *PER_REQUEST, "--pid-file", str(pid_file),
                          env=forker_app(tmp_path, "1"))
    old_fork_server = fork_server_started(server)
    assert ask(server.port)[0] == "1"
    forker_app(tmp_path, "2")
    server.signal(signal.SIGHUP)
    master = wait_until(lambda: (int(pid_file.read_text()) if pid_file.exists() else server.pid) != server.pid
                        and int(pid_file.read_text()), what="the new master's pid in the pid file")
    assert server.wait() == 0  # the old master hands over and exits
    assert not alive(old_fork_server)
    # The old master's workers are gone with it: every answer is the new master's, each from a
    # worker its own fork server forked, with the new code.
    answers = [ask(server.port) for _ in range(5)]
    assert {version for version, _, _, _ in answers} == {"2"}
    assert {parent for _, _, parent, _ in answers} == {master}
    forkers = {forker for _, _, _, forker in answers}
    assert len(forkers) == 1 and forkers != {master} and forkers <= set(children(master))


def test_after_usr1_the_workers_write_to_the_reopened_error_log(tines_server: Any, tmp_path: Path) -> None:
    # The fork server's stderr is the error log as it was when it was forked, and it runs no
    # Python to reopen it: USR1 replaces it, so workers forked after the rotation write to the
    # new file, not to the rotated one (which logrotate then compresses or deletes).
    error_log = tmp_path / "error.log"
    server = tines_server("forker_app:app", *PER_REQUEST, "--error-log", str(error_log),
                          env=forker_app(tmp_path))
    first = int(wait_until(lambda: (match := re.search(r"fork server (\d+) started", error_log.read_text()))
                           and match.group(1), what="the fork server"))
    ask(server.port)
    rotated = tmp_path / "error.log.1"
    error_log.rename(rotated)
    server.signal(signal.SIGUSR1)
    wait_until(lambda: error_log.exists() and "USR1: reopening log files" in rotated.read_text()
               and not alive(first), what="the reopen and the old fork server's end")
    # The first answer may come from the standby forked before the rotation (forked with the
    # old file); the ones after it were forked by the new fork server.
    pids = [ask(server.port)[1] for _ in range(4)][1:]
    text = error_log.read_text()
    assert all(f"answered by {pid}" in text for pid in pids), text
    assert not any(f"answered by {pid}" in rotated.read_text() for pid in pids)


THREAD_STATE_APP = '''import ctypes
import platform
import signal
import threading

libc = ctypes.CDLL(None, use_errno=True)


def main_thread_reachable():
    # glibc's pthread_kill from another thread uses the thread id cached in the main thread's
    # descriptor: the fork server's unless the clone wrote the child's (CLONE_CHILD_SETTID).
    outcome = []
    def probe():
        try:
            signal.pthread_kill(threading.main_thread().ident, 0)
            outcome.append("reachable")
        except OSError as error:
            outcome.append(type(error).__name__)
    thread = threading.Thread(target=probe)
    thread.start()
    thread.join()
    return outcome[0]


def robust_list():
    if platform.machine() != "x86_64":
        return "unknown"
    head, length = ctypes.c_void_p(), ctypes.c_size_t()
    if libc.syscall(274, 0, ctypes.byref(head), ctypes.byref(length)) != 0:  # get_robust_list
        return "unknown"
    return "registered" if head.value else "none"


def app(environ, start_response):
    body = f"{main_thread_reachable()} {robust_list()}".encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
'''


def test_a_worker_forked_by_the_fork_server_has_its_own_thread_id_and_robust_list(
        tines_server: Any, tmp_path: Path) -> None:
    # What glibc's fork does for the child and the raw clone must do too: the kernel writes
    # the child's thread id where glibc caches it (else pthread_kill of the main thread from
    # another thread fails with ESRCH, and recursive or robust mutexes see the wrong owner),
    # and the child registers its robust-mutex list again (else a worker killed holding a
    # robust process-shared mutex leaves it locked for good).
    (tmp_path / "thread_state_app.py").write_text(THREAD_STATE_APP)
    server = tines_server("thread_state_app:app", *PER_REQUEST,
                          env={"PYTHONPATH": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1"})
    fork_server_started(server)
    answers = {http_get(server.port, close=True)[1] for _ in range(3)}
    assert answers <= {b"reachable registered", b"reachable unknown"}, answers
