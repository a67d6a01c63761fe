"""The development reload (``--reload``, issue 13): a real server watching a real app file in
tmp_path. An edit changes the response (polled until the new version answers, with a
deadline); one save is one reload; a syntax error keeps the old code serving; excluded files
reload nothing; a directory created after the start is watched. Never a sleep: the tests wait
on responses and log lines, and count reload lines once the server has stopped (its log is
then complete).
"""

from __future__ import annotations

import http.client
import os
import re
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import Server, http_get, wait_until

APP = '''
try:
    from pkg.version import VERSION as SUB_VERSION
except ImportError:
    SUB_VERSION = "none"

VERSION = "{version}"


def app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [(VERSION + " " + SUB_VERSION).encode()]
'''

RELOADING = r"reload: \d+ file\(s\) changed \((?P<names>[^)]*)\): reloading"


def body(server: Server) -> bytes | None:
    """The body of one GET, or None when the request failed (a worker retiring mid-request)."""
    try:
        status, data = http_get(server.port, close=True, timeout=5)
    except (OSError, http.client.HTTPException):
        return None
    return data if status == 200 else None


def wait_for_body(server: Server, expected: bytes) -> None:
    wait_until(lambda: body(server) == expected, deadline=20.0, what=f"the response {expected!r}")


def stopped_log(server: Server) -> str:
    """Stop the server (TERM) and return its whole log."""
    server.signal(signal.SIGTERM)
    assert server.wait() == 0
    return server.log_text()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    directory = tmp_path / "project"
    directory.mkdir()
    (directory / "app.py").write_text(APP.format(version="one"))
    return directory


@pytest.fixture
def dev_server(tines_server: Callable[..., Server], project: Path) -> Server:
    # Bytecode caching on (the test environment turns it off), as on a developer's machine.
    server = tines_server(f"{project / 'app.py'}:app", "-w", "1", "--reload",
                          env={"PYTHONDONTWRITEBYTECODE": ""})
    assert body(server) == b"one none"
    return server


def save_as_an_editor_does(path: Path, text: str, keep_mtime: bool = False) -> None:
    """Write a temporary file beside ``path`` and rename it over ``path``; with
    ``keep_mtime``, the new file carries the old one's modification time."""
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text)
    if keep_mtime:
        old = path.stat()
        os.utime(temporary, ns=(old.st_atime_ns, old.st_mtime_ns))
    os.replace(temporary, path)


def test_editing_the_app_file_changes_the_response_once_per_save(dev_server: Server, project: Path) -> None:
    app = project / "app.py"
    cached = project / "__pycache__" / f"app.{__import__('sys').implementation.cache_tag}.pyc"
    assert cached.exists()  # the worker cached the bytecode of version "one"
    # Same size and same mtime as the cached source: only dropping the stale .pyc shows "two".
    save_as_an_editor_does(app, APP.format(version="two"), keep_mtime=True)
    wait_for_body(dev_server, b"two none")
    app.write_text(APP.format(version="three, written in place"))
    wait_for_body(dev_server, b"three, written in place none")
    log = stopped_log(dev_server)
    assert [m["names"] for m in re.finditer(RELOADING, log)] == ["app.py", "app.py"]
    assert log.count("is for development only") == 1


def test_a_syntax_error_keeps_the_old_code_serving_until_the_next_save(dev_server: Server, project: Path) -> None:
    app = project / "app.py"
    app.write_text(APP.format(version="two") + "\ndef broken(:\n")
    dev_server.wait_for_log(r"reload: app\.py: syntax error; the old code keeps serving until the next save")
    dev_server.wait_for_log(r"SyntaxError: ")
    assert body(dev_server) == b"one none"
    app.write_text(APP.format(version="fixed"))
    wait_for_body(dev_server, b"fixed none")
    log = stopped_log(dev_server)
    assert [m["names"] for m in re.finditer(RELOADING, log)] == ["app.py"]
    assert "HUP: starting worker generation 2" in log and "generation 3" not in log


def test_an_excluded_change_reloads_nothing(dev_server: Server, project: Path) -> None:
    (project / "notes.txt").write_text("not code")
    (project / "app.py~").write_text("a backup")
    (project / ".app.py.swp").write_text("a swap file")
    (project / "__pycache__" / "stale.py").write_text("x = (")  # in an excluded directory
    (project / "node_modules" / "package").mkdir(parents=True)
    (project / "node_modules" / "package" / "index.py").write_text("x = 1\n")
    (project / "helper.py").write_text("x = 1\n")
    dev_server.wait_for_log(RELOADING)
    dev_server.wait_for_log(r"worker \d+ \(slot \d+\) exited with code 0 \(retired: reload\)")
    log = stopped_log(dev_server)
    assert [m["names"] for m in re.finditer(RELOADING, log)] == ["helper.py"]
    assert "syntax error" not in log


def test_a_directory_created_after_the_start_is_watched(dev_server: Server, project: Path) -> None:
    (project / "pkg").mkdir()
    (project / "pkg" / "__init__.py").write_text("")
    (project / "pkg" / "version.py").write_text('VERSION = "sub-one"\n')
    wait_for_body(dev_server, b"one sub-one")
    (project / "pkg" / "version.py").write_text('VERSION = "sub-two"\n')
    wait_for_body(dev_server, b"one sub-two")
    log = stopped_log(dev_server)
    assert [m["names"] for m in re.finditer(RELOADING, log)][-1] == "pkg/version.py"
