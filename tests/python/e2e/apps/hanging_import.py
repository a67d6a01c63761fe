"""An app whose import never finishes: it waits for a configuration server that never answers
(a socket nobody writes to), as an import blocked on the network does."""

from __future__ import annotations

import socket


def fetch_settings_from_the_network_for_the_test() -> bytes:
    ours, _theirs = socket.socketpair()
    return ours.recv(1)


SETTINGS = fetch_settings_from_the_network_for_the_test()


def app(environ: dict[str, object], start_response: object) -> list[bytes]:
    return [SETTINGS]
