"""What a static answer's open and fstat cost when the kernel's caches are cold (ADR 0036).

Starts one prefork worker with a ``/static`` mount over a tree of small files on the disk
(not tmpfs), and times, over one keep-alive connection, a HEAD of every file (open, fstat, the
head: no body read) and a GET of a missing name in every directory (the miss: one failed
lookup), first with the caches warm, then after ``echo 3 > /proc/sys/vm/drop_caches`` (dentries,
inodes and pages dropped: needs root). Prints the median and the 99th percentile of each, in
microseconds; then the open and fstat alone, timed in this process, warm and cold. Run from the repository root: ``.venv/bin/python benches/static_cold.py``.
"""

from __future__ import annotations

import ctypes
import http.client
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DIRS = 40
FILES = 50


def timed(conn: http.client.HTTPConnection, method: str, path: str) -> float:
    start = time.perf_counter()
    conn.request(method, path)
    response = conn.getresponse()
    response.read()
    elapsed = time.perf_counter() - start
    assert response.status in (200, 404), (path, response.status)
    return elapsed * 1e6


def summary(samples: list[float]) -> str:
    samples = sorted(samples)
    return f"median {statistics.median(samples):7.1f} µs  p99 {samples[int(len(samples) * 0.99)]:8.1f} µs"


def run_pass(port: int) -> tuple[list[float], list[float]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    hits = [timed(conn, "HEAD", f"/static/d{d}/f{f}.bin") for d in range(DIRS) for f in range(FILES)]
    misses = [timed(conn, "GET", f"/static/d{d}/missing{d}.bin") for d in range(DIRS)]
    conn.close()
    return hits, misses


def direct(root: Path) -> list[float]:
    """The open and fstat alone, as the worker makes them (openat2 beneath the mount's fd, the
    same flags), timed in this process."""
    libc = ctypes.CDLL(None, use_errno=True)
    how = (ctypes.c_uint64 * 3)(os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY, 0, 0x08 | 0x02)
    dir_fd = os.open(root, os.O_PATH | os.O_DIRECTORY)
    samples = []
    for d in range(DIRS):
        for f in range(FILES):
            name = f"d{d}/f{f}.bin".encode()
            start = time.perf_counter()
            fd = libc.syscall(437, dir_fd, name, how, 24)
            os.fstat(fd)
            samples.append((time.perf_counter() - start) * 1e6)
            os.close(fd)
    os.close(dir_fd)
    return samples


def drop_caches() -> None:
    subprocess.run(["sync"], check=True)
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def main() -> None:
    root = Path(tempfile.mkdtemp(dir=Path.cwd() / "target"))
    try:
        for d in range(DIRS):
            (root / f"d{d}").mkdir()
            for f in range(FILES):
                (root / f"d{d}" / f"f{f}.bin").write_bytes(os.urandom(4096))
        read_fd, write_fd = os.pipe()
        server = subprocess.Popen([sys.executable, "-m", "tines", "serve", "hello_pid:app", "-b", "127.0.0.1:0",
                                   "-w", "1", "--static", f"/static={root}", "--ready-fd", str(write_fd)],
                                  pass_fds=(write_fd,), start_new_session=True,
                                  env={**os.environ, "PYTHONPATH": "tests/python/e2e/apps"})
        os.close(write_fd)
        ready = os.read(read_fd, 4096).decode()
        port = int(ready.split('"binds": ["')[1].split('"')[0].rpartition(":")[2])
        try:
            run_pass(port)
            warm_hits, warm_misses = run_pass(port)
            drop_caches()
            cold_hits, cold_misses = run_pass(port)
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(30)
        print(f"{DIRS * FILES} files of 4 KiB in {DIRS} directories, ext4 on {os.uname().release}")
        print(f"HEAD, warm:  {summary(warm_hits)}")
        print(f"HEAD, cold:  {summary(cold_hits)}")
        print(f"miss, warm:  {summary(warm_misses)}")
        print(f"miss, cold:  {summary(cold_misses)}")
        direct(root)
        print(f"openat2 + fstat alone, warm:  {summary(direct(root))}")
        drop_caches()
        cold = direct(root)
        print(f"openat2 + fstat alone, cold:  {summary(cold)}  max {max(cold):8.1f} µs")
    finally:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
