"""A CPU-bound WSGI app for ``tines tune``'s right-answer runs: each request computes for about
a millisecond (a hash chain) and waits on nothing. The right answer: prefork, workers = CPUs."""

import hashlib

ROUNDS = 2000


def app(environ, start_response):
    digest = b"tines"
    for _ in range(ROUNDS):
        digest = hashlib.sha256(digest).digest()
    body = digest.hex().encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
