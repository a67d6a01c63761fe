"""What an ASGI app sees of TLS, as JSON: the scope's scheme, its ``tls`` extension (asgiref's
TLS spec) and the worker's pid; over HTTP as the response body, over a WebSocket as the first
message, then every message is echoed (tests/python/e2e/test_tls_*.py)."""

import json
import os


def shown(scope):
    tls = scope.get("extensions", {}).get("tls")
    if tls is not None:
        tls = dict(tls)
        tls["client_cert_chain"] = list(tls.get("client_cert_chain") or [])
    return json.dumps({"scheme": scope["scheme"], "tls": tls, "pid": os.getpid()})


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        return
    if scope["type"] == "http":
        body = shown(scope).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})
        return
    message = await receive()
    assert message["type"] == "websocket.connect"
    await send({"type": "websocket.accept"})
    await send({"type": "websocket.send", "text": shown(scope)})
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            return
        await send({"type": "websocket.send", "text": message.get("text"), "bytes": message.get("bytes")})
