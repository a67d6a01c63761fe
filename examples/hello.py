"""The smallest useful WSGI app: ``tines serve examples/hello.py:app``."""

BODY = b"OK"
HEADERS = [
    ("Content-Type", "text/plain; charset=utf-8"),
    ("Content-Length", str(len(BODY))),
]


def app(environ, start_response):
    start_response("200 OK", list(HEADERS))
    return [BODY]


application = app
