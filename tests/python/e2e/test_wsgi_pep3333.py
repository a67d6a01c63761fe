"""WSGI (PEP 3333) through real Tines workers on both MPMs: environ, wsgi.input, write(),
exc_info, close(), framing of each body kind, file_wrapper (sendfile), and errors.

Well-behaved routes run under wsgiref.validate.validator, which raises inside the worker (a
500) on any PEP 3333 violation by the app or by the server's side of the contract."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import socket
from pathlib import Path
from typing import Any

import pytest

from conftest import read_until_closed, wait_until

APP = "pep3333_app:app"


@pytest.fixture(scope="module", params=["prefork", "thread", "event"])
def mpm(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def server(tines_server: Any, mpm: str) -> Any:
    extra = ["--threads", "4"] if mpm == "thread" else []
    return tines_server(APP, "-w", "2", "--mpm", mpm, *extra)


def request(server: Any, method: str, path: str, body: bytes | None = None,
            headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def raw(server: Any, data: bytes, shut: bool = False) -> bytes:
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(data)
        if shut:
            sock.shutdown(socket.SHUT_WR)
        return read_until_closed(sock)


def test_environ_follows_pep_3333_and_cgi(server: Any, mpm: str) -> None:
    status, _, body = request(server, "POST", "/environ?a=1&b=%20", body=b"xyz", headers={
        "Content-Type": "text/x-test", "X-Custom": "2", "Cookie": "a=1", "Accept": "text/html",
    })
    assert status == 200, body
    env = json.loads(body)
    assert env["REQUEST_METHOD"] == "POST"
    assert env["SCRIPT_NAME"] == "" and env["PATH_INFO"] == "/environ"
    assert env["QUERY_STRING"] == "a=1&b=%20"
    assert env["CONTENT_TYPE"] == "text/x-test" and env["CONTENT_LENGTH"] == "3"
    assert env["SERVER_NAME"] == "127.0.0.1" and env["SERVER_PORT"] == str(server.port)
    assert env["SERVER_PROTOCOL"] == "HTTP/1.1"
    assert env["REMOTE_ADDR"] == "127.0.0.1" and env["REMOTE_PORT"].isdigit()
    assert env["wsgi.url_scheme"] == "http" and env["wsgi.version"] == [1, 0]
    assert env["wsgi.multithread"] is (mpm == "thread")
    assert env["wsgi.multiprocess"] is True and env["wsgi.run_once"] is False
    assert env["wsgi.input_terminated"] is True
    assert env["headers"]["HTTP_X_CUSTOM"] == "2"
    assert "HTTP_CONTENT_TYPE" not in env["headers"] and "HTTP_CONTENT_LENGTH" not in env["headers"]


def test_headers_are_merged_latin1_decoded_and_underscore_names_dropped(server: Any) -> None:
    reply = raw(server, b"GET /environ?q=%41 HTTP/1.1\r\nHost: example.org:8080\r\nX-Dup: one\r\n"
                        b"X-Dup: two\r\nCookie: a=1\r\nCookie: b=2\r\nX_Dup: spoof\r\nX-Latin: caf\xe9\r\n"
                        b"Connection: close\r\n\r\n")
    env = json.loads(reply.split(b"\r\n\r\n", 1)[1])
    headers = env["headers"]
    assert headers["HTTP_X_DUP"] == "one, two", "a name with '_' must not spoof or join X-Dup"
    assert headers["HTTP_COOKIE"] == "a=1; b=2"
    assert headers["HTTP_X_LATIN"] == "caf\u00e9"
    assert env["SERVER_NAME"] == "example.org" and env["SERVER_PORT"] == "8080"
    assert env["QUERY_STRING"] == "q=%41"


def unix_get(path: Path, request: bytes) -> dict[str, Any]:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(str(path))
        sock.sendall(request)
        reply = read_until_closed(sock)
    assert reply.startswith(b"HTTP/1.1 200 "), reply
    return dict(json.loads(reply.split(b"\r\n\r\n", 1)[1]))


def test_environ_over_a_unix_socket_leaves_the_client_address_out(tmp_path: Path, tines_server: Any) -> None:
    # CGI leaves out what is unknown: a Unix-socket peer has no address or port, and no key of
    # the environ may hold the template's None instead of a value.
    path = tmp_path / "tines.sock"
    tines_server(APP, "-w", "1", "-b", f"unix:{path}")
    env = unix_get(path, b"GET /environ-keys HTTP/1.1\r\nHost: local\r\nConnection: close\r\n\r\n")
    assert "REMOTE_ADDR" not in env["keys"] and "REMOTE_PORT" not in env["keys"]
    assert {"REQUEST_METHOD", "PATH_INFO", "SERVER_NAME", "SERVER_PORT", "wsgi.input"} <= set(env["keys"])
    assert env["none"] == []
    # Behind a proxy on the socket, the forwarded client is the address (and it has no port).
    forwarded = unix_get(path, b"GET /environ HTTP/1.1\r\nHost: local\r\nX-Forwarded-For: 192.0.2.7\r\n"
                               b"Connection: close\r\n\r\n")
    assert forwarded["REMOTE_ADDR"] == "192.0.2.7" and forwarded["REMOTE_PORT"] == ""
    # And out again for the next request without one (each thread's template keeps the last
    # request's values: one that has none must not see them).
    again = unix_get(path, b"GET /environ-keys HTTP/1.1\r\nHost: local\r\nConnection: close\r\n\r\n")
    assert "REMOTE_ADDR" not in again["keys"] and again["none"] == []


def test_each_request_sees_its_own_values_when_requests_alternate(tines_server: Any) -> None:
    """Each worker thread's environ template keeps the last request's values (method, path,
    query, server name and port, protocol, header values) and sets only what changed: requests
    that differ in every one of them, in turn on one worker, must each see their own."""
    server = tines_server(APP, "-w", "1")
    first = ("GET", "/environ?a=1", {"Host": "one.example:81", "User-Agent": "agent A"})
    second = ("POST", "/environ", {"Host": "two.example", "Content-Type": "text/x-two"})
    third = ("GET", "/environ?a=1", {"Host": "one.example:81", "User-Agent": "agent B"})
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    seen = []
    try:
        for method, path, headers in [first, second, third, first, second]:
            connection.request(method, path, body=b"" if method == "POST" else None, headers=headers)
            response = connection.getresponse()
            body = response.read()
            assert response.status == 200, body
            seen.append(json.loads(body))
    finally:
        connection.close()
    # An HTTP/1.0 request without a Host header: the listening address names the server.
    reply = raw(server, b"GET /%65nviron HTTP/1.0\r\n\r\n")
    seen.append(json.loads(reply.split(b"\r\n\r\n", 1)[1]))
    # The same method and target again, over HTTP/1.1 (only the version differs).
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        connection.putrequest("GET", "/%65nviron", skip_host=True, skip_accept_encoding=True)
        connection.putheader("Host", "127.0.0.1")
        connection.endheaders()
        seen.append(json.loads(connection.getresponse().read()))
    finally:
        connection.close()

    def summary(env: dict[str, Any]) -> tuple[Any, ...]:
        return (env["REQUEST_METHOD"], env["PATH_INFO"], env["QUERY_STRING"], env["SERVER_NAME"],
                env["SERVER_PORT"], env["SERVER_PROTOCOL"], env["CONTENT_TYPE"], env["headers"])

    # http.client adds "Accept-Encoding: identity".
    one = ("GET", "/environ", "a=1", "one.example", "81", "HTTP/1.1", None,
           {"HTTP_HOST": "one.example:81", "HTTP_USER_AGENT": "agent A", "HTTP_ACCEPT_ENCODING": "identity"})
    two = ("POST", "/environ", "", "two.example", str(server.port), "HTTP/1.1", "text/x-two",
           {"HTTP_HOST": "two.example", "HTTP_ACCEPT_ENCODING": "identity"})
    three = one[:-1] + ({"HTTP_HOST": "one.example:81", "HTTP_USER_AGENT": "agent B",
                         "HTTP_ACCEPT_ENCODING": "identity"},)
    bare = ("GET", "/environ", "", "127.0.0.1", str(server.port), "HTTP/1.0", None, {})
    bare_11 = bare[:5] + ("HTTP/1.1", None, {"HTTP_HOST": "127.0.0.1"})
    assert [summary(env) for env in seen] == [one, two, three, one, two, bare, bare_11]


def test_each_request_sees_only_its_own_header_fields(tines_server: Any) -> None:
    """Each worker thread's environ template keeps the last request's header fields while the
    next request's header block is the same bytes: requests whose fields come and go (new
    names each time, past the point where the template is rebuilt compact; repeated names;
    a block seen before), and an app that rewrites its environ, must never see another's."""
    server = tines_server(APP, "-w", "1")
    sent: list[list[tuple[str, str]]] = []
    for index in range(40):
        fields = [("Host", "h.example"), (f"X-Name-{index}", f"value {index}")]
        if index % 3 == 0:
            fields += [("X-Dup", f"a{index}"), ("X-Dup", f"b{index}")]
        if index % 4 == 1:
            fields.append(("Cookie", f"c={index}"))
        sent.append(fields)
    sent.insert(20, sent[19])  # the same block twice in a row
    sent.insert(30, sent[5])  # and one seen long before
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        reader = sock.makefile("rb")

        def get(path: str, fields: list[tuple[str, str]]) -> bytes:
            head = "".join(f"{name}: {value}\r\n" for name, value in fields)
            sock.sendall(f"GET {path} HTTP/1.1\r\n{head}\r\n".encode())
            status = reader.readline()
            assert status.startswith(b"HTTP/1.1 200 "), status
            length = 0
            while (line := reader.readline()) != b"\r\n":
                name, _, value = line.partition(b":")
                if name.lower() == b"content-length":
                    length = int(value)
            return reader.read(length)

        for number, fields in enumerate(sent):
            if number % 7 == 3:
                assert get("/mutate", fields) == b"mutated"
            env = json.loads(get("/environ", fields))
            expected: dict[str, str] = {}
            for name, value in fields:
                key = "HTTP_" + name.upper().replace("-", "_")
                expected[key] = f"{expected[key]}, {value}" if key in expected else value
            assert env["headers"] == expected, f"request {number}"
            assert env["wsgi.url_scheme"] == "http" and env["REMOTE_PORT"].isdigit()
        keys = json.loads(get("/environ-keys", [("Host", "h.example")]))["keys"]
        assert "tines.test.added" not in keys and "wsgi.input" in keys


def test_a_read_while_another_thread_writes_waits_for_the_write(server: Any) -> None:
    """The exchange is lent to one call at a time: a thread that reads wsgi.input while
    another thread's write waits for the client (GIL released) waits its turn, then reads."""
    reply = raw(server, b"POST /write-while-reading HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n"
                        b"Connection: close\r\n\r\nabcde")
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 "), head
    assert body.count(b"x") == 8 << 20 and b"|read:abcde" in body, body[-200:]


def test_path_info_decodes_escapes_including_slash(server: Any) -> None:
    status, _, body = request(server, "GET", "/%65nviron")
    assert status == 200 and json.loads(body)["PATH_INFO"] == "/environ"


def test_forwarded_headers_are_believed_only_from_trusted_peers(tines_server: Any) -> None:
    trusted = tines_server(APP, "-w", "1")
    _, _, body = request(trusted, "GET", "/environ", headers={"X-Forwarded-For": "6.6.6.6, 1.2.3.4",
                                                               "X-Forwarded-Proto": "https"})
    env = json.loads(body)
    assert env["REMOTE_ADDR"] == "1.2.3.4" and env["wsgi.url_scheme"] == "https"
    # mod_ssl's variables describe a TLS connection to Tines itself: a proxy's word that its
    # own connection was TLS sets none of them.
    _, _, body = request(trusted, "GET", "/environ-keys", headers={"X-Forwarded-Proto": "https"})
    keys = json.loads(body)["keys"]
    assert [key for key in keys if key == "HTTPS" or key.startswith("SSL_")] == [], keys
    untrusted = tines_server(APP, "-w", "1", "--forwarded-allow-ips", "10.0.0.1")
    _, _, body = request(untrusted, "GET", "/environ", headers={"X-Forwarded-For": "1.2.3.4",
                                                                 "X-Forwarded-Proto": "https"})
    env = json.loads(body)
    assert env["REMOTE_ADDR"] == "127.0.0.1" and env["wsgi.url_scheme"] == "http"


def test_the_url_scheme_is_what_a_trusted_proxy_says_request_by_request(server: Any) -> None:
    """`https` or `http` from a trusted proxy's X-Forwarded-Proto (its last line's first entry,
    any case); anything else, or no header, is the connection's own `http`. One kept-alive
    connection: a request's scheme never leaks into the next one's environ (ADR 0016)."""
    cases: list[tuple[list[str], str]] = [
        (["https"], "https"), (["http"], "http"), (["HTTPS , http"], "https"), (["ftp"], "http"),
        ([], "http"), (["https"], "https"), ([""], "http"), (["http", "https"], "https"),
        (["https", "http"], "http"), ([], "http"),
    ]
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        for values, expected in cases:
            connection.putrequest("GET", "/environ")
            for value in values:
                connection.putheader("X-Forwarded-Proto", value)
            connection.endheaders()
            response = connection.getresponse()
            env = json.loads(response.read())
            assert (values, env["wsgi.url_scheme"]) == (values, expected)
    finally:
        connection.close()


def test_wsgi_input_read_variants(server: Any) -> None:
    assert request(server, "POST", "/read", body=b"all of it")[2] == b"all of it"
    assert request(server, "POST", "/read-n?4", body=b"abcdefghij")[2] == b"abcd|efgh|ij"
    lines = json.loads(request(server, "POST", "/lines", body=b"one\ntwo\nthree\nfour")[2])
    assert lines == ["one\n", "tw", ["o\n", "three\n", "four"]]
    assert request(server, "POST", "/iterate", body=b"a\nb\n")[2] == b"A\nB\n"


def test_chunked_request_bodies_reach_wsgi_input(server: Any) -> None:
    reply = raw(server, b"POST /read HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                        b"4\r\nabcd\r\n3;x=y\r\nefg\r\n0\r\nTrailer-Field: t\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 200 OK") and reply.endswith(b"\r\n\r\nabcdefg")


def test_expect_100_continue_is_sent_when_the_app_reads(server: Any) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(b"POST /read HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
        interim = b""
        while b"\r\n\r\n" not in interim:
            interim += sock.recv(1024)
        assert interim.startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        sock.sendall(b"hello")
        rest = interim.split(b"\r\n\r\n", 1)[1]
        while not rest.endswith(b"hello"):
            rest += sock.recv(1024)
        assert b"200 OK" in rest


def test_an_unread_small_streamed_body_keeps_the_connection_and_a_large_one_closes_it(
        tines_server: Any, mpm: str) -> None:
    extra = ["--threads", "4"] if mpm == "thread" else []
    server = tines_server(APP, "-w", "2", "--mpm", mpm, "--stream-body-paths", "/ignore-body",
                          *extra)
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    # Small enough to drain (max_body_drain, 64 KiB): kept.
    connection.request("POST", "/ignore-body", body=b"x" * 1000)
    response = connection.getresponse()
    assert response.read() == b"ignored" and response.getheader("Connection") is None
    connection.request("GET", "/fixed")
    assert connection.getresponse().read() == b"a fixed body"
    # Streamed (stream_body_paths) and over max_body_drain: closed.
    connection.request("POST", "/ignore-body", body=b"x" * 200_000)
    response = connection.getresponse()
    assert response.read() == b"ignored" and response.getheader("Connection") == "close"
    connection.close()
    # (A body read whole before dispatch is dropped for free, whatever its size:
    # test_request_bodies.py.)


def worker_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_a_64_mib_upload_streams_without_being_held_in_memory(tines_server: Any, mpm: str) -> None:
    server = tines_server(APP, "-w", "1", "--mpm", mpm)
    worker = server.worker_pids()[0]
    before = worker_rss_kib(worker)
    piece = os.urandom(1 << 20)
    expected = hashlib.sha256()

    def body():
        for _ in range(64):
            expected.update(piece)
            yield piece

    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    connection.request("POST", "/sha256", body=body(), encode_chunked=True,
                       headers={"Transfer-Encoding": "chunked"})
    response = connection.getresponse()
    assert response.status == 200
    assert response.read().decode() == expected.hexdigest()
    growth_mib = (worker_rss_kib(worker) - before) / 1024
    assert growth_mib < 32, f"the worker grew by {growth_mib:.1f} MiB for a 64 MiB upload"


def test_write_callable_and_generator_bodies(server: Any) -> None:
    status, headers, body = request(server, "GET", "/write")
    assert (status, body) == (200, b"written and returned")
    status, headers, body = request(server, "GET", "/generator")
    assert body == b"abc" and headers["transfer-encoding"] == "chunked"
    reply = raw(server, b"GET /generator HTTP/1.0\r\n\r\n")
    assert reply.endswith(b"\r\n\r\nabc") and b"Transfer-Encoding" not in reply
    assert b"Connection: close" in reply


def test_objects_kept_past_their_request_never_reach_the_next_one(server: Any) -> None:
    """The server reuses a request's ``wsgi.input`` and ``start_response`` objects for the next
    request only when the app kept none of them; kept ones must answer "the request is over"."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        connection.request("POST", "/keep", body=b"first body")
        first = connection.getresponse()
        assert (first.status, first.read()) == (200, b"kept")
        # Requests in between, on the same connection (so the same worker), where nothing is
        # kept: their objects may be reused from one to the next.
        for _ in range(3):
            connection.request("GET", "/fixed")
            response = connection.getresponse()
            assert (response.status, response.read()) == (200, b"a fixed body")
        connection.request("POST", "/use-kept", body=b"second body")
        second = connection.getresponse()
        body = second.read()
    finally:
        connection.close()
    assert second.status == 200, body
    outcomes = json.loads(body)
    assert outcomes["read"].startswith("ValueError: the request is over"), outcomes
    assert outcomes["write"].startswith("ValueError: the request is over"), outcomes
    assert outcomes["start_response"] != "no error", outcomes


def test_list_bodies_get_content_length_and_keep_alive(server: Any) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    for _ in range(3):
        connection.request("GET", "/fixed")
        response = connection.getresponse()
        assert response.getheader("Content-Length") == "12" and response.read() == b"a fixed body"
    connection.close()


def test_exc_info_before_anything_was_sent_replaces_the_status(server: Any) -> None:
    status, _, body = request(server, "GET", "/exc-info")
    assert (status, body) == (503, b"replaced")


def test_exc_info_after_bytes_were_sent_reraises_and_closes(server: Any) -> None:
    reply = raw(server, b"GET /exc-after-write HTTP/1.1\r\nHost: a\r\n\r\n")
    assert reply.count(b"HTTP/1.1 ") == 1, "never a second status line"
    assert b"already sent" in reply and not reply.endswith(b"0\r\n\r\n"), "the chunked body is cut"
    server.wait_for_log(r"ValueError: too late")


def test_each_response_gets_its_own_head_when_the_app_passes_the_same_objects(
        tines_server: Any, mpm: str) -> None:
    """The server keeps the head it read from the status and header tuples of the last call
    when the next call passes the same objects (an app's constants). Requests that pass the
    same, partly the same (a prefix), other or bad objects, or never call start_response, alternate on
    one worker; each gets exactly its own status and headers."""
    server = tines_server(APP, "-w", "1", "--mpm", mpm)
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    expected = {
        "/constant": (200, {"X-Constant": "a"}, b"constant"),
        "/other": (201, {"X-Other": "b"}, b"other"),
        "/text-only": (200, {}, b"text only"),
        "/constant-replaced": (201, {"X-Other": "b"}, b"replaced"),
        "/constant-then-injected": (500, {}, None),
        "/no-start-response": (500, {}, None),
    }
    order = ["/constant", "/constant", "/text-only", "/constant", "/other", "/constant", "/constant-then-injected",
             "/constant", "/no-start-response", "/constant", "/constant-replaced", "/constant",
             "/other", "/no-start-response", "/other", "/constant-then-injected", "/other"]
    try:
        for path in order:
            connection.request("GET", path)
            response = connection.getresponse()
            body = response.read()
            status, headers, want_body = expected[path]
            assert response.status == status, path
            for name in ("X-Constant", "X-Other", "X-Bad", "X-Injected"):
                assert response.getheader(name) == headers.get(name), (path, name)
            if want_body is not None:
                assert body == want_body, path
                assert response.getheader("Content-Type") == "text/plain", path
            if response.will_close:
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    finally:
        connection.close()


def test_calling_start_response_twice_is_a_500(server: Any) -> None:
    assert request(server, "GET", "/twice")[0] == 500


@pytest.mark.parametrize("path", ["/inject", "/hop"])
def test_bad_response_headers_never_reach_the_wire(server: Any, path: str) -> None:
    reply = raw(server, f"GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n".encode())
    assert reply.startswith(b"HTTP/1.1 500 ")
    assert b"X-Injected" not in reply and b"never" not in reply
    server.wait_for_log(r"invalid response header")


def test_a_str_body_item_is_a_500(server: Any) -> None:
    assert request(server, "GET", "/str-body")[0] == 500
    server.wait_for_log(r"must yield bytes, got str")


def test_an_exception_before_start_response_is_a_500_with_the_traceback(server: Any) -> None:
    pids = server.worker_pids()
    assert request(server, "GET", "/raise")[0] == 500
    server.wait_for_log(r"KeyError: 'raised before start_response'")
    assert "Traceback (most recent call last)" in server.log_text()
    assert server.worker_pids() == pids


def test_close_is_always_called(server: Any, tmp_path: Path) -> None:
    record = tmp_path / "events"
    status, _, body = request(server, "GET", f"/recorded?{record}")
    assert body == b"firstsecond"
    wait_until(lambda: record.read_text().splitlines() == ["item", "close"], what="close() after a body")
    failing = tmp_path / "failing"
    reply = raw(server, f"GET /recorded-fail?{failing} HTTP/1.1\r\nHost: a\r\n\r\n".encode())
    # "first" was sent as soon as it was yielded (PEP 3333), so when the body then fails the
    # status can no longer change: the connection closes with the chunked body unterminated,
    # which tells the client the response is incomplete.
    assert reply.startswith(b"HTTP/1.1 200 ") and reply.endswith(b"\r\n\r\n5\r\nfirst\r\n")
    wait_until(lambda: failing.exists() and failing.read_text().splitlines() == ["item", "close"],
               what="close() after an exception")


def test_content_length_mismatches_close_the_connection(server: Any) -> None:
    longer = raw(server, b"GET /cl-longer HTTP/1.1\r\nHost: a\r\n\r\n")
    assert longer.endswith(b"\r\n\r\nshort")  # then the server closed: raw() saw EOF
    shorter = raw(server, b"GET /cl-shorter HTTP/1.1\r\nHost: a\r\n\r\n")
    assert shorter.endswith(b"\r\n\r\nlon")


def test_head_gets_the_same_content_length_and_no_body(server: Any) -> None:
    get = raw(server, b"GET /fixed HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
    head = raw(server, b"HEAD /fixed HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
    get_length = [line for line in get.split(b"\r\n") if line.startswith(b"Content-Length")]
    head_length = [line for line in head.split(b"\r\n") if line.startswith(b"Content-Length")]
    assert get_length == head_length and head.endswith(b"\r\n\r\n")


def test_204_has_no_body(server: Any) -> None:
    reply = raw(server, b"GET /no-content HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 204") and reply.endswith(b"\r\n\r\n")
    assert b"Content-Length" not in reply and b"Transfer-Encoding" not in reply


def test_file_wrapper_sends_a_file_from_its_position(server: Any, tmp_path: Path) -> None:
    data = os.urandom(1 << 20)
    path = tmp_path / "blob"
    path.write_bytes(data)
    status, headers, body = request(server, "GET", f"/file?{path}")
    assert status == 200 and body == data and headers["content-length"] == str(len(data))
    status, headers, body = request(server, "GET", f"/file?{path}", headers={"X-Seek": "100"})
    assert body == data[100:] and headers["content-length"] == str(len(data) - 100)
    head = raw(server, f"HEAD /file?{path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n".encode())
    assert head.endswith(b"\r\n\r\n") and f"Content-Length: {len(data)}".encode() in head


def test_file_wrapper_over_a_non_file_falls_back_to_iteration(server: Any) -> None:
    status, _, body = request(server, "GET", "/bytesio")
    assert status == 200 and body == b"from memory" * 1000
