"""The request corpora against a live server on each MPM, over real sockets, with an echo app.

- ``tests/http-corpus/valid``: every request of a connection is answered 200, in order, and the
  echo (method, raw target, version, WSGI header keys, body) is what the ``.expect`` says.
- ``tests/http-corpus/invalid``: the ``.expect`` status (400 for a ``chunked-error``), after
  200s for any requests before the bad one; the server closes the connection; the app is
  called once per 200 (plus once for a bad chunked body, whose head was fine) and never for a
  refused head.
- ``../shared/corpus/gunicorn-requests`` (when present), cases with empty ``settings``: valid
  ones echo what gunicorn's parser gave, invalid ones are refused or closed; the deliberate
  differences are ``GUNICORN_DIFFERENCES`` (the same list, with the same reasons, as
  ``crates/proto/tests/corpus.rs``; see docs/http-conformance.md).

One server per MPM per test, ``-w 1``: the worker pid must be the same at the end, so no case may
crash or recycle it. A case is half-closed (SHUT_WR) only when its bytes hold a complete head,
so a head refused for its size is refused without the server seeing EOF. Every read has a 10 s
timeout; a server that neither answers nor closes is a failure, not a hang.
"""

from __future__ import annotations

import base64
import json
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

CORPUS = Path(__file__).resolve().parents[2] / "http-corpus"
GUNICORN = CORPUS.parents[1].parent / "shared" / "corpus" / "gunicorn-requests" / "expectations.json"
READ_TIMEOUT = 10.0


# ------------------------------------------------------------------ the .expect files


@dataclass
class Request:
    """One request section of a valid case."""

    method: str | None = None
    target: str | None = None
    version: str | None = None
    headers: list[tuple[str, bytes]] = field(default_factory=list)
    body: bytes = b""


@dataclass
class Case:
    name: str
    data: bytes
    requests: list[Request] = field(default_factory=list)
    status: int | None = None
    chunked_error: str | None = None


CHUNKED_ERROR_STATUS = {"TrailersTooLarge": 431}
"""ChunkedError::status(): 400 but for these."""


def load(kind: str) -> list[Case]:
    cases = []
    for http in sorted((CORPUS / kind).glob("*.http")):
        case = Case(f"{kind}/{http.stem}", http.read_bytes())
        current = Request()
        for line in http.with_suffix(".expect").read_text().splitlines():
            line = line.rstrip()
            if not line or line.startswith("#"):
                continue
            key, _, value = line.partition(" ")
            if key == "---":
                case.requests.append(current)
                current = Request()
            elif key in ("method", "target", "version"):
                setattr(current, key, value)
            elif key in ("header", "header-hex"):
                name, _, text = value.partition(":")
                text = text.lstrip()
                current.headers.append((name, bytes.fromhex(text) if key == "header-hex" else text.encode()))
            elif key == "body-text":
                current.body += value.encode()
            elif key == "body-hex":
                current.body += bytes.fromhex(value)
            elif key == "status":
                case.status = int(value)
            elif key == "chunked-error":
                case.chunked_error = value
                case.status = CHUNKED_ERROR_STATUS.get(value, 400)
        case.requests.append(current)
        cases.append(case)
    return cases


def environ_headers(fields: list[tuple[str, bytes]]) -> dict[str, str]:
    """What the WSGI layer makes of a field list: names with ``_`` dropped (they would collide
    with the hyphenated name), CONTENT_TYPE / CONTENT_LENGTH without the prefix, ``X-Y`` as
    ``HTTP_X_Y``, values as latin-1, repeated fields joined with ", " ("; " for Cookie)."""
    environ: dict[str, str] = {}
    for name, value in fields:
        if "_" in name:
            continue
        upper = name.upper().replace("-", "_")
        key = upper if upper in ("CONTENT_TYPE", "CONTENT_LENGTH") else "HTTP_" + upper
        text = value.decode("latin-1")
        if key in environ:
            separator = "; " if upper == "COOKIE" else ", "
            environ[key] += separator + text
        else:
            environ[key] = text
    return environ


# ------------------------------------------------------------------ the wire


def has_complete_head(data: bytes) -> bool:
    """Whether the bytes hold the end of a head (an empty line), however its lines end."""
    return b"\n\r\n" in data or b"\n\n" in data


def exchange(port: int, data: bytes, half_close: bool) -> tuple[bytes, bool]:
    """Sends ``data``, half-closes if asked, reads until EOF. Returns (bytes, closed): closed is
    False when the server neither closed nor answered more within READ_TIMEOUT."""
    received = b""
    with socket.create_connection(("127.0.0.1", port), timeout=READ_TIMEOUT) as sock:
        try:
            sock.sendall(data)
            if half_close:
                sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server refused early and closed (EPIPE, ECONNRESET, ENOTCONN); its answer may still be readable
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except ConnectionResetError:
            pass  # closed with unread input: still closed
        except socket.timeout:
            return received, False
    return received, True


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes


def dechunk(data: bytes) -> tuple[bytes, bytes]:
    """A chunked response body and what follows it (trailers skipped)."""
    body = b""
    while True:
        line, _, data = data.partition(b"\r\n")
        size = int(line.split(b";")[0], 16)
        if size == 0:
            _, _, rest = data.partition(b"\r\n\r\n") if not data.startswith(b"\r\n") else (b"", b"", data[2:])
            return body, rest
        body += data[:size]
        data = data[size + 2:]


def split_responses(data: bytes, head_requests: list[bool]) -> list[Response]:
    """The responses in ``data``; 1xx interim responses are left out. ``head_requests[i]`` says
    the i-th request was HEAD (its response has no body whatever Content-Length says). A body
    shorter than its Content-Length (the server closed) is taken as it is."""
    responses: list[Response] = []
    while data:
        head, found, rest = data.partition(b"\r\n\r\n")
        if not found:
            responses.append(Response(-1, {}, data))  # garbage: shows in the failure message
            break
        lines = head.decode("latin-1").split("\r\n")
        try:
            status = int(lines[0].split(" ")[1])
        except (IndexError, ValueError):
            responses.append(Response(-1, {}, data))
            break
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if status < 200:
            data = rest
            continue
        index = len(responses)
        if index < len(head_requests) and head_requests[index]:
            body, data = b"", rest
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            body, data = dechunk(rest)
        elif "content-length" in headers:
            length = int(headers["content-length"])
            body, data = rest[:length], rest[length:]
        else:
            body, data = rest, b""
        responses.append(Response(status, headers, body))
    return responses


# ------------------------------------------------------------------ the server


@pytest.fixture(params=["prefork", "thread", "event"])
def live(request: pytest.FixtureRequest, tines_server: Any, tmp_path: Path) -> tuple[Any, Path]:
    calls = tmp_path / "calls"
    calls.touch()
    extra = ["--threads", "2"] if request.param == "thread" else []
    server = tines_server("corpus_echo:app", "-w", "1", "--mpm", request.param, *extra,
                          env={"CORPUS_CALLS": str(calls)})
    return server, calls


def call_count(calls: Path) -> int:
    return calls.read_text().count("\n")


def echo_of(response: Response) -> dict[str, Any] | None:
    try:
        echo = json.loads(response.body)
    except ValueError:
        return None
    return echo if isinstance(echo, dict) else None


def compare_echo(echo: dict[str, Any], want: Request, ignore_host: str | None = None) -> list[str]:
    """What differs between an echo and the expected request."""
    faults = []
    got_headers = dict(echo["headers"])
    if ignore_host is not None and got_headers.get("HTTP_HOST") == ignore_host:
        del got_headers["HTTP_HOST"]
    want_headers = environ_headers(want.headers)
    if "chunked" in want_headers.get("HTTP_TRANSFER_ENCODING", "").lower():
        # The server reads a chunked body whole before the app runs and hands it over as a plain
        # body of known length, as a buffering proxy does (docs/slow-clients.md).
        del want_headers["HTTP_TRANSFER_ENCODING"]
        want_headers["CONTENT_LENGTH"] = str(len(want.body or b""))
    checks = [
        ("method", want.method, echo["method"]),
        ("target", want.target, echo["target"]),
        ("version", want.version and f"HTTP/{want.version}", echo["version"]),
        ("headers", want_headers, got_headers),
        ("body", want.body, base64.b64decode(echo["body"])),
    ]
    for what, expected, got in checks:
        if expected is not None and expected != got:
            faults.append(f"{what}: want {expected!r}, got {got!r}")
    return faults


def check_valid(port: int, calls: Path, name: str, data: bytes, requests: list[Request],
                ignore_host: str | None = None) -> list[str]:
    """Sends one valid connection; returns what went wrong (empty: all fine)."""
    before = call_count(calls)
    reply, closed = exchange(port, data, half_close=True)
    responses = split_responses(reply, [r.method == "HEAD" for r in requests])
    faults = []
    if not closed:
        faults.append(f"no EOF within {READ_TIMEOUT:.0f} s after the half-close")
    statuses = [r.status for r in responses]
    if statuses != [200] * len(requests):
        faults.append(f"statuses {statuses}, want {[200] * len(requests)}; reply starts {reply[:120]!r}")
    else:
        for index, (want, response) in enumerate(zip(requests, responses)):
            if want.method == "HEAD":
                continue  # no body to read the echo from: the status was checked
            echo = echo_of(response)
            if echo is None:
                faults.append(f"#{index}: not an echo: {response.body[:80]!r}")
                continue
            faults += [f"#{index} {fault}" for fault in compare_echo(echo, want, ignore_host)]
    if call_count(calls) - before != len(requests):
        faults.append(f"app called {call_count(calls) - before} times for {len(requests)} requests")
    return [f"{name}: {fault}" for fault in faults]


# ------------------------------------------------------------------ our corpus


def test_every_valid_case_is_served_and_echoed_as_expected(live: tuple[Any, Path]) -> None:
    server, calls = live
    worker = server.worker_pids()
    cases = load("valid")
    assert len(cases) >= 50, "corpus missing?"
    failures = []
    for case in cases:
        failures += check_valid(server.port, calls, case.name, case.data, case.requests)
    sent = sum(len(case.requests) for case in cases)
    assert not failures, f"{len(failures)} failures:\n" + "\n".join(failures)
    assert call_count(calls) == sent, f"the app ran {call_count(calls)} times for {sent} valid requests"
    assert server.worker_pids() == worker, "no case may kill or recycle the worker"


def test_every_invalid_case_is_refused_closed_and_never_reaches_the_app(live: tuple[Any, Path]) -> None:
    server, calls = live
    worker = server.worker_pids()
    cases = load("invalid")
    assert len(cases) >= 50, "corpus missing?"
    failures = []
    served = 0
    for case in cases:
        before = call_count(calls)
        reply, closed = exchange(server.port, case.data, half_close=has_complete_head(case.data))
        responses = split_responses(reply, [case.data.startswith(b"HEAD ")])
        statuses = [r.status for r in responses]
        ok_before = statuses[:-1]
        faults = []
        if not closed:
            faults.append(f"still open after {READ_TIMEOUT:.0f} s (statuses so far {statuses})")
        if not statuses or statuses[-1] != case.status or any(s != 200 for s in ok_before):
            faults.append(f"statuses {statuses}, want {[200] * len(ok_before) + [case.status]}; "
                          f"reply starts {reply[:100]!r}")
        # A refused head never reaches the app, nor does a bad chunked body: the server reads
        # bodies whole before the app runs.
        expected_calls = len(ok_before)
        if call_count(calls) - before != expected_calls:
            faults.append(f"app called {call_count(calls) - before} times, want {expected_calls}")
        served += expected_calls
        failures += [f"{case.name}: {fault}" for fault in faults]
    assert not failures, f"{len(failures)} failures:\n" + "\n".join(failures)
    assert call_count(calls) == served
    assert server.worker_pids() == worker, "no case may kill or recycle the worker"


# ------------------------------------------------------------------ gunicorn's corpus


GUNICORN_DIFFERENCES = {
    "valid/009": "Content-Length with Transfer-Encoding (even identity) is refused, RFC 9112 6.3",
    "valid/025": "gzip before chunked: 501, we decode no coding but chunked (RFC 9112 6.1)",
    "valid/025_line": "gzip before chunked: 501, as valid/025",
    "valid/rfc9112_smuggle_gzip_chunked_01": "gzip before chunked: 501, as valid/025",
    "valid/029": "identity is no longer a transfer coding (RFC 9112): 501",
    "valid/030": "identity before chunked: 501, as valid/029",
    "valid/rfc9112_smuggle_te_identity_chunked_01": "identity before chunked: 501, as valid/029",
    "valid/027": "raw UTF-8 in the request-target is not URI syntax (RFC 3986 2): 400",
    "valid/rfc9112_target_absolute_userinfo_01": "userinfo in an http URI is an error (RFC 9110 4.2.4)",
    "valid/099": "Content-Length 17914 but 8599 bytes follow (the .http decoding strips LF from the body): truncated",
    "invalid/003c": "`-bl` is a valid token method (RFC 9110 9.1); gunicorn's uppercase rule is its policy",
    "invalid/006": "the request line (4112 bytes) is within our 8190-byte limit (gunicorn: 4094)",
    "invalid/007": "gunicorn limits each field to 8190 bytes; we limit the whole head to 32 KiB",
    "invalid/008": "per-field limit, as invalid/007",
    "invalid/017": "per-field limit, as invalid/007",
}
"""The same names and reasons as GUNICORN_DIFFERENCES in crates/proto/tests/corpus.rs."""

ADDED_HOST = "gunicorn.corpus.test"


def add_missing_hosts(data: bytes) -> bytes:
    """gunicorn's corpus predates RFC 9112 3.2's Host rule (a 400 without it, which our corpus
    checks): as the Rust runner does, each HTTP/1.1 head without Host gets one after its request
    line, so the rest of the case is still tested. Walks the requests by their framing so that a
    request line inside a body is left alone; stops at the first thing it cannot frame."""
    out = b""
    while data:
        end = data.find(b"\r\n\r\n")
        line_end = data.find(b"\r\n")
        if end < 0 or line_end < 0:
            break
        head = data[:end + 2]
        fields = head[line_end + 2:]
        if data[:line_end].endswith(b" HTTP/1.1") and not re.search(rb"(?im)^host:", fields):
            head = head[:line_end + 2] + f"Host: {ADDED_HOST}\r\n".encode() + fields
        out += head + b"\r\n"
        data = data[end + 4:]
        length = re.search(rb"(?im)^content-length:[ \t]*([0-9]+)[ \t]*\r$", fields)
        if re.search(rb"(?im)^transfer-encoding:.*chunked", fields):
            while True:  # copy the chunked body as it is
                size_end = data.find(b"\r\n")
                if size_end < 0:
                    return out + data
                try:
                    size = int(data[:size_end].split(b";")[0], 16)
                except ValueError:
                    return out + data
                if size == 0:
                    trailer_end = data.find(b"\r\n\r\n", size_end)  # == size_end without trailers
                    if trailer_end < 0:
                        return out + data
                    out += data[:trailer_end + 4]
                    data = data[trailer_end + 4:]
                    break
                out += data[:size_end + 2 + size + 2]
                data = data[size_end + 2 + size + 2:]
        elif length:
            size = int(length.group(1))
            out += data[:size]
            data = data[size:]
    return out + data


def gunicorn_requests(case: dict[str, Any]) -> list[Request]:
    requests = []
    for want in case["expect_requests"]:
        major, minor = want["version"]
        requests.append(Request(
            method=want["method"],
            target=want["uri"]["raw"],
            version=f"{major}.{minor}",
            headers=[(name, value.encode("latin-1")) for name, value in want.get("headers", [])],
            body=base64.b64decode(want.get("body_b64", "")),
        ))
    return requests


def gunicorn_disagreements(port: int, calls: Path) -> dict[str, str]:
    found = {}
    cases = json.loads(GUNICORN.read_text())["cases"]
    for case in cases:
        if case.get("settings"):
            continue
        name = case["name"]
        data = add_missing_hosts(base64.b64decode(case["raw_b64"]))
        if case["kind"] == "valid":
            faults = [fault.removeprefix(f"{name}: ")
                      for fault in check_valid(port, calls, name, data, gunicorn_requests(case), ignore_host=ADDED_HOST)]
        else:
            # Half-closed even when incomplete, as gunicorn's README says to replay it: some of
            # its cases are invalid only because the input ends (NoMoreData).
            reply, closed = exchange(port, data, half_close=True)
            statuses = [r.status for r in split_responses(reply, [data.startswith(b"HEAD ")])]
            faults = []
            if not closed:
                faults.append(f"still open after {READ_TIMEOUT:.0f} s")
            if statuses and 200 <= statuses[-1] < 300:
                faults.append(f"accepted, statuses {statuses}")
        if faults:
            found[name] = "; ".join(faults)
    return found


@pytest.mark.skipif(not GUNICORN.exists(),
                    reason=f"gunicorn's corpus is not at {GUNICORN} (../shared beside the repository)")
def test_gunicorn_default_settings_cases_agree_except_the_documented_differences(live: tuple[Any, Path]) -> None:
    server, calls = live
    worker = server.worker_pids()
    found = gunicorn_disagreements(server.port, calls)
    unexplained = {case: what for case, what in found.items() if case not in GUNICORN_DIFFERENCES}
    stale = sorted(set(GUNICORN_DIFFERENCES) - set(found))
    assert not unexplained, "disagreements with gunicorn without a documented reason:\n" + "\n".join(
        f"{case}: {what}" for case, what in sorted(unexplained.items()))
    assert not stale, f"listed as differences but now agree (update the list here, in corpus.rs and the doc): {stale}"
    assert server.worker_pids() == worker, "no case may kill or recycle the worker"
