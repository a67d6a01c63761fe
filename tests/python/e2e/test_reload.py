"""HUP: the config and the code reloaded as a new generation, and a bad deploy that keeps serving
(issue 13, tines.reload).

The app is a file the test writes into tmp_path (on the workers' PYTHONPATH) and rewrites: it
answers ``<VERSION> <pid>``, so every response says which code and which worker served it.
The servers run with PYTHONDONTWRITEBYTECODE: a rewrite within the same second and of the same
size would otherwise be served from the stale ``.pyc`` (its check is mtime in seconds + size).
Loads count every response (client_load.ClientLoad); readiness from the log, never a sleep.
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path
from typing import Any

import pytest

from client_load import ClientLoad
from conftest import Server, alive, http_get, wait_until

MPMS = ["prefork", "thread", "event"]

APP = '''"""Answers with its VERSION and the worker's pid."""
import os
import time

VERSION = {version!r}
GATE = {gate!r}
{broken}
if GATE:
    open(GATE + ".waiting", "w").close()  # this worker has read this version of the file
while GATE and not os.path.exists(GATE):  # a slow import: until the test opens the gate
    time.sleep(0.01)


def app(environ, start_response):
    body = f"{{VERSION}} {{os.getpid()}}".encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
'''


def write_app(directory: Path, version: str, broken: bool = False, gate: Path | None = None) -> None:
    """(Re)write versioned.py in ``directory``."""
    raising = 'raise RuntimeError("the deploy is broken")' if broken else ""
    # Written aside and renamed over, as a deploy tool does: a worker importing it meanwhile
    # reads the old file or the new one, never half of one.
    staged = directory / "versioned.py.new"
    staged.write_text(APP.format(version=version, gate=str(gate) if gate else "", broken=raising))
    staged.replace(directory / "versioned.py")


def start(tines_server: Any, tmp_path: Path, *args: str) -> Server:
    """A server for versioned:app (version 1) from tmp_path."""
    write_app(tmp_path, "1")
    env = {"PYTHONPATH": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1"}
    server: Server = tines_server("versioned:app", *args, env=env)
    return server


def version_of(body: bytes) -> str:
    return body.split()[0].decode()


def pids_of(load: ClientLoad, version: str) -> set[int]:
    """Pids that answered with ``version``."""
    with load.lock:
        return {int(body.split()[1]) for body in load.bodies if version_of(body) == version}


def error_lines(server: Server, pattern: str) -> list[str]:
    return [line for line in server.log_text().splitlines() if "[ERROR]" in line and re.search(pattern, line)]


@pytest.mark.parametrize("keep_alive", [True, False], ids=["keep-alive", "close"])
@pytest.mark.parametrize("mpm", MPMS)
def test_hup_under_load_serves_the_new_code_from_new_workers_and_loses_nothing(
        tines_server: Any, tmp_path: Path, mpm: str, keep_alive: bool) -> None:
    server = start(tines_server, tmp_path, "-w", "4", "--mpm", mpm, "--threads", "2")
    old = set(server.worker_pids())
    with ClientLoad(server.port, keep_alive=keep_alive) as load:
        load.wait_more(50, "load before the reload")
        write_app(tmp_path, "2")
        server.signal(signal.SIGHUP)
        server.wait_for_log(r"reload done: generation 2 serves with 4 workers")
        wait_until(lambda: not set(server.worker_pids()) & old, what="the old workers to exit")
        load.wait_for_body(lambda body: version_of(body) == "2", count=50, what="the new code")
        load.wait_more(50, "load after the reload")
    print(f"\nHUP under {'keep-alive' if keep_alive else 'close'} load, mpm {mpm}: {load.summary()}")
    load.assert_nothing_lost()
    new = set(server.worker_pids())
    assert len(new) == 4 and not new & old
    assert pids_of(load, "2") <= new, "only new workers serve the new code"
    assert pids_of(load, "1") <= old, "only old workers served the old code"
    assert all(not alive(pid) for pid in old)
    assert version_of(http_get(server.port, close=True)[1]) == "2"


def test_hup_with_code_that_cannot_import_keeps_the_old_generation_serving_and_a_fix_goes_in(
        tines_server: Any, tmp_path: Path) -> None:
    # boot_failure_limit 1: were the failed reload counted by the crash-loop guard, the master
    # would exit at the first failed boot.
    server = start(tines_server, tmp_path, "-w", "2", "--boot-failure-limit", "1")
    old = set(server.worker_pids())
    with ClientLoad(server.port, keep_alive=True) as load:
        load.wait_more(20, "load before the reload")
        write_app(tmp_path, "2", broken=True)
        server.signal(signal.SIGHUP)
        server.wait_for_log(r"reload failed: generation 2 could not boot: .*the deploy is broken.*; "
                            r"generation 1 keeps serving")
        wait_until(lambda: set(server.worker_pids()) == old, what="the new generation to be gone")
        load.wait_more(20, "service after the failed reload")
        assert server.proc.poll() is None, "the master stays up"
        assert pids_of(load, "1") <= old and not pids_of(load, "2")

        write_app(tmp_path, "3")
        server.signal(signal.SIGHUP)
        server.wait_for_log(r"reload done: generation 3 serves with 2 workers")
        load.wait_for_body(lambda body: version_of(body) == "3", count=20, what="the fixed code")
    print(f"\nHUP with broken code, then fixed: {load.summary()}")
    load.assert_nothing_lost()
    assert len(error_lines(server, r"reload failed")) == 1
    assert "Traceback" in server.log_text() and 'RuntimeError: the deploy is broken' in server.log_text()
    # The old generation drains after "reload done" (its last keep-alive connections close when
    # the load stops): wait for its exit, as the other reload tests do.
    wait_until(lambda: not set(server.worker_pids()) & old, what="the old workers to exit")
    assert pids_of(load, "3").isdisjoint(old)


def test_after_a_failed_reload_replacements_that_cannot_boot_never_stop_the_workers_that_serve(
        tines_server: Any, tmp_path: Path) -> None:
    # The broken deploy stays on disk: a replacement of the serving generation imports it and
    # dies before ready. boot_failure_limit 1 would end the master at once, killing the worker
    # that still serves the old code.
    server = start(tines_server, tmp_path, "-w", "2", "--boot-failure-limit", "1")
    write_app(tmp_path, "2", broken=True)
    server.signal(signal.SIGHUP)
    server.wait_for_log(r"reload failed: generation 2 could not boot")
    victim, survivor = server.worker_pids()
    os.kill(victim, signal.SIGKILL)
    server.wait_for_log(r"the code on disk cannot boot \(the last reload failed too\); 1 worker\(s\) "
                        r"still serve the old code")
    assert server.proc.poll() is None, "the master stays up"
    assert version_of(http_get(server.port, close=True)[1]) == "1"
    assert survivor in server.worker_pids()
    write_app(tmp_path, "3")
    server.signal(signal.SIGHUP)
    server.wait_for_log(r"reload done: generation 3 serves with 2 workers")
    assert version_of(http_get(server.port, close=True)[1]) == "3"


def test_usr2_during_a_reload_is_refused_and_the_reload_goes_on(tines_server: Any, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    server = start(tines_server, tmp_path, "-w", "2")
    write_app(tmp_path, "2", gate=gate)
    server.signal(signal.SIGHUP)
    server.wait_for_log(r"HUP: starting worker generation 2")
    server.signal(signal.SIGUSR2)
    server.wait_for_log(r"USR2 ignored: a reload \(generation 2\) is in progress")
    gate.touch()
    server.wait_for_log(r"reload done: generation 2 serves with 2 workers")
    assert version_of(http_get(server.port, close=True)[1]) == "2"
    assert "started new master" not in server.log_text()


def test_hup_with_an_invalid_config_file_keeps_serving_and_a_fixed_file_applies_its_change(
        tines_server: Any, tmp_path: Path) -> None:
    config = tmp_path / "tines.toml"
    config.write_text("workers = 2\n")
    server = start(tines_server, tmp_path, "-c", str(config))
    old = set(server.worker_pids())
    assert len(old) == 2
    with ClientLoad(server.port, keep_alive=True) as load:
        load.wait_more(20, "load before the reload")
        config.write_text('workers = "many"\n')
        server.signal(signal.SIGHUP)
        server.wait_for_log(r"reload failed: .*workers must be a positive integer, got 'many'; "
                            r"generation 1 keeps serving")
        load.wait_more(20, "service after the failed reload")
        assert set(server.worker_pids()) == old and server.proc.poll() is None

        config.write_text("workers = 3\n")
        server.signal(signal.SIGHUP)
        server.wait_for_log(r"reload done: generation 2 serves with 3 workers")
        wait_until(lambda: len(server.worker_pids()) == 3 and not set(server.worker_pids()) & old,
                   what="three new workers")
        load.wait_more(20, "service after the reload")
    print(f"\nHUP with an invalid config, then fixed: {load.summary()}")
    load.assert_nothing_lost()
    assert len(error_lines(server, r"reload failed")) == 1


def test_a_restart_only_setting_changed_in_the_file_is_logged_as_ignored_and_the_rest_applies(
        tines_server: Any, tmp_path: Path) -> None:
    config = tmp_path / "tines.toml"
    config.write_text("workers = 2\nbacklog = 64\n")
    server = start(tines_server, tmp_path, "-c", str(config))
    # workers 9 is beyond the scoreboard sized for 2 (10 slots: room for 5).
    config.write_text("workers = 9\nbacklog = 128\nmax_requests = 1000\n")
    server.signal(signal.SIGHUP)
    server.wait_for_log(r"reload done: generation 2 serves with 2 workers")
    log = server.log_text()
    assert re.search(r"setting backlog changed but needs a restart: .*bound.*; use USR2 \(binary "
                     r"upgrade\) to apply it", log)
    assert re.search(r"setting workers changed but needs a restart: workers 9 is more than the 5 "
                     r"workers the scoreboard sized at start has room for", log)
    assert "setting max_requests" not in log

    config.write_text("workers = 3\nbacklog = 64\n")
    server.signal(signal.SIGHUP)
    server.wait_for_log(r"reload done: generation 3 serves with 3 workers")
    assert len(re.findall(r"setting \w+ changed but needs a restart", server.log_text())) == 2


def processes_over_the_log(log: str, start: int) -> list[int]:
    """The master's worker count after each spawn and exit line from the HUP on."""
    counts, count = [], start
    after = log[log.index("reload: reading the config again"):]
    for line in after.splitlines():
        if re.search(r"spawned worker \d+ \(slot \d+\)", line):
            count += 1
        elif re.search(r"worker \d+ \(slot \d+\) (exited with code|was killed by signal)", line):
            count -= 1
        else:
            continue
        counts.append(count)
    return counts


def test_reload_batch_starts_one_worker_at_a_time_and_never_runs_more_than_workers_plus_one(
        tines_server: Any, tmp_path: Path) -> None:
    server = start(tines_server, tmp_path, "-w", "4", "--reload-batch", "1", "--log-level", "debug",
                   "--drain-timeout", "0.5")
    old = set(server.worker_pids())
    sampled: list[int] = []

    def replaced() -> bool:
        sampled.append(len(server.worker_pids()))
        return "reload done: generation 2" in server.log_text()

    with ClientLoad(server.port, keep_alive=True) as load:
        load.wait_more(20, "load before the reload")
        write_app(tmp_path, "2")
        server.signal(signal.SIGHUP)
        wait_until(replaced, what="the reload to finish")
        wait_until(lambda: not set(server.worker_pids()) & old, what="the old workers to exit")
    load.assert_nothing_lost()
    log = server.log_text()
    counts = processes_over_the_log(log, 4)
    assert max(counts) == 5 and max(sampled) <= 5, (counts, sampled)
    assert counts[-1] == 4
    # Each old worker is retired only after a new one said ready: the n-th retire follows the
    # n-th ready of the new generation.
    after = log[log.index("HUP: starting worker generation 2"):]
    events = re.findall(r"worker \d+ \(slot \d+\) ready in|retiring worker \d+ \(slot \d+\): reload", after)
    readies = 0
    for event in events:
        if event.endswith("ready in"):
            readies += 1
        else:
            readies -= 1
            assert readies >= 0, events
    assert sum(event.startswith("retiring") for event in events) == 4


def test_a_hup_during_a_reload_runs_when_that_reload_ends_with_the_newest_code(
        tines_server: Any, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    server = start(tines_server, tmp_path, "-w", "2")
    with ClientLoad(server.port, keep_alive=True) as load:
        load.wait_more(20, "load before the reload")
        write_app(tmp_path, "2", gate=gate)  # its workers boot only once the gate exists
        server.signal(signal.SIGHUP)
        server.wait_for_log(r"HUP: starting worker generation 2")
        server.signal(signal.SIGHUP)
        server.wait_for_log(r"HUP: generation 2 is still starting; the reload runs again when it ends")
        # Version 3 goes on disk only once generation 2's first worker has read version 2.
        wait_until(lambda: Path(f"{gate}.waiting").exists(), what="generation 2 importing version 2")
        write_app(tmp_path, "3")
        gate.touch()
        server.wait_for_log(r"reload done: generation 3 serves with 2 workers")
        load.wait_for_body(lambda body: version_of(body) == "3", count=20, what="the newest code")
    load.assert_nothing_lost()
    log = server.log_text()
    order = [log.index(line) for line in (
        "HUP: starting worker generation 2", "is still starting; the reload runs again",
        "reload done: generation 2", "HUP: starting worker generation 3", "reload done: generation 3")]
    assert order == sorted(order)
    assert version_of(http_get(server.port, close=True)[1]) == "3"


def test_hup_with_the_dynamic_pool_replaces_every_worker_and_loses_nothing(
        tines_server: Any, tmp_path: Path) -> None:
    server = start(tines_server, tmp_path, "--max-workers", "4", "--start-workers", "3",
                   "--min-spare-workers", "1", "--max-spare-workers", "3")
    old = set(server.worker_pids())
    with ClientLoad(server.port, keep_alive=True) as load:
        load.wait_more(50, "load before the reload")
        write_app(tmp_path, "2")
        server.signal(signal.SIGHUP)
        server.wait_for_log(r"reload done: generation 2 serves with \d workers")
        wait_until(lambda: not set(server.worker_pids()) & old, what="the old workers to exit")
        load.wait_for_body(lambda body: version_of(body) == "2", count=50, what="the new code")
    print(f"\nHUP with the dynamic pool under keep-alive load: {load.summary()}")
    load.assert_nothing_lost()
    assert pids_of(load, "2").isdisjoint(old)
    assert "max_workers reached" not in server.log_text()
