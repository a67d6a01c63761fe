"""ASGI 3 apps served over real sockets (ADR 0014): the scope, bodies streamed both ways,
disconnects, backpressure from a client that stops reading, errors, lifespan, admission
(`max_concurrency`), `request_timeout`, ASGI 2, and a real Starlette app.

Routes that wait are released by other requests or by the client's own actions (see
apps/asgi_features.py), so every test asserts an order or an outcome, never a duration.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from conftest import ROOT, Server, read_until_closed, wait_until

APP = "asgi_features:app"
LOOPS = pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
"""The tests that suspend tasks (futures made by the loop) run on both loops."""


def get(server: Server, path: str, **kwargs: object) -> httpx.Response:
    return httpx.get(server.url + path, timeout=20, **kwargs)  # type: ignore[arg-type]


def raw_request(server: Server, request: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=20)
    sock.sendall(request)
    return sock


def read_response(sock: socket.socket) -> tuple[bytes, bytes]:
    """One response with a Content-Length body: (head, body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before a head: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next(line.split(b":", 1)[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:")))
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "closed before the body's end"
        body += chunk
    return head, body


def read_responses(sock: socket.socket, count: int) -> list[tuple[bytes, bytes]]:
    """``count`` responses with Content-Length bodies, however the bytes are split across
    reads (pipelined responses may come in one)."""
    data = b""
    out: list[tuple[bytes, bytes]] = []
    while len(out) < count:
        head, found, rest = data.partition(b"\r\n\r\n")
        if found:
            length = int(next(line.split(b":", 1)[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:")))
            if len(rest) >= length:
                out.append((head, rest[:length]))
                data = rest[length:]
                continue
        chunk = sock.recv(65536)
        assert chunk, f"closed after {len(out)} responses: {data!r}"
        data += chunk
    return out


@LOOPS
def test_a_coroutine_app_is_served_with_no_mpm_or_interface_flag_and_the_log_says_how(
        tines_server: Callable[..., Server], loop: str) -> None:
    server = tines_server(APP, "-w", "1", "--loop", loop)
    with httpx.Client(base_url=server.url, timeout=20) as client:
        for _ in range(50):  # one kept-alive connection
            response = client.get("/")
            assert (response.status_code, response.text) == (200, "hello from ASGI")
    assert response.headers["content-length"] == "15"
    assert ("ready: 1 worker, ASGI 3 app on the event MPM's reactor and an asyncio loop per worker"
            in server.log_text())
    assert "Traceback" not in server.log_text()


def test_the_scope_carries_what_the_spec_asks_for(tines_server: Callable[..., Server]) -> None:
    server = tines_server(APP, "-w", "1")
    response = get(server, "/scope/../scope?q=%20x&y=1", headers={"X-Custom": "Value"})
    # httpx normalises the dot segment away; the raw target is sent as given below.
    sock = raw_request(server, b"GET /sc%6Fpe?q=%20x&y=1 HTTP/1.1\r\nHost: example.test:8080\r\n"
                               b"X-Custom: Value\r\nX-Custom: Second\r\n\r\n")
    head, body = read_response(sock)
    client_port = sock.getsockname()[1]
    sock.close()
    assert head.startswith(b"HTTP/1.1 200 ")
    scope = json.loads(body)
    assert scope["type"] == "http"
    assert scope["asgi"] == {"version": "3.0", "spec_version": "2.4"}
    assert scope["http_version"] == "1.1"
    assert scope["method"] == "GET"
    assert scope["scheme"] == "http"
    assert scope["path"] == "/scope"
    assert scope["raw_path"] == "/sc%6Fpe"
    assert scope["query_string"] == "q=%20x&y=1"
    assert scope["root_path"] == ""
    assert scope["server"] == ["127.0.0.1", server.port]
    assert scope["client"][0] == "127.0.0.1" and scope["client"][1] == client_port
    # Names lower-cased, values and order as sent, repeated fields kept apart.
    assert scope["headers"] == [["host", "example.test:8080"], ["x-custom", "Value"],
                                ["x-custom", "Second"]]
    assert scope["state"] == {"greeting": "hello from startup"}
    assert scope["extensions"] == {}
    assert response.status_code == 200


def test_the_scheme_is_what_a_trusted_proxy_says_request_by_request(
        tines_server: Callable[..., Server]) -> None:
    """The rule WSGI's `wsgi.url_scheme` follows (test_wsgi_pep3333.py): `https` or `http`
    from a trusted proxy's X-Forwarded-Proto (its last line's first entry, any case), else the
    connection's own `http`; never from an untrusted peer."""
    cases: list[tuple[list[tuple[str, str]], str]] = [
        ([("X-Forwarded-Proto", "https")], "https"), ([("X-Forwarded-Proto", "http")], "http"),
        ([("X-Forwarded-Proto", "HTTPS , http")], "https"), ([("X-Forwarded-Proto", "ftp")], "http"),
        ([], "http"), ([("X-Forwarded-Proto", "https")], "https"),
        ([("X-Forwarded-Proto", "http"), ("X-Forwarded-Proto", "https")], "https"),
        ([("X-Forwarded-Proto", "https"), ("X-Forwarded-Proto", "http")], "http"), ([], "http"),
    ]
    trusted = tines_server(APP, "-w", "1")
    with httpx.Client(base_url=trusted.url, timeout=20) as client:  # one kept-alive connection
        for headers, expected in cases:
            scope = client.get("/scope", headers=headers).json()
            assert (headers, scope["scheme"]) == (headers, expected)
    untrusted = tines_server(APP, "-w", "1", "--forwarded-allow-ips", "10.0.0.1")
    scope = get(untrusted, "/scope", headers={"X-Forwarded-Proto": "https"}).json()
    assert scope["scheme"] == "http"


def test_a_request_body_streamed_in_chunks_reaches_the_app_whole_in_bounded_messages(
        tines_server: Callable[..., Server]) -> None:
    server = tines_server(APP, "-w", "1")
    payload = bytes(range(256)) * (12 * 1024)  # 3 MiB

    def chunks() -> Iterator[bytes]:
        for start in range(0, len(payload), 100_000):
            yield payload[start:start + 100_000]

    response = httpx.post(server.url + "/echo", content=chunks(), timeout=30)
    assert response.status_code == 200
    assert response.content == payload
    # At most 1 MiB per http.request message: more_body streaming, not one huge message.
    assert int(response.headers["x-messages"]) >= 3
    empty = httpx.post(server.url + "/echo", content=b"", timeout=20)
    assert (empty.status_code, empty.content, empty.headers["x-messages"]) == (200, b"", "1")


@LOOPS
def test_each_streamed_block_reaches_the_client_before_the_app_produces_the_next(
        tines_server: Callable[..., Server], loop: str) -> None:
    server = tines_server(APP, "-w", "1", "--loop", loop)
    sock = raw_request(server, b"GET /stream?n=3 HTTP/1.1\r\nHost: x\r\n\r\n")
    received = b""
    for index in range(3):
        if index:
            assert get(server, f"/release?name=stream-{index}").text == "released"
        while f"block {index}\n".encode() not in received:
            chunk = sock.recv(65536)
            assert chunk, received
            received += chunk
        # The next block is not produced until it is released.
        assert f"block {index + 1}".encode() not in received
    while not received.endswith(b"0\r\n\r\n"):
        received += sock.recv(65536)
    sock.close()
    assert b"Transfer-Encoding: chunked" in received


def test_pipelined_requests_are_answered_in_order(tines_server: Callable[..., Server]) -> None:
    server = tines_server(APP, "-w", "1")
    sock = raw_request(server, b"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET /progress HTTP/1.1\r\nHost: x\r\n\r\n"
                               b"GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n")
    responses = read_responses(sock, 3)
    sock.close()
    assert [body for _, body in responses] == [b"hello from ASGI", b"0", b"not found"]
    assert responses[2][0].startswith(b"HTTP/1.1 404 ")


@LOOPS
def test_a_client_that_goes_away_is_seen_as_http_disconnect(
        tines_server: Callable[..., Server], loop: str) -> None:
    server = tines_server(APP, "-w", "1", "--loop", loop)
    sock = raw_request(server, b"GET /wait-disconnect HTTP/1.1\r\nHost: x\r\n\r\n")
    assert get(server, "/waiting-disconnect").text == "waiting"
    sock.close()
    assert get(server, "/disconnected").text == "http.disconnect"


@LOOPS
def test_a_client_that_stops_reading_slows_send_and_the_worker_serves_others_meanwhile(
        tines_server: Callable[..., Server], loop: str) -> None:
    server = tines_server(APP, "-w", "1", "--loop", loop, "--max-response-buffer", "1MiB")
    slow = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    slow.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
    # The app's sends stop advancing while the client reads nothing; other requests are
    # answered all along (each one is a turn of the same loop the sender runs on).
    readings: list[int] = []

    def settled() -> bool:
        readings.append(int(get(server, "/progress").text))
        return len(readings) >= 30 and len(set(readings[-30:])) == 1

    wait_until(settled, 60, "the sender to stop advancing")
    stalled = readings[-1]
    # 64 MiB were to be sent: what left the app is bounded by the response buffer (1 MiB),
    # one message and the sockets' buffers, not by the body.
    assert stalled < 24, readings
    received = 0
    head = b""
    while b"\r\n\r\n" not in head:
        head += slow.recv(65536)
    received = len(head.partition(b"\r\n\r\n")[2])
    while received < 64 * 1024 * 1024:
        chunk = slow.recv(1 << 20)
        assert chunk
        received += len(chunk)
    slow.close()
    assert received == 64 * 1024 * 1024
    assert get(server, "/progress").text == "64"


def test_app_errors_are_a_500_with_the_traceback_logged_and_the_worker_lives_on(
        tines_server: Callable[..., Server]) -> None:
    server = tines_server(APP, "-w", "1")
    [worker] = server.worker_pids()
    response = get(server, "/error")
    assert response.status_code == 500
    server.wait_for_log(r"Error handling request GET /error\n(.*\n)*?ValueError: the app failed before its response")
    response = get(server, "/no-response")
    assert response.status_code == 500
    server.wait_for_log(r"Error handling request GET /no-response: the app returned without starting a response")
    response = get(server, "/bad-header")
    assert response.status_code == 500
    server.wait_for_log(r"(?s)Error handling request GET /bad-header.*bad response head")
    # After the head was sent: the connection closes before the body's end.
    sock = raw_request(server, b"GET /error-after HTTP/1.1\r\nHost: x\r\n\r\n")
    data = read_until_closed(sock)
    sock.close()
    assert data.startswith(b"HTTP/1.1 200 ") and b"partial" in data
    assert not data.endswith(b"0\r\n\r\n")
    server.wait_for_log(r"ValueError: the app failed in the middle of its response")
    assert get(server, "/").text == "hello from ASGI"
    assert server.worker_pids() == [worker]


def test_lifespan_startup_comes_before_ready_and_shutdown_runs_on_a_graceful_stop(
        tines_server: Callable[..., Server], tmp_path: Path) -> None:
    notes = tmp_path / "lifespan.log"
    server = tines_server(APP, "-w", "2", env={"LIFESPAN_LOG": str(notes)})
    # Ready means both workers' startups are done.
    assert notes.read_text().splitlines() == ["startup", "startup"]
    assert get(server, "/").status_code == 200
    server.signal(signal.SIGTERM)
    assert server.wait() == 0
    assert notes.read_text().splitlines() == ["startup", "startup", "shutdown", "shutdown"]


def test_a_failed_lifespan_startup_stops_the_start_with_the_apps_message(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "tines", "serve", "-b", "127.0.0.1:0", "-w", "1", APP],
                            env={**_environment(), "LIFESPAN_FAIL": "1"}, capture_output=True,
                            text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 2, result.stderr
    last = result.stderr.rstrip().splitlines()[-1]
    assert last.startswith("tines: error:") and "lifespan startup failed: no database" in last


def test_lifespan_off_sends_no_lifespan_events(tines_server: Callable[..., Server], tmp_path: Path) -> None:
    notes = tmp_path / "lifespan.log"
    server = tines_server(APP, "-w", "1", "--lifespan", "off", env={"LIFESPAN_LOG": str(notes)})
    assert json.loads(get(server, "/scope").text)["state"] == {}
    assert not notes.exists()


def test_requests_beyond_max_concurrency_get_503_until_one_ends(tines_server: Callable[..., Server]) -> None:
    server = tines_server(APP, "-w", "1", "--max-concurrency", "2")
    first = raw_request(server, b"GET /wait-disconnect HTTP/1.1\r\nHost: x\r\n\r\n")
    assert get(server, "/waiting-disconnect").text == "waiting"
    second = raw_request(server, b"GET /forever HTTP/1.1\r\nHost: x\r\n\r\n")
    # /forever holds the second place: a third request is refused at once.
    refused = wait_until(lambda: (r := get(server, "/")).status_code == 503 and r, 20, "a 503")
    assert refused.headers["retry-after"] == "1"  # type: ignore[union-attr]
    first.close()  # the app sees http.disconnect and returns: a place is free again
    assert wait_until(lambda: get(server, "/").status_code == 200, 20, "a place to free up")
    second.close()


def test_a_request_past_request_timeout_is_cancelled_with_its_stack_logged_and_the_worker_kept(
        tines_server: Callable[..., Server]) -> None:
    server = tines_server(APP, "-w", "1", "--request-timeout", "1")
    [worker] = server.worker_pids()
    response = get(server, "/forever")
    assert response.status_code == 503
    server.wait_for_log(r"(?s)request GET /forever made no progress for request_timeout \(1 s\): "
                        r"cancelled.*asgi_features\.py")
    assert get(server, "/").text == "hello from ASGI"
    assert server.worker_pids() == [worker]


def test_request_timeout_counts_time_without_progress_so_a_stream_that_keeps_sending_is_not_cut(
        tines_server: Callable[..., Server]) -> None:
    server = tines_server(APP, "-w", "1", "--request-timeout", "1")
    # Six blocks 0.4 s apart: 2.4 s in all, never 1 s without a send.
    response = get(server, "/drip?n=6&every=0.4")
    assert response.status_code == 200
    assert response.text == "".join(f"drop {index}\n" for index in range(6))
    assert "request_timeout" not in server.log_text()


def test_an_asgi2_app_is_served_when_named(tines_server: Callable[..., Server]) -> None:
    server = tines_server("asgi_features:ASGI2", "-w", "1", "--interface", "asgi2")
    assert get(server, "/").text == "hello from ASGI 2"


def test_the_access_log_has_a_line_per_asgi_request(tines_server: Callable[..., Server], tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    server = tines_server(APP, "-w", "1", "--access-log", str(log))
    assert get(server, "/nowhere").status_code == 404
    assert get(server, "/").status_code == 200
    lines = wait_until(lambda: (text := log.read_text()).count("\n") >= 2 and text.splitlines(), 20, "two lines")
    assert '"GET /nowhere HTTP/1.1" 404 9' in lines[0]  # type: ignore[index]
    assert '"GET / HTTP/1.1" 200 15' in lines[1]  # type: ignore[index]


def _environment() -> dict[str, str]:
    import os

    from conftest import APPS

    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(APPS), environment.get("PYTHONPATH", "")]))
    return environment


# --- a real framework ------------------------------------------------------------------------

def test_a_starlette_app_passes_its_checks_over_real_sockets(tines_server: Callable[..., Server]) -> None:
    server = tines_server("starlette_app:app", "-w", "1")
    with httpx.Client(base_url=server.url, timeout=20) as client:
        assert client.get("/").json() == {"hello": "starlette", "started": True}
        assert client.get("/items/42?detail=yes").json() == {"item": 42, "detail": "yes"}
        posted = client.post("/form", data={"name": "tines", "kind": "server"})
        assert posted.json() == {"name": "tines", "kind": "server"}
        uploaded = client.post("/upload", files={"file": ("a.bin", b"\x00\x01" * 70_000)})
        assert uploaded.json() == {"filename": "a.bin", "size": 140_000}
        with client.stream("GET", "/stream") as streamed:
            assert list(streamed.iter_lines()) == [f"line {index}" for index in range(5)]
        assert client.get("/missing").status_code == 404
        failed = client.get("/boom")
        assert failed.status_code == 500
    server.wait_for_log(r"RuntimeError: boom")
    threads: list[threading.Thread] = []
    results: list[int] = []
    for _ in range(8):
        thread = threading.Thread(target=lambda: results.append(get(server, "/slow-json").status_code))
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join(30)
    assert results == [200] * 8


# --- the operator's levers -------------------------------------------------------------------

def test_a_graceful_stop_lets_a_request_in_flight_finish_then_runs_the_lifespan_shutdown(
        tines_server: Callable[..., Server], tmp_path: Path) -> None:
    notes = tmp_path / "lifespan.log"
    server = tines_server(APP, "-w", "1", env={"LIFESPAN_LOG": str(notes)})
    holding = raw_request(server, b"GET /hold?name=drain HTTP/1.1\r\nHost: x\r\n\r\n")
    other = socket.create_connection(("127.0.0.1", server.port), timeout=20)
    other.sendall(b"GET /held?name=drain HTTP/1.1\r\nHost: x\r\n\r\n")
    assert read_response(other)[1] == b"it is held"
    server.signal(signal.SIGTERM)
    # The stop drains: the kept-alive connection's next request is still answered, and it
    # releases the request in flight, which completes.
    other.sendall(b"GET /release?name=drain HTTP/1.1\r\nHost: x\r\n\r\n")
    head, body = read_response(other)
    assert body == b"released"
    head, body = read_response(holding)
    assert body == b"held and released"
    assert server.wait() == 0
    assert notes.read_text().splitlines() == ["startup", "shutdown"]
    holding.close()
    other.close()


def test_max_requests_recycles_the_worker_through_its_lifespan_and_every_request_is_answered(
        tines_server: Callable[..., Server], tmp_path: Path) -> None:
    notes = tmp_path / "lifespan.log"
    server = tines_server(APP, "-w", "1", "--max-requests", "5", "--log-level", "debug",  # the recycles' lines
                          env={"LIFESPAN_LOG": str(notes)})
    statuses = [get(server, "/").status_code for _ in range(20)]
    assert statuses == [200] * 20
    server.wait_for_log(r"max_requests reached: recycling this worker", count=3)
    # Each recycled worker drains, then runs its shutdown; its replacement's startup runs
    # meanwhile (either may be written first).
    wait_until(lambda: notes.read_text().count("shutdown") >= 3, 20, "three shutdowns")
    lines = notes.read_text().splitlines()
    # Every shutdown is a started worker's (at every point, no more shutdowns than startups;
    # a recycled worker's shutdown and its replacement's startup may come in either order, as
    # said above), and the worker serving now has started and not shut down.
    assert all(lines[:end].count("startup") >= lines[:end].count("shutdown")
               for end in range(1, len(lines) + 1)), lines
    assert lines[0] == "startup" and lines.count("startup") > lines.count("shutdown"), lines


def read_chunked(sock: socket.socket) -> tuple[bytes, bytes, bytes, bytes]:
    """One chunked response: (head, body decoded, trailer section, what followed it)."""
    data = b""

    def need(count: int) -> None:
        nonlocal data
        while len(data) < count:
            chunk = sock.recv(65536)
            assert chunk, f"closed part-way: {data!r}"
            data += chunk

    def line() -> bytes:
        nonlocal data
        while b"\r\n" not in data:
            need(len(data) + 1)
        found, _, data = data.partition(b"\r\n")
        return found

    while b"\r\n\r\n" not in data:
        need(len(data) + 1)
    head, _, data = data.partition(b"\r\n\r\n")
    body = b""
    while size := int(line(), 16):
        need(size + 2)
        body, data = body + data[:size], data[size + 2:]
    trailers = b""
    while field := line():
        trailers += field + b"\r\n"
    return head, body, trailers, data


def test_asgi_trailers_end_a_chunked_body_and_are_offered_to_a_client_that_takes_them(
        tines_server: Callable[..., Server]) -> None:
    server = tines_server(APP, "-w", "1")
    sock = raw_request(server, b"GET /trailers?bad=1 HTTP/1.1\r\nHost: x\r\nTE: trailers\r\n\r\n")
    head, body, trailers, rest = read_chunked(sock)
    assert head.startswith(b"HTTP/1.1 200 ")
    lower = head.lower()
    assert b"\r\ntransfer-encoding: chunked" in lower
    assert b"\r\nx-offered: true" in lower
    assert b"\r\ntrailer:" not in lower  # PEP 3333's hop-by-hop list: left out
    assert body == b"part one, part two"
    # The refused Content-Length raised in the app's send; the fields it sent after follow.
    assert trailers == b"x-checksum: abc\r\nx-refused: yes\r\nx-status: 0\r\n"
    assert rest == b""
    # The connection stays usable: the trailer section ended the response exactly.
    sock.sendall(b"GET /trailers HTTP/1.1\r\nHost: x\r\n\r\n")
    head, body, trailers, _ = read_chunked(sock)
    # Not offered without `TE: trailers`; an app that sends them anyway still ends its body.
    assert b"\r\nx-offered: false" in head.lower()
    assert (body, trailers) == (b"part one, part two", b"x-checksum: abc\r\nx-refused: no\r\nx-status: 0\r\n")
    # With a Content-Length the body is not chunked: the trailers have nowhere to go.
    sock.sendall(b"GET /trailers?declared=1 HTTP/1.1\r\nHost: x\r\nTE: trailers\r\n\r\n")
    head, body = read_response(sock)
    assert b"transfer-encoding" not in head.lower()
    assert body == b"part one, part two"
    sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert read_response(sock)[1] == b"hello from ASGI"
    sock.close()
    assert "http.response.trailers" not in server.log_text()
