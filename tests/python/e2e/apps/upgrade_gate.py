"""Answers with the worker's pid; its import can be held at a gate the test controls, to keep
a new master (USR2) from getting ready while the test acts on the overlap.

When the FIFO named in ``UPGRADE_GATE`` exists at import, the import opens it and reads what
the test writes: ``go`` lets the import finish, anything else makes it fail (a broken deploy).
Workers started while the path does not exist import at once.
"""

import os

GATE = os.environ.get("UPGRADE_GATE")
if GATE and os.path.exists(GATE):
    with open(GATE) as gate:
        word = gate.read().strip()
    if word != "go":
        raise RuntimeError(f"the upgrade gate said {word!r}")


def app(environ, start_response):
    body = str(os.getpid()).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
