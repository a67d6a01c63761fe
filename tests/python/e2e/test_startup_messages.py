"""The master says in one line which interface runs and which MPM really serves it, and the
ready line on --ready-fd, the workers' process titles and check-config agree: an ASGI app is
never said to run on prefork; plurals are right."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from conftest import APPS, ROOT, wait_until

WSGI = "examples/hello.py:app"
ASGI = "asgi_features:app"


def title(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as handle:
        return handle.read().split(b"\0")[0].decode().strip()


def test_a_wsgi_app_is_said_to_run_on_its_mpm_with_1_worker(tines_server: Any) -> None:
    server = tines_server(WSGI, "-w", "1")
    log = server.log_text()
    assert "Starting 1 worker; the ready line says which interface and MPM serve the app" in log
    assert "ready: 1 worker, WSGI app on mpm prefork\n" in log
    assert "1 workers" not in log
    assert (server.ready["interface"], server.ready["mpm"], server.ready["workers"]) == ("wsgi", "prefork", 1)
    assert [title(pid) for pid in server.worker_pids()] == ["tines: worker 0 [prefork] gen 1"]


def test_a_wsgi_app_with_the_interface_set_is_named_before_the_fork(tines_server: Any) -> None:
    server = tines_server(WSGI, "-w", "2", "--mpm", "thread", "--threads", "2", "--interface", "wsgi")
    log = server.log_text()
    assert "Using mpm thread with 2 workers for a WSGI app" in log
    assert "ready: 2 workers, WSGI app on mpm thread\n" in log
    assert sorted(title(pid) for pid in server.worker_pids()) == [
        "tines: worker 0 [thread] gen 1", "tines: worker 1 [thread] gen 1"]


def test_an_asgi_app_is_said_to_run_on_the_event_reactor_never_prefork(tines_server: Any) -> None:
    server = tines_server(ASGI, "-w", "2")
    log = server.log_text()
    assert "ready: 2 workers, ASGI 3 app on the event MPM's reactor and an asyncio loop per worker\n" in log
    assert "prefork" not in log, log
    assert (server.ready["interface"], server.ready["mpm"]) == ("asgi3", "event")
    assert sorted(title(pid) for pid in server.worker_pids()) == [
        "tines: worker 0 [asgi event] gen 1", "tines: worker 1 [asgi event] gen 1"]


def test_a_preloaded_asgi_app_is_named_in_the_start_line(tines_server: Any) -> None:
    server = tines_server(ASGI, "-w", "1", "--preload")
    log = server.log_text()
    assert ("Using the event MPM's reactor and an asyncio loop per worker with 1 worker for an ASGI 3 app"
            in log)
    assert "prefork" not in log, log


def check_config(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tines", "check-config", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(APPS)})


def test_check_config_says_the_interface_and_with_check_app_that_the_app_imported() -> None:
    plain = check_config(ASGI, "-w", "1")
    assert plain.returncode == 0, plain.stderr
    assert ("interface: auto: not known until the app is imported (--check-app imports it); WSGI apps run on "
            "mpm prefork, ASGI apps on the event MPM's reactor") in plain.stdout
    asgi = check_config(ASGI, "--check-app")
    assert asgi.returncode == 0, asgi.stderr
    assert (f"app: {ASGI} imported: an ASGI 3 app, on the event MPM's reactor and an asyncio loop per "
            "worker (mpm prefork is for WSGI apps)") in asgi.stdout
    wsgi = check_config(WSGI, "--check-app", "--mpm", "thread")
    assert wsgi.returncode == 0, wsgi.stderr
    assert f"app: {WSGI} imported: a WSGI app, on mpm thread" in wsgi.stdout
    assert "interface: auto" in wsgi.stdout


def test_a_preloaded_asgi_app_forked_by_the_fork_server_shows_the_event_reactor_in_every_title(
        tines_server: Any) -> None:
    server = tines_server(ASGI, "-w", "1", "--preload", "--max-requests", "1")
    # The fork server, the worker and its standby (max_requests 1); a process the fork server has
    # just forked shows its title until it sets its own.
    expected = ["tines: fork server [asgi event] gen 1", "tines: worker 0 [asgi event] gen 1",
                "tines: worker 1 [asgi event] gen 1"]
    wait_until(lambda: sorted(title(pid) for pid in server.worker_pids()) == expected,
               what=f"the titles {expected}")
