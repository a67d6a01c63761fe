"""A streamed WSGI body leaves block by block (PEP 3333: a server must not delay the
transmission of any block), while a small list body still leaves in one write with its head.

The streaming app waits on a gate the test holds before producing each next block, so the test
asserts an order (block i reached the client before the app was allowed to produce block i+1),
never a duration.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import wait_until

MPMS = [("prefork",), ("thread", "--threads", "2"), ("event",), ("event", "--threads", "0")]
MPM_IDS = ["prefork", "thread", "event", "event-inline"]
BLOCK_DEADLINE = 15.0
"""How long a block may take to arrive before the test calls it held back (generous: the app
produced it at once, so on an idle machine it arrives within a millisecond)."""


def block(index: int) -> bytes:
    return f"tick {index}\n".encode()


def read_until(sock: socket.socket, needle: bytes, received: bytes, what: str) -> bytes:
    """Read until ``needle`` is in what was received; fail if it does not come in time."""
    sock.settimeout(BLOCK_DEADLINE)
    while needle not in received:
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            raise AssertionError(f"{what} was held back: got only {received!r}") from None
        if not chunk:
            raise AssertionError(f"connection closed before {what}: got {received!r}")
        received += chunk
    return received


def dechunk(body: bytes) -> bytes:
    out = b""
    while True:
        size_line, _, body = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return out
        out, body = out + body[:size], body[size + 2:]


@pytest.mark.parametrize("mpm", MPMS, ids=MPM_IDS)
@pytest.mark.parametrize("framing", ["chunked", "length"])
def test_each_streamed_block_reaches_the_client_before_the_app_produces_the_next(
        tines_server: Any, mpm: tuple[str, ...], framing: str) -> None:
    server = tines_server("streaming:app", "-w", "1", "--mpm", *mpm)
    blocks = 4
    with socket.create_server(("127.0.0.1", 0)) as gate_listener, \
            socket.create_connection(("127.0.0.1", server.port), timeout=20) as client:
        gate_port = gate_listener.getsockname()[1]
        length = "&length=1" if framing == "length" else ""
        client.sendall(f"GET /gated?port={gate_port}&blocks={blocks}{length} HTTP/1.1\r\n"
                       f"Host: t\r\n\r\n".encode())
        gate_listener.settimeout(20)
        gate, _ = gate_listener.accept()
        with gate:
            received = b""
            for index in range(1, blocks + 1):
                received = read_until(client, block(index), received, f"block {index}")
                if index < blocks:
                    gate.sendall(b"g")  # only now may the app produce the next block
        head, _, body = received.partition(b"\r\n\r\n")
        if framing == "chunked":
            assert b"transfer-encoding: chunked" in head.lower()
            received = read_until(client, b"0\r\n\r\n", received, "the last chunk")
            body = dechunk(received.partition(b"\r\n\r\n")[2])
        else:
            assert b"content-length: 28" in head.lower()
        assert head.startswith(b"HTTP/1.1 200 ")
        assert body == b"".join(block(i) for i in range(1, blocks + 1))
        # The connection stays usable after a streamed response.
        client.sendall(b"GET /list HTTP/1.1\r\nHost: t\r\n\r\n")
        assert read_until(client, b"second part", b"", "the next response").startswith(b"HTTP/1.1 200 ")


def strace_binary() -> str:
    """strace, installed with apt when missing (root only); skip with the reason otherwise."""
    found = shutil.which("strace")
    if found:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        for command in (["apt-get", "install", "-y", "-q", "strace"], ["apt-get", "update", "-q"],
                        ["apt-get", "install", "-y", "-q", "strace"]):
            subprocess.run(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=300, check=False)
            if shutil.which("strace"):
                return str(shutil.which("strace"))
    pytest.skip("strace is not installed and could not be installed with apt-get (counting writes needs it)")


WRITES = re.compile(r"^\d+\s+(sendmsg|sendto|write|writev|sendfile)\((\d+),")
# A call another thread interrupts is logged in two lines ("accept4(3, <unfinished ...>", then
# "<... accept4 resumed>...) = 16"): the accepted fd is on the line with the result.
ACCEPTS = re.compile(r"^\d+\s+(?:accept4?\(|<\.\.\. accept4? resumed>).*\)\s+=\s+(\d+)")


def writes_per_connection(trace: str) -> list[int]:
    """For each accepted connection in an strace log (-f), how many write calls it got."""
    counts: list[int] = []
    connection_of: dict[int, int] = {}  # fd -> index in counts (a closed fd's number is reused)
    for line in trace.splitlines():
        if match := ACCEPTS.match(line):
            connection_of[int(match.group(1))] = len(counts)
            counts.append(0)
        elif (match := WRITES.match(line)) and int(match.group(2)) in connection_of:
            counts[connection_of[int(match.group(2))]] += 1
    return counts


@pytest.mark.parametrize("mpm", MPMS, ids=MPM_IDS)
def test_small_bodies_leave_in_one_write_and_generators_one_write_per_block(
        tines_server: Any, mpm: tuple[str, ...], tmp_path: Path) -> None:
    strace = strace_binary()
    server = tines_server("streaming:app", "-w", "1", "--mpm", *mpm)
    (worker,) = wait_until(server.worker_pids, what="the worker")  # type: ignore[misc]
    trace_path, err_path = tmp_path / "trace.txt", tmp_path / "strace.err"
    with open(err_path, "wb") as err:
        tracer = subprocess.Popen([strace, "-f", "-o", str(trace_path), "-e",
                                   "trace=accept,accept4,sendmsg,sendto,write,writev,sendfile",
                                   "-p", str(worker)], stdin=subprocess.DEVNULL, stderr=err)
    try:
        wait_until(lambda: b"attached" in err_path.read_bytes(), what="strace to attach")
        expected = []
        for target, count in (("/list", 1), ("/generator?blocks=3", 4), ("/bytesio", 2)):
            with socket.create_connection(("127.0.0.1", server.port), timeout=20) as client:
                client.sendall(f"GET {target} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode())
                received = b""
                client.settimeout(20)
                while chunk := client.recv(65536):
                    received += chunk
                assert received.startswith(b"HTTP/1.1 200 ")
            expected.append(count)
    finally:
        tracer.terminate()
        tracer.wait(20)
    # A list body: head and body in one write. A generator of 3 blocks: one write per block
    # (the first with the head), and the last chunk. A file wrapper over an in-memory file
    # (5 blocks of 4 KiB, read at once): gathered up to the 16 KiB output buffer, so 2.
    assert writes_per_connection(trace_path.read_text()) == expected, trace_path.read_text()
