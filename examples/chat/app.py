"""A small chat room on Starlette over WebSocket: ``make chat`` (or
``tines serve examples/chat/app.py:app -w 1``), then open http://127.0.0.1:8001/ in two browser
tabs.

One room per worker process: run it with one worker (a room shared by several workers needs a
broker between them, such as Redis pub/sub). The lifespan opens the room and, at shutdown,
says goodbye to whoever is still there.
"""

import contextlib
import html

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Tines chat</title>
<style>
  body { font: 16px system-ui, sans-serif; max-width: 40rem; margin: 2rem auto; }
  #log { border: 1px solid #ccc; height: 20rem; overflow-y: auto; padding: .5rem; }
  #log p { margin: .2rem 0; }
  form { display: flex; gap: .5rem; margin-top: .5rem; }
  #text { flex: 1; }
</style>
</head>
<body>
<h1>Tines chat</h1>
<div id="log" aria-live="polite"></div>
<form id="form">
  <input id="name" placeholder="name" size="8" required>
  <input id="text" placeholder="say something" autocomplete="off" required>
  <button>Send</button>
</form>
<script>
  const log = document.getElementById("log");
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const socket = new WebSocket(`${scheme}://${location.host}/ws`);
  socket.onmessage = (event) => {
    const line = document.createElement("p");
    line.textContent = event.data;
    log.appendChild(line);
    log.scrollTop = log.scrollHeight;
  };
  socket.onclose = (event) => {
    const line = document.createElement("p");
    line.textContent = `(disconnected: ${event.code})`;
    log.appendChild(line);
  };
  document.getElementById("form").onsubmit = (event) => {
    event.preventDefault();
    const name = document.getElementById("name").value;
    const text = document.getElementById("text");
    socket.send(`${name}: ${text.value}`);
    text.value = "";
  };
</script>
</body>
</html>
"""


class Room:
    """The people connected to this worker, and what they said last."""

    def __init__(self) -> None:
        self.members: set[WebSocket] = set()
        self.said = 0

    async def say(self, text: str) -> None:
        self.said += 1
        for member in list(self.members):
            try:
                await member.send_text(text)
            except (WebSocketDisconnect, OSError):
                self.members.discard(member)


room = Room()


@contextlib.asynccontextmanager
async def lifespan(app):
    yield
    await room.say("(the server is stopping)")


async def page(request: Request) -> HTMLResponse:
    return HTMLResponse(PAGE)


async def stats(request: Request) -> JSONResponse:
    return JSONResponse({"members": len(room.members), "said": room.said})


async def chat(socket: WebSocket) -> None:
    await socket.accept()
    room.members.add(socket)
    await room.say(f"(someone joined: {len(room.members)} here)")
    try:
        while True:
            text = await socket.receive_text()
            # The page shows text, never markup; escaped here too for other clients.
            await room.say(html.escape(text[:500]))
    except WebSocketDisconnect:
        pass
    finally:
        room.members.discard(socket)
        await room.say(f"(someone left: {len(room.members)} here)")


app = Starlette(routes=[
    Route("/", page),
    Route("/stats", stats),
    WebSocketRoute("/ws", chat),
], lifespan=lifespan)
