"""What a WSGI app sees of TLS, as JSON: the scheme, ``HTTPS``, every ``SSL_*`` variable, the
client's address and the worker's pid (tests/python/e2e/test_tls_*.py)."""

import json
import os


def app(environ, start_response):
    shown = {key: value for key, value in environ.items() if key.startswith("SSL_")}
    shown.update({"wsgi.url_scheme": environ["wsgi.url_scheme"], "HTTPS": environ.get("HTTPS"),
                  "REMOTE_ADDR": environ.get("REMOTE_ADDR"), "REMOTE_PORT": environ.get("REMOTE_PORT"),
                  "pid": os.getpid()})
    body = json.dumps(shown).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]
