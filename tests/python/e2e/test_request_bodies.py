"""Request bodies are read whole by the worker's poller before the app runs, on every MPM
(docs/slow-clients.md, ADR 0008): a slow uploader holds no app slot; bodies over
``request_buffer_memory`` go to an unlinked temporary file in ``request_buffer_dir``; chunked
bodies reach the app with ``CONTENT_LENGTH``; ``Expect: 100-continue`` is answered by the
server; ``stream_body_paths`` routes still stream. Real servers, real sockets."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, holds_connection, server_side_row, wait_until
from test_event import IO_TIMEOUT, Reader, connect, nothing_received

APP = "body_echo:app"
MIB = 1 << 20


def post(sock: socket.socket, body: bytes, path: str = "/", extra: str = "") -> None:
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode()
                 + body)


def chunked(*pieces: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for piece in pieces) + b"0\r\n\r\n"


def fd_targets(pid: int) -> list[str]:
    targets = []
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            targets.append(os.readlink(f"/proc/{pid}/fd/{name}"))
        except FileNotFoundError:
            pass
    return targets


def spool_fds(pid: int, directory: Path) -> list[str]:
    """The worker's descriptors of files in ``directory``."""
    return [target for target in fd_targets(pid) if target.startswith(str(directory) + "/")]


def held_by_any_process(directory: Path) -> list[tuple[int, str]]:
    """Every descriptor of any process on files in ``directory``."""
    held = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                held.extend((int(entry), target) for target in spool_fds(int(entry), directory))
            except (FileNotFoundError, PermissionError, ProcessLookupError):
                pass  # gone meanwhile
    return held


def unread_by_server(client: socket.socket) -> int:
    """Bytes ``client`` sent that wait unread in the server's socket (``rx_queue`` of the
    server's end in /proc/net/tcp)."""
    fields = server_side_row(client)
    if fields is None:
        raise AssertionError("no such connection")
    return int(fields[4].split(":")[1], 16)


WAITS_FOR_DISK = "waits for room in buffer_disk_total"


def memory_kib(pid: int) -> int:
    """The process's resident memory (RSS, KiB)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


class Trickler:
    """Sends one byte a second on ``sock`` (a body that never ends in time) until stopped."""

    def __init__(self, sock: socket.socket, byte: bytes) -> None:
        self.sock = sock
        self.byte = byte
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.stop.wait(1.0):
            try:
                self.sock.sendall(self.byte)
            except OSError:
                return

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.sock.close()


@pytest.mark.parametrize("mpm", ["prefork", "thread", "event"])
def test_slow_uploaders_do_not_hold_the_only_app_slot(tines_server: Any, mpm: str) -> None:
    # One worker, one slot: if an uploader's request were dispatched, the app would sit in
    # wsgi.input.read() for the whole upload and the normal client would wait for it.
    server = tines_server(APP, "-w", "1", "--mpm", mpm, "--threads", "1")
    length_uploader = connect(server.port)
    length_uploader.sendall(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 1000000\r\n\r\nx")
    chunked_uploader = connect(server.port)
    chunked_uploader.sendall(b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                             b"f4240\r\nx")
    tricklers = [Trickler(length_uploader, b"x"), Trickler(chunked_uploader, b"x")]
    try:
        normal = connect(server.port)
        normal.settimeout(10)  # per request: far above a served request, far below the uploads
        reader = Reader(normal)
        statuses = []
        for index in range(5):
            post(normal, b"n" * index)
            response = reader.response()
            statuses.append((response.status, response.body))
        assert statuses == [(200, f"{i} {i} -".encode()) for i in range(5)]
        # The uploaders are still connected and unanswered.
        assert nothing_received(length_uploader) and nothing_received(chunked_uploader)
    finally:
        for trickler in tricklers:
            trickler.close()


def test_a_chunked_body_reaches_the_app_with_its_decoded_length_and_no_transfer_encoding(
        tines_server: Any) -> None:
    server = tines_server(APP, "-w", "1")
    with connect(server.port) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                     + chunked(b"hello ", b"chunked ", b"world"))
        response = Reader(sock).response()
    assert (response.status, response.body) == (200, b"19 19 -")


@pytest.mark.parametrize("mpm", ["prefork", "thread", "event"])
def test_a_request_pipelined_after_a_chunked_body_is_served(tines_server: Any, mpm: str) -> None:
    server = tines_server(APP, "-w", "1", "--mpm", mpm)
    with connect(server.port) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                     + chunked(b"abc", b"defg")
                     + b"POST /second HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nhi")
        reader = Reader(sock)
        first, second = reader.response(), reader.response()
    assert (first.status, first.body) == (200, b"7 7 -")
    assert (second.status, second.body) == (200, b"2 2 -")


@pytest.mark.parametrize(("store", "size"), [
    # In memory, stored in slices of request_buffer_memory: the body ends in the first.
    (("--request-buffer-memory", "1024"), 5),
    # Past request_buffer_memory into a file, stored in slices of the disk room that
    # buffer_disk_total allows: the body ends in the first slice that goes to the file.
    (("--request-buffer-memory", "1024", "--buffer-disk-total", "2000"), 1500),
], ids=["memory", "file"])
def test_a_request_pipelined_in_the_head_s_packet_after_a_chunked_body_is_served_whole(
        tines_server: Any, store: tuple[str, ...], size: int) -> None:
    # The body and the whole next request came with the first head (more bytes than one
    # slice of the body's store takes): every byte after the body's end is the next request.
    server = tines_server(APP, "-w", "1", "--header-timeout", "3", *store)
    pad = "p" * 2000
    with connect(server.port) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                     + chunked(b"b" * size)
                     + f"GET /a HTTP/1.1\r\nHost: t\r\nX-Pad: {pad}\r\n\r\n".encode())
        reader = Reader(sock)
        first, second = reader.response(), reader.response()
    assert (first.status, first.body) == (200, f"{size} {size} -".encode())
    assert (second.status, second.body) == (200, b"0 - -")


@pytest.mark.parametrize("store", [(), ("--request-buffer-memory", "1024")], ids=["memory", "file"])
def test_a_buffered_body_the_app_ignores_is_dropped_and_the_connection_kept(
        tines_server: Any, store: tuple[str, ...]) -> None:
    # 100 KiB is over max_body_drain (64 KiB), which only bounds bodies still in the socket:
    # this one was read whole before dispatch.
    server = tines_server(APP, "-w", "1", "--max-body-drain", "65536", *store)
    with connect(server.port) as sock:
        reader = Reader(sock)
        post(sock, b"x" * 100 * 1024, path="/ignore")
        ignored = reader.response()
        assert (ignored.status, ignored.body) == (200, b"ignored")
        assert ignored.headers.get("connection") != "close"
        post(sock, b"next")
        after = reader.response()
    assert (after.status, after.body) == (200, b"4 4 -")


@pytest.mark.parametrize("mpm", ["prefork", "event"])
def test_a_body_over_request_buffer_memory_goes_to_an_unnamed_file_freed_after_the_request(
        tines_server: Any, tmp_path: Path, mpm: str) -> None:
    spool = tmp_path / "spool"
    spool.mkdir()
    server = tines_server(APP, "-w", "1", "--mpm", mpm, "--request-buffer-memory", "65536",
                          "--request-buffer-dir", str(spool))
    (worker,) = server.worker_pids()
    body = os.urandom(MIB)
    with connect(server.port) as sock:
        sock.sendall(f"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                     + body[:300_000])
        # Mid-upload: the worker holds a file in the directory that has no name there.
        held = wait_until(lambda: spool_fds(worker, spool), what="a temporary file in request_buffer_dir")
        assert all(target.endswith("(deleted)") for target in held), held  # type: ignore[union-attr]
        assert os.listdir(spool) == []
        sock.sendall(body[300_000:])
        response = Reader(sock).response()
        assert (response.status, response.body) == (200, f"{MIB} {MIB} -".encode())
        # The request is over: the file is closed, even though the connection stays open.
        wait_until(lambda: not spool_fds(worker, spool), what="the temporary file closed")
    assert os.listdir(spool) == []


@pytest.mark.parametrize("mpm", ["prefork", "thread", "event"])
def test_100_continue_comes_from_the_server_before_the_body_is_sent(tines_server: Any, mpm: str) -> None:
    server = tines_server(APP, "-w", "1", "--mpm", mpm)
    with connect(server.port) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
        reader = Reader(sock)
        interim = reader.response()
        assert interim.status == 100
        sock.sendall(b"hello")
        final = reader.response()
        assert (final.status, final.body) == (200, b"5 5 -")
        # Exactly one 100: nothing else follows the final response.
        assert not reader.buf and nothing_received(sock)


def test_a_content_length_over_max_body_size_gets_413_and_no_100_continue(tines_server: Any) -> None:
    server = tines_server(APP, "-w", "1", "--max-body-size", "1000")
    with connect(server.port) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 1001\r\nExpect: 100-continue\r\n\r\n")
        response = Reader(sock).response()
    assert response.status == 413


def test_a_chunked_body_growing_past_max_body_size_gets_413_before_the_app_runs(tines_server: Any) -> None:
    server = tines_server(APP, "-w", "1", "--max-body-size", "1000")
    with connect(server.port) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                     + chunked(b"a" * 600, b"b" * 600))
        response = Reader(sock).response()
    assert response.status == 413


@pytest.mark.parametrize("mpm", ["prefork", "thread"])
def test_a_body_that_stalls_before_dispatch_gets_408(tines_server: Any, mpm: str) -> None:
    server = tines_server(APP, "-w", "1", "--mpm", mpm, "--body-timeout", "1", "--body-min-rate", "0")
    with connect(server.port) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\nonly some")
        response = Reader(sock).response()
    assert response.status == 408


# Every spelling of a path under the prefix streams: it is matched in normal form (decoded
# once, `//` collapsed, an absolute form's path), as the rate limits and compression read paths.
@pytest.mark.parametrize("target", [b"/stream/up?x=1", b"/%73tream/up?x=1", b"//stream//up",
                                    b"http://t/stream/up#f"])
def test_a_stream_body_path_lets_the_app_read_the_first_bytes_before_the_body_is_complete(
        tines_server: Any, target: bytes) -> None:
    server = tines_server(APP, "-w", "1", "--stream-body-paths", "/stream/")
    with connect(server.port) as sock:
        # Only the first ten of a hundred bytes: the response can only come if the app runs
        # before the body is complete.
        sock.sendall(b"POST " + target + b" HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n0123456789")
        reader = Reader(sock)
        response = reader.response()
        assert (response.status, response.body) == (200, b"first 0123456789")
        sock.sendall(b"z" * 90)  # the rest, drained by the server: the connection is kept
        post(sock, b"abc")
        after = reader.response()
    assert (after.status, after.body) == (200, b"3 3 -")


@pytest.mark.parametrize("mpm", ["thread", "event"])
def test_a_body_that_needs_disk_beyond_buffer_disk_total_waits_unread_until_a_request_frees_it(
        tines_server: Any, tmp_path: Path, gate: tuple[socket.socket, str], mpm: str) -> None:
    # (prefork: the loop does not run while its process holds the first request, so nothing
    # waits; the starvation test below covers its waiting.) The bodies are larger than a
    # head's read buffer (max_head_size, 32 KiB), which may take a body whole with the head.
    listener, gate_path = gate
    spool = tmp_path / "spool"
    spool.mkdir()
    server = tines_server(APP, "-w", "1", "--mpm", mpm, "--threads", "2", "--log-level", "debug",
                          "--request-buffer-memory", "1024", "--buffer-disk-total", "150000",
                          "--request-buffer-dir", str(spool), env={"GATE_SOCKET": gate_path})
    (worker,) = server.worker_pids()
    first, second = connect(server.port), connect(server.port)
    try:
        post(first, b"a" * 100_000, path="/hold")
        held, _ = listener.accept()  # the first request's file (100 kB) is held by the app
        held.settimeout(IO_TIMEOUT)
        assert held.recv(64).strip().isdigit()
        post(second, b"b" * 100_000)  # needs 100 kB at once; 50 kB are free
        server.wait_for_log(WAITS_FOR_DISK)
        # It waits with its body unread in its socket and no file of its own: not on the
        # free app slot (the app would have read it) and not half-stored.
        assert unread_by_server(second) > 0
        assert len(spool_fds(worker, spool)) == 1
        assert nothing_received(second)
        held.close()  # the first request completes and its file is closed
        answer_first = Reader(first).response()
        answer_second = Reader(second).response()
        assert (answer_first.status, answer_first.body) == (200, b"100000 100000 -")
        assert (answer_second.status, answer_second.body) == (200, b"100000 100000 -")
    finally:
        first.close()
        second.close()


@pytest.mark.parametrize("mpm", ["prefork", "thread"])
def test_two_content_length_bodies_that_fit_the_disk_budget_only_one_at_a_time_never_starve_each_other(
        tines_server: Any, tmp_path: Path, mpm: str) -> None:
    # buffer_disk_total holds one of the two bodies, not both. If each could take part of
    # it as its bytes came, both would stall half-read until their deadline (408).
    spool = tmp_path / "spool"
    spool.mkdir()
    server = tines_server(APP, "-w", "1", "--mpm", mpm, "--threads", "2", "--log-level", "debug",
                          "--request-buffer-memory", "1024", "--buffer-disk-total", "30000",
                          "--body-timeout", "3", "--body-min-rate", "0",
                          "--request-buffer-dir", str(spool))
    first, second = connect(server.port), connect(server.port)
    try:
        head = b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 20000\r\n\r\n"
        first.sendall(head + b"a" * 15_000)
        wait_until(lambda: unread_by_server(first) == 0, what="the first body's start read")
        second.sendall(head + b"b" * 15_000)
        # The second body is read as it comes, or waits unread for disk room.
        wait_until(lambda: unread_by_server(second) == 0 or WAITS_FOR_DISK in server.log_text(),
                   what="the second body read or waiting")
        first.sendall(b"a" * 5_000)
        second.sendall(b"b" * 5_000)
        answers = [Reader(sock).response() for sock in (first, second)]
        assert [(answer.status, answer.body) for answer in answers] == [(200, b"20000 20000 -")] * 2
    finally:
        first.close()
        second.close()


def test_a_503_from_a_full_queue_gives_back_the_body_s_temporary_file_at_once(
        tines_server: Any, tmp_path: Path, gate: tuple[socket.socket, str]) -> None:
    listener, gate_path = gate
    spool = tmp_path / "spool"
    spool.mkdir()
    server = tines_server(APP, "-w", "1", "--mpm", "event", "--threads", "1",
                          "--max-queued-requests", "1", "--request-buffer-memory", "1024",
                          "--request-buffer-dir", str(spool), "--linger-timeout", "60",
                          env={"GATE_SOCKET": gate_path})
    (worker,) = server.worker_pids()
    running, queued, refused = (connect(server.port) for _ in range(3))
    held = None
    try:
        post(running, b"a", path="/hold")
        held, _ = listener.accept()  # the one app thread runs it
        held.settimeout(IO_TIMEOUT)
        assert held.recv(64).strip().isdigit()
        post(queued, b"b")  # waits in the queue
        post(refused, b"c" * 100_000)  # read whole into a file, then refused: the queue is full
        assert Reader(refused).response().status == 503
        held.close()
        assert Reader(running).response().body == b"1 1 -"
        assert Reader(queued).response().body == b"1 1 -"
        # The refused client has not closed, so its connection lingers (up to 60 s); the loop
        # answered the others since the 503: the refused body's file is closed already.
        assert spool_fds(worker, spool) == []
        assert holds_connection(worker, refused)
    finally:
        for sock in (running, queued, refused):
            sock.close()
        if held is not None:
            held.close()


def test_a_full_disk_fails_the_request_with_507_and_the_worker_lives_on(
        tines_server: Any, tmp_path: Path) -> None:
    small = tmp_path / "small"
    small.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(small)],
                             capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        server = tines_server(APP, "-w", "1", "--request-buffer-memory", "1024",
                              "--request-buffer-dir", str(small))
        with connect(server.port) as sock:
            try:
                post(sock, b"x" * (3 * MIB))
            except OSError:
                pass  # the server answered and stopped reading
            assert Reader(sock).response().status == 507
        server.wait_for_log(r"request_buffer_dir .*small.*No space left on device")
        with connect(server.port) as sock:
            post(sock, b"fits")
            assert Reader(sock).response().body == b"4 4 -"
    finally:
        subprocess.run(["umount", "-l", str(small)], check=False)


def test_a_request_buffer_dir_where_no_temporary_file_can_be_made_is_refused_before_start() -> None:
    # /proc is a directory, but no file can be created in it (not even as root).
    result = subprocess.run(
        [sys.executable, "-m", "tines", "check-config", "--request-buffer-dir", "/proc",
         "examples/hello.py:app"], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 2
    assert "request_buffer_dir" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def check_config(*args: str, cwd: Path | str = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tines", "check-config", *args],
                          capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "python")})


def test_a_relative_request_buffer_dir_is_checked_where_the_workers_will_use_it(tmp_path: Path) -> None:
    # The workers run in chdir: "spool" means chdir/spool there, whatever the master's
    # directory was.
    (tmp_path / "spool").mkdir()
    (tmp_path / "app.py").write_text("def app(environ, start_response):\n    return []\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = check_config("--chdir", str(tmp_path), "--request-buffer-dir", "spool", "app:app",
                          cwd=elsewhere)
    assert result.returncode == 0, result.stderr
    (tmp_path / "spool").rmdir()
    (elsewhere / "spool").mkdir()
    result = check_config("--chdir", str(tmp_path), "--request-buffer-dir", "spool", "app:app",
                          cwd=elsewhere)
    assert result.returncode == 2
    assert f"{tmp_path}/spool" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_a_request_buffer_dir_the_worker_user_cannot_write_is_refused_before_start() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root, to switch to another user")
    try:
        import pwd
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user nobody here")
    # In /tmp, which anyone can reach (pytest's own directories are root's alone).
    private = tempfile.mkdtemp(prefix="tines-private-", dir="/tmp")  # 0700, root's
    try:
        result = check_config("--user", "nobody", "--request-buffer-dir", private,
                              "examples/hello.py:app")
        assert result.returncode == 2
        assert "request_buffer_dir" in result.stderr and "nobody" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
        os.chown(private, nobody.pw_uid, nobody.pw_gid)
        result = check_config("--user", "nobody", "--request-buffer-dir", private,
                              "examples/hello.py:app")
        assert result.returncode == 0, result.stderr
    finally:
        os.rmdir(private)


def stream_upload(sock: socket.socket, size: int, during: Any) -> None:
    """Sends a ``size``-byte body in 1 MiB blocks (never held whole), calling ``during()``
    every 64 MiB."""
    block = os.urandom(MIB)
    sock.sendall(f"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: {size}\r\n\r\n".encode())
    sent = 0
    while sent < size:
        piece = block[:min(MIB, size - sent)]
        sock.sendall(piece)
        sent += len(piece)
        if sent % (64 * MIB) == 0:
            during()


def test_a_1_gb_upload_costs_the_worker_no_memory_and_leaves_no_file(
        tines_server: Any, tmp_path: Path) -> None:
    size = 1_000_000_000
    spool = tmp_path / "spool"
    spool.mkdir()
    server = tines_server(APP, "-w", "1", "--max-body-size", str(2 * size),
                          "--request-buffer-dir", str(spool))
    (worker,) = server.worker_pids()
    with connect(server.port) as sock:
        post(sock, b"warm-up")
        assert Reader(sock).response().status == 200
        before = memory_kib(worker)
        peak = before
        seen_file = []

        def sample() -> None:
            nonlocal peak
            peak = max(peak, memory_kib(worker))
            seen_file.extend(spool_fds(worker, spool))

        stream_upload(sock, size, sample)
        response = Reader(sock).response()
        sample()
        assert (response.status, response.body) == (200, f"{size} {size} -".encode())
    assert seen_file and all(target.endswith("(deleted)") for target in seen_file)
    # request_buffer_memory (256 KiB) plus a few MiB (the app's 1 MiB read blocks, allocator
    # slack): nothing near the body's size.
    assert peak - before < 256 + 8 * 1024, (before, peak)
    wait_until(lambda: not spool_fds(worker, spool), what="the temporary file closed")
    assert os.listdir(spool) == []

    # Killed mid-upload, while it held the file: the unnamed file goes with the process.
    killed: list[int] = []
    with connect(server.port) as sock:
        def kill_at_64_mib() -> None:
            if spool_fds(worker, spool):
                killed.append(worker)
                os.kill(worker, 9)
                raise ConnectionResetError("killed")
        try:
            stream_upload(sock, 256 * MIB, kill_at_64_mib)
        except OSError:
            pass
    assert killed == [worker]
    wait_until(lambda: not os.path.exists(f"/proc/{worker}/fd"), what="the killed worker gone")
    # The file had no name (O_TMPFILE), so its blocks are freed once no descriptor is left:
    # none went to another process (the master, a new worker). (The mkostemp fallback, for
    # a file system without O_TMPFILE, would also leave no name; it cannot be forced here.)
    assert held_by_any_process(spool) == []
