"""An ASGI app for the tests of a worker's WebSocket limits (test_websocket_limits.py).

``/echo`` echoes until the client goes. ``/held`` accepts, then takes nothing from the client
until the test opens a gate: the first ``/held`` WebSocket connects to the Unix socket named by
``GATE_SOCKET`` and waits until the test closes it; every ``/held`` WebSocket then receives, and
answers each message with its length as text. ``/disconnects`` (HTTP) waits until ``n``
WebSockets have seen their disconnect (and returned), then tells their codes in order.
"""

import asyncio
import os

gate: "asyncio.Task[None] | None" = None
codes: list[int] = []
returned = asyncio.Condition()


async def wait_at_gate() -> None:
    reader, writer = await asyncio.open_unix_connection(os.environ["GATE_SOCKET"])
    writer.write(b"held\n")
    await writer.drain()
    while await reader.read(64):
        pass
    writer.close()


async def app(scope, receive, send):
    global gate
    if scope["type"] == "lifespan":
        return
    if scope["type"] == "http":
        if scope["path"] == "/disconnects":
            wanted = int(scope["query_string"].decode().partition("=")[2])
            async with returned:
                await returned.wait_for(lambda: len(codes) >= wanted)
            body = " ".join(map(str, codes)).encode()
        else:
            body = b"http beside websockets"
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})
        return
    assert (await receive())["type"] == "websocket.connect"
    await send({"type": "websocket.accept"})
    code = None
    try:
        if scope["path"] == "/held":
            if gate is None:
                gate = asyncio.ensure_future(wait_at_gate())
            await asyncio.shield(gate)
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                code = message["code"]
                return
            data = message.get("text") or message.get("bytes") or b""
            if scope["path"] == "/held":
                await send({"type": "websocket.send", "text": str(len(data))})
            elif message.get("text") is not None:
                await send({"type": "websocket.send", "text": message["text"]})
            else:
                await send({"type": "websocket.send", "bytes": message["bytes"]})
    finally:
        # Counted with the lock held and nothing awaited after it: the app has returned (and
        # the server has let its WebSocket go) before a waiting ``/disconnects`` runs.
        async with returned:
            if code is not None:
                codes.append(code)
            returned.notify_all()
