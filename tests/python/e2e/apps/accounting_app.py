"""Large compressible-but-not-much bodies for the compression accounting tests
(tests/python/e2e/test_compression_accounting.py), as WSGI (``app``) and ASGI (``asgi``):
text that compresses to about three quarters (base64 of seeded random bytes), so the compressed
body still outgrows the socket's buffers and leaves through the slow-client paths.

- ``/big``: 48 blocks of 64 KiB, streamed (no length);
- ``/big-whole``: 3 MiB as one body with its ``Content-Length`` (over the 1 MiB a whole body
  is compressed in one go up to: compressed as a stream).
"""

import base64
import random

BLOCK = 64 * 1024
TEXT = base64.b64encode(random.Random(39).randbytes(48 * BLOCK * 3 // 4))
BLOCKS = [TEXT[i:i + BLOCK] for i in range(0, len(TEXT), BLOCK)]
WHOLE = TEXT


def app(environ, start_response):
    if environ["PATH_INFO"] == "/big":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return iter(BLOCKS)
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(WHOLE)))])
    return [WHOLE]


async def asgi(scope, receive, send):
    if scope["type"] != "http":
        return
    if scope["path"] == "/big":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        for block in BLOCKS:
            await send({"type": "http.response.body", "body": block, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain"), (b"content-length", str(len(WHOLE)).encode())]})
    await send({"type": "http.response.body", "body": WHOLE})
