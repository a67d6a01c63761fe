"""Answers with the worker's pid; with a directory in TINES_TEST_GATES, two gates for tests.

- At import: if ``<dir>/boot-gate`` exists, the importing worker writes ``<dir>/booting-<pid>``
  and waits until the gate is removed (a worker the test holds in its boot).
- ``/slow``: writes ``<dir>/started-<pid>`` and waits until ``<dir>/release-<pid>`` exists (a
  request the test holds in the app), then answers with the pid.
"""

import os
import time
from pathlib import Path

GATES = Path(os.environ["TINES_TEST_GATES"]) if os.environ.get("TINES_TEST_GATES") else None
POLL = 0.01
"""How often the app looks at its gate (the app waits; the test never sleeps)."""

if GATES is not None and (GATES / "boot-gate").exists():
    (GATES / f"booting-{os.getpid()}").touch()
    while (GATES / "boot-gate").exists():
        time.sleep(POLL)


def app(environ, start_response):
    pid = os.getpid()
    if environ["PATH_INFO"] == "/slow" and GATES is not None:
        (GATES / f"started-{pid}").touch()
        while not (GATES / f"release-{pid}").exists():
            time.sleep(POLL)
    body = str(pid).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
