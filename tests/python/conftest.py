"""Fixtures that run real Tines servers.

``tines_server(app_spec, *args, env=None)`` starts ``python -m tines serve APP -b 127.0.0.1:0
--ready-fd W`` in its own process group, waits for the master's JSON ready line on the pipe
(never a sleep), and returns a ``Server``. Every server is killed (SIGKILL to its process
group) when the test ends, whatever happened.
"""

from __future__ import annotations

import http.client
import importlib.util
import json
import os
import re
import resource
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tls_certs import tls_certs  # noqa: F401  (the TLS tests' certificates: a session fixture)

ROOT = Path(__file__).resolve().parents[2]
APPS = Path(__file__).resolve().parent / "e2e" / "apps"


def nobody_reaches_the_apps() -> bool:
    """Whether a worker switched to the user nobody can import the test apps: root, and every
    directory down to them open to others (a clone under a private directory, as `mktemp -d`
    makes, is not). Tests of `--user nobody` skip, with this reason, when it cannot."""
    if os.geteuid() != 0:
        return False
    try:
        return subprocess.run(["test", "-r", str(APPS), "-a", "-x", str(APPS)], user="nobody",
                              capture_output=True).returncode == 0
    except (PermissionError, KeyError):
        return False


NOBODY_REACHES_THE_APPS = nobody_reaches_the_apps()
NOBODY_SKIP_REASON = "needs root, and the test apps readable by the user nobody (not under a private directory)"
READY_DEADLINE = 30.0
"""Generous: a loaded CI machine may take seconds to import Flask in every worker."""


def wait_until(predicate: Callable[[], object], deadline: float = 20.0, what: str = "condition") -> object:
    """Poll ``predicate`` (a cheap check of state the test observes) until it is truthy."""
    end = time.monotonic() + deadline
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def http_get(port: int, path: str = "/", close: bool = False, timeout: float = 20.0) -> tuple[int, bytes]:
    """One GET on a new connection to 127.0.0.1:``port``; its status and body."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("GET", path, headers={"Connection": "close"} if close else {})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends on ``sock`` until it closes. A close with bytes of ours
    left unread makes the kernel reset instead of a FIN: that ends the read too."""
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except ConnectionResetError:
        pass
    return received


def apt_install(package: str) -> str | None:
    """apt-get install ``package`` (``apt-get update`` only if that fails); None when done,
    else why not."""
    if not shutil.which("apt-get"):
        return "no apt-get (not a Debian system)"
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    if sudo and not shutil.which("sudo"):
        return "not root and no sudo"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = [*sudo, "apt-get", "install", "-y", "-q", "--no-install-recommends", package]
    result = None
    try:
        for command in (install, [*sudo, "apt-get", "update", "-q"], install):
            result = subprocess.run(command, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                                    text=True, timeout=280, check=False)
            if command is install and result.returncode == 0:
                return None
    except subprocess.TimeoutExpired as error:
        return f"{' '.join(error.cmd)} took more than {error.timeout:.0f} s"
    assert result is not None
    return f"apt-get install {package} failed: {(result.stderr or result.stdout).strip()[-500:]}"


def debian_tool(name: str, package: str | None = None) -> str:
    """The path of the tool ``name``, installed from Debian's ``package`` (default: the same
    name) when missing; the test skips, saying why, when it cannot be."""
    found = shutil.which(name)
    if found is None:
        failure = apt_install(package or name)
        found = shutil.which(name)
        if found is None:
            pytest.skip(f"{name} is not installed and could not be: {failure or 'not on PATH after install'}")
    return found


GO_TOOLS = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tines" / "gobin"
"""Where ``go_tool`` installs Go programs: once per machine, outside the work tree."""


def go_tool(name: str, package: str) -> str:
    """The path of the Go program ``name``, built from ``package`` (``module/cmd@version``)
    with ``go install`` into GO_TOOLS when it is not there yet; the test skips, saying why,
    when Go or its module proxy is missing."""
    binary = GO_TOOLS / name
    if binary.exists():
        return str(binary)
    go = shutil.which("go")
    if go is None:
        pytest.skip(f"{name} needs Go to build it ({package}): go is not installed")
    GO_TOOLS.mkdir(parents=True, exist_ok=True)
    try:
        result = subprocess.run([go, "install", package], env={**os.environ, "GOBIN": str(GO_TOOLS)},
                                stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=280, check=False)
    except subprocess.TimeoutExpired:
        pytest.skip(f"go install {package} took more than 280 s")
    if result.returncode != 0 or not binary.exists():
        pytest.skip(f"go install {package} failed (no Go module proxy?): {result.stderr.strip()[-500:]}")
    return str(binary)


def processes() -> Iterator[tuple[int, list[str]]]:
    """Every process: its pid and the fields of its /proc/PID/stat after the command name
    (state, ppid, pgrp, ...); one that is gone meanwhile is left out."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                yield int(entry), handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (from /proc), zombies left out."""
    return sorted(child for child, fields in processes() if int(fields[1]) == pid and fields[0] != "Z")


def process_group(pgid: int) -> list[int]:
    """Every process of the process group ``pgid`` (zombies included), from /proc."""
    return [member for member, fields in processes() if int(fields[2]) == pgid]


def server_side_row(client: socket.socket) -> list[str] | None:
    """The fields of the server's end of the loopback TCP connection ``client`` in
    /proc/net/tcp, or None when the kernel has no such socket any more."""
    client_port = client.getsockname()[1]
    server_port = client.getpeername()[1]
    with open("/proc/net/tcp") as handle:
        next(handle)
        for line in handle:
            fields = line.split()
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            if (local_port, remote_port) == (server_port, client_port):
                return fields
    return None


def server_side_inode(client: socket.socket) -> int | None:
    """The socket inode of the server's end of the loopback TCP connection ``client``
    (from /proc/net/tcp), or None once no process holds that end (closed, or orphaned while
    the kernel still sends what it queued)."""
    fields = server_side_row(client)
    return (int(fields[9]) or None) if fields is not None else None


def load_app_module(name: str) -> Any:
    """The module of tests/python/e2e/apps/NAME.py, loaded from its file (sys.path untouched),
    for the expected bodies a test compares against."""
    spec = importlib.util.spec_from_file_location(name, APPS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GATE_TIMEOUT = 20.0
"""How long a test waits for an app's request to reach its gate."""


@pytest.fixture
def gate() -> Iterator[tuple[socket.socket, str]]:
    """A Unix socket that gated routes of the test apps connect to (tests/python/e2e/apps:
    event_app's /block, gate.py): the test accepts the app's connection and releases the
    request by sending a byte on it."""
    directory = tempfile.mkdtemp(prefix="tines-gate-", dir="/tmp")
    path = os.path.join(directory, "gate.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(8)
    listener.settimeout(GATE_TIMEOUT)
    try:
        yield listener, path
    finally:
        listener.close()
        os.unlink(path)
        os.rmdir(directory)


def holds_connection(pid: int, client: socket.socket) -> bool:
    """True while process ``pid`` has an fd open on the server's end of ``client``."""
    inode = server_side_inode(client)
    return inode is not None and f"socket:[{inode}]" in fd_targets(pid)


def fd_targets(pid: int) -> list[str]:
    """What each open fd of ``pid`` points at (``readlink /proc/PID/fd/N``)."""
    targets = []
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            targets.append(os.readlink(f"/proc/{pid}/fd/{name}"))
        except OSError:
            continue  # closed meanwhile
    return targets


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class Server:
    """A running ``tines serve``."""

    def __init__(self, proc: subprocess.Popen[bytes], log_path: Path, ready: dict[str, object]) -> None:
        self.proc = proc
        self.log_path = log_path
        self.ready = ready
        self.pid = proc.pid
        bind = str(ready["binds"][0])  # type: ignore[index]
        self.host, _, port = bind.rpartition(":")
        self.port = int(port)
        self.url = f"http://127.0.0.1:{self.port}"

    def log_text(self) -> str:
        """Everything the server wrote to stderr so far."""
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, pattern: str, deadline: float = 20.0, count: int = 1) -> list[re.Match[str]]:
        """Wait until ``pattern`` matches ``count`` times in the log; return the matches."""
        regex = re.compile(pattern)

        def matches() -> list[re.Match[str]] | None:
            found = list(regex.finditer(self.log_text()))
            return found if len(found) >= count else None

        return wait_until(matches, deadline, f"log line {pattern!r}")  # type: ignore[return-value]

    def worker_pids(self) -> list[int]:
        """The master's live child processes."""
        return children(self.pid)

    def signal(self, signum: int) -> None:
        """Send a signal to the master."""
        os.kill(self.pid, signum)

    def wait(self, timeout: float = 30.0) -> int:
        """Wait for the master to exit; its status."""
        return self.proc.wait(timeout)

    def kill(self) -> None:
        """SIGKILL the whole process group and reap the master."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass


def start_server(app: str, *args: str, env: dict[str, str] | None = None, log_path: Path,
                 cwd: Path = ROOT, open_files: int | None = None,
                 program: Sequence[str] = (sys.executable, "-m", "tines"),
                 pass_fds: Sequence[int] = ()) -> Server:
    """Start a server and wait for its ready line; raise with the log if it does not come.

    ``open_files`` sets the server's RLIMIT_NOFILE (soft and hard) before it starts; ``program``
    is the ``tines`` command to run (another virtualenv's ``bin/tines``, say); ``pass_fds`` are
    more fds the server inherits (under their own numbers).
    """
    read_fd, write_fd = os.pipe()
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(APPS), environment.get("PYTHONPATH", "")]))
    environment.update(env or {})
    command = [*program, "serve", app, "-b", "127.0.0.1:0",
               "--ready-fd", str(write_fd), *args]
    def limit_open_files() -> None:
        if open_files is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, open_files))

    with open(log_path, "ab") as log:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                pass_fds=(write_fd, *pass_fds), start_new_session=True, env=environment, cwd=cwd,
                                preexec_fn=limit_open_files if open_files is not None else None)
    os.close(write_fd)
    try:
        data = b""
        end = time.monotonic() + READY_DEADLINE
        while not data.endswith(b"\n"):
            remaining = end - time.monotonic()
            if remaining <= 0:
                raise AssertionError("no ready line in time")
            readable, _, _ = select.select([read_fd], [], [], remaining)
            if not readable:
                continue
            chunk = os.read(read_fd, 4096)
            if not chunk:
                raise AssertionError(f"the server exited before ready (status {proc.wait(10)})")
            data += chunk
    except BaseException as error:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(10)
        raise AssertionError(f"{error}; log:\n{log_path.read_text(errors='replace')}") from None
    finally:
        os.close(read_fd)
    return Server(proc, log_path, json.loads(data))


@pytest.fixture
def tines_server(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """Factory: ``tines_server(app_spec, *args, env=None, open_files=None, program=None,
    pass_fds=())`` (``start_server``'s options); every server is killed at the end."""
    servers: list[Server] = []

    def start(app: str, *args: str, env: dict[str, str] | None = None,
              open_files: int | None = None, program: Sequence[str] | None = None,
              pass_fds: Sequence[int] = ()) -> Server:
        server = start_server(app, *args, env=env, log_path=tmp_path / f"server-{len(servers)}.log",
                              open_files=open_files, pass_fds=pass_fds,
                              **({"program": program} if program is not None else {}))
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.kill()
