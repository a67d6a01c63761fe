"""Starts a Python thread at its first request (after the fork) that counts while the worker
serves, as apps' background flushers and pollers do. Each response says how far it got, and
so does the file named by ``COUNT_FILE`` (readable while no request comes)."""

import os
import threading
import time

STATE = {"count": 0}
STARTED = threading.Lock()
THREADS: list[threading.Thread] = []


def count() -> None:
    path = os.environ["COUNT_FILE"]
    while True:
        STATE["count"] += 1
        with open(f"{path}.tmp", "w") as out:
            out.write(str(STATE["count"]))
        os.replace(f"{path}.tmp", path)
        time.sleep(0.001)


def app(environ, start_response):
    with STARTED:
        if not THREADS:
            THREADS.append(threading.Thread(target=count, daemon=True))
            THREADS[0].start()
    body = str(STATE["count"]).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
