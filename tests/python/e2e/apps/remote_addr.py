"""Answers with the client address the app sees: `REMOTE_ADDR REMOTE_PORT pid`."""

import os


def app(environ, start_response):
    body = f"{environ.get('REMOTE_ADDR', '')} {environ.get('REMOTE_PORT', '')} {os.getpid()}".encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
