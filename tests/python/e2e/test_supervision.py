"""The master supervises: dead workers are replaced at once, stops follow the stop sequence,
no worker outlives the master, accept is spread across workers."""

from __future__ import annotations

import collections
import http.client
import os
import re
import signal
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

from client_load import ClientLoad
from conftest import alive, http_get, wait_until

HELLO = "examples/hello.py:app"


get = http_get


@pytest.mark.parametrize("how", ["SIGKILL", "SIGSEGV"])
def test_a_killed_worker_is_replaced_while_the_others_keep_serving(tines_server: Any, how: str) -> None:
    server = tines_server("crashy:app", "-w", "2")
    victim = server.worker_pids()[0]
    with ClientLoad(server.port, path="/pid") as load:
        wait_until(lambda: load.count() > 20, what="load to start")
        os.kill(victim, getattr(signal, how))
        server.wait_for_log(rf"worker {victim} \(slot \d+\) was killed by signal {how}")
        server.wait_for_log(r"ready in [0-9.]+ ms", count=3)
        before = load.count()
        wait_until(lambda: load.count() > before + 20, what="service after the kill")
    pids = server.worker_pids()
    assert victim not in pids and len(pids) == 2
    # Only requests in flight on the killed worker can fail: one per client at most.
    assert load.failed <= len(load.threads)


def test_a_killed_worker_is_replaced_at_once_not_at_the_masters_next_periodic_check(tines_server: Any) -> None:
    # The master's periodic check (every LOOP_TIMEOUT) is logged at debug: the replacement
    # must be spawned while the master handles the CHLD, before it next sleeps that long.
    server = tines_server(HELLO, "-w", "1", "--log-level", "debug")
    victim = server.worker_pids()[0]
    os.kill(victim, signal.SIGKILL)
    server.wait_for_log(r"ready in [0-9.]+ ms", count=2)
    log = server.log_text()
    killed = log.index(f"worker {victim} (slot 0) was killed by signal SIGKILL")
    spawned = re.compile(r"spawned worker (\d+)").search(log, killed)
    assert spawned is not None, log
    assert "periodic check" not in log[killed:spawned.start()], log[killed:]
    assert server.worker_pids() == [int(spawned.group(1))]
    server.wait_for_log(r"periodic check: no signal or message")  # the marker is real


def test_a_segfault_in_the_app_kills_one_worker_which_is_replaced(tines_server: Any) -> None:
    server = tines_server("crashy:app", "-w", "2")
    with pytest.raises((http.client.HTTPException, OSError)):
        get(server.port, "/segv")
    server.wait_for_log(r"was killed by signal SIGSEGV")
    server.wait_for_log(r"ready in [0-9.]+ ms", count=3)
    assert get(server.port, "/pid")[0] == 200


@pytest.mark.parametrize("mpm", ["prefork", "thread"])
def test_a_segfault_leaves_the_python_stack_of_every_thread_in_the_error_log(
        tines_server: Any, tmp_path: Path, mpm: str) -> None:
    error_log = tmp_path / "error.log"
    server = tines_server("crashy:app", "-w", "1", "--mpm", mpm, "--error-log", str(error_log))
    with pytest.raises((http.client.HTTPException, OSError)):
        get(server.port, "/segv")
    wait_until(lambda: "was killed by signal SIGSEGV" in error_log.read_text(), what="the SIGSEGV")
    text = error_log.read_text()
    fatal = text.index("Fatal Python error: Segmentation fault")
    stack = text[fatal:text.index("was killed by signal SIGSEGV")]
    assert re.search(r"(Current thread|Thread) 0x[0-9a-f]+ .*\(most recent call first\)", stack), stack
    assert re.search(r'crashy\.py", line \d+ in app', stack), stack


def test_workers_that_crash_after_ready_are_replaced_at_first_then_with_a_growing_delay(
        tines_server: Any) -> None:
    server = tines_server("crashy:app", "-w", "2", "--log-level", "debug")
    crashes = 6
    for crash in range(crashes):  # each one is taken by a live worker, which dies
        with pytest.raises((http.client.HTTPException, OSError)):
            get(server.port, "/exit")
        if crash == 0:
            # The first crash is alone: its replacement is started before the second one is
            # sent (on a busy machine the master could otherwise reap two exits in one pass,
            # and two crashes in a row are rightly a reason to back off).
            server.wait_for_log(r"spawned worker \d+", count=3)
    server.wait_for_log(r"exited with code 7", count=crashes)
    assert get(server.port, "/pid")[0] == 200  # a normal request still gets served
    log = server.log_text()
    backoffs = re.findall(r"workers crashed after ready (\d+) times in [0-9.]+ s: "
                          r"next start in ([0-9.]+) s", log)
    assert [(int(count), float(delay)) for count, delay in backoffs] == [
        (2, 0.1), (3, 0.2), (4, 0.4), (5, 0.8), (6, 1.6)], log
    # The first replacement is not delayed: spawned before any backoff or periodic check.
    first = log.index("exited with code 7")
    spawned = re.compile(r"spawned worker \d+").search(log, first)
    assert spawned is not None
    assert "next start in" not in log[first:spawned.start()]
    assert "periodic check" not in log[first:spawned.start()]
    # One spawn per crash, no more: every crash was taken by a ready worker.
    server.wait_for_log(r"spawned worker \d+", count=2 + crashes)
    assert len(re.findall(r"spawned worker \d+", server.log_text())) == 2 + crashes


def test_exits_the_master_asked_for_or_max_requests_are_not_crashes(tines_server: Any) -> None:
    # At debug: a recycle's exit line is.
    server = tines_server("hello_pid:app", "-w", "2", "--max-requests", "1", "--log-level", "debug")
    for _ in range(4):
        assert get(server.port, close=True)[0] == 200
    server.wait_for_log(r"exited with code 0")  # recycled (max_requests)
    server.signal(signal.SIGTTOU)  # the master stops one worker
    server.wait_for_log(r"TTOU: 1 worker\b")
    # One worker left, and the standby that max_requests 1 brings (tines.standby).
    wait_until(lambda: len(server.worker_pids()) == 2, what="one worker and the standby left")
    assert get(server.port, close=True)[0] == 200
    assert "crashed after ready" not in server.log_text()


def test_a_worker_that_exits_is_logged_with_its_code_and_replaced(tines_server: Any) -> None:
    server = tines_server("crashy:app", "-w", "1")
    with pytest.raises((http.client.HTTPException, OSError)):
        get(server.port, "/exit")
    server.wait_for_log(r"exited with code 7")
    server.wait_for_log(r"ready in [0-9.]+ ms", count=2)
    assert get(server.port, "/pid")[0] == 200


def test_an_app_exception_is_a_500_with_the_traceback_logged(tines_server: Any) -> None:
    server = tines_server("crashy:app", "-w", "1")
    pids = server.worker_pids()
    status, _ = get(server.port, "/raise")
    assert status == 500
    server.wait_for_log(r"Traceback \(most recent call last\)")
    assert "RuntimeError: boom from the app" in server.log_text()
    assert server.worker_pids() == pids


@pytest.mark.parametrize("mpm", ["prefork", "thread", "event"])
def test_term_lets_an_in_flight_request_finish_then_exits_zero(tines_server: Any, tmp_path: Path, mpm: str) -> None:
    server = tines_server("crashy:app", "-w", "1", "--mpm", mpm, "--graceful-timeout", "20")
    gate = tmp_path / "gate"
    result: dict[str, Any] = {}

    def slow_request() -> None:
        result["response"] = get(server.port, f"/slow?{gate}")

    client = threading.Thread(target=slow_request)
    client.start()
    wait_until(lambda: Path(f"{gate}.started").exists(), what="the slow request to start")
    server.signal(signal.SIGTERM)
    server.wait_for_log(r"TERM: graceful stop")
    gate.touch()
    client.join(30)
    assert result["response"] == (200, b"done")
    assert server.wait() == 0
    assert server.worker_pids() == []


def test_sigkill_of_the_master_leaves_no_worker_behind(tines_server: Any) -> None:
    server = tines_server(HELLO, "-w", "3")
    workers = server.worker_pids()
    assert len(workers) == 3
    os.kill(server.pid, signal.SIGKILL)
    server.proc.wait(10)
    wait_until(lambda: not any(alive(pid) for pid in workers), what="workers to exit")


def test_int_is_a_quick_stop(tines_server: Any) -> None:
    server = tines_server(HELLO, "-w", "2")
    workers = server.worker_pids()
    server.signal(signal.SIGINT)
    assert server.wait() == 0
    wait_until(lambda: not any(alive(pid) for pid in workers), what="workers to exit")


def test_ttin_and_ttou_change_the_number_of_workers(tines_server: Any) -> None:
    server = tines_server(HELLO, "-w", "1")
    server.signal(signal.SIGTTIN)
    server.wait_for_log(r"TTIN: 2 workers")
    wait_until(lambda: len(server.worker_pids()) == 2, what="a second worker")
    server.signal(signal.SIGTTOU)
    server.wait_for_log(r"TTOU: 1 worker\b")
    wait_until(lambda: len(server.worker_pids()) == 1, what="back to one worker")
    assert get(server.port)[0] == 200


def test_hup_replaces_every_worker_without_refusing_requests(tines_server: Any) -> None:
    # New connections only: an idle keep-alive connection that an old worker closes while the
    # client sends on it is the race every HTTP/1.1 server has (clients retry; docs/signals.md).
    server = tines_server("crashy:app", "-w", "2")
    old = set(server.worker_pids())
    with ClientLoad(server.port, keep_alive=False, path="/pid") as load:
        wait_until(lambda: load.count() > 10, what="load to start")
        server.signal(signal.SIGHUP)
        wait_until(lambda: not (set(server.worker_pids()) & old) and len(server.worker_pids()) == 2,
                   what="a new generation")
        before = load.count()
        wait_until(lambda: load.count() > before + 10, what="service after the reload")
    assert load.failed == 0


@pytest.mark.parametrize("mpm", ["prefork", "thread", "event"])
def test_max_requests_recycles_workers_and_no_request_fails(tines_server: Any, mpm: str) -> None:
    server = tines_server("hello_pid:app", "-w", "2", "--mpm", mpm, "--max-requests", "5",
                          "--log-level", "debug")  # a recycle's exit line is at debug
    first = set(server.worker_pids())
    seen = set()
    for _ in range(40):
        status, body = get(server.port, close=True)
        assert status == 200
        seen.add(int(body))
    assert seen - first, "recycled workers served requests too"
    server.wait_for_log(r"exited with code 0")


@pytest.mark.parametrize("mpm", ["prefork", "thread", "event"])
def test_accept_is_spread_across_workers(tines_server: Any, mpm: str) -> None:
    workers = 4
    server = tines_server("hello_pid:app", "-w", str(workers), "--mpm", mpm)
    counts: collections.Counter[int] = collections.Counter()
    lock = threading.Lock()
    total = 400

    def client(n: int) -> None:
        for _ in range(n):
            with socket.create_connection(("127.0.0.1", server.port), timeout=20) as sock:
                sock.sendall(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
                data = b""
                while chunk := sock.recv(4096):
                    data += chunk
            with lock:
                counts[int(data.rsplit(b"\r\n\r\n", 1)[1])] += 1

    threads = [threading.Thread(target=client, args=(total // 4,)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert sum(counts.values()) == total
    assert len(counts) == workers, counts
    if mpm in ("event", "thread"):
        # (`thread` is the event machine with app threads, ADR 0010: the same loop, the same
        # accept.) The event loop runs under SCHED_BATCH (ADR 0005, 11): a woken loop does not preempt,
        # so the loop that is already on a CPU usually wins the next accept, whatever the wait
        # queue's order; on a busy 2-core machine one worker then takes most of these
        # one-at-a-time connections (seen: 369/13/9/9). That costs nothing: a worker takes a
        # connection only while an app thread is free (`can_take_connection`), so under
        # concurrent load the others get theirs. Every worker still takes part.
        return
    # Each blocked accept is woken in turn, but the woken worker must still get a CPU: with both
    # cores busy (a CPU hog, issue 40's loaded run) the workers already running take more of
    # the one-at-a-time connections (seen: 149/146/71/34). Still no worker is starved.
    assert min(counts.values()) >= total / workers / 4, counts


def test_workers_that_keep_dying_before_ready_make_the_master_give_up(tines_server: Any, tmp_path: Path) -> None:
    marker = tmp_path / "fail"
    server = tines_server("fragile:app", "-w", "1", "--boot-failure-limit", "3",
                          env={"FRAGILE_MARKER": str(marker)})
    assert get(server.port)[0] == 200
    marker.touch()
    # Its replacements cannot boot. (A reload that cannot boot is not counted: the old generation
    # keeps serving, test_reload.py.)
    os.kill(server.worker_pids()[0], signal.SIGKILL)
    server.wait_for_log(r"worker died before ready \(2 in a row\): next start in 0\.2 s")
    server.wait_for_log(r"workers keep dying before they are ready \(3 in a row\): giving up")
    assert server.wait() == 3
