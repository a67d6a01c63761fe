"""Answers with what the app sees of the environment a gunicorn or uvicorn command line set
(``-e``, ``--env-file``): ``GREETING=...`` and ``DATABASE_URL=...``, one a line."""

import os


def app(environ, start_response):
    body = "".join(f"{name}={os.environ.get(name, '')}\n" for name in ("GREETING", "DATABASE_URL")).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
