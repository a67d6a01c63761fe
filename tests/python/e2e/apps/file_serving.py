"""Serves the file named by ``SERVED_FILE`` through ``wsgi.file_wrapper`` (with its
Content-Length), for the access log tests of large responses (tests/python/e2e/test_access_log.py)."""

import os


def app(environ, start_response):
    path = os.environ["SERVED_FILE"]
    size = os.path.getsize(path)
    start_response("200 OK", [("Content-Type", "application/octet-stream"),
                              ("Content-Length", str(size))])
    return environ["wsgi.file_wrapper"](open(path, "rb"), 1 << 20)
