"""Issue 39's follow-up: an ASGI worker's static lookups never wait for the disk on its event
loop. Names are first looked up in the dentry cache only (``openat2`` with ``RESOLVE_CACHED``);
one that is not there (a name never looked up has no dentry, cached or negative, whatever the
file system) goes to the worker's pool (its lookup threads, ``tines-pool-ioN``, apart from the
compression lanes), which looks it up, and the request is routed again once it is back: answered
the same.

The pool's work is observed as its threads' context switches (``/proc/PID/task/TID/status``): a
pool thread blocked on its queue is never scheduled, so its count moves only when it ran a job.
An event count, not a duration. A thread that has just handed its result back is still on its way
to its queue's wait (where its count moves once more), so counts are read settled: every pool
thread asleep, and the same counts twice in a row."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import httpx

from conftest import Server, wait_until

ASGI = "static_app:asgi"
CSS = b"body { color: #123456 }\n" * 200


def pool_switches(pid: int) -> dict[str, int]:
    """Context switches of ``pid``'s pool threads, by name."""
    counts = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        name = (task / "comm").read_text().strip()
        if name.startswith("tines-pool"):
            fields = dict(line.split(":\t") for line in (task / "status").read_text().splitlines() if ":\t" in line)
            counts[name] = int(fields["voluntary_ctxt_switches"]) + int(fields["nonvoluntary_ctxt_switches"])
    return counts


def settled_switches(pid: int) -> dict[str, int]:
    """``pool_switches`` once every pool thread sleeps on its queue (the state ``S``) and two
    reads in a row agree: a thread that ran a job has finished counting it."""
    def asleep() -> bool:
        return all(line.split()[1] == "S"
                   for task in Path(f"/proc/{pid}/task").iterdir()
                   if (task / "comm").read_text().startswith("tines-pool")
                   for line in (task / "status").read_text().splitlines() if line.startswith("State:"))
    seen: list[dict[str, int]] = []

    def steady() -> bool:
        if not asleep():
            return False
        seen.append(pool_switches(pid))
        return len(seen) > 1 and seen[-1] == seen[-2]
    wait_until(steady, what="the pool's threads asleep")
    return seen[-1]


def test_cold_static_lookups_run_on_the_pool_warm_ones_on_the_loop(
        tines_server: Callable[..., Server], tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "a.css").write_bytes(CSS)
    server = tines_server(ASGI, "-w", "1", "--static", f"/static={site}")
    [worker] = server.worker_pids()
    base = f"http://127.0.0.1:{server.port}"
    assert sorted(pool_switches(worker)) == ["tines-pool-io0", "tines-pool-io1"]
    assert pool_switches(server.pid) == {}
    missing = f"/static/missing-{uuid.uuid4().hex}.txt"
    with httpx.Client(timeout=20) as http:
        # a.css's dentry is cached (the file was just made), its .br sibling's name never
        # looked up: cold, so the pool looks it up; a miss never looked up is cold too.
        for path, accept, status, body in (("/static/a.css", "br", 200, CSS), (missing, "", 404, b"Not Found\n")):
            before = settled_switches(worker)
            response = http.get(f"{base}{path}", headers={"Accept-Encoding": accept})
            assert (response.status_code, response.content) == (status, body), path
            assert "content-encoding" not in response.headers
            ran = settled_switches(worker)
            assert sum(ran.values()) > sum(before.values()), (path, before, ran)
            # Asked again: every name is in the cache now (a negative dentry for what is
            # missing), answered on the loop, the pool untouched.
            response = http.get(f"{base}{path}", headers={"Accept-Encoding": accept})
            assert (response.status_code, response.content) == (status, body), path
            assert settled_switches(worker) == ran, path
        # The app still gets what is not under a mount.
        assert http.get(f"{base}/elsewhere").text.startswith("app /elsewhere ")
