"""Test app whose routes crash the worker in different ways, or hold a request.

/pid        the worker's pid
/segv       SIGSEGV from C (reads address 0 through ctypes)
/exit       os._exit(7)
/raise      an exception (a 500, the worker lives)
/slow       blocks until the file named by the query string exists, then answers "done"

``asgi`` is the same for an ASGI worker (/exit, /slow awaiting its gate, else the pid).
"""

import asyncio
import ctypes
import os
import time


def app(environ, start_response):
    path = environ["PATH_INFO"]
    if path == "/segv":
        ctypes.string_at(0)
    if path == "/exit":
        os._exit(7)
    if path == "/raise":
        raise RuntimeError("boom from the app")
    if path == "/slow":
        gate = environ["QUERY_STRING"]
        open(gate + ".started", "w").close()
        while not os.path.exists(gate):
            time.sleep(0.01)
        body = b"done"
    else:
        body = str(os.getpid()).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


async def asgi(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            await send({"type": message["type"] + ".complete"})
            if message["type"] == "lifespan.shutdown":
                return
    path = scope["path"]
    if path == "/exit":
        os._exit(7)
    if path == "/slow":
        gate = scope["query_string"].decode()
        open(gate + ".started", "w").close()
        while not os.path.exists(gate):
            await asyncio.sleep(0.01)
        body = b"done"
    else:
        body = str(os.getpid()).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
