"""Server hooks (docs/hooks.md): each fires in its process, in order, with the right views;
a failing on_starting/post_fork stops the start with one line; other failures are logged and
the server goes on. Also: the app's own child processes are the app's (subprocess.run)."""

from __future__ import annotations

import functools
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import APPS, ROOT, http_get, wait_until
from test_cli_errors import assert_one_line_error

HELLO = "examples/hello.py:app"
HOOKS = "recording_hooks"


get = functools.partial(http_get, close=True)


def calls(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def find(lines: list[str], pattern: str) -> list[int]:
    """Indexes of the lines matching ``pattern`` (a regex searched from the line's start)."""
    regex = re.compile(pattern)
    return [index for index, line in enumerate(lines) if regex.match(line)]


def test_hooks_fire_in_order_in_their_processes_with_the_right_arguments(tines_server: Any, tmp_path: Path) -> None:
    record = tmp_path / "hooks.log"
    server = tines_server(HELLO, "-w", "2", "--hooks", HOOKS, env={"TINES_TEST_HOOKS_LOG": str(record)})
    master = server.pid
    wait_until(lambda: find(calls(record), "when_ready "), what="when_ready")
    workers = server.worker_pids()
    lines = calls(record)
    assert lines[0] == f"on_starting pid={master} app={HELLO} workers=2", lines
    ready = find(lines, f"when_ready pid={master} live=2$")
    assert len(ready) == 1, lines
    for pid in workers:
        [post_fork] = find(lines, rf"post_fork pid={pid} worker={pid}/(\d) master={master}$")
        slot = re.match(r".* worker=\d+/(\d)", lines[post_fork]).group(1)  # type: ignore[union-attr]
        [pre_fork] = find(lines, rf"pre_fork pid={master} worker=-/{slot}$")
        [initialised] = find(lines, rf"post_worker_init pid={pid} worker={pid}/{slot}$")
        assert pre_fork < post_fork < initialised < ready[0], lines

    status, _ = get(server.port, "/hooked")
    assert status == 200
    wait_until(lambda: find(calls(record), "post_request "), what="post_request")
    lines = calls(record)
    [pre] = find(lines, r"pre_request pid=(\d+) worker=\1/\d path=/hooked$")
    [post] = find(lines, r"post_request pid=(\d+) worker=\1/\d path=/hooked status=200 OK$")
    assert ready[0] < pre < post and lines[pre].split()[1] == lines[post].split()[1], lines

    victim = workers[0]
    os.kill(victim, signal.SIGKILL)
    server.wait_for_log(r"ready in [0-9.]+ ms", count=3)
    wait_until(lambda: find(calls(record), rf"child_exit pid={master} worker={victim}/"), what="child_exit")
    assert not find(calls(record), rf"worker_exit pid={victim}"), "a SIGKILLed worker runs nothing"

    remaining = server.worker_pids()
    server.signal(signal.SIGTERM)
    assert server.wait() == 0
    lines = calls(record)
    assert lines[-1] == f"on_exit pid={master}", lines
    for pid in remaining:
        [exited] = find(lines, rf"worker_exit pid={pid} worker={pid}/\d$")
        [reaped] = find(lines, rf"child_exit pid={master} worker={pid}/\d$")
        assert exited < reaped < len(lines) - 1, lines


def test_no_request_hook_means_the_app_is_not_wrapped(tmp_path: Path) -> None:
    # The zero-cost promise, checked where it is made: with neither request hook defined the
    # worker runs the app object itself.
    from tines.hooks import Hooks, WorkerView, wrap_app

    def app(environ: Any, start_response: Any) -> list[bytes]:
        return [b""]

    worker = WorkerView(pid=1, slot=0, generation=1, mpm="prefork")
    assert wrap_app(app, Hooks({"post_fork": print}), worker) is app
    assert wrap_app(app, Hooks({"post_request": print}), worker) is not app


def serve_until_exit(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    environment = {"PYTHONPATH": str(APPS), "PATH": "/usr/bin:/bin", **env}
    return subprocess.run([sys.executable, "-m", "tines", "serve", "-b", "127.0.0.1:0", *args],
                          capture_output=True, text=True, timeout=60, cwd=ROOT, env=environment,
                          stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("hook", ["on_starting", "post_fork"])
def test_a_failing_start_hook_stops_the_first_start_with_one_line(tmp_path: Path, hook: str) -> None:
    record = tmp_path / "hooks.log"
    result = serve_until_exit("-w", "2", "--hooks", HOOKS, HELLO,
                              env={"TINES_TEST_HOOKS_LOG": str(record), "TINES_TEST_HOOKS_FAIL": hook})
    assert_one_line_error(result, f"hook {hook} raised RuntimeError: {hook} failed on purpose")
    # The traceback is logged with the hook's name before the error line.
    assert f"hook {hook} failed:\nTraceback" in result.stderr, result.stderr
    assert not find(calls(record), "when_ready"), calls(record)


def test_a_failing_post_fork_after_the_first_start_counts_for_the_crash_loop_guard(tines_server: Any, tmp_path: Path) -> None:
    gate = tmp_path / "fail-now"
    server = tines_server(HELLO, "-w", "1", "--boot-failure-limit", "2", "--hooks", HOOKS,
                          env={"TINES_TEST_HOOKS_LOG": str(tmp_path / "hooks.log"),
                               "TINES_TEST_HOOKS_FAIL": "post_fork", "TINES_TEST_HOOKS_FAIL_WHEN": str(gate)})
    gate.touch()
    os.kill(server.worker_pids()[0], signal.SIGKILL)
    server.wait_for_log(r"failed to boot: hook post_fork raised RuntimeError: post_fork failed on purpose")
    server.wait_for_log(r"worker died before ready \(1 in a row\)")
    assert server.wait() == 3  # the guard's limit, as for an app that cannot boot any more
    assert "workers keep dying before they are ready (2 in a row): giving up" in server.log_text()


def test_a_hooks_module_that_cannot_be_imported_stops_the_start() -> None:
    result = serve_until_exit("--hooks", "no_such_hooks_module", HELLO, env={})
    assert_one_line_error(result, "hooks:", "no_such_hooks_module")


def test_a_hooks_module_with_a_misspelt_hook_stops_the_start() -> None:
    result = serve_until_exit("--hooks", "misnamed_hooks", HELLO, env={})
    assert_one_line_error(result, "post_frok", "did you mean post_fork?")


@pytest.mark.parametrize("hook", ["when_ready", "pre_fork", "child_exit"])
def test_a_failing_master_hook_is_logged_and_the_master_goes_on(tines_server: Any, tmp_path: Path, hook: str) -> None:
    record = tmp_path / "hooks.log"
    server = tines_server(HELLO, "-w", "1", "--hooks", HOOKS,
                          env={"TINES_TEST_HOOKS_LOG": str(record), "TINES_TEST_HOOKS_FAIL": hook})
    victim = server.worker_pids()[0]
    os.kill(victim, signal.SIGKILL)  # child_exit runs for it, then pre_fork for the replacement
    server.wait_for_log(r"ready in [0-9.]+ ms", count=2)
    server.wait_for_log(rf"hook {hook} failed:\nTraceback")
    assert get(server.port, "/")[0] == 200
    assert server.proc.poll() is None


def test_a_failing_request_hook_is_logged_and_the_worker_goes_on(tines_server: Any, tmp_path: Path) -> None:
    record = tmp_path / "hooks.log"
    failing = tines_server(HELLO, "-w", "1", "--hooks", HOOKS,
                           env={"TINES_TEST_HOOKS_LOG": str(record), "TINES_TEST_HOOKS_FAIL": "pre_request"})
    worker = failing.worker_pids()
    assert get(failing.port, "/a")[0] == 500
    failing.wait_for_log(r"hook pre_request failed:\nTraceback")
    assert not find(calls(record), "post_request"), "the app did not run"
    post = tines_server(HELLO, "-w", "1", "--hooks", HOOKS,
                        env={"TINES_TEST_HOOKS_LOG": str(tmp_path / "post.log"), "TINES_TEST_HOOKS_FAIL": "post_request"})
    post_worker = post.worker_pids()
    assert get(post.port, "/b")[0] == 200
    assert get(post.port, "/c")[0] == 200
    post.wait_for_log(r"hook post_request failed:\nTraceback", count=2)
    assert failing.worker_pids() == worker and post.worker_pids() == post_worker


@pytest.mark.parametrize("mpm", ["prefork", "thread", "event"])
def test_an_app_gets_the_exit_status_of_its_own_subprocesses(tines_server: Any, mpm: str) -> None:
    server = tines_server("run_subprocess:app", "-w", "1", "--mpm", mpm, "--threads", "2")
    assert get(server.port, "/true") == (200, b"0")
    assert get(server.port, "/false") == (200, b"1")
    assert get(server.port, "/true") == (200, b"0")


def test_an_asgi_apps_worker_hooks_after_its_load_see_the_mpm_that_serves_it(tines_server: Any, tmp_path: Path) -> None:
    # interface auto, mpm prefork (the default): post_fork cannot know yet, the hooks run once
    # the app is loaded must say what serves it, the event reactor.
    record = tmp_path / "hooks.txt"
    server = tines_server("lifespan_lines:app", "-w", "1", "--hooks", "exit_hooks",
                          env={"LIFESPAN_FILE": str(tmp_path / "lifespan.txt"), "EXIT_HOOKS_FILE": str(record)})
    wait_until(lambda: calls(record), what="post_worker_init")
    server.signal(signal.SIGTERM)
    assert server.wait() == 0
    assert [line.split(" ", 1)[1] for line in calls(record)] == ["post_worker_init mpm=event", "worker_exit mpm=event"]
