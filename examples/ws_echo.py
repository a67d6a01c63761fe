"""A WebSocket echo server as a plain ASGI app: ``tines serve examples/ws_echo.py:app``, then
connect to ``ws://127.0.0.1:8000/`` (any path). Plain HTTP requests get a one-line answer."""


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        return
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"connect with a WebSocket client\n"})
        return
    await receive()  # websocket.connect
    await send({"type": "websocket.accept"})
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            return
        if message.get("text") is not None:
            await send({"type": "websocket.send", "text": message["text"]})
        else:
            await send({"type": "websocket.send", "bytes": message["bytes"]})
