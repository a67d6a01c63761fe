"""A stuck request on the thread and event MPMs (app threads apart from the loop) drains its
worker instead of killing it (docs/signals.md, "A stuck request"): the loop answers the stuck
client 503, the other requests in flight on the same worker finish and their responses go out
in full, a kept-alive idle client is closed gracefully, the stuck thread's stack is in the
error log, a new worker takes over, and the stuck request's late result is dropped (one
access-log line for it: the 503). A request stuck in C code holding the GIL, and the neighbour
it stopped, are both answered by the loop, which needs no GIL, and the worker ends by itself;
beside idle app threads, with a request waiting for one of them, the worker is killed as soon as
the interpreter probe shows the GIL held, long before graceful_timeout.
Synchronised by a gate (a Unix socket the app's requests
connect to and wait on until the test closes them) and by the server's own answers, never by
sleeps."""

from __future__ import annotations

import http.client
import json
import re
import socket
from pathlib import Path
from typing import Any

import pytest

from conftest import alive, http_get, wait_until

APP = "stuck_drain_app:app"
HOLDS = 3


def send_get(port: int, path: str) -> socket.socket:
    """A raw client that has sent ``GET path`` (kept alive) and reads the answer itself."""
    client = socket.create_connection(("127.0.0.1", port), timeout=60)
    client.sendall(f"GET {path} HTTP/1.1\r\nHost: test\r\n\r\n".encode())
    return client


def arrival(listener: socket.socket) -> tuple[socket.socket, str, int]:
    """The next request to reach the gate: its connection, route and worker pid."""
    conn, _ = listener.accept()
    line = b""
    while not line.endswith(b"\n"):
        chunk = conn.recv(64)
        assert chunk, "the gated request went away"
        line += chunk
    route, pid = line.decode().split()
    return conn, route, int(pid)


def read_to_eof(client: socket.socket) -> bytes:
    """Everything until the server closes; a reset raises (ConnectionResetError)."""
    data = b""
    while chunk := client.recv(65536):
        data += chunk
    return data


@pytest.mark.parametrize("stuck_returns", [True, False], ids=["stuck-returns-late", "stuck-for-good"])
@pytest.mark.parametrize("mpm", ["thread", "event"])
def test_a_stuck_request_drains_its_worker_and_its_neighbours_finish(
        tines_server: Any, tmp_path: Path, gate: tuple[socket.socket, str], mpm: str,
        stuck_returns: bool) -> None:
    listener, gate_path = gate
    access_log = tmp_path / "access.log"
    server = tines_server(APP, "-w", "1", "--mpm", mpm, "--threads", "5", "--request-timeout", "1",
                          "--access-log", str(access_log), "--access-log-format", "json",
                          env={"GATE_SOCKET": gate_path})
    # A kept-alive client, idle on the worker through what follows.
    idle = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    idle.request("GET", "/")
    first = idle.getresponse()
    worker_pid = int(first.read())
    assert first.status == 200
    stuck_client = send_get(server.port, "/stuck")
    stuck_gate, route, pid = arrival(listener)
    assert (route, pid) == ("stuck", worker_pid)
    holds = []
    hold_gates = []
    for _ in range(HOLDS):
        hold = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        hold.request("GET", "/hold")
        holds.append(hold)
        gate, route, pid = arrival(listener)
        assert (route, pid) == ("hold", worker_pid)
        hold_gates.append(gate)

    # The loop answers the stuck client while the three others are still in the app.
    answer = read_to_eof(stuck_client)
    stuck_client.close()
    head = answer.split(b"\r\n\r\n", 1)[0]
    assert head.startswith(b"HTTP/1.1 503 "), answer
    assert b"Connection: close" in head
    assert answer.endswith(b"request timeout\n")

    if stuck_returns:
        stuck_gate.close()  # it returns late; its 200 must go nowhere
        # Back before the others are let go (else the drain could end without it).
        server.wait_for_log(r"Request GET /stuck returned after request_timeout answered it")
    for gate in hold_gates:
        gate.close()
    for hold in holds:
        response = hold.getresponse()
        body = response.read()
        assert response.status == 200
        lines = body.splitlines()
        assert lines[-1] == b"done" and set(lines[:-1]) <= {b"tick"}, body
        # Its head went out before the drain began: the connection is closed after it.
        assert read_to_eof(hold.sock) == b""
        hold.close()
    # The idle kept-alive client is closed, not reset.
    assert read_to_eof(idle.sock) == b""
    idle.close()

    log = server.wait_for_log(rf"worker {worker_pid} \(slot \d+\) exited with code 0 "
                              r"\(request_timeout\)")[0].string
    judged = log.index(f"worker {worker_pid} (slot ")
    assert "request GET /stuck made no progress" in log[judged:]
    assert "draining it" in log[judged:]
    stack = log.index("in stuck_at_the_gate_for_the_test", judged)
    assert judged < stack
    answered = log.index("answered (503); draining", stack)
    if stuck_returns:
        # Released before the others, it came back within the drain: dropped, and the
        # worker ended as on any stop.
        dropped = log.index("Request GET /stuck returned after request_timeout answered it: "
                            "its result is dropped")
        assert answered < dropped
        assert "exiting without waiting" not in log
    else:
        assert "exiting without waiting for 1 stuck app thread(s)" in log[answered:]
    assert "SIGKILL" not in log and "crashed" not in log

    # Replaced: a new worker serves.
    wait_until(lambda: server.worker_pids() and worker_pid not in server.worker_pids(),
               what="the replacement")
    assert not alive(worker_pid)
    status, body = http_get(server.port, "/", close=True)
    assert status == 200 and int(body) != worker_pid

    records = [json.loads(line) for line in access_log.read_text().splitlines()]
    stuck_lines = [record for record in records if record["path"] == "/stuck"]
    assert len(stuck_lines) == 1, stuck_lines
    assert stuck_lines[0]["status"] == 503
    hold_lines = [record for record in records if record["path"] == "/hold"]
    assert [record["status"] for record in hold_lines] == [200] * HOLDS


@pytest.mark.parametrize("mpm", ["thread", "event"])
def test_a_request_stuck_holding_the_gil_and_the_neighbour_it_stopped_are_answered_and_the_worker_ends(
        tines_server: Any, gate: tuple[socket.socket, str], mpm: str) -> None:
    # The neighbour, in the app first, cannot progress once the GIL is held: it overruns
    # request_timeout too and is judged after the first dump if not with it. The loop, which
    # needs no GIL, answers both; drained, the worker ends by itself, its threads stuck.
    listener, gate_path = gate
    server = tines_server(APP, "-w", "1", "--mpm", mpm, "--threads", "3", "--request-timeout", "1",
                          "--graceful-timeout", "300", env={"GATE_SOCKET": gate_path})
    hold = send_get(server.port, "/hold")
    hold_gate, route, worker_pid = arrival(listener)
    assert route == "hold"
    stuck_client = send_get(server.port, "/c-call")
    _, route, pid = arrival(listener)
    assert (route, pid) == ("stuck", worker_pid)
    answer = read_to_eof(stuck_client)
    stuck_client.close()
    assert answer.startswith(b"HTTP/1.1 503 ") and answer.endswith(b"request timeout\n"), answer
    # The neighbour: a 503 if nothing of its response was out, else its response cut short
    # by a close; never a reset.
    neighbour = read_to_eof(hold)
    hold.close()
    assert (neighbour.startswith(b"HTTP/1.1 503 ") and neighbour.endswith(b"request timeout\n")
            or neighbour.startswith(b"HTTP/1.1 200 ")), neighbour
    log = server.wait_for_log(rf"worker {worker_pid} \(slot \d+\) exited with code 0 "
                              r"\(request_timeout\)")[0].string
    judged = log.index("request GET /c-call made no progress")
    assert "request GET /hold made no progress" in log
    stack = log.index("in stuck_in_c_holding_the_gil_for_the_test")
    exited = log.index("exiting without waiting for 2 stuck app thread(s)")
    assert judged < exited and stack < exited
    assert "SIGKILL" not in log
    wait_until(lambda: server.worker_pids() and worker_pid not in server.worker_pids(),
               what="the replacement")
    status, body = http_get(server.port, "/", close=True)
    assert status == 200 and int(body) != worker_pid
    hold_gate.close()


@pytest.mark.timeout(40)  # far below graceful_timeout: the kill must not wait for it
@pytest.mark.parametrize("mpm", ["thread", "event"])
def test_a_request_stuck_holding_the_gil_beside_idle_app_threads_gets_its_worker_killed_early(
        tines_server: Any, gate: tuple[socket.socket, str], mpm: str) -> None:
    # The other app threads are idle: none is busy to tell the master that the GIL is held,
    # and a kept-alive client's request sent after the dump waits for it in one of them, so the
    # drain cannot end. The interpreter probe the loop starts on the dump cannot take the GIL
    # either: the master kills the worker GIL_WAIT after the dump, not at graceful_timeout.
    listener, gate_path = gate
    server = tines_server(APP, "-w", "1", "--mpm", mpm, "--threads", "3", "--request-timeout", "1",
                          "--graceful-timeout", "60", "--keepalive-timeout", "60",
                          "--drain-timeout", "60", env={"GATE_SOCKET": gate_path})
    kept = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    kept.request("GET", "/")
    first = kept.getresponse()
    worker_pid = int(first.read())
    assert first.status == 200
    stuck_client = send_get(server.port, "/c-call")
    _, route, pid = arrival(listener)
    assert (route, pid) == ("stuck", worker_pid)
    # The 503 is the loop's answer to the dump: what is sent now comes after it.
    answer = read_to_eof(stuck_client)
    stuck_client.close()
    assert answer.startswith(b"HTTP/1.1 503 ") and answer.endswith(b"request timeout\n"), answer
    kept.sock.sendall(b"GET / HTTP/1.1\r\nHost: test\r\n\r\n")
    log = server.wait_for_log(rf"worker {worker_pid} \(slot \d+\) was killed by signal SIGKILL")
    log_text = log[0].string
    assert re.search(rf"worker {worker_pid} \(slot \d+\): the GIL was not free for", log_text)
    assert "still draining" not in log_text, "killed at graceful_timeout"
    try:
        late = read_to_eof(kept.sock)
    except ConnectionResetError:
        late = b""
    assert not late.startswith(b"HTTP/1.1 200 "), late
    kept.close()
    wait_until(lambda: server.worker_pids() and worker_pid not in server.worker_pids(),
               what="the replacement")
    assert not alive(worker_pid)
    status, body = http_get(server.port, "/", close=True)
    assert status == 200 and int(body) != worker_pid


@pytest.mark.parametrize("mpm", ["thread", "event"])
def test_requests_queued_behind_the_only_app_thread_are_refused_for_a_retry_not_held(
        tines_server: Any, gate: tuple[socket.socket, str], mpm: str) -> None:
    # One app thread, stuck: a request queued for it could only wait for the worker's end.
    # The loop answers it 503 with Retry-After, and the worker ends by itself at once.
    listener, gate_path = gate
    server = tines_server(APP, "-w", "1", "--mpm", mpm, "--threads", "1", "--request-timeout", "1",
                          "--graceful-timeout", "300", env={"GATE_SOCKET": gate_path})
    stuck_client = send_get(server.port, "/stuck")
    stuck_gate, route, worker_pid = arrival(listener)
    assert route == "stuck"
    queued = send_get(server.port, "/queued")
    answer = read_to_eof(stuck_client)
    assert answer.startswith(b"HTTP/1.1 503 ") and answer.endswith(b"request timeout\n"), answer
    refused = read_to_eof(queued)
    head = refused.split(b"\r\n\r\n", 1)[0]
    assert head.startswith(b"HTTP/1.1 503 ") and b"\r\nRetry-After: 1" in head, refused
    server.wait_for_log(rf"worker {worker_pid} \(slot \d+\) exited with code 0 \(request_timeout\)")
    assert "exiting without waiting for 1 stuck app thread(s)" in server.log_text()
    assert "SIGKILL" not in server.log_text()
    stuck_client.close()
    queued.close()
    stuck_gate.close()
