"""Requests to ``/hold`` wait at a gate the test controls, so a test decides how long workers
(or app threads) stay busy without any sleep.

The gate is a Unix socket the test listens on (path in ``GATE_SOCKET``): a held request
connects, sends ``<pid> <thread id>\\n`` (so the test knows which worker holds it) and waits
until the test closes the connection. Every other path answers at once. Each answer's body is
the worker's pid.
"""

import os
import socket
import threading


def app(environ, start_response):
    if environ["PATH_INFO"] == "/hold":
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as gate:
            gate.connect(os.environ["GATE_SOCKET"])
            gate.sendall(f"{os.getpid()} {threading.get_ident()}\n".encode())
            while gate.recv(64):
                pass
    body = str(os.getpid()).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
