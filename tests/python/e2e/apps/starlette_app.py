"""A small Starlette app: JSON routes, path and query parameters, a form, an upload, a
streamed response, lifespan state, a sync endpoint (run in a thread pool), an error and a
WebSocket route."""

import asyncio
import contextlib

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect


@contextlib.asynccontextmanager
async def lifespan(app):
    yield {"started": True}


async def home(request: Request) -> JSONResponse:
    return JSONResponse({"hello": "starlette", "started": request.state.started})


async def item(request: Request) -> JSONResponse:
    return JSONResponse({"item": request.path_params["item_id"],
                         "detail": request.query_params.get("detail")})


async def form(request: Request) -> JSONResponse:
    data = await request.form()
    return JSONResponse({key: data[key] for key in data})


async def upload(request: Request) -> JSONResponse:
    data = await request.form()
    upload = data["file"]
    content = await upload.read()
    return JSONResponse({"filename": upload.filename, "size": len(content)})


async def stream(request: Request) -> StreamingResponse:
    async def lines():
        for index in range(5):
            await asyncio.sleep(0)
            yield f"line {index}\n"

    return StreamingResponse(lines(), media_type="text/plain")


def slow_json(request: Request) -> JSONResponse:
    # A sync endpoint: Starlette runs it in its thread pool, off the loop.
    return JSONResponse({"sum": sum(range(10_000))})


async def boom(request: Request) -> JSONResponse:
    raise RuntimeError("boom")


async def websocket(socket: WebSocket) -> None:
    await socket.accept()
    try:
        text = await socket.receive_text()
        await socket.send_text(f"pong: {text}")
        data = await socket.receive_json()
        await socket.send_json({"n": data["n"] + 1})
    except WebSocketDisconnect:
        pass


app = Starlette(routes=[
    Route("/", home),
    Route("/items/{item_id:int}", item),
    Route("/form", form, methods=["POST"]),
    Route("/upload", upload, methods=["POST"]),
    Route("/stream", stream),
    Route("/slow-json", slow_json),
    Route("/boom", boom),
    WebSocketRoute("/ws", websocket),
], lifespan=lifespan)
