"""Slow readers of a streamed WSGI body hold no slot (ADR 0024, issue 41 item 3): while its
client reads slower than the app produces, the slot pulls a finite stream from the app into
memory (``max_response_buffer``) and then a nameless temporary file, up to
``max_stream_buffer`` in all; the app's iterator is then finished and closed, the slot freed,
and the poller writes the rest. Past the cap the slot waits for its client, bounded by
``send_timeout`` (the existing backpressure test, test_responses.py, runs past the cap).

One worker with one app slot everywhere, so a held slot shows. Synchronised on gates and on
what the client received, never on a duration."""

from __future__ import annotations

import socket
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from conftest import holds_connection, load_app_module, read_until_closed, wait_until
from test_event import Reader, connect, get, worker_pid
from test_responses import APP, MPMS, PATTERN, SIZE, spill_fds, spool_dir, stalled

__all__ = ["spool_dir"]  # the fixture, imported for this module's tests

_APP = load_app_module("responses_app")
GATED_FIRST: int = _APP.GATED_FIRST

SLOW_READERS = 8
PROBES = 40
MIN_ANSWERED = 39
PROBE_DEADLINE = 10.0
"""Generous for one hello request on loopback; a slot held by a slow reader makes it expire."""


def probe(port: int) -> bool:
    """One hello on a new connection: answered in time, or not."""
    try:
        response = get(port, "/hello", timeout=PROBE_DEADLINE)
    except (OSError, EOFError):
        return False
    return (response.status, response.body) == (200, b"hello")


@pytest.mark.parametrize("mpm", MPMS)
def test_slow_readers_of_ten_mib_streams_leave_a_normal_client_answered(
        tines_server: Any, spool_dir: Path, mpm: str) -> None:
    """Eight clients ask for a 10 MiB generator body (half with the app's Content-Length, half
    chunked) and read nothing: a normal client still gets 39 of 40 answers, the streams wait
    in nameless temporary files, and each slow client then reads exactly its 10 MiB, framed
    as the app set it, on a connection that is kept."""
    server = tines_server(APP, "-w", "1", "--mpm", mpm, "--threads", "1",
                          "--request-buffer-dir", str(spool_dir))
    pid = worker_pid(server)
    paths = ["/gen", "/gen-chunked"] * (SLOW_READERS // 2)
    with ExitStack() as stack:
        slow = [stalled(stack, server.port, path, wait=False) for path in paths]
        answered = failed = 0
        for _ in range(PROBES):
            if probe(server.port):
                answered += 1
            else:
                failed += 1
                if failed > PROBES - MIN_ANSWERED:
                    break  # the bar can no longer be reached: spare the remaining deadlines
        assert answered >= MIN_ANSWERED, f"{answered} of {PROBES} probes answered"
        for sock in slow:
            assert holds_connection(pid, sock), "a slow reader was cut off"
        assert spill_fds(pid, spool_dir), "the streams wait in temporary files"
        for sock, path in zip(slow, paths):
            reader = Reader(sock)
            response = reader.response()
            assert response.status == 200
            if path == "/gen":
                assert response.headers.get("content-length") == str(SIZE), response.headers
                assert "transfer-encoding" not in response.headers, response.headers
            else:
                # The reader checks every chunk's size line and CRLF, and the last chunk.
                assert response.headers.get("transfer-encoding") == "chunked", response.headers
                assert "content-length" not in response.headers, response.headers
            assert len(response.body) == SIZE
            assert response.body == PATTERN, "the body arrived corrupted or out of order"
            assert reader.buf == b"", "nothing follows the response"
            sock.sendall(b"GET /hello HTTP/1.1\r\nHost: slow\r\n\r\n")
            assert reader.response().body == b"hello", "the connection is kept"
        wait_until(lambda: not spill_fds(pid, spool_dir), what="the spill files closed once read")


def read_body(reader: Reader, until: int) -> bytes:
    """Reads the response's head (once) and body bytes until ``until`` of them arrived."""
    if not hasattr(reader, "body_start"):
        while b"\r\n\r\n" not in reader.buf:
            assert reader._fill(), "closed before the head"
        head, _, rest = bytes(reader.buf).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 "), head
        reader.buf = bytearray(rest)
        reader.body_start = True  # type: ignore[attr-defined]
    while len(reader.buf) < until:
        # Times out (fails) when bytes the app produced are held back.
        assert reader._fill(), f"closed with {len(reader.buf)} of {until} body bytes"
    return bytes(reader.buf)


@pytest.mark.parametrize("mpm", ["thread", "event"])
def test_a_spooled_stream_reaches_its_reader_block_by_block_while_the_app_waits(
        tines_server: Any, gate: tuple[socket.socket, str], spool_dir: Path, mpm: str) -> None:
    """PEP 3333 with the spool: an 8 MiB first block waits partly in a temporary file; the app
    then waits at a gate before each next block. Every block, the spilled one included, must
    reach the reader while the app still waits (the loop writes what the client takes), so
    each is received before the test opens the next gate. (On prefork the loop is the slot:
    queued bytes wait for the app's next block, docs/slow-clients.md.)"""
    listener, gate_path = gate
    server = tines_server(APP, "-w", "1", "--mpm", mpm, "--threads", "1",
                          "--request-buffer-dir", str(spool_dir),
                          env={"RESPONSES_APP_GATE": gate_path})
    pid = worker_pid(server)
    blocks = 3
    with connect(server.port, rcvbuf=4096) as client:
        client.sendall(f"GET /gated?{blocks} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
        reader = Reader(client)
        expected = PATTERN[:GATED_FIRST]
        for index in range(1, blocks + 1):
            held, _ = listener.accept()
            with held:
                held.settimeout(PROBE_DEADLINE)
                assert held.recv(16) == f"{index}\n".encode(), "the app waits at its gate"
                if index == 1:
                    assert spill_fds(pid, spool_dir), "the first block waits partly on disk"
                assert read_body(reader, len(expected)) == expected, f"block {index - 1} out of order"
                held.sendall(b"x")  # only now may the app produce the next block
            expected += f"tick {index}\n".encode()
        assert read_body(reader, len(expected)) == expected
        wait_until(lambda: not spill_fds(pid, spool_dir), what="the spill file closed once read")


@pytest.mark.parametrize("mpm", MPMS)
def test_a_stream_past_max_stream_buffer_holds_its_slot_until_the_send_timeout(
        tines_server: Any, spool_dir: Path, mpm: str) -> None:
    """Past the cap the slot waits for its client as before ADR 0024, and the send timeout
    frees it: a client that never reads is cut off, and the next request is answered."""
    server = tines_server(APP, "-w", "1", "--mpm", mpm, "--threads", "1",
                          "--max-stream-buffer", "1MiB", "--send-timeout", "1",
                          "--request-buffer-dir", str(spool_dir))
    pid = worker_pid(server)
    with ExitStack() as stack:
        stuck = stalled(stack, server.port, "/gen")
        # Served once the send timeout cut the stuck client off (the deadline is generous).
        assert get(server.port, "/hello", timeout=30).body == b"hello"
        wait_until(lambda: not holds_connection(pid, stuck), what="the stuck client cut off")
        stuck.settimeout(20)
        assert 0 < len(read_until_closed(stuck)) < SIZE, "a cut response, then the close"
        assert get(server.port, "/hello").body == b"hello"
