"""A worker out of file descriptors (EMFILE) retries accept every 100 ms while connections wait
in the queue; it logs the failure once a second at most, each later line counting the failures
held back since the one before (issue 41, item 7: it was one line per retry, ten a second per
worker)."""

from __future__ import annotations

import re
import socket
from typing import Any

import pytest

APP = "examples/hello.py:app"
FAILED = r"accept failed: [^\n]*Too many open files[^\n]*"
HELD_BACK = re.compile(r"\((\d+) more since the last such line, not logged\)")


@pytest.mark.parametrize("mpm", ["prefork", "event"])
def test_a_lasting_emfile_is_logged_once_a_second_with_a_count(tines_server: Any, mpm: str) -> None:
    server = tines_server(APP, "-w", "1", "--mpm", mpm, "--limit-open-files", "64",
                          "--header-timeout", "600", "--header-timeout-max", "600")
    held: list[socket.socket] = []
    try:
        # More connections than the worker has descriptors, each with half a head so that it
        # is accepted at once (not held by TCP_DEFER_ACCEPT) and then waits for the rest.
        for _ in range(96):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=20)
            sock.sendall(b"GET / HTTP/1.1\r\n")
            held.append(sock)
        # Before the fix no line ever carried a count (each retry was a line of its own).
        server.wait_for_log(rf"{FAILED}{HELD_BACK.pattern}")
        lines = re.findall(FAILED, server.log_text())
        assert HELD_BACK.search(lines[0]) is None, lines[0]
        for line in lines[1:]:
            counted = HELD_BACK.search(line)
            assert counted is not None and int(counted.group(1)) >= 1, lines
    finally:
        for sock in held:
            sock.close()
