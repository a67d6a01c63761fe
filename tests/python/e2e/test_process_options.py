"""Process and logging options: Unix sockets and umask, --chdir, --user/--group, the access
log (combined format, written by Rust), check-config."""

from __future__ import annotations

import http.client
import os
import pwd
import re
import socket
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import APPS, NOBODY_REACHES_THE_APPS, NOBODY_SKIP_REASON, ROOT, wait_until

COMBINED = re.compile(
    r'^127\.0\.0\.1 - - \[\d{2}/\w{3}/\d{4}:\d{2}:\d{2}:\d{2} \+0000\] '
    r'"GET /logged\?x=1 HTTP/1\.1" 200 2 "http://ref\.example/" "agent/1\.0"$'
)


def test_access_log_lines_are_combined_format_and_written_by_the_worker(tines_server: Any, tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    server = tines_server("examples/hello.py:app", "-w", "1", "--access-log", str(log))
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=20)
    connection.request("GET", "/logged?x=1", headers={"Referer": "http://ref.example/", "User-Agent": "agent/1.0"})
    assert connection.getresponse().read() == b"OK"
    connection.close()
    # Lines are buffered per worker and written when the worker's loop goes idle.
    wait_until(lambda: log.exists() and log.read_text().strip(), what="the access log line")
    lines = log.read_text().splitlines()
    assert len(lines) == 1
    assert COMBINED.match(lines[0]), lines[0]


def test_access_log_escapes_quotes_so_lines_cannot_be_forged(tines_server: Any, tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    server = tines_server("examples/hello.py:app", "-w", "1", "--access-log", str(log))
    with socket.create_connection(("127.0.0.1", server.port), timeout=20) as sock:
        sock.sendall(b'GET / HTTP/1.1\r\nHost: a\r\nUser-Agent: x" 200 1 "evil\r\nConnection: close\r\n\r\n')
        while sock.recv(4096):
            pass
    wait_until(lambda: log.exists() and log.read_text().strip(), what="the access log line")
    line = log.read_text().splitlines()[0]
    assert line.endswith('"x\\x22 200 1 \\x22evil"'), line


def test_access_log_shows_the_client_address_the_app_sees_behind_a_trusted_proxy(
        tines_server: Any, tmp_path: Path) -> None:
    # 127.0.0.1 is trusted by default: the app's REMOTE_ADDR is the forwarded client, and so is
    # the log's first field (gunicorn's %(h)s); an untrusted peer's header changes neither.
    for trusted, expected in ((None, "203.0.113.9"), ("10.0.0.1", "127.0.0.1")):
        log = tmp_path / f"access-{expected}.log"
        extra = ("--forwarded-allow-ips", trusted) if trusted else ()
        server = tines_server("examples/hello.py:app", "-w", "1", "--access-log", str(log), *extra)
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=20)
        connection.request("GET", "/", headers={"X-Forwarded-For": "198.51.100.1, 203.0.113.9"})
        assert connection.getresponse().read() == b"OK"
        connection.close()
        wait_until(lambda: log.exists() and log.read_text().strip(), what="the access log line")
        assert log.read_text().split(" ", 1)[0] == expected


def test_serves_on_a_unix_socket_with_the_umask_applied(tmp_path: Path, tines_server: Any) -> None:
    path = tmp_path / "tines.sock"
    server = tines_server("examples/hello.py:app", "-w", "1", "-b", f"unix:{path}", "--umask", "077")
    assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(str(path))
        sock.sendall(b"GET / HTTP/1.1\r\nHost: local\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := sock.recv(4096):
            data += chunk
    assert data.startswith(b"HTTP/1.1 200 OK") and data.endswith(b"OK")
    server.signal(15)
    assert server.wait() == 0
    assert not path.exists(), "the socket file is removed at exit"


def test_chdir_changes_the_working_directory_before_loading_the_app(tines_server: Any, tmp_path: Path) -> None:
    (tmp_path / "here_app.py").write_text(
        "import os\n"
        "def app(environ, start_response):\n"
        "    body = os.getcwd().encode()\n"
        "    start_response('200 OK', [('Content-Length', str(len(body)))])\n"
        "    return [body]\n"
    )
    server = tines_server("here_app:app", "-w", "1", "--chdir", str(tmp_path))
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=20)
    connection.request("GET", "/")
    assert connection.getresponse().read().decode() == str(tmp_path)


@pytest.mark.skipif(not NOBODY_REACHES_THE_APPS, reason=NOBODY_SKIP_REASON)
def test_user_and_group_are_dropped_after_binding(tines_server: Any, tmp_path: Path) -> None:
    nobody = pwd.getpwnam("nobody")
    os.chmod(tmp_path, 0o755)
    server = tines_server("hello_pid:app", "-w", "1", "--user", "nobody", "--group", str(nobody.pw_gid))
    worker = server.worker_pids()[0]
    status = Path(f"/proc/{worker}/status").read_text()
    uid_line = next(line for line in status.splitlines() if line.startswith("Uid:"))
    assert uid_line.split()[1:] == [str(nobody.pw_uid)] * 4
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=20)
    connection.request("GET", "/")
    assert connection.getresponse().status == 200


def test_check_config_shows_each_value_and_where_it_came_from(tmp_path: Path) -> None:
    config = tmp_path / "tines.toml"
    config.write_text('threads = 3\nmpm = "thread"\n')
    env = {"PYTHONPATH": str(APPS), "PATH": "/usr/bin:/bin", "TINES_WORKERS": "5"}
    result = subprocess.run([sys.executable, "-m", "tines", "check-config", "-c", str(config), "--threads", "7",
                             "examples/hello.py:app"], capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines()[1:]}
    assert rows["threads"][1:] == ["7", "cli"]
    assert rows["workers"][1:] == ["5", "env", "TINES_WORKERS"]
    assert rows["mpm"][1:3] == ['"thread"', "file"]
    assert rows["backlog"][2] == "default"


WARNING_THREADS_IGNORED = ("threads 4 (cli) is ignored by mpm prefork, which runs one request at a time per worker: "
                           "for app threads use --mpm thread or --mpm event")


def test_threads_with_prefork_is_warned_about_once_at_start(tines_server: Any) -> None:
    server = tines_server("hello_pid:app", "-w", "2", "--threads", "4")
    warnings = [line for line in server.log_text().splitlines() if "[WARNING]" in line]
    assert len(warnings) == 1, server.log_text()
    assert warnings[0].endswith(WARNING_THREADS_IGNORED)
    threaded = tines_server("hello_pid:app", "-w", "2", "--threads", "4", "--mpm", "thread")
    assert "[WARNING]" not in threaded.log_text()


def test_check_config_warns_about_threads_with_prefork(tmp_path: Path) -> None:
    env = {"PYTHONPATH": str(APPS), "PATH": "/usr/bin:/bin", "TINES_THREADS": "4"}
    result = subprocess.run([sys.executable, "-m", "tines", "check-config", "examples/hello.py:app"],
                            capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ("tines: warning: " + WARNING_THREADS_IGNORED + "\n").replace(
        "(cli)", "(env TINES_THREADS)")
