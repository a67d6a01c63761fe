"""The limit_* settings (docs/limits.md): set in each worker before the app loads; the soft
CPU limit recycles a worker gracefully and the hard one kills it, each named in the log; a value
the workers could not set stops the start with one line."""

from __future__ import annotations

import functools
import http.client
import json
import resource
import subprocess
import sys

import pytest

from conftest import APPS, ROOT, http_get
from test_cli_errors import assert_one_line_error

APP = "limits_app:app"
GIB = 1024 ** 3


get = functools.partial(http_get, close=True, timeout=60.0)


def tines_with_open_files_hard_limit(hard: int, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``tines ARGS`` with RLIMIT_NOFILE (soft and hard) lowered to ``hard`` first."""
    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    env = {"PYTHONPATH": str(APPS), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "tines", *args], capture_output=True, text=True,
                          timeout=60, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, preexec_fn=lower)


def test_a_busy_worker_at_its_soft_cpu_limit_finishes_the_request_and_is_replaced(tines_server: object) -> None:
    server = tines_server(APP, "--workers", "1", "--limit-cpu", "1")  # type: ignore[operator]
    status, body = get(server.port, "/spin?seconds=2")
    assert status == 200  # SIGXCPU came at 1 s: the request still finished
    busy = int(body)
    server.wait_for_log(rf"cpu time limit \(limit_cpu 1 s\) reached: recycling this worker")
    server.wait_for_log(rf"worker {busy} \(slot 0\) exited with code 0 \(limit_cpu 1 s: [0-9.]+ s of CPU time\)")
    status, body = get(server.port, "/")
    assert status == 200 and int(body) != busy


def test_a_worker_at_its_hard_cpu_limit_is_killed_and_the_master_names_the_limit(tines_server: object) -> None:
    server = tines_server(APP, "--workers", "1", "--limit-cpu", "1", "--limit-cpu-hard", "2")  # type: ignore[operator]
    status, body = get(server.port, "/")
    killed = int(body)
    with pytest.raises((http.client.HTTPException, ConnectionError)):
        get(server.port, "/spin?seconds=30")
    server.wait_for_log(rf"worker {killed} \(slot 0\) was killed by signal SIGKILL "
                        rf"\(probably limit_cpu hard limit 2 s: [0-9.]+ s of CPU time\)")
    status, body = get(server.port, "/")
    assert status == 200 and int(body) != killed


@pytest.mark.parametrize("mpm", ["prefork", "event"])
def test_the_limits_are_in_force_in_the_worker_and_the_open_files_one_is_not_undone(tines_server: object, mpm: str) -> None:
    server = tines_server(APP, "--workers", "1", "--mpm", mpm, "--limit-open-files", "256",  # type: ignore[operator]
                          "--limit-core", "0", "--limit-address-space", str(64 * GIB),
                          "--limit-data", str(32 * GIB), "--limit-cpu", "600")
    status, body = get(server.port, "/limits")
    assert status == 200
    limits = json.loads(body)
    assert limits["NOFILE"] == [256, 256]
    assert limits["CORE"] == [0, 0]
    assert limits["AS"] == [64 * GIB, 64 * GIB]
    assert limits["DATA"] == [32 * GIB, 32 * GIB]
    assert limits["CPU"] == [600, 610]  # hard = limit_cpu + 10 without limit_cpu_hard


def test_the_byte_limits_take_units_as_max_worker_memory_does(tines_server: object) -> None:
    server = tines_server(APP, "--workers", "1", "--limit-address-space", "64GiB",  # type: ignore[operator]
                          "--limit-data", "32G", "--limit-core", "1.5MiB")
    status, body = get(server.port, "/limits")
    assert status == 200
    limits = json.loads(body)
    assert limits["AS"] == [64 * GIB, 64 * GIB]
    assert limits["DATA"] == [32 * GIB, 32 * GIB]
    assert limits["CORE"] == [3 << 19, 3 << 19]


def test_without_an_open_files_limit_the_worker_raises_its_soft_limit_to_the_hard_one(tines_server: object) -> None:
    server = tines_server(APP, "--workers", "1")  # type: ignore[operator]
    status, body = get(server.port, "/limits")
    soft, hard = json.loads(body)["NOFILE"]
    assert soft == hard


@pytest.mark.parametrize("command", ["serve", "check-config"])
def test_a_limit_above_the_hard_limit_stops_the_start_with_one_line(command: str) -> None:
    result = tines_with_open_files_hard_limit(512, command, "--limit-open-files", "1024", "-b", "127.0.0.1:0",
                                              "examples/hello.py:app")
    assert_one_line_error(result, "limit_open_files 1024 (cli)", "hard limit 512")
    assert "ready" not in result.stderr


def test_a_hard_cpu_limit_needs_the_soft_one_and_must_not_be_below_it() -> None:
    below = tines_with_open_files_hard_limit(4096, "check-config", "--limit-cpu", "5", "--limit-cpu-hard", "4",
                                             "examples/hello.py:app")
    assert_one_line_error(below, "limit_cpu_hard 4 (cli) must be at least limit_cpu 5")
    alone = tines_with_open_files_hard_limit(4096, "check-config", "--limit-cpu-hard", "4", "examples/hello.py:app")
    assert_one_line_error(alone, "limit_cpu_hard needs limit_cpu")
