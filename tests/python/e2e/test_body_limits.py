"""A chunked upload that grows past ``--max-body-size`` (its size is unknown until it is read).

What the docs promise (docs/settings.md, docs/http-conformance.md, docs/slow-clients.md): the
server reads the body before the app runs and answers 413 itself, whatever the app. On a
``stream_body_paths`` route the body streams: the app's read of ``wsgi.input`` fails; an app that
lets the error propagate gets a 413 from the server; an app or framework that catches it answers
with the status it chooses (Flask turns the OSError into a 500, as it does any exception from a
view), and that status stands: the response is the app's.
"""

from __future__ import annotations

import http.client
from typing import Any

import pytest


def chunked_upload(port: int, size: int) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.putrequest("POST", "/")
        connection.putheader("Transfer-Encoding", "chunked")
        connection.putheader("Content-Type", "application/octet-stream")
        connection.endheaders()
        piece = b"x" * 1000
        try:
            for _ in range(size // len(piece)):
                connection.send(b"%x\r\n%s\r\n" % (len(piece), piece))
            connection.send(b"0\r\n\r\n")
        except OSError:
            pass  # the server answered and stopped reading: the response is still there
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


@pytest.mark.parametrize("app", ["upload_limits:raw", "upload_limits:flask_app"])
def test_a_chunked_upload_over_max_body_size_is_answered_413_before_the_app_runs(
        tines_server: Any, app: str) -> None:
    server = tines_server(app, "-w", "1", "--max-body-size", "5000")
    assert chunked_upload(server.port, 3000) == (200, b"3000\n")
    status, _ = chunked_upload(server.port, 20000)
    assert status == 413


@pytest.mark.parametrize(("app", "expected"), [("upload_limits:raw", 413), ("upload_limits:flask_app", 500)])
def test_a_streamed_chunked_upload_over_max_body_size_fails_the_read_and_the_apps_status_stands(
        tines_server: Any, app: str, expected: int) -> None:
    server = tines_server(app, "-w", "1", "--max-body-size", "5000", "--stream-body-paths", "/")
    assert chunked_upload(server.port, 3000) == (200, b"3000\n")
    status, _ = chunked_upload(server.port, 20000)
    assert status == expected
