"""A plain ASGI 3 app (no framework) with one route per behaviour the ASGI tests check.

Routes that must wait do so on asyncio events another request sets (``/release``), so the
tests assert an order, never a duration. ``LIFESPAN_LOG`` (a file path in the environment)
receives one line per lifespan event.
"""

import asyncio
import json
import os

events: dict[str, asyncio.Event] = {}
progress: dict[str, int] = {"big": 0}
seen: dict[str, str] = {}


def event(name: str) -> asyncio.Event:
    if name not in events:
        events[name] = asyncio.Event()
    return events[name]


def note(line: str) -> None:
    path = os.environ.get("LIFESPAN_LOG")
    if path:
        with open(path, "a") as handle:
            handle.write(line + "\n")


async def lifespan(scope, receive, send):
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            scope["state"]["greeting"] = "hello from startup"
            note("startup")
            if os.environ.get("LIFESPAN_FAIL"):
                await send({"type": "lifespan.startup.failed", "message": "no database"})
                return
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            note("shutdown")
            await send({"type": "lifespan.shutdown.complete"})
            return


async def respond(send, body: bytes, status: int = 200, content_type: bytes = b"text/plain") -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type)]})
    await send({"type": "http.response.body", "body": body})


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        return await lifespan(scope, receive, send)
    path = scope["path"]
    query = dict(part.split("=", 1) for part in scope["query_string"].decode().split("&") if "=" in part)
    if path == "/":
        return await respond(send, b"hello from ASGI")
    if path == "/scope":
        shown = {key: value for key, value in scope.items() if key not in ("headers", "state")}
        shown = {key: (value.decode("latin-1") if isinstance(value, bytes) else value)
                 for key, value in shown.items()}
        shown["headers"] = [[name.decode("latin-1"), value.decode("latin-1")]
                            for name, value in scope["headers"]]
        shown["state"] = dict(scope.get("state", {}))
        return await respond(send, json.dumps(shown).encode(), content_type=b"application/json")
    if path == "/echo":
        parts = []
        messages = 0
        while True:
            message = await receive()
            assert message["type"] == "http.request", message
            messages += 1
            parts.append(message["body"])
            if not message.get("more_body"):
                break
        body = b"".join(parts)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"x-messages", str(messages).encode())]})
        await send({"type": "http.response.body", "body": body})
        return None
    if path == "/stream":
        # One block, then wait for the test to release the next.
        count = int(query.get("n", "3"))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for index in range(count):
            if index:
                gate = event(f"stream-{index}")
                await gate.wait()
            await send({"type": "http.response.body", "body": f"block {index}\n".encode(),
                        "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        return None
    if path == "/drip":
        # The app's own pace: a block every `every` seconds.
        count, every = int(query["n"]), float(query["every"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for index in range(count):
            await asyncio.sleep(every)
            await send({"type": "http.response.body", "body": f"drop {index}\n".encode(),
                        "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        return None
    if path == "/release":
        event(query["name"]).set()
        return await respond(send, b"released")
    if path == "/hold":
        event(query["name"] + "-held").set()
        await event(query["name"]).wait()
        return await respond(send, b"held and released")
    if path == "/held":
        await event(query["name"] + "-held").wait()
        return await respond(send, b"it is held")
    if path == "/big":
        # 64 blocks of 1 MiB to a client that may not read: send must wait for it.
        block = b"x" * (1024 * 1024)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(64 * len(block)).encode())]})
        for _ in range(64):
            await send({"type": "http.response.body", "body": block, "more_body": True})
            progress["big"] += 1
        await send({"type": "http.response.body", "body": b""})
        return None
    if path == "/progress":
        return await respond(send, str(progress["big"]).encode())
    if path == "/wait-disconnect":
        message = await receive()  # the (empty) body
        assert message["type"] == "http.request"
        event("waiting-disconnect").set()
        message = await receive()
        seen["disconnect"] = message["type"]
        event("disconnected").set()
        return None
    if path == "/disconnected":
        await event("disconnected").wait()
        return await respond(send, seen["disconnect"].encode())
    if path == "/waiting-disconnect":
        await event("waiting-disconnect").wait()
        return await respond(send, b"waiting")
    if path == "/error":
        raise ValueError("the app failed before its response")
    if path == "/error-after":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"partial", "more_body": True})
        raise ValueError("the app failed in the middle of its response")
    if path == "/no-response":
        return None
    if path == "/bad-header":
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"x-bad", b"line\r\nbreak")]})
        await send({"type": "http.response.body", "body": b"never"})
        return None
    if path == "/forever":
        await asyncio.Event().wait()
        return None
    if path == "/trailers":
        # The trailers extension: body in two messages, then trailers in two (``declared``:
        # with a Content-Length, where they cannot go; ``bad``: a refused field first).
        offered = "http.response.trailers" in scope["extensions"]
        headers = [(b"content-type", b"text/plain"), (b"trailer", b"x-checksum, x-status"),
                   (b"x-offered", str(offered).encode())]
        if "declared" in query:
            headers.append((b"content-length", b"18"))
        await send({"type": "http.response.start", "status": 200, "headers": headers,
                    "trailers": True})
        await send({"type": "http.response.body", "body": b"part one, ", "more_body": True})
        await send({"type": "http.response.body", "body": b"part two"})
        refused = b"no"
        if "bad" in query:
            try:
                await send({"type": "http.response.trailers",
                            "headers": [(b"content-length", b"3")], "more_trailers": True})
            except ValueError:
                refused = b"yes"
        await send({"type": "http.response.trailers",
                    "headers": [(b"x-checksum", b"abc"), (b"x-refused", refused)],
                    "more_trailers": True})
        await send({"type": "http.response.trailers", "headers": [(b"x-status", b"0")]})
        return None
    return await respond(send, b"not found", status=404)


class ASGI2:
    """An ASGI 2 app: the class is called with the scope, its instance with receive and send."""

    def __init__(self, scope):
        self.scope = scope

    async def __call__(self, receive, send):
        if self.scope["type"] != "http":
            return
        await respond(send, b"hello from ASGI 2")
