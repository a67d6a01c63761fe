"""Bad input gets one clear line on stderr and exit code 2."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

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


@pytest.mark.parametrize("spec, extra", [
    ("asgi_app:app", []),
    ("asgi_app:instance", []),
    ("asgi_app:instance", ["--preload"]),
    ("asgi_app:create_app", ["--factory"]),
])
def test_an_asgi_app_is_named_as_such_not_as_a_factory(spec: str, extra: list[str]) -> None:
    result = tines("serve", "-b", "127.0.0.1:0", "-w", "1", *extra, spec)
    assert_one_line_error(result, "ASGI app (async def)", "serves WSGI apps only")
    assert "--factory" not in result.stderr


@pytest.mark.parametrize("words, says", [
    (["--timeout", "30"], "not supported yet (planned as --request-timeout"),
    (["--reload"], "not supported yet; send HUP to the master"),
    (["--pid", "tines.pid"], "not supported yet; the master's pid"),
])
def test_gunicorn_flags_get_what_tines_has_instead_not_a_similar_spelling(words: list[str], says: str) -> None:
    result = tines("serve", *words, "examples/hello.py:app")
    assert_one_line_error(result, f"unknown option {words[0]!r}", says)
    assert "did you mean" not in result.stderr
