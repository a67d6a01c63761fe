"""Apps that show what they see of ``root_path``, for test_root_path.py: each answers JSON.

``wsgi`` and ``asgi`` report the raw values (``SCRIPT_NAME``/``PATH_INFO``; ``root_path``,
``path``, ``raw_path``, of an ``http`` scope or, in a message, a ``websocket`` one); ``flask_app`` and ``starlette_app`` route ``/items`` as the frameworks
do behind a prefix, and build the URL of that route (which must hold the prefix).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from flask import Flask, request, url_for
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


def wsgi(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    body = json.dumps({"SCRIPT_NAME": environ["SCRIPT_NAME"], "PATH_INFO": environ["PATH_INFO"]})
    start_response("200 OK", [("Content-Type", "application/json")])
    return [body.encode()]


async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"})
                return
    body = json.dumps({"root_path": scope["root_path"], "path": scope["path"],
                       "raw_path": scope["raw_path"].decode("latin-1")})
    if scope["type"] == "websocket":
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.send", "text": body})
        await send({"type": "websocket.close", "code": 1000})
        return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body.encode()})


flask_app = Flask(__name__)


@flask_app.get("/items")
def items() -> dict[str, str]:
    return {"script_root": request.script_root, "path": request.path, "url": url_for("items")}


async def starlette_items(request: Request) -> JSONResponse:
    return JSONResponse({"root_path": request.scope["root_path"], "path": request.scope["path"],
                         "url": str(request.url_for("items"))})


starlette_app = Starlette(routes=[Route("/items", starlette_items, name="items")])
