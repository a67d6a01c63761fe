"""The machine's fork limit for a preloaded app: fork + ``_exit`` + ``waitpid``, N times.

``fork_limit.py FILE:ATTR SECONDS [MODULE...]``: imports the MODULEs (say the Tines master's
own, ``tines.arbiter tines.worker``, for a process of the master's size) and the app as the
servers do, so the process has the app's memory and its page tables cost what a preloaded
master's do; then forks children one after the other for SECONDS, each ``os._exit(0)`` at once,
each waited for; prints one JSON line: ``forks``, ``elapsed_s``, ``forks_per_sec``, ``us_per_fork`` and the process's
``rss_kib``. No request, no pool: the ceiling of process per request with one process at a
time. benches/isolation.py runs it in every round, pinned as the server is
(``taskset -c SERVER_CPU``), and judges Tines against it.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import sys
import time

from fork_per_connection import load_app


def rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def fork_exit_wait(seconds: float) -> tuple[int, float]:
    """Sequential fork + ``_exit(0)`` + ``waitpid`` for at least ``seconds``: how many, and
    how long they took."""
    started = time.perf_counter()
    count, elapsed = 0, 0.0
    while elapsed < seconds:
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        count += 1
        elapsed = time.perf_counter() - started
    return count, elapsed


def main(argv: list[str]) -> None:
    if len(argv) < 2:
        sys.exit("usage: fork_limit.py FILE:ATTR SECONDS [MODULE...]")
    for module in argv[2:]:
        importlib.import_module(module)
    load_app(argv[0])
    gc.collect()
    seconds = float(argv[1])
    fork_exit_wait(seconds / 10)  # warm: the first forks fault the parent's pages in
    count, elapsed = fork_exit_wait(seconds)
    print(json.dumps({"forks": count, "elapsed_s": elapsed, "forks_per_sec": count / elapsed,
                      "us_per_fork": elapsed * 1e6 / count, "rss_kib": rss_kib()}))


if __name__ == "__main__":
    main(sys.argv[1:])
