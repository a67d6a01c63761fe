"""Bad input gets one clear line on stderr and exit code 2."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import APPS, ROOT


def tines(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": str(APPS), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "tines", *args], capture_output=True, text=True,
                          timeout=60, cwd=cwd, env=env, stdin=subprocess.DEVNULL)


def assert_one_line_error(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("tines: error:")]
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    # The error is the last thing said (log lines, and a traceback for the app's own
    # exception, may come before it).
    assert result.stderr.rstrip().splitlines()[-1] == lines[0]


def test_unknown_flag() -> None:
    assert_one_line_error(tines("serve", "--wokers", "2", "examples/hello.py:app"), "--wokers")


def test_bad_worker_count() -> None:
    assert_one_line_error(tines("serve", "-w", "x", "examples/hello.py:app"),
                          "workers must be a positive integer, got 'x'")


def test_unreadable_config_file(tmp_path: Path) -> None:
    assert_one_line_error(tines("serve", "-c", str(tmp_path / "missing.toml"), "examples/hello.py:app"),
                          "cannot read config file")


def test_toml_syntax_error_names_the_line(tmp_path: Path) -> None:
    config = tmp_path / "tines.toml"
    config.write_text('workers = 2\nbind = ["127.0.0.1:0"\nmpm = "prefork"\n')
    assert_one_line_error(tines("serve", "-c", str(config), "examples/hello.py:app"), "line 3")


def test_unknown_config_key_suggests_the_right_one(tmp_path: Path) -> None:
    config = tmp_path / "tines.toml"
    config.write_text("wokers = 2\n")
    assert_one_line_error(tines("serve", "-c", str(config), "examples/hello.py:app"),
                          "wokers", "did you mean 'workers'")


@pytest.mark.parametrize("preload", [False, True])
def test_app_module_that_cannot_be_imported(preload: bool) -> None:
    extra = ["--preload"] if preload else []
    result = tines("serve", "-b", "127.0.0.1:0", "-w", "2", *extra, "no_such_module_here:app")
    assert_one_line_error(result, "No module named 'no_such_module_here'")


def test_app_module_that_raises_while_importing() -> None:
    result = tines("serve", "-b", "127.0.0.1:0", "-w", "1", "broken_import:app")
    assert_one_line_error(result, "ZeroDivisionError")
    assert "Traceback" in result.stderr


def test_missing_attribute() -> None:
    result = tines("serve", "-b", "127.0.0.1:0", "-w", "1", "examples/hello.py:nothing")
    assert_one_line_error(result, "nothing")


def test_port_in_use() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = tines("serve", "-b", f"127.0.0.1:{port}", "examples/hello.py:app")
    assert_one_line_error(result, f"cannot bind 127.0.0.1:{port}", "Address already in use")


def serve_refused(*args: str) -> subprocess.CompletedProcess[str]:
    """``tines serve`` with --ready-fd; fails the test if the master announces ready (a setting
    that breaks every worker must stop the start, not be found after it)."""
    read_fd, write_fd = os.pipe()
    env = {"PYTHONPATH": str(APPS), "PATH": "/usr/bin:/bin"}
    command = [sys.executable, "-m", "tines", "serve", "-b", "127.0.0.1:0", "-w", "1",
               "--ready-fd", str(write_fd), *args, "examples/hello.py:app"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT, env=env, stdin=subprocess.DEVNULL, pass_fds=(write_fd,),
                            start_new_session=True)
    os.close(write_fd)
    try:
        with os.fdopen(read_fd, "rb") as ready:
            announced = ready.readline()  # EOF when the master exits without announcing
        if announced:
            os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert not announced, f"the master announced ready with {args}: {announced!r}"
    return subprocess.CompletedProcess(command, proc.returncode, stdout, stderr)


@pytest.mark.parametrize("flag, value", [
    ("--keepalive-timeout", "1e308"),
    ("--body-timeout", "1e20"),
    ("--send-timeout", "1e20"),
    ("--header-timeout", "1e308"),
    ("--header-timeout-max", "1e308"),
    ("--send-timeout", "1e19"),
])
def test_a_timeout_too_long_for_the_clock_stops_the_start(flag: str, value: str) -> None:
    setting = flag[2:].replace("-", "_")
    assert_one_line_error(serve_refused(flag, value), setting, "seconds from 0 to 1000000000")


@pytest.mark.parametrize("flag, value", [
    ("--request-timeout", "1e308"),
    ("--boot-timeout", "1e10"),
    ("--graceful-timeout", "1e308"),
    ("--shutdown-delay", "1e300"),
    ("--memory-sample-rate", "1e300"),
    ("--defer-accept", "99999999999999999999"),
    ("--limit-cpu", "99999999999999999999"),
])
def test_every_seconds_setting_is_bounded_before_the_start(flag: str, value: str) -> None:
    # The master's own settings too (issue 41, item 7): before, --request-timeout 1e308 started
    # and the watchdog duty raised OverflowError every turn.
    setting = flag[2:].replace("-", "_")
    words = "reads per second" if setting == "memory_sample_rate" else "seconds from 0 to 1000000000"
    assert_one_line_error(serve_refused(flag, value), f"{setting} must be", words)


def test_an_access_log_in_a_missing_directory_stops_the_start(tmp_path: Path) -> None:
    path = tmp_path / "missing" / "access.log"
    assert_one_line_error(serve_refused("--access-log", str(path)),
                          f"cannot open access log '{path}'", "No such file or directory")


@pytest.mark.parametrize("spec, fragments", [
    ("%(h)s %(zz)s", ("access_log_format", "unknown atom %(zz)s", "atoms: h l u t")),
    ("jsonl", ("access_log_format", "is not combined, common or json")),
    ("%(h)s 100%", ("access_log_format", "a lone %")),
    ("%({HOME}e)s", ("access_log_format", "environ variables are not logged")),
    ("%({SSL_CIPHER}e)s", ("access_log_format", "environ variables are not logged",
                           "%({SSL_CIPHER}x)s shows it")),
])
def test_a_bad_access_log_format_stops_the_start(spec: str, fragments: tuple[str, ...]) -> None:
    assert_one_line_error(serve_refused("--access-log-format", spec), *fragments)
    assert_one_line_error(tines("check-config", "--access-log-format", spec, "examples/hello.py:app"),
                          *fragments)


def test_an_error_log_in_a_missing_directory_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "missing" / "error.log"
    result = serve_refused("--error-log", str(path))
    assert_one_line_error(result, f"cannot open error log '{path}'", "No such file or directory")
    assert "Traceback" not in result.stderr


def test_a_head_size_no_request_fits_in_is_refused() -> None:
    assert_one_line_error(tines("serve", "--max-head-size", "10", "examples/hello.py:app"),
                          "max_head_size must be at least 27", "got '10'")


def test_the_smallest_valid_request_is_served_at_the_smallest_limits(tines_server: Any) -> None:
    server = tines_server("examples/hello.py:app", "-w", "1", "--max-head-size", "27",
                          "--max-request-line", "14")
    with socket.create_connection(("127.0.0.1", server.port), timeout=20) as client:
        client.sendall(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        assert client.recv(4096).startswith(b"HTTP/1.1 200 ")
        client.sendall(b"GET / HTTP/1.1\r\nHost: ab\r\n\r\n")  # one byte more than allowed
        assert client.recv(4096).startswith(b"HTTP/1.1 431 ")


def test_check_config_refuses_what_every_worker_would_fail_on() -> None:
    assert_one_line_error(tines("check-config", "--header-timeout", "1e308", "examples/hello.py:app"),
                          "header_timeout must be a number of seconds from 0 to 1000000000")


def test_check_config_with_check_app_imports_the_app() -> None:
    good = tines("check-config", "--check-app", "examples/hello.py:app")
    assert good.returncode == 0, good.stderr
    assert "app" in good.stdout
    bad = tines("check-config", "--check-app", "broken_import:app")
    assert_one_line_error(bad, "ZeroDivisionError")
    assert "Traceback" in bad.stderr
    assert bad.stdout == ""
    assert_one_line_error(tines("check-config", "--check-app", "examples/hello.py:nothing"), "nothing")


def test_check_config_without_check_app_does_not_import_the_app() -> None:
    result = tines("check-config", "broken_import:app")
    assert result.returncode == 0, result.stderr


def test_check_app_needs_an_app() -> None:
    assert_one_line_error(tines("check-config", "--check-app"), "--check-app needs APP")

@pytest.mark.parametrize("spec, extra", [
    ("asgi_app:app", ["--mpm", "prefork"]),
    ("asgi_app:instance", ["--mpm", "thread"]),
    ("asgi_app:instance", ["--mpm", "prefork", "--preload"]),
    ("asgi_app:create_app", ["--factory", "--mpm", "prefork"]),
])
def test_an_asgi_app_with_an_explicit_mpm_other_than_event_is_refused_in_one_line(
        spec: str, extra: list[str]) -> None:
    result = tines("serve", "-b", "127.0.0.1:0", "-w", "1", *extra, spec)
    assert_one_line_error(result, "an ASGI app runs on the event MPM, but mpm is", "(cli)")
    assert "--factory" not in result.stderr


def test_stream_body_paths_with_an_asgi_app_is_refused_in_one_line() -> None:
    result = tines("serve", "-b", "127.0.0.1:0", "-w", "1", "--stream-body-paths", "/upload", "asgi_app:app")
    assert_one_line_error(result, "stream_body_paths (cli) is for WSGI apps")


@pytest.mark.parametrize("extra", [[], ["--preload"]])
def test_an_asgi_app_under_interface_wsgi_is_refused_in_one_line(extra: list[str]) -> None:
    result = tines("serve", "-b", "127.0.0.1:0", "-w", "1", "--interface", "wsgi", *extra, "asgi_app:app")
    assert_one_line_error(result, "'asgi_app:app' is an ASGI app (async def), but interface is wsgi")


@pytest.mark.parametrize("words, says", [
    (["--statsd-host", "localhost:8125"], "(gunicorn): none: Tines has no StatsD client; it serves Prometheus "
     "/metrics (and /status.json) on --status-bind"),
    (["--daemon"], "(gunicorn): none: run Tines in the foreground"),
    (["--reload-dir", "src"], "(uvicorn): none: --reload watches the tree the app is imported from"),
])
def test_gunicorn_flags_get_what_tines_has_instead_not_a_similar_spelling(words: list[str], says: str) -> None:
    result = tines("serve", *words, "examples/hello.py:app")
    assert_one_line_error(result, f"unknown option {words[0]!r}", says)
    assert "did you mean" not in result.stderr


def test_check_config_checks_the_hooks_module_as_serve_does() -> None:
    assert_one_line_error(tines("check-config", "--hooks", "misnamed_hooks", "examples/hello.py:app"),
                          "post_frok", "did you mean post_fork?")
    assert_one_line_error(tines("check-config", "--hooks", "no_such_hooks_module", "examples/hello.py:app"),
                          "hooks:", "no_such_hooks_module")
    good = tines("check-config", "--hooks", "recording_hooks", "examples/hello.py:app")
    assert good.returncode == 0, good.stderr


@pytest.mark.parametrize(("args", "fragment"), [
    (("--max-workers", "2", "--start-workers", "3"), "start_workers 3 (cli) is more than max_workers 2 (cli)"),
    (("--max-workers", "8", "--min-spare-workers", "4", "--max-spare-workers", "2"),
     "max_spare_workers 2 (cli) must be at least min_spare_workers + 1 = 5"),
    (("--max-workers", "8", "-w", "4"), "workers 4 (cli) fixes the worker count"),
    (("--min-spare-workers", "2",), "min_spare_workers (cli) needs max_workers"),
])
def test_bad_pool_settings_are_one_line_before_anything_starts(args: tuple[str, ...], fragment: str) -> None:
    assert_one_line_error(tines("serve", "-b", "127.0.0.1:0", *args, "examples/hello.py:app"), fragment)
    assert_one_line_error(tines("check-config", *args, "examples/hello.py:app"), fragment)


def test_check_config_names_the_worker_mode_in_force() -> None:
    fixed = tines("check-config", "-w", "3", "examples/hello.py:app")
    assert fixed.returncode == 0, fixed.stderr
    assert fixed.stdout.splitlines()[-1].startswith("mode: fixed: 3 workers")
    dynamic = tines("check-config", "--max-workers", "6", "--mpm", "thread", "--threads", "4",
                    "--min-spare-threads", "4", "examples/hello.py:app")
    assert dynamic.returncode == 0, dynamic.stderr
    assert dynamic.stdout.splitlines()[-1].startswith(
        "mode: dynamic pool: start 1, idle threads kept between 4 and ")
