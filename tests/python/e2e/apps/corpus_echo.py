"""Echoes each request as JSON (method, raw target, body in base64) and counts calls in the
file named by $CORPUS_CALLS (one line per call), so a test can prove a rejected request never
reached the app."""

import base64
import json
import os


def app(environ, start_response):
    with open(os.environ["CORPUS_CALLS"], "a") as calls:
        calls.write(environ["RAW_URI"] + "\n")
    stream = environ["wsgi.input"]
    body = b""
    while True:
        chunk = stream.read(65536)
        if not chunk:
            break
        body += chunk
    data = json.dumps({
        "method": environ["REQUEST_METHOD"],
        "target": environ["RAW_URI"],
        "body": base64.b64encode(body).decode(),
    }).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
    return [data]
