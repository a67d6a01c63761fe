"""A request of death (the app calls ``os._exit``) sent 200 times a second beside a normal
client for 10 s, on 2 workers: the crash backoff keeps a worker serving (its floor), every
death is paid for by one deadly request (no fork storm), the log names the request, the normal
client gets its answers, and the server serves and stops cleanly afterwards (docs/signals.md,
"Crashes").

The load is open loop on the clock (tests/python/open_loop.py): the 10 s are the stimulus, not
a wait. The attacker gives up on each request after half a second (its requests still wait in
the listen queue, and each one a worker takes kills it); the normal client waits as long as a
request may sit in the listen queue behind the deadly ones, so only a request the server lost
counts as lost, not a slow one.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import re
import signal
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

import open_loop
from conftest import children, http_get, read_until_closed, wait_until

WORKERS = 2
ATTACK = ("/exit", 200.0, 0.5)
"""Path, requests per second, per-request timeout (seconds)."""
NORMAL = ("/pid", 100.0, 200.0)
"""The normal client: generous, since each deadly request ahead of it in the listen queue costs
a worker's fork and boot (about 8 ms on prefork, more on event and on a loaded machine)."""
DURATION = 10.0


@pytest.mark.timeout(600)
@pytest.mark.parametrize("mpm", ["prefork", "event"])
def test_a_request_of_death_at_200_per_second_leaves_the_others_served(tines_server: Any, mpm: str) -> None:
    server = tines_server("crashy:app", "-w", str(WORKERS), "--mpm", mpm, "--log-level", "debug")
    attack, normal = open_loop.Stream(*ATTACK), open_loop.Stream(*NORMAL)

    open_loop.run(server.port, [attack, normal], DURATION)

    assert normal.sent == 1000 and attack.sent == 2000
    assert normal.ok() >= 0.9 * normal.sent, f"{normal.summary()}; {attack.summary()}"
    # The deadly requests still queued once the attacker gave up kill their workers too; a
    # request sent now waits behind them, then is served.
    assert http_get(server.port, "/pid", timeout=NORMAL[2])[0] == 200
    log = server.log_text()
    deaths = len(re.findall(r"\(slot \d+\) exited with code 7\b", log))
    named = len(re.findall(r"\(slot \d+\) crashed while serving GET /exit\n", log))
    starts = len(re.findall(r"spawned worker \d+", log))
    # Every death was a deadly request, named as such; each start beyond the first workers
    # replaced one death: the backoff let no start through that no request paid for.
    assert 0 < deaths <= attack.sent and named == deaths, log[-3000:]
    assert starts <= deaths + WORKERS, (starts, deaths)

    server.signal(signal.SIGTERM)
    assert server.wait(60) == 0
    assert children(server.pid) == []


def hold_a_slow_request(port: int, gate: Path) -> threading.Thread:
    """A client whose ``/slow`` request waits in the app on ``gate`` (crashy.py), once it is
    there; the thread ends when the worker dies under it."""

    def slow() -> None:
        with contextlib.suppress(http.client.HTTPException, OSError):
            http_get(port, f"/slow?{gate}")

    holder = threading.Thread(target=slow)
    holder.start()
    wait_until(lambda: gate.with_name(gate.name + ".started").exists(), what="the slow request in the app")
    return holder


def test_every_request_in_flight_is_named_when_a_worker_with_app_threads_crashes(
        tines_server: Any, tmp_path: Path) -> None:
    server = tines_server("crashy:app", "-w", "1", "--mpm", "thread", "--threads", "2")
    gate = tmp_path / "gate"
    holder = hold_a_slow_request(server.port, gate)
    with pytest.raises((http.client.HTTPException, OSError)):
        http_get(server.port, "/exit?a\\b")  # a backslash: logged escaped
    holder.join(30)
    line = server.wait_for_log(r"crashed with 2 requests in flight: .*")[0].group(0)
    assert f"GET /slow?{gate}" in line and "GET /exit?a\\x5cb" in line, line


def test_an_asgi_worker_that_crashes_says_how_many_requests_it_held(tines_server: Any, tmp_path: Path) -> None:
    server = tines_server("crashy:asgi", "-w", "1")
    gate = tmp_path / "gate"
    holder = hold_a_slow_request(server.port, gate)
    with pytest.raises((http.client.HTTPException, OSError)):
        http_get(server.port, "/exit")
    holder.join(30)
    server.wait_for_log(r"crashed with 2 request\(s\) in flight \(an ASGI worker: which ones is not recorded\)")


def test_a_worker_killed_between_requests_is_said_to_have_had_none_in_flight(tines_server: Any) -> None:
    server = tines_server("crashy:app", "-w", "1")
    with socket.create_connection(("127.0.0.1", server.port)) as client:
        client.sendall(b"GET /pid HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        # The worker records the request's end before it closes the connection.
        assert read_until_closed(client).startswith(b"HTTP/1.1 200")
    victim = server.worker_pids()[0]
    os.kill(victim, signal.SIGKILL)
    server.wait_for_log(rf"worker {victim} \(slot 0\) crashed between requests \(none in flight\)")
