"""Responses written in batches (issue 15, ADR 0011): a slot that serves several ready requests
in a row writes their small responses back to back when the batch ends, not one by one.

The order is observed with the gate of apps/gate.py, never with a clock: two requests become
ready together (sent while the worker is held by a third), the first is answered by the app at
once, the second waits at the gate. While it waits, the first response has not left the
server when batching is on, and has when the batch was due (the first request took longer
than `response_batch_delay`) or batching is off.
"""

from __future__ import annotations

import socket
from typing import Any

import pytest

from test_event import Reader, connect, nothing_received

APP = "gate:app"
GET = b"GET %s HTTP/1.1\r\nHost: t\r\n\r\n"
# Long enough that no batch falls due while the test runs; the batch then ends only when the
# slot would sleep.
A_MINUTE = "60"
# Shorter than any request can take: every batch falls due before the next request.
A_MICROSECOND = "0.000001"

MPMS = [
    pytest.param(("--mpm", "prefork"), id="prefork"),
    pytest.param(("--mpm", "event", "--threads", "0"), id="event-inline"),
    # One app thread: the loop hands both requests over in one batch and the thread takes
    # them in order.
    pytest.param(("--mpm", "event", "--threads", "1"), id="event"),
    pytest.param(("--mpm", "thread", "--threads", "1"), id="thread"),
]


def answered(sock: socket.socket, reader: Reader) -> bytes:
    response = reader.response()
    assert response.status == 200
    return response.body


def first_response_left_while_second_request_runs(
        tines_server: Any, gate: tuple[socket.socket, str], mpm: tuple[str, ...],
        delay: str) -> bool:
    """Whether the response to request A had reached its client when request B, ready at the
    same time and served after it, was running in the app."""
    listener, path = gate
    server = tines_server(APP, "-w", "1", *mpm, "--response-batch-delay", delay,
                          env={"GATE_SOCKET": path})
    holder, first, second = (connect(server.port) for _ in range(3))
    readers = {sock: Reader(sock) for sock in (holder, first, second)}
    try:
        # Each connection accepted and idle first, so that their next requests are plain
        # readable events of one loop wake-up, in the order they are sent.
        for sock in (first, second):
            sock.sendall(GET % b"/")
            answered(sock, readers[sock])
        holder.sendall(GET % b"/hold")
        held, _ = listener.accept()  # the worker's one slot is busy: nothing else runs
        held.recv(64)  # its "<pid> <thread>" line (closing with it unread would reset)
        first.sendall(GET % b"/a")
        second.sendall(GET % b"/hold")
        held.close()  # the slot comes back and finds both requests ready
        running, _ = listener.accept()  # B runs (A was served before it)
        try:
            running.recv(64)  # its "<pid> <thread>" line: the app is inside B now
            left = not nothing_received(first)
        finally:
            running.close()
        # Whatever the order, every response arrives whole.
        for sock in (holder, first, second):
            assert answered(sock, readers[sock]).isdigit()
        return left
    finally:
        for sock in (holder, first, second):
            sock.close()


@pytest.mark.parametrize("mpm", MPMS)
def test_a_small_response_waits_for_the_end_of_its_batch(
        tines_server: Any, gate: tuple[socket.socket, str], mpm: tuple[str, ...]) -> None:
    assert not first_response_left_while_second_request_runs(tines_server, gate, mpm, A_MINUTE)


@pytest.mark.parametrize("mpm", MPMS)
def test_a_batch_is_written_before_a_request_that_would_make_it_wait_past_the_delay(
        tines_server: Any, gate: tuple[socket.socket, str], mpm: tuple[str, ...]) -> None:
    assert first_response_left_while_second_request_runs(tines_server, gate, mpm, A_MICROSECOND)


@pytest.mark.parametrize("mpm", MPMS)
def test_with_no_delay_each_response_is_written_when_it_is_complete(
        tines_server: Any, gate: tuple[socket.socket, str], mpm: tuple[str, ...]) -> None:
    assert first_response_left_while_second_request_runs(tines_server, gate, mpm, "0")


@pytest.mark.parametrize("mpm", [("--mpm", "event", "--threads", "1"),
                                 ("--mpm", "thread", "--threads", "1")], ids=["event", "thread"])
def test_a_request_that_arrives_while_buffered_ones_are_served_is_answered_too(
        tines_server: Any, gate: tuple[socket.socket, str], mpm: tuple[str, ...]) -> None:
    # Three requests arrive in one packet; a fourth arrives while the app holds the first. The
    # loop sees the fourth's bytes arrive while the connection is out; the connection comes
    # back after each batched response and the buffered two are served from the buffer first,
    # but the fourth must still be read before the connection is parked (it raised its one
    # edge already). Lost, it would wait for the keep-alive timeout and a reset.
    listener, path = gate
    server = tines_server(APP, "-w", "1", *mpm, "--keepalive-timeout", "300",
                          env={"GATE_SOCKET": path})
    with connect(server.port) as sock:
        reader = Reader(sock)
        sock.sendall(GET % b"/hold" + GET % b"/a" + GET % b"/b")
        held, _ = listener.accept()
        held.recv(64)
        sock.sendall(GET % b"/c")
        held.close()
        bodies = [answered(sock, reader) for _ in range(4)]
    assert all(body.isdigit() for body in bodies)
