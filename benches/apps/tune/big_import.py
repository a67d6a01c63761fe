"""A WSGI app that builds 50 MB of data at import (a model, a big table) and only reads it
afterwards. The right answer: ``preload``, with about 50 MB saved per worker."""

TABLE = [bytes([i % 251]) * 1000 for i in range(50_000)]  # 50,000 objects of 1 kB: about 50 MB


def app(environ, start_response):
    row = TABLE[hash(environ.get("PATH_INFO", "")) % len(TABLE)]
    body = str(len(row)).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
