"""Two ways to read an upload, for test_body_limits.py: ``raw`` lets the read error from
``wsgi.input`` propagate (the server answers); ``flask_app`` reads through Flask, which
catches the error and answers with its own status (500, the OSError in its log)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from flask import Flask, request


def raw(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    body = environ["wsgi.input"].read()
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [f"{len(body)}\n".encode()]


flask_app = Flask(__name__)


@flask_app.post("/")
def upload() -> str:
    return f"{len(request.get_data())}\n"
