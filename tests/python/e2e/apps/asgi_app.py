"""ASGI apps in plain Python (no framework): Tines serves WSGI, and must say so in one line.

``app`` is an ASGI function, ``instance`` is shaped like a Starlette/FastAPI/Django app (an
object whose ``__call__`` is ``async def``), and ``create_app`` is a factory returning one.
"""


async def app(scope, receive, send):
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"hello from ASGI"})


class Application:
    async def __call__(self, scope, receive, send):
        await app(scope, receive, send)


instance = Application()


def create_app():
    return Application()
