"""An ASGI request whose client is gone before the response started: the app's ``send``
raises and no false "returned without starting a response (500 sent)" line is logged (issue
41, item 7: it was, although the app did call ``send`` and nothing could reach the client)."""

from __future__ import annotations

import socket
from typing import Any

import httpx

from conftest import wait_until


def state(server: Any) -> str:
    return httpx.get(server.url + "/state", timeout=20).text


def test_a_send_after_the_client_left_logs_no_false_500(tines_server: Any) -> None:
    server = tines_server("asgi_client_gone:app", "-w", "1")
    client = socket.create_connection(("127.0.0.1", server.port), timeout=20)
    client.sendall(b"GET /leave HTTP/1.1\r\nHost: x\r\n\r\n")
    wait_until(lambda: state(server) == "waiting", what="the app waiting for http.disconnect")
    client.close()
    # The app's send raised, and end() (which logs the complaint) ran in the same step.
    wait_until(lambda: state(server) == "waiting,ClientDisconnected", what="the app's refused send")
    log = server.log_text()
    assert "without starting a response" not in log, log
    assert "Error handling request GET /leave" not in log, log
