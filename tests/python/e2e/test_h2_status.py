"""The status page counts HTTP/2 connections and their open streams (``h2_connections``,
``h2_streams`` in ``/status.json``): one connection and one stream while the app holds a
stream at a gate (its neighbour already answered), the stream gone once its response ended,
the connection gone once the client closed it."""

from __future__ import annotations

import http.client
import json
import socket
from typing import Any

import pytest
from h2_frames import H2Connection
from h2_tools import ASGI, WSGI, serve_h2c

from conftest import load_app_module, wait_until

APP = load_app_module("h2_app")


def h2_counts(port: int) -> tuple[int, int, int, int]:
    """The totals' and the one worker's (h2_connections, h2_streams)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    try:
        connection.request("GET", "/status.json")
        report = json.loads(connection.getresponse().read())
    finally:
        connection.close()
    totals, (worker,) = report["totals"], report["workers"]
    return totals["h2_connections"], totals["h2_streams"], worker["h2_connections"], worker["h2_streams"]


@pytest.mark.parametrize("served,path", [((WSGI, "thread", "--threads", "4"), "/hold"), ((ASGI,), "/gated")],
                         ids=["thread", "asgi"])
def test_h2_connections_and_streams_are_counted_while_open(tines_server: Any, served: tuple[str, ...],
                                                           path: str) -> None:
    server, port = serve_h2c(tines_server, served, "--status-bind", "127.0.0.1:0")
    status = int(server.wait_for_log(r"Status at: http://127\.0\.0\.1:(\d+)")[0].group(1))
    assert h2_counts(status) == (0, 0, 0, 0)
    with socket.create_server(("127.0.0.1", 0)) as gate_listener, H2Connection(port) as connection:
        gate_listener.settimeout(20)
        connection.settle()
        held = connection.send_request(f"{path}?port={gate_listener.getsockname()[1]}&blocks=2")
        gate, _ = gate_listener.accept()  # the app holds the stream from here on
        with gate:
            beside = connection.request("/")
            assert (beside.status, beside.body) == (200, APP.HELLO), connection.describe()
            wait_until(lambda: h2_counts(status) == (1, 1, 1, 1), what="one h2 connection, one stream open")
            gate.sendall(b"x")  # /gated: the last block; /hold: read and ignored until the close
        answer = connection.response(held)
        assert answer.status == 200, connection.describe()
        wait_until(lambda: h2_counts(status) == (1, 0, 1, 0), what="the stream ended, the connection open")
    wait_until(lambda: h2_counts(status) == (0, 0, 0, 0), what="the connection closed")
