"""Answers with what a worker (and so the app) sees of the service manager's variables:
``NOTIFY_SOCKET=<value or nothing>`` and ``LISTEN_FDS=<...>``, one a line, then the pid."""

import os


def app(environ, start_response):
    body = "".join(f"{name}={os.environ.get(name, '')}\n" for name in ("NOTIFY_SOCKET", "LISTEN_FDS"))
    body = (body + str(os.getpid())).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
