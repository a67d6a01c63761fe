"""The status listener's counts: after requests with known methods and statuses (the app's,
and the responses the server writes itself), ``/status.json`` and ``/metrics`` say exactly
those counts, at once (a request is counted before its last byte is written), on every MPM;
``/metrics`` is read by prometheus_client's parsers (text and OpenMetrics); totals survive
the workers that made them (a killed worker, a recycled one), and each exit is counted by its
reason."""

from __future__ import annotations

import json
import os
import signal
import socket
from typing import Any

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text

from conftest import wait_until
from test_status import fetch, status, status_port

HUGE_HEADER = b"X-Filler: " + b"a" * 70_000 + b"\r\n"

# (raw request, method label, status class) with Connection: close: every byte the client
# sends is read for a request that is answered (but the 431's, cut at the head limit).
REQUESTS: list[tuple[bytes, str, str]] = [
    *[(b"GET /status/200 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", "GET", "2xx")] * 3,
    *[(b"POST /status/404 HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\nConnection: close\r\n\r\nabcd",
       "POST", "4xx")] * 2,
    (b"PROPFIND /status/207 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", "OTHER", "2xx"),
    (b"GET /status/302 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", "GET", "3xx"),
    (b"DELETE /raise HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", "DELETE", "5xx"),
    (b"GET /stream HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", "GET", "2xx"),
    (b"HEAD /status/200 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", "HEAD", "2xx"),
    # Written by the server itself: a malformed head (400) and one past the limit (431).
    (b"GET /bad HTTP/1.1\r\nHost: t\r\nBad Header\r\n\r\n", "GET", "4xx"),
    (b"GET /big HTTP/1.1\r\nHost: t\r\n" + HUGE_HEADER + b"\r\n", "GET", "4xx"),
]


def exchange(port: int, request: bytes) -> bytes:
    """Sends ``request`` on a new connection and reads the response to the server's close."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as client:
        try:
            client.sendall(request)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before the whole head went: the answer is still there to read
        received = b""
        while True:
            try:
                chunk = client.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            received += chunk
    return received


def samples(text: str, parse: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition, by name and sorted labels."""
    found = {}
    for family in parse(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def metrics(port: int, openmetrics: bool = False) -> str:
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    try:
        headers = {"Accept": "application/openmetrics-text; version=1.0.0"} if openmetrics else {}
        connection.request("GET", "/metrics", headers=headers)
        response = connection.getresponse()
        body = response.read().decode()
        expected = "application/openmetrics-text" if openmetrics else "text/plain; version=0.0.4"
        assert response.status == 200 and response.getheader("content-type", "").startswith(expected)
        return body
    finally:
        connection.close()


@pytest.mark.parametrize("mpm", ["prefork", "thread", "event"])
def test_known_requests_are_counted_exactly_in_json_and_metrics(tines_server: Any, mpm: str) -> None:
    server = tines_server("status_codes:app", "--mpm", mpm, "-w", "2", "--status-bind", "127.0.0.1:0")
    port = status_port(server)
    received = [exchange(server.port, request) for request, _, _ in REQUESTS]
    statuses = [int(response.split(b" ", 2)[1]) for response in received]
    assert statuses == [200, 200, 200, 404, 404, 207, 302, 500, 200, 200, 400, 431]

    # No waiting: each was counted before its last byte left.
    report = status(port)
    assert report["requests"] == len(REQUESTS)
    totals = report["totals"]
    assert totals["by_status"] == {"1xx": 0, "2xx": 6, "3xx": 1, "4xx": 4, "5xx": 1}
    assert totals["by_method"] == {"GET": 7, "HEAD": 1, "POST": 2, "DELETE": 1, "OTHER": 1}
    assert totals["accepted"] == len(REQUESTS)
    assert totals["bytes_out"] == sum(len(response) for response in received)
    sent = [len(request) for request, _, _ in REQUESTS]
    assert sum(sent[:-1]) < totals["bytes_in"] <= sum(sent)
    # Gauges: the workers publish them as they finish with each connection.
    wait_until(lambda: (t := status(port)["totals"])["in_flight"] == 0 and t["connections"] == 0,
               what="no request in flight, no connection open")

    expected_cells: dict[tuple[str, str], int] = {}
    for _, method, status_class in REQUESTS:
        expected_cells[(method, status_class)] = expected_cells.get((method, status_class), 0) + 1
    for openmetrics, parse in ((False, parse_text), (True, parse_openmetrics)):
        text = metrics(port, openmetrics)
        assert text.endswith("# EOF\n") == openmetrics
        found = samples(text, parse)
        cells = {(dict(labels)["method"], dict(labels)["status"]): int(value)
                 for (name, labels), value in found.items() if name == "tines_requests_total" and value}
        assert cells == expected_cells
        for histogram in ("tines_request_duration_seconds", "tines_request_queue_wait_seconds"):
            assert found[(f"{histogram}_count", ())] == len(REQUESTS)
            assert found[(f"{histogram}_bucket", (("le", "+Inf"),))] == len(REQUESTS)
            buckets = sorted((float(dict(labels)["le"]), value) for (name, labels), value in found.items()
                             if name == f"{histogram}_bucket")
            assert [value for _, value in buckets] == sorted(value for _, value in buckets)
        assert found[("tines_connections_accepted_total", ())] == len(REQUESTS)
        assert found[("tines_sent_bytes_total", ())] == totals["bytes_out"]
        live = sum(value for (name, labels), value in found.items()
                   if name == "tines_workers" and dict(labels)["state"] != "free")
        assert live == 2
        pss = [value for (name, labels), value in found.items()
               if name == "tines_worker_memory_bytes" and dict(labels)["kind"] == "pss"]
        assert len(pss) == 2


@pytest.mark.parametrize("mpm", ["prefork", "thread", "event"])
def test_a_request_is_counted_before_the_server_is_done_with_it(
        tines_server: Any, gate: tuple[Any, str], mpm: str) -> None:
    # The response is all sent, but its iterable's close() has not returned: a client that has
    # the response finds it counted (on a kept-alive connection, too). Responses are written as
    # soon as they are complete (a batched one waits for the end of its batch, after close()).
    listener, path = gate
    server = tines_server("status_codes:app", "--mpm", mpm, "-w", "1", "--status-bind", "127.0.0.1:0",
                          "--response-batch-delay", "0", env={"GATE_SOCKET": path})
    port = status_port(server)
    with socket.create_connection(("127.0.0.1", server.port), timeout=20) as client:
        client.sendall(b"GET /held-close HTTP/1.1\r\nHost: t\r\n\r\n")
        received = b""
        while not received.endswith(b"\r\n\r\nsent\n"):
            chunk = client.recv(4096)
            assert chunk, received
            received += chunk
        held, _ = listener.accept()
        assert held.recv(64) == b"closing\n"  # close() runs: the server is not done
        report = status(port)
        assert report["requests"] == 1 and report["totals"]["by_status"]["2xx"] == 1
        held.close()
    assert status(port)["requests"] == 1


def test_a_killed_worker_is_a_crash_and_its_counts_stay(tines_server: Any) -> None:
    server = tines_server("status_codes:app", "-w", "1", "--status-bind", "127.0.0.1:0")
    port = status_port(server)
    for _ in range(3):
        exchange(server.port, REQUESTS[0][0])
    first = status(port)["workers"][0]["pid"]
    os.kill(first, signal.SIGKILL)
    server.wait_for_log(rf"worker {first} \(slot \d+\) was killed by signal SIGKILL")
    report = wait_until(lambda: (r := status(port))["workers"] and r["workers"][0]["pid"] != first and r,
                        what="the replacement worker")
    assert report["requests"] == 3  # the totals keep what the killed worker served
    assert report["restarts"]["crash"] == 1
    exit_record = report["recent_exits"][0]
    assert (exit_record["pid"], exit_record["reason"], exit_record["signal"], exit_record["requests"]) \
        == (first, "signal", signal.SIGKILL, 3)
    assert report["workers"][0]["last_exit"]["pid"] == first
    exchange(server.port, REQUESTS[0][0])
    assert status(port)["requests"] == 4
    found = samples(metrics(port), parse_text)
    assert found[("tines_worker_restarts_total", (("reason", "crash"),))] == 1
    assert found[("tines_requests_total", (("method", "GET"), ("status", "2xx")))] == 4
    assert found[("tines_connections_accepted_total", ())] == 4


def test_a_recycled_worker_is_counted_by_its_reason(tines_server: Any) -> None:
    server = tines_server("status_codes:app", "-w", "1", "--max-requests", "2", "--status-bind", "127.0.0.1:0")
    port = status_port(server)
    first = status(port)["workers"][0]["pid"]
    for _ in range(2):
        exchange(server.port, REQUESTS[0][0])
    report = wait_until(lambda: (r := status(port))["restarts"]["max_requests"] == 1 and r,
                        what="the recycled worker reaped")
    assert report["recent_exits"][0]["pid"] == first
    assert report["recent_exits"][0]["exit_code"] == 0
    assert report["requests"] == 2 and report["totals"]["accepted"] == 2


def test_the_html_page_shows_a_stuck_request_while_every_worker_is_stuck(
        tines_server: Any, gate: tuple[Any, str]) -> None:
    listener, path = gate
    server = tines_server("gate:app", "-w", "1", "--status-bind", "127.0.0.1:0",
                          env={"GATE_SOCKET": path})
    port = status_port(server)
    with socket.create_connection(("127.0.0.1", server.port), timeout=20) as client:
        client.sendall(b"GET /hold?token=secret HTTP/1.1\r\nHost: a\r\n\r\n")
        held, _ = listener.accept()
        assert held.recv(64)
        code, headers, body = fetch(port, "/?refresh=2")
        page = body.decode()
        assert code == 200 and headers["content-type"] == "text/html; charset=utf-8"
        assert '<meta http-equiv="refresh" content="2">' in page
        assert "<code>GET /hold?...</code>" in page and "secret" not in page
        assert '<td class="busy">busy</td>' in page
        assert "W" in page.split('<div class="map"', 1)[1].split("</div>", 1)[0]
        assert 'http-equiv="refresh"' not in fetch(port, "/?refresh=0")[2].decode()
        # /metrics answers too, with the request in flight.
        assert samples(metrics(port), parse_text)[("tines_requests_in_flight", ())] == 1
        held.close()
        assert client.recv(4096).startswith(b"HTTP/1.1 200 ")
    assert json.loads(fetch(port, "/status.json")[2])["requests"] == 1
