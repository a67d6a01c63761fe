"""Requests that get stuck (for request_timeout), a stream that keeps producing, and a plain
answer naming the worker's pid.

``/sleep`` and ``/c-call`` first write the worker's pid to the file named by the
``STUCK_MARKER`` environment variable (the test's readiness signal: the request is in the
app), then never return on their own: one in ``time.sleep``, one in a C function called with
the GIL held (``ctypes.PyDLL``), which no Python-level check could interrupt.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable, Iterator


def announce_stuck() -> None:
    with open(os.environ["STUCK_MARKER"], "w") as marker:
        marker.write(str(os.getpid()))


def stuck_in_time_sleep_for_the_test() -> None:
    announce_stuck()
    time.sleep(600)


def stuck_in_c_holding_the_gil_for_the_test() -> None:
    announce_stuck()
    # PyDLL keeps the GIL for the call: the whole interpreter is stuck in libc's sleep.
    libc = ctypes.PyDLL(None)
    while True:
        libc.sleep(600)


def slow_stream(blocks: int, pause: float) -> Iterator[bytes]:
    for index in range(blocks):
        time.sleep(pause)
        yield b"block %d\n" % index


def app(environ: dict[str, object], start_response: Callable[..., object]) -> object:
    path = environ["PATH_INFO"]
    if path == "/sleep":
        stuck_in_time_sleep_for_the_test()
    elif path == "/c-call":
        stuck_in_c_holding_the_gil_for_the_test()
    elif path == "/stream":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return slow_stream(int(os.environ.get("STREAM_BLOCKS", "25")), 0.1)
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [str(os.getpid()).encode()]
