"""Registers ``atexit`` callbacks that append a line to ``$EXIT_MARKS``: one at import (in the
master with ``--preload``, so inherited by the workers) and one per request, in the worker
that serves it. Answers with the worker's pid."""

import atexit
import os

MARKS = os.environ["EXIT_MARKS"]


def mark(kind: str) -> None:
    with open(MARKS, "a") as marks:
        marks.write(f"{kind} {os.getpid()}\n")


atexit.register(mark, "imported")


def app(environ, start_response):
    atexit.register(mark, "served")
    body = str(os.getpid()).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
