"""A plain ASGI app with WebSocket routes for the WebSocket tests (and an HTTP route beside
them). ``/last-disconnect`` tells how the last WebSocket that saw a disconnect ended."""

import asyncio

last: dict[str, object] = {}
counts = {"messages": 0}
changed = asyncio.Event()


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        return
    if scope["type"] == "http":
        if scope["path"] == "/last-disconnect":
            # Waits until some WebSocket saw its disconnect.
            await changed.wait()
            body = f"{last['code']} {last['reason']}".encode()
        elif scope["path"] == "/messages":
            body = str(counts["messages"]).encode()
        else:
            body = b"http beside websockets"
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})
        return
    path = scope["path"]
    message = await receive()
    assert message["type"] == "websocket.connect"
    if path == "/deny":
        await send({"type": "websocket.close"})
        return
    if path == "/deny-custom":
        await send({"type": "websocket.http.response.start", "status": 401,
                    "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "websocket.http.response.body", "body": b"who are you?"})
        return
    if path == "/scope":
        await send({"type": "websocket.accept"})
        shown = {key: value for key, value in scope.items() if key in (
            "type", "scheme", "path", "query_string", "subprotocols", "http_version", "extensions")}
        shown["query_string"] = shown["query_string"].decode()
        await send({"type": "websocket.send", "text": repr(sorted(shown.items()))})
        await send({"type": "websocket.close"})
        return
    subprotocol = "superchat" if "superchat" in scope["subprotocols"] else None
    await send({"type": "websocket.accept", "subprotocol": subprotocol,
                "headers": [(b"x-accepted-by", b"tines-test")]})
    if path == "/bad-close":
        await send({"type": "websocket.close", "code": 1006})  # reserved: ValueError
        return
    if path == "/cancelled-receive":
        # A receive cancelled by a timeout must not take the next message with it.
        try:
            await asyncio.wait_for(receive(), 0.01)
        except asyncio.TimeoutError:
            pass
        await send({"type": "websocket.send", "text": "ready"})
        message = await receive()
        await send({"type": "websocket.send", "text": "got " + message["text"]})
        await send({"type": "websocket.close"})
        return
    if path == "/close-4000":
        await send({"type": "websocket.close", "code": 4000, "reason": "bye"})
        return
    # Echo until the client goes.
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            last.update(code=message["code"], reason=message.get("reason", ""))
            changed.set()
            return
        counts["messages"] += 1
        if message.get("text") is not None:
            await send({"type": "websocket.send", "text": message["text"]})
        else:
            await send({"type": "websocket.send", "bytes": message["bytes"]})
