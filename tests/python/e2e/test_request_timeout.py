"""request_timeout and boot_timeout: a stuck request's worker is dumped (every thread's Python
stack in the error log), its client answered 503, and the worker replaced while the other
worker serves: killed on prefork, drained and ended by itself on thread and event (their loop
answers the stuck client; test_stuck_request_drain.py has the neighbours' side of it); a
stream that keeps producing is left alone; a worker whose import hangs is dumped and killed,
and counts toward the crash-loop guard."""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import APPS, ROOT, alive, http_get, wait_until

STUCK = "stuck_app:app"
MPMS = ("prefork", "thread", "event")


def send_get(port: int, path: str) -> socket.socket:
    """Open a connection and send a GET for ``path`` without reading the answer."""
    client = socket.create_connection(("127.0.0.1", port), timeout=60)
    client.sendall(f"GET {path} HTTP/1.1\r\nHost: test\r\n\r\n".encode())
    return client


def read_all(client: socket.socket) -> bytes:
    """Everything until the server closes the connection."""
    data = b""
    while chunk := client.recv(65536):
        data += chunk
    return data


def start_stuck_server(tines_server: Any, tmp_path: Path, mpm: str) -> tuple[Any, Path]:
    marker = tmp_path / "stuck.pid"
    server = tines_server(STUCK, "-w", "2", "--mpm", mpm, "--request-timeout", "1",
                          env={"STUCK_MARKER": str(marker)})
    return server, marker


def assert_stuck_request_is_dumped_and_replaced(server: Any, marker: Path, path: str,
                                                function: str, mpm: str) -> None:
    stuck_client = send_get(server.port, path)
    stuck_pid = int(wait_until(lambda: marker.exists() and marker.read_text(), what="the stuck request"))
    # The other worker answers while the first one is stuck.
    for _ in range(5):
        status, body = http_get(server.port, "/", close=True)
        assert status == 200 and int(body) != stuck_pid
    answer = read_all(stuck_client)
    stuck_client.close()
    head = answer.split(b"\r\n\r\n", 1)[0]
    assert head.startswith(b"HTTP/1.1 503 "), answer
    assert b"Connection: close" in head
    # prefork: the stuck request is the worker's loop, which is killed; thread and event: the
    # worker drains and ends by itself (no other request is in flight here).
    end = (r"was killed by signal SIGKILL" if mpm == "prefork" else r"exited with code 0")
    log = server.wait_for_log(rf"worker {stuck_pid} \(slot \d+\) {end} \(request_timeout\)")[0].string
    judged = log.index(f"worker {stuck_pid} (slot ")
    assert f"request GET {path} made no progress" in log[judged:]
    assert "(request_timeout 1 s" in log[judged:]
    stack = log.index(f"in {function}", judged)
    ended = log.index(f"worker {stuck_pid} (slot", stack)
    assert judged < stack < ended
    assert log.count(f"request GET {path} made no progress") == 1
    # Replaced: two workers again, the stuck one gone, and the server answers.
    wait_until(lambda: len(server.worker_pids()) == 2 and stuck_pid not in server.worker_pids(),
               what="the replacement")
    assert not alive(stuck_pid)
    assert http_get(server.port, "/", close=True)[0] == 200
    assert "workers crashed after ready" not in server.log_text()


@pytest.mark.parametrize("mpm", MPMS)
def test_a_request_stuck_in_sleep_gets_503_and_its_worker_is_dumped_and_replaced(
        tines_server: Any, tmp_path: Path, mpm: str) -> None:
    server, marker = start_stuck_server(tines_server, tmp_path, mpm)
    assert_stuck_request_is_dumped_and_replaced(server, marker, "/sleep",
                                                "stuck_in_time_sleep_for_the_test", mpm)


@pytest.mark.parametrize("mpm", ("prefork", "event"))
def test_a_request_stuck_in_c_code_holding_the_gil_is_dumped_too(
        tines_server: Any, tmp_path: Path, mpm: str) -> None:
    server, marker = start_stuck_server(tines_server, tmp_path, mpm)
    assert_stuck_request_is_dumped_and_replaced(server, marker, "/c-call",
                                                "stuck_in_c_holding_the_gil_for_the_test", mpm)


@pytest.mark.parametrize("mpm", MPMS)
def test_a_stream_that_keeps_producing_outlives_the_request_timeout(tines_server: Any, mpm: str) -> None:
    # 25 blocks, 0.1 s apart: the response takes longer than request_timeout, each gap is
    # far below it.
    server = tines_server(STUCK, "-w", "1", "--mpm", mpm, "--request-timeout", "1")
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    connection.request("GET", "/stream")
    response = connection.getresponse()
    body = response.read()
    connection.close()
    assert response.status == 200
    assert body == b"".join(b"block %d\n" % index for index in range(25))
    assert "made no progress" not in server.log_text()


def test_a_worker_whose_import_hangs_is_dumped_and_the_guard_gives_up(tmp_path: Path) -> None:
    log_path = tmp_path / "server.log"
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(APPS), os.environ.get("PYTHONPATH", "")])))
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tines", "serve", "hanging_import:app", "-b", "127.0.0.1:0",
             "-w", "1", "--boot-timeout", "1", "--boot-failure-limit", "1"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=environment, cwd=ROOT,
            start_new_session=True)
    try:
        status = proc.wait(60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    text = log_path.read_text(errors="replace")
    assert status == 3, text  # the crash-loop guard's exit status
    judged = text.index("not ready after")
    assert "(boot_timeout 1 s)" in text[judged:]
    stack = text.index("in fetch_settings_from_the_network_for_the_test", judged)
    killed = text.index("was killed by signal SIGKILL (boot_timeout)", stack)
    gave_up = text.index("workers keep dying before they are ready (1 in a row): giving up", killed)
    assert judged < stack < killed < gave_up


def test_the_scoreboard_shows_the_request_a_real_worker_is_stuck_in() -> None:
    """The master's scoreboard lives in its own memory: here the test is the master, and forks
    a worker that runs the Rust MPM over a real socket, as ``tines.worker`` does."""
    import tines._core as _core
    from tines.config import load
    from tines.worker import WorkerSpec, worker_settings

    board = _core.Scoreboard(1, 2)
    settings = worker_settings(load({"mpm": "thread", "threads": 2}, {}))
    listener = socket.create_server(("127.0.0.1", 0))
    release_read, release_write = os.pipe()

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        os.read(release_read, 1)  # held in the app until the test releases it
        start_response("200 OK", [])
        return [b"done"]

    pid = os.fork()
    if pid == 0:  # the worker
        try:
            os.close(release_write)
            _core.run_worker(app, WorkerSpec(settings, [listener.fileno()], board, 0))
        finally:
            os._exit(0)
    os.close(release_read)
    board.claim(0, pid, 1)
    try:
        client = send_get(listener.getsockname()[1], "/report?year=2026")

        def busy_thread() -> dict[str, Any] | None:
            return next((thread for thread in board.read(0)["threads"] if thread["state"] == "busy"), None)

        thread = wait_until(busy_thread, what="a busy app thread")
        assert (thread["method"], thread["target"]) == ("GET", "/report?year=2026")
        assert not thread["waiting_on_client"] and thread["response_bytes"] == 0
        assert thread["dispatch_ns"] <= thread["progress_ns"]
        assert board.read(0)["active"] == 1
        os.write(release_write, b"x")
        assert read_until_body(client).endswith(b"done")
        client.close()
        wait_until(lambda: board.read(0)["requests"] == 1, what="the finished request")
        finished = [thread for thread in board.read(0)["threads"] if thread["requests"] == 1]
        assert len(finished) == 1 and finished[0]["state"] == "idle"
        assert finished[0]["last_response_us"] >= finished[0]["last_app_us"]
        assert board.read(0)["bytes_out"] > 0
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        listener.close()
        os.close(release_write)


def read_until_body(client: socket.socket) -> bytes:
    """A response with a Content-Length body (the connection stays open)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += client.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:")))
    while len(body) < length:
        body += client.recv(65536)
    return head + b"\r\n\r\n" + body


def test_the_scoreboard_api_the_master_writes_with() -> None:
    import tines._core as _core

    board = _core.Scoreboard(2, 3)
    assert board.threads_per_slot == 3
    assert _core.EXIT_REASONS[0] == "none" and "request_timeout" in _core.EXIT_REASONS
    board.claim(1, 1234, 7)
    board.set_memory(1, 4096, 3072, 2048, 0)
    board.set_exit_reason(1, "memory")
    with pytest.raises(ValueError):
        board.set_exit_reason(1, "bogus")
    board.retire(1, 1234, 9)  # the master reaped it: killed by SIGKILL
    assert board.totals()["exits"] == {"memory": 1}
    reading = board.read(1)
    assert (reading["exit_reason"], reading["rss"], reading["pss"], reading["uss"], reading["swap"]) == (
        "memory", 4096, 3072, 2048, 0)
    assert [thread["state"] for thread in reading["threads"]] == ["idle", "idle", "idle"]
    board.claim(1, 1235, 8)
    assert board.read(1)["exit_reason"] == "none"
