"""Routes that exercise PEP 3333. Well-behaved routes run under wsgiref.validate.validator
(any violation by the app *or the server* raises AssertionError: a 500); the routes that
misbehave on purpose run unwrapped."""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import threading
from wsgiref.validate import validator

ENVIRON_KEYS = (
    "REQUEST_METHOD", "SCRIPT_NAME", "PATH_INFO", "QUERY_STRING", "CONTENT_TYPE", "CONTENT_LENGTH",
    "SERVER_NAME", "SERVER_PORT", "SERVER_PROTOCOL", "REMOTE_ADDR", "REMOTE_PORT", "RAW_URI",
    "wsgi.url_scheme", "wsgi.multithread", "wsgi.multiprocess", "wsgi.run_once",
    "wsgi.input_terminated",
)


# Module constants, passed again and again as the same objects (the server keeps the head it
# read from them: each call must still get exactly its own status and headers).
OK = "200 OK"
CREATED = "201 Created"
TEXT = ("Content-Type", "text/plain")
CONSTANT = [TEXT, ("X-Constant", "a")]
OTHER = [TEXT, ("X-Other", "b")]
INJECTED = ("X-Bad", "1\r\nX-Injected: yes")


def respond(start_response, body: bytes, content_type: str = "text/plain", status: str = "200 OK"):
    start_response(status, [("Content-Type", content_type), ("Content-Length", str(len(body)))])
    return [body]


def good(environ, start_response):
    path = environ["PATH_INFO"]
    query = environ["QUERY_STRING"]
    stream = environ["wsgi.input"]
    if path == "/environ":
        data = {key: environ.get(key) for key in ENVIRON_KEYS}
        data["wsgi.version"] = list(environ["wsgi.version"])
        data["headers"] = {k: v for k, v in environ.items() if k.startswith("HTTP_")}
        environ["wsgi.errors"].write("wsgi.errors is writable\n")
        return respond(start_response, json.dumps(data).encode(), "application/json")
    if path == "/environ-keys":
        data = {"keys": sorted(environ), "none": sorted(k for k, v in environ.items() if v is None)}
        return respond(start_response, json.dumps(data).encode(), "application/json")
    if path == "/read":
        parts = []
        while True:
            part = stream.read(65536)  # PEP 3333: read(size); input_terminated allows reading to the end
            if not part:
                break
            parts.append(part)
        return respond(start_response, b"".join(parts))
    if path == "/fixed":
        return respond(start_response, b"a fixed body")
    if path == "/read-n":
        parts = []
        while True:
            part = stream.read(int(query or "3"))
            if not part:
                break
            parts.append(part)
        return respond(start_response, b"|".join(parts))
    if path == "/lines":
        first = stream.readline()
        limited = stream.readline(2)
        rest = stream.readlines()
        return respond(start_response, json.dumps([first.decode(), limited.decode(), [r.decode() for r in rest]]).encode())
    if path == "/iterate":
        return respond(start_response, b"".join(line.upper() for line in stream))
    if path == "/sha256":
        digest = hashlib.sha256()
        while True:
            chunk = stream.read(65536)
            if not chunk:
                break
            digest.update(chunk)
        return respond(start_response, digest.hexdigest().encode())
    if path == "/ignore-body":
        return respond(start_response, b"ignored")
    if path == "/write":
        write = start_response("200 OK", [("Content-Type", "text/plain")])
        write(b"written ")
        return [b"and returned"]
    if path == "/generator":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return (part for part in (b"a", b"", b"b", b"c"))
    if path == "/exc-info":
        try:
            raise ValueError("replace me")
        except ValueError:
            start_response("200 OK", [("Content-Type", "text/plain")])
            return respond(lambda s, h: start_response(s, h, sys.exc_info()), b"replaced", status="503 Service Unavailable")
    if path == "/no-content":
        start_response("204 No Content", [])
        return []
    return respond(start_response, b"not found", status="404 Not Found")


class Recorded:
    """An iterable that writes each event ("item", "close") to the file named by the query."""

    def __init__(self, path: str, fail: bool) -> None:
        self.path = path
        self.fail = fail

    def note(self, event: str) -> None:
        with open(self.path, "a") as handle:
            handle.write(event + "\n")

    def __iter__(self):
        self.note("item")
        yield b"first"
        if self.fail:
            raise RuntimeError("failing in the middle of the body")
        yield b"second"

    def close(self) -> None:
        self.note("close")


KEPT: list = []


def outcome(call) -> str:
    try:
        call()
    except Exception as err:  # noqa: BLE001 - the test reads what was raised
        return f"{type(err).__name__}: {err}"
    return "no error"


def bad(environ, start_response):
    path = environ["PATH_INFO"]
    query = environ["QUERY_STRING"]
    if path == "/keep":
        # Keeps the request's objects past its end (apps do, by mistake or in a thread).
        write = start_response("200 OK", [("Content-Type", "text/plain")])
        KEPT[:] = [environ["wsgi.input"], start_response, write]
        return [b"kept"]
    if path == "/use-kept":
        stream, kept_start, kept_write = KEPT
        data = {
            "read": outcome(lambda: stream.read()),
            "write": outcome(lambda: kept_write(b"from an old request")),
            "start_response": outcome(lambda: kept_start("200 OK", [])),
        }
        return respond(start_response, json.dumps(data).encode(), "application/json")
    # Not under the validator: it wraps the returned iterable, which hides the file_wrapper
    # object from the server (so sendfile would never be used).
    if path == "/file":
        handle = open(query, "rb")
        handle.seek(int(environ.get("HTTP_X_SEEK", "0")))
        start_response("200 OK", [("Content-Type", "application/octet-stream")])
        return environ["wsgi.file_wrapper"](handle, 65536)
    if path == "/bytesio":
        start_response("200 OK", [("Content-Type", "application/octet-stream")])
        return environ["wsgi.file_wrapper"](io.BytesIO(b"from memory" * 1000))
    if path == "/twice":
        start_response("200 OK", [])
        start_response("200 OK", [])
        return [b"never"]
    if path == "/inject":
        start_response("200 OK", [("X-Ok", "1\r\nX-Injected: yes")])
        return [b"never"]
    if path == "/hop":
        start_response("200 OK", [("Connection", "close")])
        return [b"never"]
    if path == "/str-body":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return ["not bytes"]
    if path == "/raise":
        raise KeyError("raised before start_response")
    if path == "/recorded":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return Recorded(query, fail=False)
    if path == "/recorded-fail":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return Recorded(query, fail=True)
    if path == "/write-while-reading":
        # One thread reads wsgi.input while another writes a large block the client takes
        # its time to read (GIL released, the exchange lent to the write): the read waits
        # for the write, then gets the body.
        stream = environ["wsgi.input"]
        write = start_response("200 OK", [("Content-Type", "text/plain")])
        got: list[bytes] = []
        writing = threading.Event()

        def reader() -> None:
            writing.wait()
            got.append(stream.read())

        thread = threading.Thread(target=reader)
        thread.start()
        writing.set()
        write(b"x" * (8 << 20))
        thread.join()
        return [b"|read:" + b"".join(got)]
    if path == "/mutate":
        # The environ is the app's: whatever it does to it must not reach the next request.
        for key in [key for key in environ if key.startswith("HTTP_")]:
            del environ[key]
        environ["wsgi.url_scheme"] = "mutated"
        environ["REMOTE_PORT"] = "mutated"
        environ["wsgi.input"] = None
        environ["tines.test.added"] = "added"
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"mutated"]
    if path == "/constant":
        start_response(OK, list(CONSTANT))
        return [b"constant"]
    if path == "/text-only":
        start_response(OK, [TEXT])
        return [b"text only"]
    if path == "/other":
        start_response(CREATED, list(OTHER))
        return [b"other"]
    if path == "/constant-then-injected":
        start_response(OK, [TEXT, INJECTED])
        return [b"never"]
    if path == "/constant-replaced":
        start_response(OK, list(CONSTANT))
        try:
            raise ValueError("replace the constant head")
        except ValueError:
            start_response(CREATED, list(OTHER), sys.exc_info())
        return [b"replaced"]
    if path == "/no-start-response":
        return [b"never"]
    if path == "/cl-longer":
        start_response("200 OK", [("Content-Length", "100")])
        return [b"short"]
    if path == "/cl-shorter":
        start_response("200 OK", [("Content-Length", "3")])
        return [b"longer than three"]
    if path == "/exc-after-write":
        write = start_response("200 OK", [("Content-Type", "text/plain")])
        write(b"already sent")
        try:
            raise ValueError("too late")
        except ValueError:
            start_response("500 Internal Server Error", [], sys.exc_info())
        return [b"never"]
    return validated(environ, start_response)


validated = validator(good)
app = bad
