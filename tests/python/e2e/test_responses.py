"""Responses are handed to the poller on every MPM (ADR 0009): a client that does not read its
response holds no app slot. A complete (list) body goes to the worker's response store
(memory up to ``response_buffer_total``, then an unlinked file within ``buffer_disk_total``);
a streamed one may leave ``max_response_buffer`` in memory and the rest of
``max_stream_buffer`` in a file (ADR 0024, test_stream_slow_readers.py); beyond that the slot
waits for the client, up to ``send_timeout``. One worker with one app slot everywhere, so a
held slot shows."""

from __future__ import annotations

import os
import platform
import socket
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from conftest import fd_targets, load_app_module, holds_connection, read_until_closed, wait_until
from test_event import Reader, connect, get, nothing_received, wait_readable, worker_pid

APP = "responses_app:app"
MPMS = ["prefork", "thread", "event"]


_APP = load_app_module("responses_app")
SIZE: int = _APP.SIZE
PATTERN: bytes = _APP.PATTERN


def stalled(stack: ExitStack, port: int, path: str, wait: bool = True) -> socket.socket:
    """A client with a 4 KiB receive buffer that asks for ``path`` and reads nothing; with
    ``wait``, until the first response bytes arrived (so the app has run)."""
    sock = stack.enter_context(connect(port, rcvbuf=4096))
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: slow\r\n\r\n".encode())
    if wait:
        wait_readable(sock)
    return sock


def assert_whole(sock: socket.socket) -> None:
    response = Reader(sock).response()
    assert response.status == 200
    assert len(response.body) == SIZE
    assert response.body == PATTERN, "the body arrived corrupted or out of order"


def spill_fds(pid: int, directory: Path) -> list[str]:
    return [target for target in fd_targets(pid) if target.startswith(str(directory))]


@pytest.fixture
def spool_dir(tmp_path: Path) -> Iterator[Path]:
    directory = tmp_path / "spool"
    directory.mkdir()
    yield directory
    assert list(directory.iterdir()) == [], "a temporary file kept a name"


@pytest.mark.parametrize("mpm", MPMS)
def test_clients_that_never_read_ten_mib_list_bodies_do_not_stop_a_normal_client(
        tines_server: Any, spool_dir: Path, mpm: str) -> None:
    """Default buffer settings; ten clients asked for 10 MiB each and read nothing (all still
    connected): every request of a normal client is answered, in order. Then the stalled
    clients read, and each gets its body byte-exact (memory and spill file alike)."""
    server = tines_server(APP, "-w", "1", "--mpm", mpm, "--threads", "1",
                          "--request-buffer-dir", str(spool_dir))
    with ExitStack() as stack:
        slow = [stalled(stack, server.port, "/list", wait=False) for _ in range(10)]
        with connect(server.port) as normal:
            normal.settimeout(10)
            reader = Reader(normal)
            for index in range(5):
                normal.sendall(f"GET /hello?{index} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
                response = reader.response()
                assert (response.status, response.body) == (200, b"hello")
        pid = worker_pid(server)
        for sock in slow:
            wait_readable(sock)
            assert holds_connection(pid, sock), "a stalled client was cut off early"
        for sock in slow:
            assert_whole(sock)


@pytest.mark.parametrize("mpm", MPMS)
def test_list_bodies_beyond_the_memory_budget_spill_to_a_nameless_file_and_arrive_whole(
        tines_server: Any, spool_dir: Path, mpm: str) -> None:
    server = tines_server(APP, "-w", "1", "--mpm", mpm, "--threads", "1",
                          "--response-buffer-total", str(1 << 20),
                          "--request-buffer-dir", str(spool_dir))
    pid = worker_pid(server)
    with ExitStack() as stack:
        first = stalled(stack, server.port, "/list")
        second = stalled(stack, server.port, "/list")
        assert get(server.port, "/hello", timeout=10).body == b"hello"
        spilled = spill_fds(pid, spool_dir)
        assert len(spilled) == 2 and all(target.endswith("(deleted)") for target in spilled), spilled
        assert list(spool_dir.iterdir()) == []
        assert_whole(first)
        assert_whole(second)
        wait_until(lambda: not spill_fds(pid, spool_dir), what="the spill files closed once read")
        # A client that goes away unread: its file is closed too.
        gone = stalled(stack, server.port, "/list")
        wait_until(lambda: spill_fds(pid, spool_dir), what="a spill file for the third client")
        gone.close()
        wait_until(lambda: not spill_fds(pid, spool_dir), what="the spill file closed on disconnect")
        assert get(server.port, "/hello", timeout=10).body == b"hello"


@pytest.mark.parametrize("mpm", MPMS)
def test_with_both_budgets_full_the_slot_waits_and_the_send_timeout_frees_it(
        tines_server: Any, spool_dir: Path, mpm: str) -> None:
    server = tines_server(APP, "-w", "1", "--mpm", mpm, "--threads", "1",
                          "--response-buffer-total", "65536", "--buffer-disk-total", "65536",
                          "--send-timeout", "1", "--request-buffer-dir", str(spool_dir))
    pid = worker_pid(server)
    with ExitStack() as stack:
        stuck = stalled(stack, server.port, "/list")
        # Served once the send timeout cut the stuck client off (the deadline is generous).
        assert get(server.port, "/hello", timeout=20).body == b"hello"
        wait_until(lambda: not holds_connection(pid, stuck), what="the stuck client cut off")
        stuck.settimeout(20)
        assert 0 < len(read_until_closed(stuck)) < SIZE, "a cut response, then the close"
        assert get(server.port, "/hello", timeout=10).body == b"hello"


@pytest.mark.parametrize("mpm", MPMS)
def test_the_poller_cuts_a_non_reader_off_at_the_send_timeout(
        tines_server: Any, spool_dir: Path, mpm: str) -> None:
    server = tines_server(APP, "-w", "1", "--mpm", mpm, "--threads", "1", "--send-timeout", "1",
                          "--request-buffer-dir", str(spool_dir))
    pid = worker_pid(server)
    with ExitStack() as stack:
        stuck = stalled(stack, server.port, "/list")
        assert get(server.port, "/hello", timeout=10).body == b"hello"
        wait_until(lambda: not holds_connection(pid, stuck), what="the stuck client cut off")
        stuck.settimeout(20)
        assert 0 < len(read_until_closed(stuck)) < SIZE, "a cut response, then the close"
        assert get(server.port, "/hello", timeout=10).body == b"hello"


# poll(2), and ppoll(2) (what glibc's poll() uses where poll is no syscall), by architecture.
POLL_SYSCALLS = {"x86_64": {7, 271}, "aarch64": {73}, "riscv64": {73}}


def waiting_on_one_socket(pid: int) -> bool:
    """True when a thread of worker ``pid`` is blocked in poll(2) on one descriptor: a slot
    waiting for its client (``io::wait_fd``). Nothing else in a worker waits that way: the
    loop waits in epoll_wait, idle app threads on a futex. Read from
    /proc/<pid>/task/<tid>/syscall (number, then the arguments: fds, nfds, timeout)."""
    numbers = POLL_SYSCALLS[platform.machine()]
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            fields = Path(f"/proc/{pid}/task/{task}/syscall").read_text().split()
        except (FileNotFoundError, ProcessLookupError):
            continue  # the thread ended meanwhile
        if len(fields) >= 3 and fields[0].isdigit() and int(fields[0]) in numbers \
                and int(fields[2], 16) == 1:
            return True
    return False


@pytest.mark.parametrize("mpm", MPMS)
def test_a_streamed_body_beyond_max_stream_buffer_waits_for_its_reader_and_arrives_whole(
        tines_server: Any, spool_dir: Path, mpm: str) -> None:
    """Backpressure past the stream's cap: the generator's slot (the only one) waits in poll
    on the slow reader's socket, which is seen in /proc; while it waits, a second request gets
    nothing; once the reader takes the body, whole and in order, the second request is
    answered."""
    server = tines_server(APP, "-w", "1", "--mpm", mpm, "--threads", "1",
                          "--max-response-buffer", "65536", "--max-stream-buffer", "65536",
                          "--send-timeout", "60",
                          "--request-buffer-dir", str(spool_dir))
    pid = worker_pid(server)
    assert get(server.port, "/hello").body == b"hello"
    assert not waiting_on_one_socket(pid), "an idle worker has no thread waiting on a client"
    with ExitStack() as stack:
        slow = stalled(stack, server.port, "/gen")
        wait_until(lambda: waiting_on_one_socket(pid), what="the slot waiting for the slow reader")
        with connect(server.port) as other:
            other.sendall(b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\n")
            # The reader has taken nothing, so the slot still waits and cannot have answered.
            assert waiting_on_one_socket(pid)
            assert nothing_received(other)
            assert_whole(slow)
            other.settimeout(20)
            assert Reader(other).response().body == b"hello"
