"""An app that fails to import while the file named by $FRAGILE_MARKER exists."""

import os

if os.path.exists(os.environ["FRAGILE_MARKER"]):
    raise RuntimeError("the marker file says: fail to boot")


def app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
    return [b"OK"]
