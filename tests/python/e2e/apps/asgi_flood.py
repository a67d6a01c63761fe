"""An ASGI app that floods its clients, for the tests of clients that stop reading
(test_websocket_release.py).

``/flood?N`` (WebSocket) accepts, then sends 64 KiB messages until a ``send`` raises;
``/flood-pair?N`` does it from two tasks at once (``Na`` and ``Nb``);
``/stream?N`` (HTTP) streams 64 KiB body messages the same way. Each appends lines to the
file named by ``FLOOD_RECORD`` (one ``write`` each, so lines never interleave):

- ``waiting N`` when a ``send`` is about to wait for the client (it returned a future of the
  loop rather than an awaitable that is done already: the server's backpressure);
- ``raised N waiting|next TYPE`` when a ``send`` raised: the one that waited, or a later one,
  and what then came from ``receive`` (``websocket.disconnect CODE``, ``http.disconnect``).
"""

import asyncio
import os

CHUNK = b"x" * 65536


def record(line: str) -> None:
    fd = os.open(os.environ["FLOOD_RECORD"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


async def flood(name: str, send, message: dict) -> None:
    """Sends ``message`` until a send raises; records the first wait and the raise."""
    told = False
    while True:
        awaitable = send(message)
        waits = isinstance(awaitable, asyncio.Future)
        if waits and not told:
            told = True
            record(f"waiting {name}")
        try:
            await awaitable
        except OSError:
            raise OSError("waiting" if waits else "next") from None


async def flood_recorded(name: str, send) -> None:
    """One of two tasks flooding the same WebSocket (a handler and a broadcaster): records its
    own raise, without a receive (the other task may be in one)."""
    try:
        await flood(name, send, {"type": "websocket.send", "bytes": CHUNK})
    except OSError as error:
        record(f"raised {name} {error}")


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        return
    name = scope["query_string"].decode()
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/octet-stream")]})
        try:
            await flood(name, send, {"type": "http.response.body", "body": CHUNK,
                                     "more_body": True})
        except OSError as error:
            message = await receive()
            record(f"raised {name} {error} {message['type']}")
        return
    assert (await receive())["type"] == "websocket.connect"
    await send({"type": "websocket.accept"})
    if scope["path"] == "/flood-pair":
        await asyncio.gather(flood_recorded(name + "a", send), flood_recorded(name + "b", send))
        return
    try:
        await flood(name, send, {"type": "websocket.send", "bytes": CHUNK})
    except OSError as error:
        message = await receive()
        record(f"raised {name} {error} {message['type']} {message.get('code')}")
