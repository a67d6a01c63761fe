"""The smallest fork-per-connection server: what process per request costs with nothing else.

``fork_per_connection.py FILE:ATTR HOST PORT [READY_FD]``: imports the app once (preloaded),
then accepts, forks, and the child answers that connection's one request through a bare WSGI
call and ``_exit``s; the parent reaps. No pool, no spares, no scoreboard, no logging: the
process-per-request bench (benches/isolation.py) runs it beside Tines, in the same rounds and
pinning, as the floor of latency a process per request can have on this machine. READY_FD, when
given, gets one line once the socket listens.
"""

from __future__ import annotations

import importlib
import io
import os
import socket
import sys
from typing import Any, Callable


def load_app(target: str) -> Callable[..., Any]:
    """``FILE:ATTR`` imported as the suite's servers do: FILE's directory first on ``sys.path``
    and the current directory (``gunicorn --chdir``)."""
    path, _, attr = target.rpartition(":")
    directory, module = os.path.split(os.path.abspath(path))
    os.chdir(directory)
    sys.path.insert(0, directory)
    return getattr(importlib.import_module(module.removesuffix(".py")), attr)  # type: ignore[no-any-return]


def answer(conn: socket.socket, app: Callable[..., Any], port: str) -> None:
    """Read one request head, call the app, write its response with ``Connection: close``."""
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = conn.recv(65536)
        if not chunk:
            return
        head += chunk
    lines = head.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    method, target, protocol = lines[0].split(" ", 2)
    path, _, query = target.partition("?")
    environ: dict[str, Any] = {
        "REQUEST_METHOD": method, "SCRIPT_NAME": "", "PATH_INFO": path, "QUERY_STRING": query,
        "SERVER_NAME": "127.0.0.1", "SERVER_PORT": port, "SERVER_PROTOCOL": protocol,
        "wsgi.version": (1, 0), "wsgi.url_scheme": "http", "wsgi.input": io.BytesIO(),
        "wsgi.errors": sys.stderr, "wsgi.multithread": False, "wsgi.multiprocess": True,
        "wsgi.run_once": True}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        environ["HTTP_" + name.strip().upper().replace("-", "_")] = value.strip()
    started: list[Any] = []
    result = app(environ, lambda status, headers, exc_info=None: started.extend((status, headers)))
    try:
        body = b"".join(result)
    finally:
        getattr(result, "close", lambda: None)()
    status, headers = started
    fields = [(k, v) for k, v in headers if k.lower() not in ("content-length", "connection")]
    fields += [("Content-Length", str(len(body))), ("Connection", "close")]
    conn.sendall(f"HTTP/1.1 {status}\r\n".encode("latin-1") + "".join(
        f"{k}: {v}\r\n" for k, v in fields).encode("latin-1") + b"\r\n" + body)


def main(argv: list[str]) -> None:
    if len(argv) not in (3, 4):
        sys.exit("usage: fork_per_connection.py FILE:ATTR HOST PORT [READY_FD]")
    app = load_app(argv[0])
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((argv[1], int(argv[2])))
    listener.listen(1024)
    if len(argv) == 4:
        os.write(int(argv[3]), b'{"ready": true}\n')
        os.close(int(argv[3]))
    while True:
        conn, _ = listener.accept()
        if os.fork() == 0:
            listener.close()
            try:
                answer(conn, app, argv[2])
            finally:
                os._exit(0)  # no interpreter teardown: the process is done
        conn.close()
        while True:  # reap every child that has exited, never block
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break


if __name__ == "__main__":
    main(sys.argv[1:])
