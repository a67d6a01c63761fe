"""The request corpus (tests/http-corpus) against live servers on each MPM, over real sockets.

Valid cases: every request in the connection is answered 200 by an echo app, in order, with
the method, target and body the corpus expects. Invalid cases: the expected status, then the
connection is closed, and a request refused for its head never reaches the app. The worker
that saw every case is still the same process at the end."""

from __future__ import annotations

import base64
import json
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

CORPUS = Path(__file__).resolve().parents[2] / "http-corpus"


@dataclass
class Expected:
    method: str | None = None
    target: str | None = None
    body: bytes = b""


@dataclass
class Case:
    name: str
    data: bytes
    requests: list[Expected] = field(default_factory=list)
    status: int | None = None
    body_error: bool = False


def load(kind: str) -> list[Case]:
    cases = []
    for http in sorted((CORPUS / kind).glob("*.http")):
        case = Case(http.stem, http.read_bytes())
        current = Expected()
        for line in http.with_suffix(".expect").read_text().splitlines():
            if not line or line.startswith("#"):
                continue
            key, _, value = line.partition(" ")
            if key == "---":
                case.requests.append(current)
                current = Expected()
            elif key == "method":
                current.method = value
            elif key == "target":
                current.target = value
            elif key == "body-text":
                current.body += value.encode()
            elif key == "body-hex":
                current.body += bytes.fromhex(value)
            elif key == "status":
                case.status = int(value)
            elif key == "chunked-error":
                case.body_error = True
        case.requests.append(current)
        cases.append(case)
    return cases


def exchange(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(data)
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server may have answered and closed already
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except ConnectionResetError:
            pass
    return received


def split_responses(data: bytes, heads: list[bool] | None = None) -> list[tuple[int, bytes]]:
    """Responses with a Content-Length body (all this server sends for these apps); a response
    to HEAD (``heads[i]``) has the header but no body."""
    responses: list[tuple[int, bytes]] = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ")[1])
        length = next((int(line.split(b":", 1)[1]) for line in lines[1:]
                       if line.lower().startswith(b"content-length:")), 0)
        if heads and len(responses) < len(heads) and heads[len(responses)] and status >= 200:
            length = 0
        if status >= 200:  # a 1xx interim response (100 Continue) has no body and is not the answer
            responses.append((status, rest[:length]))
        data = rest[length:]
    return responses


@pytest.fixture(params=["prefork", "thread"])
def live(request: pytest.FixtureRequest, tines_server: Any, tmp_path: Path) -> tuple[Any, Path]:
    calls = tmp_path / "calls"
    calls.touch()
    extra = ["--threads", "2"] if request.param == "thread" else []
    server = tines_server("corpus_echo:app", "-w", "1", "--mpm", request.param, *extra,
                          env={"CORPUS_CALLS": str(calls)})
    return server, calls


def test_every_valid_case_is_answered_as_the_corpus_expects(live: tuple[Any, Path]) -> None:
    server, _ = live
    worker = server.worker_pids()
    failures = []
    for case in load("valid"):
        heads = [request.method == "HEAD" for request in case.requests]
        responses = split_responses(exchange(server.port, case.data), heads)
        if [status for status, _ in responses] != [200] * len(case.requests):
            failures.append(f"{case.name}: statuses {[s for s, _ in responses]}")
            continue
        for index, (expected, (_, body)) in enumerate(zip(case.requests, responses)):
            if expected.method == "HEAD":
                continue  # no body to compare: the status was checked
            try:
                echo = json.loads(body)
            except ValueError:
                failures.append(f"{case.name} #{index}: not an echo: {body[:80]!r}")
                continue
            got = (echo["method"], echo["target"], base64.b64decode(echo["body"]))
            want = (expected.method or echo["method"], expected.target or echo["target"], expected.body)
            if got != want:
                failures.append(f"{case.name} #{index}: got {got!r}, want {want!r}")
    assert not failures, "\n".join(failures)
    assert server.worker_pids() == worker


def test_every_invalid_case_is_refused_closed_and_never_reaches_the_app(live: tuple[Any, Path]) -> None:
    server, calls = live
    worker = server.worker_pids()
    failures = []
    for case in load("invalid"):
        before = calls.read_text().count("\n")
        reply = exchange(server.port, case.data)  # returns at EOF: the server closed
        statuses = [status for status, _ in split_responses(reply)] if reply else []
        expected = 400 if case.body_error else case.status
        if not statuses or statuses[-1] != expected:
            failures.append(f"{case.name}: want {expected}, got {statuses}")
        if not case.body_error and calls.read_text().count("\n") != before:
            failures.append(f"{case.name}: the app was called for a refused head")
    assert not failures, "\n".join(failures)
    assert server.worker_pids() == worker, "no case may kill the worker"
