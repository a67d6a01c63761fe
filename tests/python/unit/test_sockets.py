"""tines.sockets: TCP_DEFER_ACCEPT on the listeners the master binds (`defer_accept`)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tines.sockets import bind_all


def deferral(sock: socket.socket) -> int:
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_DEFER_ACCEPT)


@pytest.mark.parametrize("address", ["127.0.0.1:0", "[::1]:0"])
def test_tcp_listeners_get_the_deferral_and_zero_clears_it(address: str) -> None:
    try:
        listeners = bind_all([address], 16, 5)
    except Exception as error:  # noqa: BLE001 - no IPv6 loopback here
        if address.startswith("["):
            pytest.skip(f"no IPv6 loopback: {error}")
        raise
    try:
        assert deferral(listeners[0].sock) > 0
    finally:
        for listener in listeners:
            listener.close()
    listeners = bind_all([address], 16, 0)
    try:
        assert deferral(listeners[0].sock) == 0
    finally:
        for listener in listeners:
            listener.close()


def test_an_adopted_tcp_socket_gets_it_and_a_unix_socket_is_left_alone(tmp_path: Path) -> None:
    inherited = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    inherited.bind(("127.0.0.1", 0))
    inherited.listen(4)
    path = tmp_path / "s.sock"
    listeners = bind_all([f"fd://{inherited.detach()}", f"unix:{path}"], 16, 3)
    try:
        assert deferral(listeners[0].sock) > 0
        assert listeners[1].sock.family == socket.AF_UNIX
    finally:
        for listener in listeners:
            listener.close()
