"""Issue 39's follow-up: an ASGI worker's static lookups never wait for the disk on its event
loop. Names are first looked up in the dentry cache only (``openat2`` with ``RESOLVE_CACHED``);
one that is not there (a name never looked up has no dentry, cached or negative, whatever the
file system) goes to the worker's pool (its lookup threads, ``tines-pool-ioN``, apart from the
compression lanes), which looks it up, and the request is routed again once it is back: answered
the same.

The pool's work is observed as its threads' context switches (``/proc/PID/task/TID/status``): a
pool thread blocked on its queue is never scheduled, so its count moves only when it ran a job.
An event count, not a duration."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import httpx

from conftest import Server

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
            before = pool_switches(worker)
            response = http.get(f"{base}{path}", headers={"Accept-Encoding": accept})
            assert (response.status_code, response.content) == (status, body), path
            assert "content-encoding" not in response.headers
            ran = pool_switches(worker)
            assert sum(ran.values()) > sum(before.values()), (path, before, ran)
            # Asked again: every name is in the cache now (a negative dentry for what is
            # missing), answered on the loop, the pool untouched.
            response = http.get(f"{base}{path}", headers={"Accept-Encoding": accept})
            assert (response.status_code, response.content) == (status, body), path
            assert pool_switches(worker) == ran, path
        # The app still gets what is not under a mount.
        assert http.get(f"{base}/elsewhere").text.startswith("app /elsewhere ")
