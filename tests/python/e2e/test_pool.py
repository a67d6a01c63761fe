"""The dynamic pool with real workers: it grows under load up to max_workers, logs reaching it
once per episode, shrinks back to max_spare when idle, serves a burst after idle with no failed
request, and counts thread MPM spares in app threads.

Load is held at a gate (apps/gate.py): each ``/hold`` request waits until the test opens it,
so the test knows which workers are busy without timing anything. Pool checks are observed
through the master's ``pool check:`` debug lines (one per check, once a second)."""

from __future__ import annotations

import http.client
import re
import signal
import socket
import threading
from pathlib import Path
from typing import Any

from conftest import http_get, wait_until

DEADLINE = 60.0
"""Generous: the pool grows by one check a second, and the machine is shared."""


class Gate:
    """The Unix socket ``/hold`` requests wait on; ``held`` lists (pid, thread) of each one
    waiting, ``open()`` lets every one through (and any that come later)."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(128)
        self.lock = threading.Lock()
        self.waiting: list[tuple[socket.socket, str]] = []
        self.opened = False
        self.thread = threading.Thread(target=self.accept, daemon=True)
        self.thread.start()

    def accept(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            line = connection.makefile("r").readline().strip()
            with self.lock:
                if self.opened:
                    connection.close()
                else:
                    self.waiting.append((connection, line))

    def held(self) -> list[str]:
        with self.lock:
            return [line for _, line in self.waiting]

    def wait_held(self, count: int) -> list[str]:
        """Wait until ``count`` requests wait at the gate; their (pid, thread) lines."""
        wait_until(lambda: len(self.held()) >= count, DEADLINE, f"{count} requests held at the gate")
        return self.held()

    def open(self) -> None:
        with self.lock:
            self.opened = True
            for connection, _ in self.waiting:
                connection.close()
            self.waiting = []

    def close(self) -> None:
        self.open()
        self.listener.close()


class Clients:
    """``count`` concurrent GETs of ``path``, each on its own connection; their outcomes."""

    def __init__(self, port: int, count: int, path: str = "/hold") -> None:
        self.results: list[object] = []
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        for _ in range(count):
            self.add(port, path)

    def add(self, port: int, path: str = "/hold") -> None:
        """One more concurrent GET."""
        thread = threading.Thread(target=self.get, args=(port, path), daemon=True)
        self.threads.append(thread)
        thread.start()

    def get(self, port: int, path: str) -> None:
        try:
            outcome: object = http_get(port, path, timeout=DEADLINE)
        except (OSError, http.client.HTTPException) as error:
            outcome = error
        with self.lock:
            self.results.append(outcome)

    def join(self) -> list[object]:
        for thread in self.threads:
            thread.join(DEADLINE)
        return self.results


def start(tines_server: Any, tmp_path: Path, *args: str) -> tuple[Any, Gate]:
    gate = Gate(tmp_path / "gate.sock")
    server = tines_server("gate:app", "--log-level", "debug", *args, env={"GATE_SOCKET": gate.path})
    return server, gate


def pool_checks(server: Any) -> int:
    return len(re.findall(r"pool check: ", server.log_text()))


def wait_for_more_checks(server: Any, count: int = 2) -> None:
    """Wait until the master made ``count`` more pool checks."""
    seen = pool_checks(server)
    wait_until(lambda: pool_checks(server) >= seen + count, DEADLINE, f"{count} more pool checks")


def test_the_pool_grows_to_max_workers_under_load_and_shrinks_to_max_spare_when_idle(
        tines_server: Any, tmp_path: Path) -> None:
    server, gate = start(tines_server, tmp_path, "--max-workers", "4", "--start-workers", "1",
                         "--min-spare-workers", "1", "--max-spare-workers", "2")
    try:
        assert len(server.worker_pids()) == 1
        # One request at a time until four are held (a prefork worker may take a connection
        # whose head has not arrived yet while it has none in the app: five at once could put
        # two on one worker), then a fifth, one more than max_workers: it waits in the backlog.
        clients = Clients(server.port, 0)
        for count in range(1, 5):
            clients.add(server.port)
            held = gate.wait_held(count)
        clients.add(server.port)
        assert len({line.split()[0] for line in held}) == 4  # four workers, one request each
        server.wait_for_log(r"max_workers reached: 4 busy; raise it \(max_workers 4\)", DEADLINE)
        assert len(server.worker_pids()) == 4
        wait_for_more_checks(server, 3)
        assert len(gate.held()) == 4  # never a fifth worker
        gate.open()
        results = clients.join()
        assert len(results) == 5 and all(isinstance(r, tuple) and r[0] == 200 for r in results), results
        server.wait_for_log(r"retiring worker \d+ \(slot \d+\): idle \d+ > max_spare_workers 2, fewest connections \d+",
                            DEADLINE, count=2)
        wait_until(lambda: len(server.worker_pids()) == 2, DEADLINE, "two workers left")
        wait_for_more_checks(server, 3)
        assert len(server.worker_pids()) == 2
    finally:
        gate.close()
    log = server.log_text()
    assert log.count("max_workers reached") == 1
    assert len(re.findall(r"retiring worker", log)) == 2
    spawned = [int(n) for n in re.findall(r"spawning (\d+) workers? \(idle 0 < min_spare_workers 1\)", log)]
    assert sum(spawned) == 3
    # Grown first, then the limit, then shrunk.
    assert log.rindex("spawning") < log.index("max_workers reached") < log.index("retiring worker")


def test_a_burst_after_idle_is_served_with_no_failed_request_and_each_episode_at_the_limit_is_logged_once(
        tines_server: Any, tmp_path: Path) -> None:
    server, gate = start(tines_server, tmp_path, "--max-workers", "3", "--start-workers", "1",
                         "--min-spare-workers", "1", "--max-spare-workers", "2")
    try:
        for episode in (1, 2):
            # Idle: the pool is back at its floor before each burst.
            wait_until(lambda: len(server.worker_pids()) <= 2, DEADLINE, "an idle pool")
            clients = Clients(server.port, 12)  # 3 held, the rest queued behind them
            gate.wait_held(3)
            server.wait_for_log(r"max_workers reached: 3 busy", DEADLINE, count=episode)
            wait_for_more_checks(server, 2)
            assert server.log_text().count("max_workers reached") == episode
            gate.open()
            results = clients.join()
            assert len(results) == 12 and all(isinstance(r, tuple) and r[0] == 200 for r in results), results
            with gate.lock:
                gate.opened = False  # the next burst is held again
            # Not short any more: the episode is over.
            wait_until(lambda: re.search(r"pool check: idle [1-9]", server.log_text().rsplit(
                "max_workers reached", 1)[1]), DEADLINE, "a check that finds spares")
    finally:
        gate.close()
    assert server.log_text().count("max_workers reached") == 2


def test_thread_mpm_spares_are_counted_in_app_threads(tines_server: Any, tmp_path: Path) -> None:
    server, gate = start(tines_server, tmp_path, "--mpm", "thread", "--threads", "2", "--max-workers", "3",
                         "--start-workers", "1", "--min-spare-threads", "1", "--max-spare-threads", "3")
    try:
        server.wait_for_log(r"Using mpm thread with a dynamic pool: start 1, idle threads kept between 1 and 3")
        [first] = server.worker_pids()
        one = Clients(server.port, 1)
        gate.wait_held(1)
        # One of two app threads is busy: one idle thread is enough, nothing is spawned.
        wait_until(lambda: "pool check: idle 1 threads" in server.log_text(), DEADLINE, "a check seeing 1 idle thread")
        wait_for_more_checks(server, 2)
        assert "spawning" not in server.log_text()
        assert server.worker_pids() == [first]
        two = Clients(server.port, 1)
        held = gate.wait_held(2)
        assert {line.split()[0] for line in held} == {str(first)}  # both threads of the one worker
        server.wait_for_log(r"spawning 1 worker \(idle 0 < min_spare_threads 1\)", DEADLINE)
        wait_until(lambda: len(server.worker_pids()) == 2, DEADLINE, "a second worker")
        gate.open()
        assert [r[0] for r in one.join() + two.join()] == [200, 200]  # type: ignore[index]
        # 4 idle threads > 3: one worker is retired, the one with the fewest connections.
        server.wait_for_log(r"retiring worker \d+ \(slot \d+\): idle 4 > max_spare_threads 3, fewest connections \d+", DEADLINE)
        wait_until(lambda: len(server.worker_pids()) == 1, DEADLINE, "one worker left")
    finally:
        gate.close()
    assert http_get(server.port)[0] == 200


def test_ttin_and_ttou_add_and_remove_one_worker_in_the_dynamic_pool(tines_server: Any, tmp_path: Path) -> None:
    server, gate = start(tines_server, tmp_path, "--max-workers", "3", "--start-workers", "1",
                         "--min-spare-workers", "1", "--max-spare-workers", "2")
    try:
        [first] = server.worker_pids()
        server.signal(signal.SIGTTIN)
        server.wait_for_log(r"TTIN: idle workers now kept between 2 and 3; spawning 1 worker")
        wait_until(lambda: len(server.worker_pids()) == 2, DEADLINE, "a second worker")
        # The pool keeps it: two idle workers are within the new bounds.
        wait_for_more_checks(server, 2)
        assert len(server.worker_pids()) == 2 and "retiring" not in server.log_text()
        [second] = set(server.worker_pids()) - {first}
        server.signal(signal.SIGTTOU)
        server.wait_for_log(r"retiring worker \d+ \(slot \d+\): TTOU: idle workers now kept between 1 and 2, "
                            r"fewest connections 0")
        wait_until(lambda: len(server.worker_pids()) == 1, DEADLINE, "one worker left")
        wait_for_more_checks(server, 2)
        assert server.worker_pids() in ([first], [second])
        assert http_get(server.port)[0] == 200
    finally:
        gate.close()
