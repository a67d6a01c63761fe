"""The framework-penalty app (issue 15): one Flask route returning ``OK``.

What a real framework costs per request on top of the server, with nothing else in the way (no
template, no database): the row that showed Tines 20 µs a request behind bjoern when raw WSGI
showed them level.
"""

from __future__ import annotations

from flask import Flask

app = Flask(__name__)


@app.get("/ok")
def ok() -> str:
    return "OK"
