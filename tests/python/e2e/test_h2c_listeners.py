"""Each listener keeps its h2c mode where the master hands listeners on: a binary upgrade (USR2)
names them in ``LISTEN_FDNAMES`` (``h2c``, ``http1+h2c``), and systemd names them with
``FileDescriptorName=``; the master that adopts them serves each as it was bound (docs/http2.md).
What the modes then speak is tested by the HTTP/2 end-to-end tests (test_h2_*.py); here, what the
master says each listener is, and that the plain one still speaks HTTP/1.1."""

from __future__ import annotations

import re
import signal
import sys
from pathlib import Path
from typing import Any

from conftest import Server, children, http_get, wait_until
from test_stop_and_notify import ACTIVATE, listening_socket


def ports_of(server: Server) -> list[int]:
    return [int(str(bind).rpartition(":")[2]) for bind in server.ready["binds"]]  # type: ignore[attr-defined]


def says(server: Server, port: int, pid: int, mode: str) -> None:
    server.wait_for_log(rf"Listening at: http://127\.0\.0\.1:{port} \({pid}\){re.escape(mode)}\n")


def test_usr2_hands_each_listener_on_with_its_h2c_mode(tines_server: Any, tmp_path: Path) -> None:
    pid_file = tmp_path / "tines.pid"
    server: Server = tines_server("hello_pid:app", "-w", "1", "-b", "h2c:127.0.0.1:0", "-b", "http1+h2c:127.0.0.1:0",
                                  "--pid-file", str(pid_file), "--drain-timeout", "1")
    plain, only, both = ports_of(server)
    says(server, plain, server.pid, "")
    says(server, only, server.pid, ": HTTP/2 (h2c) only")
    says(server, both, server.pid, ": HTTP/1.1 and HTTP/2 (h2c)")

    server.signal(signal.SIGUSR2)
    master = wait_until(lambda: pid_file.exists() and (pid := pid_file.read_text().strip()).isdigit()
                        and int(pid) != server.pid and int(pid), what="the new master's pid")
    assert server.wait() == 0, "the old master handed over and left"
    says(server, only, master, ": HTTP/2 (h2c) only")  # type: ignore[arg-type]
    says(server, both, master, ": HTTP/1.1 and HTTP/2 (h2c)")  # type: ignore[arg-type]
    says(server, plain, master, "")  # type: ignore[arg-type]
    new_workers = wait_until(lambda: children(master), what="the new master's worker")  # type: ignore[arg-type]
    status, body = http_get(plain, close=True)
    assert status == 200 and int(body) in new_workers  # type: ignore[operator]


def test_socket_activation_takes_the_mode_from_the_name_or_the_bind(tines_server: Any) -> None:
    """systemd's sockets: one named ``h2c``, one named ``http1+h2c``, one a ``h2c:fd://N`` bind
    names by its number; the unnamed, unmarked one speaks HTTP/1.1."""
    sockets = [listening_socket() for _ in range(4)]
    fds = [sock.fileno() for sock in sockets]
    ports = [sock.getsockname()[1] for sock in sockets]
    server: Server = tines_server(
        "hello_pid:app", "-w", "1", "-b", "h2c:fd://6",
        program=(sys.executable, "-c", ACTIVATE, ",".join(map(str, fds)), "web:h2c:http1+h2c:web2"), pass_fds=fds)
    for sock in sockets:
        sock.close()  # the server holds its own copies
    says(server, ports[0], server.pid, "")
    says(server, ports[1], server.pid, ": HTTP/2 (h2c) only")
    says(server, ports[2], server.pid, ": HTTP/1.1 and HTTP/2 (h2c)")
    says(server, ports[3], server.pid, ": HTTP/2 (h2c) only")  # fd 6: the fourth passed
    assert http_get(ports[0], close=True)[0] == 200
