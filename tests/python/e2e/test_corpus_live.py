"""The request corpus (tests/http-corpus) against live servers on each MPM, over real sockets.

Valid cases: every request in the connection is answered 200 by an echo app, in order, with
the method, target and body the corpus expects. Invalid cases: the expected status, then the
connection is closed, and a request refused for its head never reaches the app. The worker
that saw every case is still the same process at the end."""

from __future__ import annotations

import base64
import json
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from conftest import read_until_closed

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
        return read_until_closed(sock)


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


@pytest.fixture(params=["prefork", "thread", "event"])
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


LLHTTP_CASES = CORPUS.parents[1].parent / "shared" / "corpus" / "llhttp" / "cases.json"


HOST_LINE = re.compile(rb"(?im)^host:")


ABSOLUTE_AUTHORITY = re.compile(rb"(?i)https?://([^/?#]+)")


def with_host(data: bytes) -> bytes:
    """llhttp does not require Host; RFC 9112 3.2 does (400 without it), so, as the Rust runner
    does for gunicorn's corpus, HTTP/1.1 heads of a case with no Host line get one: the
    authority of an absolute-form target (RFC 9110 7.2: a client sends Host identical to it,
    and a differing one is 400), else llhttp.test."""
    if HOST_LINE.search(data):
        return data

    def add(line: re.Match[bytes]) -> bytes:
        authority = ABSOLUTE_AUTHORITY.match(line.group(1))
        host = authority.group(1) if authority else b"llhttp.test"
        return line.group(0) + b"Host: " + host + b"\r\n"

    return re.sub(rb"(\S*) HTTP/1\.1\r\n", add, data)


def llhttp_disagreements(port: int) -> dict[str, str]:
    """The llhttp request cases where this server disagrees with llhttp, each with what
    happened. llhttp's verdict covers the first ``messages_complete`` messages (all fine) and,
    for an error case, the message after them (refused); bytes after that (a truncated tail)
    are not judged."""
    cases = json.loads(LLHTTP_CASES.read_text())["cases"]
    found = {}
    for case in cases:
        if case["type"] != "request":
            continue
        data = with_host(base64.b64decode(case["raw_b64"]))
        heads = [data.startswith(b"HEAD ")]
        statuses = [status for status, _ in split_responses(exchange(port, data), heads)]
        done = case["messages_complete"]
        first_ok = len(statuses) >= done and all(200 <= status < 300 for status in statuses[:done])
        refused_next = len(statuses) <= done or not 200 <= statuses[done] < 300
        agrees = first_ok and (refused_next if expected_llhttp_outcome(case) == "error" else True)
        if not agrees:
            found[case["id"]] = f"statuses {statuses}"
    return found


def expected_llhttp_outcome(case: dict[str, Any]) -> str:
    # llhttp "pauses" on Upgrade/CONNECT/PRI to hand the connection over: not a rejection.
    if case["outcome"] == "error" and case["error_name"].startswith("HPE_PAUSED"):
        return "ok"
    return str(case["outcome"])


LLHTTP_DIFFERENCES = {
    "request/content-length.md:447": "llhttp's harness skips the body from a callback; a server must read all 123 bytes, "
                                     "and the input ends first: 400",
    "request/invalid.md:69": "ANNOUNCE is a valid token method for us (RFC 9110 9.1); llhttp has a fixed method list",
    "request/invalid.md:359": "MKCOLA is a valid token method (RFC 9110 9.1), as invalid.md:69",
    "request/method.md:138": "asterisk-form is for OPTIONS only (RFC 9112 3.2.4): M-SEARCH * is 400",
    "request/method.md:375": "ICE/1.0 is not HTTP: 400",
    "request/method.md:405": "RTSP/1.0 is not HTTP: 400",
    "request/method.md:433": "RTSP/1.0 is not HTTP: 400",
    "request/sample.md:317": "an HTTP/0.9 request line (no version) is 400",
    "request/transfer-encoding.md:331": "a chunk extension `;` with no name is tolerated (the size is unambiguous); "
                                        "llhttp's strict mode refuses it",
    "request/transfer-encoding.md:754": "deflate before chunked: we decode no coding but chunked, 501 (RFC 9112 6.1)",
    "request/transfer-encoding.md:796": "deflate before chunked across two fields: 501, as transfer-encoding.md:754",
    "request/uri.md:225": "userinfo in an http URI is an error (RFC 9110 4.2.4): 400",
}


@pytest.mark.skipif(not LLHTTP_CASES.exists(), reason="../shared/corpus/llhttp is not beside the repository")
def test_llhttp_request_cases_agree_except_the_documented_differences(live: tuple[Any, Path]) -> None:
    server, _ = live
    worker = server.worker_pids()
    found = llhttp_disagreements(server.port)
    unexplained = {case: what for case, what in found.items() if case not in LLHTTP_DIFFERENCES}
    stale = sorted(set(LLHTTP_DIFFERENCES) - set(found))
    assert not unexplained, f"disagreements with llhttp without a documented reason: {unexplained}"
    assert not stale, f"listed as differences but now agree (update the list): {stale}"
    assert server.worker_pids() == worker
