"""The apps ``tines tune`` calibrates with: they do nothing, so what a request costs under them
is the server's own cost (the framework penalty) under the same MPM and load."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any

BODY = b"OK"
HEADERS = [("Content-Type", "text/plain"), ("Content-Length", "2")]


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    """WSGI: 200 OK."""
    start_response("200 OK", list(HEADERS))
    return [BODY]


async def asgi_app(scope: dict[str, Any], receive: Callable[[], Awaitable[dict[str, Any]]],
                   send: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
    """ASGI 3: 200 OK (lifespan accepted)."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(k.lower().encode(), v.encode()) for k, v in HEADERS]})
    await send({"type": "http.response.body", "body": BODY})
