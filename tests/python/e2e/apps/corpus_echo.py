"""Echoes each request as JSON and counts calls in the file named by $CORPUS_CALLS (one line per
call), so a test can prove a rejected request never reached the app.

The JSON: ``method``, ``target`` (RAW_URI, as sent), ``version`` (SERVER_PROTOCOL), ``headers``
(every ``HTTP_*`` key plus CONTENT_TYPE and CONTENT_LENGTH when present, as the environ has
them) and ``body`` (base64 of everything ``wsgi.input`` gave)."""

import base64
import json
import os


def app(environ, start_response):
    with open(os.environ["CORPUS_CALLS"], "a") as calls:
        calls.write(environ["RAW_URI"].replace("\n", "\\n") + "\n")
    stream = environ["wsgi.input"]
    body = b""
    while True:
        chunk = stream.read(65536)
        if not chunk:
            break
        body += chunk
    headers = {key: value for key, value in environ.items()
               if key.startswith("HTTP_") or key in ("CONTENT_TYPE", "CONTENT_LENGTH")}
    data = json.dumps({
        "method": environ["REQUEST_METHOD"],
        "target": environ["RAW_URI"],
        "version": environ["SERVER_PROTOCOL"],
        "headers": headers,
        "body": base64.b64encode(body).decode(),
    }).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
    return [data]
