"""Request bodies for the before/after runs' upload workloads (benches/ab.py ``--apps``):

- ``upload``: a 20 MB file POSTed as ``multipart/form-data`` to ``benches/apps/flask_upload.py``
  (Flask reads ``request.files``);
- ``blog-post``: the blog's form post (``POST /blog/create`` of ``examples/blog/app.py``, a
  title and a 2 KB body, answered 303 after an INSERT). The blog refuses a POST without its
  CSRF pair, so each start of the server is first asked for the form (``GET /blog/create``):
  its ``blog_csrf`` cookie and the form's ``csrf_token`` go into every POST of that start.

``request_for(app, port, workdir)`` returns the load's method, headers and body file for an app
of ``UPLOAD_APPS`` (the body files are written once per run directory); the load generator
(``tines bench -m POST -H ... --body-file ...``) sends the same body on every request.
"""

from __future__ import annotations

import http.client
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

UPLOAD_SIZE = 20_000_000
BOUNDARY = "tines-bench-upload-boundary"
BLOG_TITLE = "A post from the load generator"
BLOG_BODY = ("Posted by the before/after benchmark: a paragraph of plain text, as a person "
             "would type into the form. ") * 20  # about 2 KB
UPLOAD_APPS = ("upload", "blog-post")


class PrepareFailed(Exception):
    """The server did not hand out what the workload needs (the blog's form); says why."""


@dataclass(frozen=True)
class Request:
    """What each request of the load sends besides its URL."""

    method: str
    headers: tuple[str, ...]
    body_file: Path


def upload_body(workdir: Path) -> Path:
    """The multipart body with one ``file`` part of UPLOAD_SIZE bytes (written once)."""
    path = workdir / f"upload-{UPLOAD_SIZE}.multipart"
    if not path.exists() or path.stat().st_size < UPLOAD_SIZE:
        head = (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; "
                "filename=\"upload.bin\"\r\nContent-Type: application/octet-stream\r\n\r\n")
        block = bytes(range(256)) * 4096  # 1 MiB
        with path.open("wb") as out:
            out.write(head.encode())
            left = UPLOAD_SIZE
            while left:
                out.write(block[:min(left, len(block))])
                left -= min(left, len(block))
            out.write(f"\r\n--{BOUNDARY}--\r\n".encode())
    return path


def blog_form(port: int) -> tuple[str, str]:
    """The ``blog_csrf`` cookie and the form's ``csrf_token`` of a fresh ``GET /blog/create``."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", "/blog/create")
        response = connection.getresponse()
        page = response.read().decode(errors="replace")
        cookie = re.search(r"blog_csrf=([0-9a-f]{32})", response.getheader("Set-Cookie") or "")
    except OSError as error:
        raise PrepareFailed(f"GET /blog/create: {error}") from error
    finally:
        connection.close()
    token = re.search(r'name="csrf_token" value="([0-9a-f]+)"', page)
    if response.status != 200 or cookie is None or token is None:
        raise PrepareFailed(f"GET /blog/create answered {response.status} without the CSRF "
                            "cookie and token")
    return cookie.group(1), token.group(1)


def request_for(app: str, port: int, workdir: Path) -> Request:
    """The method, headers and body of ``app``'s requests against the server on ``port``."""
    if app == "upload":
        return Request("POST", (f"Content-Type: multipart/form-data; boundary={BOUNDARY}",),
                       upload_body(workdir))
    if app == "blog-post":
        cookie, token = blog_form(port)
        path = workdir / f"blog-post-{port}.form"
        path.write_text(urlencode({"csrf_token": token, "title": BLOG_TITLE, "body": BLOG_BODY}))
        return Request("POST", (f"Cookie: blog_csrf={cookie}",
                                "Content-Type: application/x-www-form-urlencoded"), path)
    raise ValueError(f"{app!r} is not one of {', '.join(UPLOAD_APPS)}")
