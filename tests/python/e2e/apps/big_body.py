"""Answers every request with an 8 MiB body (and /small with a short one)."""

BIG = b"x" * (8 << 20)


def app(environ, start_response):
    body = b"small" if environ["PATH_INFO"] == "/small" else BIG
    start_response("200 OK", [("Content-Type", "application/octet-stream"), ("Content-Length", str(len(body)))])
    return [body]
