"""The app under the slow-client attack (tests/python/slow_clients.py; issue 14), for the e2e
test and the benchmark suite's attack row alike.

``GET /``: ``OK``, as examples/hello.py answers (the normal client). ``GET /big``: a 10 MiB
body as a list of ten 1 MiB bytes objects, built once at import (what a non-reader asks for).
``POST /upload``: reads ``wsgi.input`` to the end and answers how many bytes it read (what a
slow uploader sends to). Anything else: 404.
"""

MIB = 1 << 20
BIG = [bytes([ord("a") + index]) * MIB for index in range(10)]
BIG_LENGTH = sum(len(part) for part in BIG)
READ_SIZE = 64 << 10


def answer(start_response, status, body, content_type="text/plain; charset=utf-8"):
    start_response(status, [("Content-Type", content_type), ("Content-Length", str(len(body)))])
    return [body]


def app(environ, start_response):
    path, method = environ.get("PATH_INFO", "/"), environ["REQUEST_METHOD"]
    if path == "/" and method in ("GET", "HEAD"):
        return answer(start_response, "200 OK", b"OK")
    if path == "/big" and method in ("GET", "HEAD"):
        start_response("200 OK", [("Content-Type", "application/octet-stream"),
                                  ("Content-Length", str(BIG_LENGTH))])
        return BIG
    if path == "/upload" and method == "POST":
        stream, received = environ["wsgi.input"], 0
        while chunk := stream.read(READ_SIZE):
            received += len(chunk)
        return answer(start_response, "200 OK", str(received).encode())
    return answer(start_response, "404 Not Found", b"not found")


application = app
