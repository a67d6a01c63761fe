"""A WSGI app that leaks 50 KB per request (a cache that is never cleared). The right answer:
``max_requests`` (and ``max_worker_memory``) from the leak rate."""

LEAK_BYTES = 50_000
_kept = []


def app(environ, start_response):
    # Written, so the pages are really resident (and counted in USS).
    _kept.append(bytearray(b"x" * LEAK_BYTES))
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
    return [b"OK"]
