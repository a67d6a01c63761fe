"""ASGI app for the tests of compressed sends that are cancelled, not awaited, or cut by the
client (tests/python/e2e/test_compression_sends.py; issue 39's follow-up, review items 1-3):
every block is large enough to be compressed in the worker's pool, off the loop.

- ``/cancelled``: ``BLOCKS[0]`` sent under ``asyncio.wait_for(..., 0)`` (it times out: the
  block is in the pool), ``BLOCKS[1]`` sent and its awaitable cancelled, then the other blocks
  and the end, each awaited: the response is every block, in order.
- ``/unawaited``: the blocks but the last awaited; the last (the end of the body) sent with
  ``asyncio.ensure_future`` and never awaited: the app returns at once.
- ``/unawaited-whole``: ``WHOLE`` in one body message, never awaited (compressed whole).
- ``/endless``: blocks, each awaited, until a ``send`` raises (the client left); then a line
  ``compress_cancel_app: endless send raised <name>`` on stderr, and the app returns.
- anything else: ``ok``, uncompressed.
"""

import asyncio
import sys

BLOCKS = [f"block {n}: {'lorem ipsum dolor sit amet ' * 4000}\n".encode() for n in range(4)]
WHOLE = b"".join(f"line {n}: the quick brown fox\n".encode() for n in range(20_000))
HEAD = {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]}


def block(data, more=True):
    return {"type": "http.response.body", "body": data, "more_body": more}


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    path = scope["path"]
    if path == "/cancelled":
        await send(HEAD)
        try:
            await asyncio.wait_for(send(block(BLOCKS[0])), 0)
        except asyncio.TimeoutError:
            pass
        pending = asyncio.ensure_future(send(block(BLOCKS[1])))
        pending.cancel()
        for data in BLOCKS[2:]:
            await send(block(data))
        await send(block(b"", more=False))
    elif path == "/unawaited":
        await send(HEAD)
        for data in BLOCKS[:-1]:
            await send(block(data))
        asyncio.ensure_future(send(block(BLOCKS[-1], more=False)))
    elif path == "/unawaited-whole":
        await send(HEAD)
        asyncio.ensure_future(send(block(WHOLE, more=False)))
    elif path == "/endless":
        await send(HEAD)
        try:
            while True:
                for data in BLOCKS:
                    await send(block(data))
        except Exception as error:
            print(f"compress_cancel_app: endless send raised {type(error).__name__}", file=sys.stderr, flush=True)
    else:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain"), (b"content-length", b"2")]})
        await send(block(b"ok", more=False))
