"""For the memory tests: ``/`` answers the worker's pid; ``/grow?mib=N`` keeps N MiB more (every
byte written, so resident and private) for the worker's life, then answers its pid;
``/merge`` answers ``prctl(PR_GET_MEMORY_MERGE)`` (1 when the worker opted in to KSM)."""

import ctypes
import os
from urllib.parse import parse_qs

PR_GET_MEMORY_MERGE = 68
HELD = []


def app(environ, start_response):
    path = environ["PATH_INFO"]
    if path == "/grow":
        mib = int(parse_qs(environ["QUERY_STRING"]).get("mib", ["4"])[0])
        HELD.append(b"x" * (mib << 20))
        body = str(os.getpid())
    elif path == "/merge":
        libc = ctypes.CDLL(None, use_errno=True)
        body = str(libc.prctl(PR_GET_MEMORY_MERGE, 0, 0, 0, 0))
    else:
        body = str(os.getpid())
    data = body.encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(data)))])
    return [data]
