"""Answers every request with a 302 redirect to /elsewhere (a URL a benchmark should not measure)."""


def app(environ, start_response):
    start_response("302 Found", [("Location", "/elsewhere"), ("Content-Length", "0")])
    return [b""]
