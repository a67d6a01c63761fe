"""The app the profiler tests drive (tests/python/e2e/test_profile.py): every request renders a
page whose cost is all in ``checksum``, called through ``render_page``, so a profile of it has
a known shape."""


def checksum(rounds):
    total = 0
    for number in range(rounds):
        total = (total * 31 + number) % 1_000_003
    return total


def render_page():
    # Long enough to span several of CPython's 5 ms switch intervals: in prefork the loop
    # holds the GIL, and the sampler gets it when the app's bytecode honours a switch request.
    return f"checksum {checksum(400_000)}\n".encode()


def app(environ, start_response):
    body = render_page()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
