"""ps tells the master from its workers: ``tines: master [APP]``, ``tines: worker SLOT [MPM] gen G``."""

from __future__ import annotations

import signal
from typing import Any

import pytest

from conftest import wait_until

HELLO = "examples/hello.py:app"


def title(pid: int) -> str:
    """What ps shows for ``pid``: its command line, as the kernel reports it."""
    with open(f"/proc/{pid}/cmdline", "rb") as handle:
        return handle.read().split(b"\0")[0].decode().strip()


@pytest.mark.parametrize("mpm", ["prefork", "thread", "event"])
def test_the_master_and_each_worker_have_their_own_process_title(tines_server: Any, mpm: str) -> None:
    server = tines_server(HELLO, "-w", "2", "--mpm", mpm)
    assert title(server.pid) == f"tines: master [{HELLO}]"
    workers = sorted(title(pid) for pid in server.worker_pids())
    assert workers == [f"tines: worker 0 [{mpm}] gen 1", f"tines: worker 1 [{mpm}] gen 1"]


def test_after_a_reload_workers_show_their_generation_and_the_master_keeps_its_title(tines_server: Any) -> None:
    server = tines_server(HELLO, "-w", "2")
    old = set(server.worker_pids())
    server.signal(signal.SIGHUP)
    wait_until(lambda: len(server.worker_pids()) == 2 and not old & set(server.worker_pids()),
               what="the new generation to replace the old one")
    workers = sorted(title(pid) for pid in server.worker_pids())
    assert all(line.startswith("tines: worker ") and line.endswith("[prefork] gen 2") for line in workers), workers
    assert title(server.pid) == f"tines: master [{HELLO}]"
