"""TechEmpower-style test apps as one plain WSGI app, the same code for every server.

Routes (TechEmpower "Framework Benchmarks" test types, their rules kept where they apply):

    GET /plaintext   "Hello, World!" as text/plain (the suite sends it pipelined, 16 deep)
    GET /json        {"message": "Hello, World!"} serialised per request, application/json
    GET /fortunes    every row of the ``fortune`` table, read per request, plus one fortune
                     added at request time, sorted by message, HTML-escaped, as an HTML table

The fortunes database is a SQLite file named by ``FORTUNES_DB``, created by the suite with
``fortunes_db.create`` before any server starts; the app only reads it, through one connection
per thread, opened on first use (never carried across fork). Anything else is a 404.
"""

from __future__ import annotations

import html
import json
import os
import sqlite3
import threading
from typing import Any, Callable, Iterable

StartResponse = Callable[..., Any]

PLAINTEXT = b"Hello, World!"
ADDED_FORTUNE = "Additional fortune added at request time."
_local = threading.local()


def database() -> sqlite3.Connection:
    """This thread's read-only connection to ``FORTUNES_DB`` (reopened after a fork)."""
    pid = os.getpid()
    if getattr(_local, "pid", None) != pid:
        path = os.environ["FORTUNES_DB"]
        _local.connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True,
                                            check_same_thread=False)
        _local.pid = pid
    connection: sqlite3.Connection = _local.connection
    return connection


def fortunes_page() -> bytes:
    rows = database().execute("SELECT id, message FROM fortune").fetchall()
    rows.append((0, ADDED_FORTUNE))
    rows.sort(key=lambda row: row[1])
    cells = "".join(f"<tr><td>{id_}</td><td>{html.escape(message)}</td></tr>"
                    for id_, message in rows)
    return ("<!DOCTYPE html><html><head><title>Fortunes</title></head><body><table>"
            f"<tr><th>id</th><th>message</th></tr>{cells}</table></body></html>").encode()


def respond(start_response: StartResponse, status: str, body: bytes,
            content_type: str) -> Iterable[bytes]:
    start_response(status, [("Content-Type", content_type),
                            ("Content-Length", str(len(body)))])
    return [body]


def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
    path = environ.get("PATH_INFO", "")
    if path == "/plaintext":
        return respond(start_response, "200 OK", PLAINTEXT, "text/plain")
    if path == "/json":
        body = json.dumps({"message": "Hello, World!"}).encode()
        return respond(start_response, "200 OK", body, "application/json")
    if path == "/fortunes":
        return respond(start_response, "200 OK", fortunes_page(), "text/html; charset=utf-8")
    return respond(start_response, "404 Not Found", b"not found\n", "text/plain")


application = app
