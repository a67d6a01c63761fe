"""A process per request (docs/mpm.md, "Process per request"; ADR 0021): ``max_requests 1``
with ``--preload`` and the standby workers it brings by default, under concurrent clients."""

from __future__ import annotations

import signal
import threading
from typing import Any

import pytest

from conftest import http_get, process_group, wait_until

CLIENTS = 8
REQUESTS = 1000


def describe(pid: int) -> str:
    """The process's title and state, for the failure message."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            title = handle.read().replace(b"\0", b" ").decode(errors="replace").strip()
        with open(f"/proc/{pid}/stat") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"
    return f"{title} ({state})"


@pytest.mark.parametrize("mpm", ["prefork", "event"])
def test_max_requests_1_under_8_clients_serves_every_request_from_its_own_process_and_leaves_none(
        tines_server: Any, mpm: str) -> None:
    server = tines_server("hello_pid:app", "-w", "2", "--mpm", mpm, "--max-requests", "1", "--preload")
    answers: list[tuple[int, int]] = []
    failures: list[BaseException] = []
    lock = threading.Lock()

    def client(count: int) -> None:
        try:
            for _ in range(count):
                status, body = http_get(server.port, close=True, timeout=60.0)
                with lock:
                    answers.append((status, int(body)))
        except BaseException as error:  # noqa: BLE001 - reported by the test below
            with lock:
                failures.append(error)

    threads = [threading.Thread(target=client, args=(REQUESTS // CLIENTS,)) for _ in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert len(answers) == REQUESTS
    assert {status for status, _ in answers} == {200}
    pids = [pid for _, pid in answers]
    assert len(set(pids)) == REQUESTS, "a process served more than one request"
    server.signal(signal.SIGTERM)
    assert server.wait() == 0
    left = {pid: describe(pid) for pid in process_group(server.pid)}
    assert left == {}, f"processes of the server outlived its master:\n{server.log_text()}"
    log = server.log_text()
    assert "no free scoreboard slot" not in log
    assert "crashed after ready" not in log and "died before ready" not in log


def test_a_standby_accepts_nothing_until_promoted_and_a_stop_ends_it_cleanly(tines_server: Any) -> None:
    # max_requests 0: the worker never drains, so the standby is never promoted.
    server = tines_server("hello_pid:app", "-w", "1", "--standby-workers", "1", "--log-level", "debug")
    standby = int(server.wait_for_log(r"standby (\d+) \(slot \d\) booted")[0].group(1))
    worker = next(pid for pid in server.worker_pids() if pid != standby)
    served_by = {int(http_get(server.port, close=True)[1]) for _ in range(20)}
    assert served_by == {worker}
    server.signal(signal.SIGTERM)
    assert server.wait() == 0
    server.wait_for_log(rf"worker {standby} \(slot \d\) exited with code 0")
    assert process_group(server.pid) == []


def test_max_requests_1_promotes_the_standby_for_the_next_request(tines_server: Any) -> None:
    server = tines_server("hello_pid:app", "-w", "1", "--max-requests", "1", "--preload", "--log-level", "debug")
    standby = int(server.wait_for_log(r"standby (\d+) \(slot \d\) booted")[0].group(1))
    first = int(http_get(server.port, close=True)[1])
    assert first != standby
    server.wait_for_log(rf"promoted standby {standby} ")
    assert int(http_get(server.port, close=True)[1]) == standby


def test_a_recycled_worker_runs_the_atexit_callbacks_registered_in_it_and_inherited(
        tines_server: Any, tmp_path: Any) -> None:
    marks = tmp_path / "marks"
    server = tines_server("exit_callbacks:app", "-w", "1", "--max-requests", "1", "--preload",
                          env={"EXIT_MARKS": str(marks)})
    pids = [int(http_get(server.port, close=True)[1]) for _ in range(2)]
    assert pids[0] != pids[1]

    def recorded() -> list[str] | None:
        lines = marks.read_text().splitlines() if marks.exists() else []
        wanted = {f"{kind} {pid}" for pid in pids for kind in ("imported", "served")}
        return lines if wanted <= set(lines) else None

    lines = wait_until(recorded, what="both workers' atexit callbacks")
    # Each ran once in each worker: the worker's own first (atexit runs the last registered
    # first), then the one inherited from the master's import.
    for pid in pids:
        assert [line for line in lines if line.endswith(f" {pid}")] == [f"served {pid}", f"imported {pid}"]
    server.signal(signal.SIGTERM)
    assert server.wait() == 0
    # The master's own exit does not run its workers' callbacks, nor does a standby that never
    # served run a "served" one.
    assert all(line.split()[0] == "imported" for line in marks.read_text().splitlines()
               if int(line.split()[1]) not in pids)
