"""The ASGI app of tests/python/e2e/test_h2_asgi_wake.py: ``/bytes?n=N`` answers N bytes
(``content-length`` set) in one ``send``, or in ``sends`` equal pieces; ``/`` answers ``ok``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs


async def app(scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    args = {key: values[0] for key, values in parse_qs(scope["query_string"].decode()).items()}
    size, sends = int(args.get("n", "2")), int(args.get("sends", "1"))
    body = b"ok" if scope["path"] != "/bytes" else bytes(index % 251 for index in range(size))
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/octet-stream"),
                            (b"content-length", str(len(body)).encode())]})
    piece = -(-len(body) // sends)
    for start in range(0, len(body), piece):
        await send({"type": "http.response.body", "body": body[start:start + piece],
                    "more_body": start + piece < len(body)})
