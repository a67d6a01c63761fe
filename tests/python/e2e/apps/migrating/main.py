"""The FastAPI app docs/migrating.md's uvicorn and Granian examples serve as ``main:app``: it
answers with what it saw of the request (``root_path``, ``path``, scheme, client), and logs
one ``logging`` record per request so a ``--log-config`` can be seen taking effect."""

import logging

from fastapi import FastAPI, Request

app = FastAPI()
log = logging.getLogger("main")


def _seen(request: Request) -> dict[str, object]:
    scope = request.scope
    log.info("served %s", scope["path"])
    client = scope.get("client")
    return {"interface": "asgi", "root_path": scope.get("root_path", ""), "path": scope["path"],
            "scheme": scope["scheme"], "client": client[0] if client else None}


@app.get("/")
def root(request: Request) -> dict[str, object]:
    """What the app saw, at ``/``."""
    return _seen(request)


@app.get("/items")
def items(request: Request) -> dict[str, object]:
    """What the app saw, at ``/items`` (``/api/items`` behind ``--root-path /api``)."""
    return _seen(request)
