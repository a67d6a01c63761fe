"""gate.py's app (``/hold`` waits at the test's gate), plus ``/big``: an 8 MiB body in one
piece, which a worker hands to its poller to write as the client reads."""

from gate import app as gated

BIG = b"x" * (8 << 20)


def app(environ, start_response):
    if environ["PATH_INFO"] == "/big":
        start_response("200 OK", [("Content-Type", "application/octet-stream"),
                                  ("Content-Length", str(len(BIG)))])
        return [BIG]
    return gated(environ, start_response)
