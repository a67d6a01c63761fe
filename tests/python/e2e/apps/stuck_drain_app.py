"""A stuck request beside requests that finish, for the drain after ``request_timeout``.

Both gated routes connect to the Unix socket named by ``GATE_SOCKET``, send ``<route> <pid>\\n``
(the test's readiness signal: the request is in the app) and wait until the test closes that
connection:

- ``/stuck`` waits in ``recv`` without a progress point, so it overruns ``request_timeout``;
  released, it answers 200 ``late``, which the server must drop (its client had the 503).
- ``/c-call`` then calls C code that never returns, holding the GIL (``ctypes.PyDLL``): the
  whole interpreter stops, the other requests with it.
- ``/hold`` streams: it writes a ``tick`` line each time a quarter of a second passes with the
  gate still shut (each block is a progress point, so it never overruns ``request_timeout``),
  then ``done`` once the gate opens.

Every other path answers the worker's pid.
"""

from __future__ import annotations

import ctypes
import os
import socket
from collections.abc import Callable, Iterator


def connect_gate(route: str) -> socket.socket:
    gate = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    gate.connect(os.environ["GATE_SOCKET"])
    gate.sendall(f"{route} {os.getpid()}\n".encode())
    return gate


def stuck_at_the_gate_for_the_test() -> None:
    with connect_gate("stuck") as gate:
        while gate.recv(64):
            pass


def stuck_in_c_holding_the_gil_for_the_test() -> None:
    connect_gate("stuck").close()
    libc = ctypes.PyDLL(None)
    while True:
        libc.sleep(600)


def hold_at_the_gate(gate: socket.socket) -> Iterator[bytes]:
    with gate:
        gate.settimeout(0.25)
        while True:
            try:
                if not gate.recv(64):
                    break
            except socket.timeout:
                yield b"tick\n"
        yield b"done\n"


def app(environ: dict[str, object], start_response: Callable[..., object]) -> object:
    path = environ["PATH_INFO"]
    if path == "/stuck":
        stuck_at_the_gate_for_the_test()
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "4")])
        return [b"late"]
    if path == "/c-call":
        stuck_in_c_holding_the_gil_for_the_test()
    if path == "/hold":
        gate = connect_gate("hold")
        start_response("200 OK", [("Content-Type", "text/plain")])
        return hold_at_the_gate(gate)
    body = str(os.getpid()).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
