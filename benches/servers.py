"""The servers under test and a server's life: command lines, start (pinned, ready), stop.

Every server runs one worker process on CPU 1 (``taskset -c 1``, inherited by every process
and thread it starts), loads the same app file, and must answer the app's URL with 200 before
it is loaded. Tines signals readiness on ``--ready-fd``; the others are polled.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from model import ASGI_APPS, ATTACK_APP
from provision import PEERS_VENV, tool_path

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
BENCH_APPS = REPO / "benches" / "apps"
SERVER_CPU = "1"
READY_DEADLINE_S = 30.0
POLL_INTERVAL_S = 0.05  # polling a port, not a readiness sleep
STOP_GRACE_S = 5.0
# App threads of the threaded servers (gunicorn gthread, uWSGI, tines thread).
THREADS = 4
# Listen backlog given to uWSGI, whose default (100) drops connects at 1000 connections; the
# others' defaults are at least this (Tines 2048, gunicorn 2048, Granian 1024, nginx 511+).
UWSGI_LISTEN = 1024


@dataclass(frozen=True)
class App:
    """A WSGI app every server loads from the same file, and the URL path measured."""

    name: str
    file: Path
    attr: str
    url_path: str
    scheme: str = "http"  # "ws": a WebSocket echo load (each request a message)

    @property
    def module_target(self) -> str:
        """``module:attr``, imported with the file's directory on ``sys.path``."""
        return f"{self.file.stem}:{self.attr}"

    @property
    def file_target(self) -> str:
        return f"{self.file.relative_to(REPO)}:{self.attr}"


APPS = {
    "hello": App("hello", EXAMPLES / "hello.py", "app", "/"),
    "blog": App("blog", EXAMPLES / "blog" / "app.py", "app", "/blog/"),
    "plaintext": App("plaintext", BENCH_APPS / "techempower.py", "app", "/plaintext"),
    "json": App("json", BENCH_APPS / "techempower.py", "app", "/json"),
    "fortunes": App("fortunes", BENCH_APPS / "techempower.py", "app", "/fortunes"),
    # Upload workloads of the before/after runs (benches/uploads.py; benches/ab.py --apps).
    "upload": App("upload", BENCH_APPS / "flask_upload.py", "app", "/upload"),
    "blog-post": App("blog-post", EXAMPLES / "blog" / "app.py", "app", "/blog/create"),
    # The framework penalty (issue 15): one Flask route returning OK, no template, no database.
    "flask": App("flask", BENCH_APPS / "flask_ok.py", "app", "/ok"),
    # The slow-client attack row (model.ATTACK_APP): hello's answer at /, the attack's targets
    # beside it; the app the e2e test of issue 14 uses.
    "attacked": App("attacked", REPO / "tests" / "python" / "e2e" / "apps" / "slow_clients_app.py",
                    "app", "/"),
    # ASGI (issue 17): hello as an `async def` app, served by Tines, uvicorn and Granian.
    "asgi-hello": App("asgi-hello", EXAMPLES / "asgi_hello.py", "app", "/"),
    # WebSocket echo (issue 17): small text messages, each request one message and its echo.
    "ws-echo": App("ws-echo", EXAMPLES / "ws_echo.py", "app", "/", scheme="ws"),
}

# command(app, port, ready_fd or None, workdir) -> argv
Command = Callable[[App, int, "int | None", Path], list[str]]


@dataclass(frozen=True)
class Server:
    name: str
    command: Command
    uses_ready_fd: bool = False
    apps: frozenset[str] | None = None  # None: every WSGI app (model.ASGI_APPS excluded)


def tines_binary() -> Path:
    """The ``tines`` of the venv running the suite (``make bench``: ``.venv``)."""
    candidate = Path(sys.executable).parent / "tines"
    return candidate if candidate.exists() else REPO / ".venv" / "bin" / "tines"


def tines_command(mpm: str, threads: int | None, binary: Path | None = None,
                  extra: tuple[str, ...] = ()) -> Command:
    """``tines serve`` with one worker of ``mpm`` and the ``extra`` flags; ``binary`` is the
    ``tines`` to run (default ``tines_binary()``, looked up at each start; benches/ab.py passes
    a baseline build's)."""
    def command(app: App, port: int, ready_fd: int | None, _workdir: Path) -> list[str]:
        cmd = [str(binary or tines_binary()), "serve", app.file_target, "-b",
               f"127.0.0.1:{port}", "-w", "1", "--mpm", mpm, *extra]
        if threads is not None:
            cmd += ["--threads", str(threads)]
        if ready_fd is not None:
            cmd += ["--ready-fd", str(ready_fd)]
        return cmd
    return command


def gunicorn_command(app: App, port: int, _ready_fd: int | None, _workdir: Path) -> list[str]:
    return [str(PEERS_VENV / "bin" / "gunicorn"), "-k", "gthread", "-w", "1",
            "--threads", str(THREADS), "-b", f"127.0.0.1:{port}", "--chdir", str(app.file.parent),
            app.module_target]


def uwsgi_command(app: App, port: int, _ready_fd: int | None, _workdir: Path) -> list[str]:
    return [str(PEERS_VENV / "bin" / "uwsgi"), "--http11-socket", f"127.0.0.1:{port}",
            "--master", "--processes", "1", "--threads", str(THREADS),
            "--chdir", str(app.file.parent), "--module", app.module_target,
            "--need-app", "--disable-logging", "--die-on-term", "--listen", str(UWSGI_LISTEN)]


def granian_command(app: App, port: int, _ready_fd: int | None, _workdir: Path) -> list[str]:
    return [str(PEERS_VENV / "bin" / "granian"), "--interface", "wsgi", "--host", "127.0.0.1",
            "--port", str(port), "--workers", "1", "--blocking-threads", "1",
            "--working-dir", str(app.file.parent), app.module_target]


BJOERN_SERVE = REPO / "benches" / "bjoern_serve.py"


def bjoern_command(app: App, port: int, _ready_fd: int | None, _workdir: Path) -> list[str]:
    """bjoern has no command line: benches/bjoern_serve.py imports the app file (from its
    directory, as the others' --chdir) and runs bjoern in that one process."""
    return [str(PEERS_VENV / "bin" / "python"), str(BJOERN_SERVE), app.file_target, "127.0.0.1",
            str(port)]


NGINX_CONF = """\
# nginx for the benchmark: one worker, a static answer per location, nothing logged.
worker_processes 1;
daemon off;
master_process on;
pid {workdir}/nginx-{port}.pid;
error_log stderr warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {workdir}/nginx-{port}-body;
    proxy_temp_path {workdir}/nginx-{port}-proxy;
    fastcgi_temp_path {workdir}/nginx-{port}-fastcgi;
    uwsgi_temp_path {workdir}/nginx-{port}-uwsgi;
    scgi_temp_path {workdir}/nginx-{port}-scgi;
    server {{
        listen 127.0.0.1:{port};
        location = / {{ default_type text/plain; return 200 "OK"; }}
        location = /plaintext {{ default_type text/plain; return 200 "Hello, World!"; }}
    }}
}}
"""


def nginx_command(_app: App, port: int, _ready_fd: int | None, workdir: Path) -> list[str]:
    conf = workdir / f"nginx-{port}.conf"
    if port:
        conf.write_text(NGINX_CONF.format(workdir=workdir, port=port))
    return [tool_path("nginx") or "nginx", "-e", "stderr", "-p", str(workdir), "-c", str(conf)]


# App threads per Tines MPM: the thread MPM gets THREADS like the threaded peers; prefork has
# none, and the event MPM keeps its own defaults (loop thread + its default app threads).
TINES_THREADS: dict[str, int | None] = {"prefork": None, "thread": THREADS, "event": None}


def tines_server(mpm: str, binary: Path | None = None, name: str | None = None) -> Server:
    """The suite's Tines server for ``mpm`` (named ``tines-MPM`` unless ``name`` is given),
    running ``binary`` (default: ``tines_binary()``)."""
    return Server(name or f"tines-{mpm}", tines_command(mpm, TINES_THREADS[mpm], binary),
                  uses_ready_fd=True)


PROCESS_PER_REQUEST = "tines-prefork-per-request"
"""Process per request (TreeFrog's mode): prefork recycling its one worker after every request
(``--max-requests 1``), the app preloaded so each new worker is a fork, not an import. Only on
hello; the report sets it against ``tines-prefork`` (the same worker, reused)."""


def process_per_request_server() -> Server:
    """The suite's process-per-request row (see PROCESS_PER_REQUEST)."""
    return Server(PROCESS_PER_REQUEST,
                  tines_command("prefork", None, extra=("--max-requests", "1", "--preload")),
                  uses_ready_fd=True, apps=frozenset({"hello"}))


def wsgi_servers() -> list[Server]:
    """Every WSGI server the suite knows, Tines' MPMs first."""
    return [
        *(tines_server(mpm) for mpm in TINES_THREADS),
        process_per_request_server(),
        Server("gunicorn-gthread", gunicorn_command),
        Server("uwsgi", uwsgi_command),
        Server("granian-wsgi", granian_command),
        # The C reference for WSGI (one process, libev): every app but the attack row, whose
        # servers are model.ATTACK_SERVERS.
        Server("bjoern", bjoern_command, apps=frozenset(APPS) - {ATTACK_APP} - ASGI_APPS),
        # The machine's limit: a static answer with no app behind it.
        Server("nginx-static", nginx_command, apps=frozenset({"hello", "plaintext"})),
    ]


def tines_mpms(help_text: str) -> set[str]:
    """The MPMs offered by ``tines serve --help`` (its ``--mpm {a,b,c}`` choices)."""
    found = re.search(r"--mpm \{([^}]*)\}", help_text)
    return set(found.group(1).split(",")) if found else set()


def tines_serve_help(binary: Path | None = None) -> str:
    """Every flag ``tines serve`` of ``binary`` (default: ``tines_binary()``) knows: its
    ``--help-all``, or its ``--help`` for a build from before ``--help-all`` (whose ``--help``
    listed every flag; today's shows only the ones that matter first)."""
    for flag in ("--help-all", "--help"):
        result = subprocess.run([str(binary or tines_binary()), "serve", flag],
                                capture_output=True, text=True, timeout=60)
        if result.returncode == 0:
            return result.stdout
    return result.stdout


def uvicorn_command(app: App, port: int, _ready_fd: int | None, _workdir: Path) -> list[str]:
    """uvicorn at its fastest: httptools and uvloop (``uvicorn[standard]``)."""
    return [str(PEERS_VENV / "bin" / "uvicorn"), "--host", "127.0.0.1", "--port", str(port),
            "--workers", "1", "--loop", "uvloop", "--http", "httptools", "--no-access-log",
            "--log-level", "warning", "--app-dir", str(app.file.parent), app.module_target]


def granian_asgi_command(app: App, port: int, _ready_fd: int | None, _workdir: Path) -> list[str]:
    return [str(PEERS_VENV / "bin" / "granian"), "--interface", "asgi", "--host", "127.0.0.1",
            "--port", str(port), "--workers", "1", "--loop", "uvloop", "--log-level", "warning",
            "--working-dir", str(app.file.parent), app.module_target]


def asgi_servers(help_text: str) -> tuple[list[Server], dict[str, str]]:
    """The ASGI servers (issue 17), each on the ASGI apps only: Tines (its event reactor under
    an asyncio loop, uvloop as for the peers), uvicorn (httptools, uvloop) and Granian. A Tines
    build without ``--interface`` serves no ASGI: then none of them runs, and the report says
    why."""
    if "--interface" not in help_text:
        reason = "this build of Tines serves no ASGI (`tines serve --help` has no --interface)"
        return [], {name: reason for name in ("tines-asgi", "uvicorn", "granian-asgi")}
    asgi = frozenset(ASGI_APPS)
    return [
        Server("tines-asgi", tines_command("event", None, extra=("--loop", "uvloop")),
               uses_ready_fd=True, apps=asgi),
        Server("uvicorn", uvicorn_command, apps=asgi),
        Server("granian-asgi", granian_asgi_command, apps=asgi),
    ], {}


def available_servers() -> tuple[list[Server], dict[str, str]]:
    """The servers this machine and this build of Tines can run, and why others are skipped."""
    help_text = tines_serve_help()
    mpms = tines_mpms(help_text)
    servers, skipped = [], {}
    for server in wsgi_servers():
        mpm = server.name.removeprefix("tines-").split("-")[0] if server.name.startswith("tines-") else None
        if mpm is not None and mpm not in mpms:
            skipped[server.name] = (f"this build of Tines has no {mpm} MPM (`tines serve --help` "
                                    f"offers --mpm {{{','.join(sorted(mpms))}}})")
            continue
        servers.append(server)
    asgi, asgi_skipped = asgi_servers(help_text)
    return servers + asgi, {**skipped, **asgi_skipped}


# --------------------------------------------------------------------------- a server's life


class StartFailed(Exception):
    """The server did not become ready; the message says why."""


@dataclass
class Running:
    process: subprocess.Popen[bytes]
    command: list[str]
    log: Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_status(port: int, path: str) -> int | None:
    """Status code of one ``GET path`` on a fresh connection, or None if it fails."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2.0) as s:
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
                      .encode())
            head = s.recv(64)
        return int(head.split()[1]) if head.startswith(b"HTTP/1.") else None
    except (OSError, ValueError, IndexError):
        return None


def closes_after_close_request(port: int, path: str, timeout: float = 1.0) -> bool:
    """True when the server closes the connection after answering a ``Connection: close``
    request (RFC 9112 9.6), False when it keeps it open past ``timeout``. uWSGI's
    ``--http11-socket`` keeps it open; wrk then reuses the connection, so its "close" run
    measures keep-alive for that server."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
                      .encode())
            while s.recv(65536):
                pass
        return True
    except socket.timeout:
        return False
    except OSError:
        return True  # reset: closed, if rudely


def log_tail(log: Path) -> str:
    """The server log's last line mentioning an error (else its last line), shortened."""
    try:
        lines = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or [""])[-1][-200:]


def wait_ready_line(ready_read: int, deadline: float) -> None:
    """Return once Tines' ready JSON line arrives or its pipe closes (then the port is polled)."""
    buffer = b""
    while time.monotonic() < deadline:
        readable, _, _ = select.select([ready_read], [], [], max(0.0, deadline - time.monotonic()))
        if not readable:
            break
        chunk = os.read(ready_read, 4096)
        if not chunk:
            return
        buffer += chunk
        if b"\n" in buffer:
            try:
                json.loads(buffer.split(b"\n", 1)[0])
            except ValueError:
                pass  # an unreadable line: fall back to polling
            return
    raise StartFailed(f"no ready line within {READY_DEADLINE_S:.0f} s")


Probe = Callable[[int, str], "int | None"]
"""``probe(port, path)``: the status of one ``GET path``, or None (``http_status``; the TLS rows
give one that speaks TLS)."""


def wait_port(running: Running, port: int, path: str, deadline: float,
              probe: Probe = http_status) -> None:
    """Poll ``GET path`` until it answers 200, the server exits, or the deadline passes."""
    last: int | None = None
    while time.monotonic() < deadline:
        if running.process.poll() is not None:
            raise StartFailed(f"exited with {running.process.returncode}: {log_tail(running.log)}")
        last = probe(port, path)
        if last == 200:
            return
        time.sleep(POLL_INTERVAL_S)
    raise StartFailed(f"no 200 on {path} within {READY_DEADLINE_S:.0f} s (last: {last})")


def start(server: Server, app: App, port: int, log: Path, env: dict[str, str],
          workdir: Path, probe: Probe = http_status, wrapper: tuple[str, ...] = (),
          ready_deadline_s: float = READY_DEADLINE_S) -> Running:
    """Start ``server`` pinned to SERVER_CPU in its own process group (under ``wrapper``, such
    as valgrind, if given); wait until ``probe`` sees it serve."""
    ready_read, ready_write = os.pipe() if server.uses_ready_fd else (-1, -1)
    command = server.command(app, port, ready_write if server.uses_ready_fd else None, workdir)
    with log.open("ab") as out:
        process = subprocess.Popen(
            ["taskset", "-c", SERVER_CPU, *wrapper, *command], cwd=REPO, env=env,
            stdin=subprocess.DEVNULL,
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            pass_fds=(ready_write,) if server.uses_ready_fd else ())
    running = Running(process, command, log)
    deadline = time.monotonic() + ready_deadline_s
    try:
        if server.uses_ready_fd:
            os.close(ready_write)
            wait_ready_line(ready_read, deadline)
        wait_port(running, port, app.url_path, deadline, probe)
    except BaseException:
        stop(running)
        raise
    finally:
        if server.uses_ready_fd:
            os.close(ready_read)
    return running


def stop(running: Running) -> None:
    """SIGTERM the server's process group, SIGKILL it after STOP_GRACE_S, and reap it."""
    pgid = running.process.pid  # start_new_session: the group id is the leader's pid
    try:
        os.killpg(pgid, signal.SIGTERM)
        running.process.wait(timeout=STOP_GRACE_S)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    try:
        os.killpg(pgid, signal.SIGKILL)  # also any worker left behind by its master
    except ProcessLookupError:
        pass
    running.process.wait()


def display_command(server: Server, app: App) -> str:
    """The command line as the report shows it (repository-relative, PORT for the port)."""
    cmd = " ".join(server.command(app, 0, 3 if server.uses_ready_fd else None, Path("WORKDIR")))
    cmd = cmd.replace(str(REPO) + "/", "").replace("127.0.0.1:0", "127.0.0.1:PORT")
    cmd = re.sub(r"127\.0\.0\.1 0$", "127.0.0.1 PORT", cmd)  # bjoern_serve.py HOST PORT
    return cmd.replace("--port 0", "--port PORT").replace("nginx-0.conf", "nginx-PORT.conf")
