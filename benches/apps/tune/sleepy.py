"""A WSGI app that waits 50 ms per request (a slow database or API, say) and computes almost
nothing. The right answer: thread or event, with many threads."""

import time

DELAY_S = 0.050


def app(environ, start_response):
    time.sleep(DELAY_S)
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "5")])
    return [b"slept"]
