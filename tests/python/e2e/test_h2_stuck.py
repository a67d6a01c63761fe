"""A stuck stream is answered by the loop at ``request_timeout`` (503, nothing having been
sent) and its worker drains, without cutting the other streams of its connection: a stream
opened beside it is answered, and the connection ends by GOAWAY NO_ERROR, not by a reset; with
a neighbour on an app thread at the same time (streams share their connection's fd: the loop
tells the stuck one by its stream id), only the stuck one is answered 503."""

from __future__ import annotations

import hashlib
import socket
from typing import Any

import pytest
from h2_frames import NO_ERROR, H2Connection
from h2_tools import WSGI, serve_h2c
from hyperframe.frame import DataFrame, RstStreamFrame

from conftest import load_app_module

APP = load_app_module("h2_app")


@pytest.mark.parametrize("mpm", [("thread", "--threads", "4"), ("event", "--threads", "2")], ids=["thread", "event"])
def test_a_stuck_stream_gets_503_and_its_neighbours_are_served(tines_server: Any, mpm: tuple[str, ...]) -> None:
    server, port = serve_h2c(tines_server, (WSGI, *mpm), "--request-timeout", "1", "--graceful-timeout", "30")
    with socket.create_server(("127.0.0.1", 0)) as gate_listener, H2Connection(port) as connection:
        gate_listener.settimeout(20)
        connection.settle()
        stuck = connection.send_request(f"/hold?port={gate_listener.getsockname()[1]}")
        gate, _ = gate_listener.accept()  # the app holds the stream from here on
        with gate:
            beside = connection.request("/")
            assert (beside.status, beside.body, beside.reset) == (200, APP.HELLO, None), connection.describe()
            answer = connection.response(stuck)
            assert (answer.status, answer.body) == (503, b"request timeout\n"), connection.describe()
            # The worker drains: its connection is told to go away gracefully (NO_ERROR), its
            # other streams not reset.
            goaway = connection.goaway()
            assert goaway is not None and goaway.error_code == NO_ERROR, connection.describe()
        # The app returns late (the gate closed): the drain ends, the connection with it.
        connection.wait_closed(60)
        assert not any(isinstance(frame, RstStreamFrame) for frame in connection.frames), connection.describe()
    server.wait_for_log(r"Request GET /hold(\?port=\d+)? returned after request_timeout answered it")


@pytest.mark.parametrize("mpm", [("thread", "--threads", "4"), ("event", "--threads", "2")], ids=["thread", "event"])
def test_a_stuck_stream_beside_another_stream_in_an_app_thread_of_the_same_connection(
        tines_server: Any, mpm: tuple[str, ...]) -> None:
    """Two streams of one connection on app threads at once (the connection's fd is theirs
    both): the stuck one gets its 503 and the other, an upload the app reads as it streams in
    (waiting on the client, which ``request_timeout`` does not count), is served after it."""
    server, port = serve_h2c(tines_server, (WSGI, *mpm), "--request-timeout", "1", "--graceful-timeout", "30",
                             "--stream-body-paths", "/upload")
    first, rest = b"a" * 1000, b"b" * 1000
    with socket.create_server(("127.0.0.1", 0)) as gate_listener, H2Connection(port) as connection:
        gate_listener.settimeout(20)
        connection.settle()
        # The upload first: dispatched at its HEADERS (a streamed body), its app thread then
        # waits for the rest of the body.
        upload = connection.new_stream()
        connection.send(connection.headers_frame(upload, [(b":method", b"POST"), (b":scheme", b"http"),
                                                          (b":authority", b"localhost"), (b":path", b"/upload"),
                                                          (b"content-length", b"2000")], end_stream=False),
                        DataFrame(upload, first))
        stuck = connection.send_request(f"/hold?port={gate_listener.getsockname()[1]}")
        gate, _ = gate_listener.accept()  # the app holds the stuck stream from here on
        with gate:
            answer = connection.response(stuck)
            assert (answer.status, answer.body) == (503, b"request timeout\n"), connection.describe()
            last = DataFrame(upload, rest)
            last.flags.add("END_STREAM")
            connection.send(last)
            uploaded = connection.response(upload)
            expected = f"{hashlib.sha256(first + rest).hexdigest()} 2000".encode()
            assert (uploaded.status, uploaded.body, uploaded.reset) == (200, expected, None), connection.describe()
            goaway = connection.goaway()
            assert goaway is not None and goaway.error_code == NO_ERROR, connection.describe()
        connection.wait_closed(60)
    server.wait_for_log(r"Request GET /hold(\?port=\d+)? returned after request_timeout answered it")
