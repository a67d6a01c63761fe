"""The smallest useful ASGI app: ``tines serve examples/asgi_hello.py:app`` (no flag needed:
a coroutine app is served as ASGI 3)."""

BODY = b"OK"
START = {
    "type": "http.response.start",
    "status": 200,
    "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(BODY)).encode())],
}
RESPONSE = {"type": "http.response.body", "body": BODY}


async def app(scope, receive, send):
    if scope["type"] != "http":
        return  # lifespan: nothing to start
    await send(START)
    await send(RESPONSE)
