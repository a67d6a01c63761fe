"""Requests waiting for an app thread (issue 40): with the thread MPM and one app thread held in
the app, the requests read meanwhile wait in the worker's queue. The status page,
``/status.json``, ``/metrics`` and ``tines status`` show them as waiting (count and longest
wait), not as idle connections; once they are served, the mean time counts their wait.

The app holds ``/hold`` at a gate the test controls (apps/gate.py): no sleep, no duration
asserted."""

from __future__ import annotations

import http.client
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from conftest import ROOT, wait_until
from test_status import fetch, status, status_port

HELD = 4
"""Keep-alive connections that each send one ``/hold``: one is served, the others wait."""


def test_requests_waiting_for_an_app_thread_are_shown_apart_from_idle_connections(
        tines_server: Any, tmp_path: Path) -> None:
    gate_path = str(tmp_path / "gate.sock")
    gate = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    gate.bind(gate_path)
    gate.listen(HELD)
    held: list[socket.socket] = []
    clients: list[http.client.HTTPConnection] = []
    try:
        server = tines_server("gate:app", "--mpm", "thread", "--threads", "1", "-w", "1",
                              "--status-bind", "127.0.0.1:0", env={"GATE_SOCKET": gate_path})
        port = status_port(server)
        # Accepted and idle first: a loop whose app threads are all busy stops accepting (the
        # backlog waits in the kernel), but reads and queues requests on connections it holds.
        for _ in range(HELD):
            client = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
            client.request("GET", "/")
            response = client.getresponse()
            assert response.status == 200
            response.read()
            clients.append(client)
        wait_until(lambda: status(port)["requests"] == HELD, what="the first requests counted")
        for client in clients:
            client.request("GET", "/hold")
        gate.settimeout(60)

        def hold_next() -> None:
            # The held request says who holds it; read, so that closing sends no reset.
            connection, _ = gate.accept()
            connection.makefile("rb").readline()
            held.append(connection)

        hold_next()

        def queued() -> dict[str, Any] | None:
            report = status(port)
            totals = report["totals"]
            return report if totals["queued"] == HELD - 1 and totals["in_flight"] == 1 else None

        report = wait_until(queued, what="the other requests queued behind the held one")
        totals = report["totals"]
        assert totals["connections"] == HELD
        # Waiting for an app thread is not idle: before issue 40 these read "4 open / 3 idle".
        assert totals["connections_idle"] == 0
        assert totals["queued_wait_ms"] > 0
        worker = report["workers"][0]
        assert (worker["queued"], worker["active"]) == (HELD - 1, 1)
        assert worker["queued_wait_ms"] > 0
        assert [t["state"] for t in worker["threads"]] == ["app"]

        code, _, page = fetch(port, "/?refresh=0")
        assert code == 200
        assert f"<b>{HELD} / 0</b><span>connections open / idle</span>" in page.decode()
        assert f"<b>{HELD - 1} / " in page.decode()
        assert "waiting for an app thread / longest wait" in page.decode()
        code, _, exposition = fetch(port, "/metrics")
        lines = exposition.decode().splitlines()
        assert code == 200 and f"tines_requests_queued {HELD - 1}" in lines
        assert "tines_connections_idle 0" in lines
        oldest = next(line for line in lines if line.startswith("tines_requests_queued_oldest_wait_seconds "))
        assert float(oldest.split()[1]) > 0
        shown = subprocess.run([sys.executable, "-m", "tines", "status", "--once", "--status-bind",
                                f"127.0.0.1:{port}"], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0, shown.stderr
        assert f"in flight 1  waiting {HELD - 1} (longest " in shown.stdout
        assert f"conns {HELD} open, 0 idle" in shown.stdout

        # Let them go one by one: each queued request reaches the app (and the gate) in turn.
        for _ in range(HELD - 1):
            held.pop().close()
            hold_next()
        held.pop().close()
        for client in clients:
            response = client.getresponse()
            assert response.status == 200
            response.read()

        def drained() -> dict[str, Any] | None:
            report = status(port)
            return report if report["requests"] == 2 * HELD and report["totals"]["queued"] == 0 else None

        totals = wait_until(drained, what="every request served")["totals"]  # type: ignore[index]
        assert (totals["queued_wait_ms"], totals["in_flight"]) == (0, 0)
        assert totals["queue_wait_sum_s"] > 0
        # The mean a client saw is duration and queue wait together, per request.
        both_ms = (totals["duration_sum_s"] + totals["queue_wait_sum_s"]) * 1000 / (2 * HELD)
        assert abs(totals["mean_response_ms"] - both_ms) <= 0.002
        assert totals["mean_response_ms"] > totals["duration_sum_s"] * 1000 / (2 * HELD)
    finally:
        for connection in held:
            connection.close()
        for client in clients:
            client.close()
        gate.close()
