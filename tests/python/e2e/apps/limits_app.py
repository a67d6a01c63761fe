"""Reports the worker's resource limits, or keeps the CPU busy (for the limit_* settings).

- ``/limits``: JSON ``{"pid": ..., "NOFILE": [soft, hard], "CORE": ..., "AS": ..., "DATA": ...,
  "CPU": ...}`` (-1 is unlimited).
- ``/spin?seconds=N``: loops in pure Python until this process has used N seconds of CPU time
  (user + system, all threads), then answers with the pid.
- anything else: the pid.
"""

import json
import os
import resource


def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def app(environ, start_response):
    path = environ["PATH_INFO"]
    if path == "/limits":
        names = ("NOFILE", "CORE", "AS", "DATA", "CPU")
        limits = {name: list(resource.getrlimit(getattr(resource, "RLIMIT_" + name))) for name in names}
        body = json.dumps({"pid": os.getpid(), **limits}).encode()
    elif path == "/spin":
        target = float(environ["QUERY_STRING"].partition("=")[2])
        while cpu_seconds() < target:
            sum(range(1000))
        body = str(os.getpid()).encode()
    else:
        body = str(os.getpid()).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
