"""What the app and the operator see of an HTTP/2 request, on every MPM and an ASGI app:
``SERVER_PROTOCOL`` ``HTTP/2`` and the scheme (WSGI), ``http_version`` ``2`` (ASGI), the
access log's protocol ``HTTP/2.0``, ``:authority`` as the host and cookie crumbs joined; and
the header rules of RFC 9113 8.2 applied before the app: a field name in uppercase or a
connection-specific field resets the stream (PROTOCOL_ERROR) and never reaches the app (it
counts its calls), the connection serving on; ``x_forwarded_for`` never becomes
``HTTP_X_FORWARDED_FOR``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from h2_frames import PROTOCOL_ERROR, H2Connection, Header
from hyperframe.frame import GoAwayFrame, HeadersFrame, RstStreamFrame
from h2_tools import ASGI, SERVED, SERVED_IDS, serve_h2c

from conftest import http_get, wait_until


def info(connection: H2Connection, served: tuple[str, ...], extra: list[Header] | None = None) -> dict[str, Any]:
    response = connection.request("/scope" if served[0] == ASGI else "/env", extra=extra or [])
    assert response.status == 200 and response.reset is None, connection.describe()
    return json.loads(response.body)  # type: ignore[no-any-return]


@pytest.mark.parametrize("served", SERVED, ids=SERVED_IDS)
def test_the_app_sees_http2_and_the_access_log_says_http2(tines_server: Any, tmp_path: Path,
                                                          served: tuple[str, ...]) -> None:
    access_log = tmp_path / "access.log"
    server, port = serve_h2c(tines_server, served, "--access-log", str(access_log))
    with H2Connection(port) as connection:
        connection.settle()
        seen = info(connection, served, [(b"cookie", b"a=1"), (b"cookie", b"b=2"), (b"x-test", b"yes")])
    if served[0] == ASGI:
        assert (seen["http_version"], seen["scheme"], seen["method"]) == ("2", "http", "GET"), seen
        headers = dict(seen["headers"])
        assert headers["host"] == "localhost" and headers["x-test"] == "yes", seen
        assert "; ".join(value for name, value in seen["headers"] if name == "cookie") == "a=1; b=2", seen
        assert all(name == name.lower() for name, _ in seen["headers"]), seen
    else:
        assert (seen["SERVER_PROTOCOL"], seen["wsgi.url_scheme"], seen["REQUEST_METHOD"]) == ("HTTP/2", "http", "GET")
        assert seen["HTTP_HOST"] == "localhost" and seen["HTTP_X_TEST"] == "yes", seen
        assert seen["HTTP_COOKIE"] == "a=1; b=2", seen
        assert "HTTP_CONNECTION" not in seen and "HTTP_TRANSFER_ENCODING" not in seen, seen
    # The same app over HTTP/1.1 on the first bind, for the log line to compare.
    assert http_get(server.port, "/")[0] == 200
    wait_until(lambda: len(access_log.read_text().splitlines()) >= 2, what="two access log lines")
    lines = access_log.read_text().splitlines()
    assert len(lines) == 2, lines
    path = "/scope" if served[0] == ASGI else "/env"
    assert f'"GET {path} HTTP/2.0" 200' in lines[0] and '"GET / HTTP/1.1" 200' in lines[1], lines


REFUSED: list[tuple[str, list[Header]]] = [
    ("connection", [(b"connection", b"keep-alive")]),
    ("keep-alive", [(b"keep-alive", b"timeout=5")]),
    ("proxy-connection", [(b"proxy-connection", b"keep-alive")]),
    ("transfer-encoding", [(b"transfer-encoding", b"chunked")]),
    ("upgrade", [(b"upgrade", b"websocket")]),
    ("te other than trailers", [(b"te", b"gzip")]),
]


@pytest.mark.parametrize("served", SERVED, ids=SERVED_IDS)
def test_a_malformed_request_is_reset_and_never_reaches_the_app(tines_server: Any, served: tuple[str, ...]) -> None:
    _, port = serve_h2c(tines_server, served)
    with H2Connection(port) as connection:
        # A name in uppercase: a stream error (RFC 9113 8.2.1, 8.1.1), or a connection error,
        # which an endpoint may always choose (5.4; h2spec's 8.1.2/1 takes either too).
        connection.settle()
        upper = connection.send_request("/calls", extra=[(b"X-Upper", b"1")])
        refused = connection.wait_for(lambda f: isinstance(f, (RstStreamFrame, GoAwayFrame))
                                      or (isinstance(f, HeadersFrame) and f.stream_id == upper),
                                      "RST_STREAM or GOAWAY")
        assert isinstance(refused, (RstStreamFrame, GoAwayFrame)) and refused.error_code == PROTOCOL_ERROR, \
            connection.describe()
    with H2Connection(port) as connection:
        connection.settle()
        for what, extra in REFUSED:
            response = connection.request("/calls", extra=extra)
            assert response.reset == PROTOCOL_ERROR and not response.body, (what, connection.describe())
        # te: trailers is allowed; the connection survived every reset above.
        allowed = connection.request("/calls", extra=[(b"te", b"trailers")])
        assert (allowed.status, allowed.body) == (200, b"1"), ("only this call reached the app", connection.describe())


@pytest.mark.parametrize("served", SERVED, ids=SERVED_IDS)
def test_x_forwarded_for_with_an_underscore_never_becomes_the_forwarded_address(
        tines_server: Any, served: tuple[str, ...]) -> None:
    _, port = serve_h2c(tines_server, served)
    with H2Connection(port) as connection:
        connection.settle()
        seen = info(connection, served, [(b"x_forwarded_for", b"203.0.113.9")])
    if served[0] == ASGI:
        # ASGI passes names as they came (no CGI mangling to collide with); what matters is
        # that it is not taken for the forwarded address.
        assert seen["client"][0] == "127.0.0.1", seen
        assert all(name != "x-forwarded-for" for name, _ in seen["headers"]), seen
    else:
        assert "HTTP_X_FORWARDED_FOR" not in seen and seen["REMOTE_ADDR"] == "127.0.0.1", seen
