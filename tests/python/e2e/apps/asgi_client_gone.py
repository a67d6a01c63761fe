"""For the test of a client gone before the response started: ``/leave`` says it waits
(``/state``), waits for ``http.disconnect``, then calls ``send`` (which raises, the client being
gone) and notes the exception's name; ``/state`` answers what ``/leave`` did so far."""

state: list[str] = []


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            await send({"type": message["type"] + ".complete"})
            if message["type"] == "lifespan.shutdown":
                return
    if scope["path"] == "/leave":
        state.append("waiting")
        while (await receive())["type"] != "http.disconnect":
            pass
        try:
            await send({"type": "http.response.start", "status": 200, "headers": []})
        except Exception as error:
            state.append(type(error).__name__)
            raise
        state.append("sent")
        return
    body = ",".join(state).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
