"""The upload-heavy app of the before/after runs (issue 14: uploads must not get slower): Flask
receiving a file upload, as a typical upload form's view does.

``POST /upload`` (multipart/form-data with a ``file`` part): Flask parses the form, reads the
uploaded file and answers its size. ``GET /upload``: a short answer, so that the harness's
readiness check (a GET that must answer 200) works.
"""

from __future__ import annotations

from flask import Flask, request

app = Flask(__name__)


@app.get("/upload")
def upload_form() -> str:
    return "POST a multipart form with a file part named file\n"


@app.post("/upload")
def upload() -> tuple[str, int]:
    uploaded = request.files.get("file")
    if uploaded is None:
        return "no file part\n", 400
    size = 0
    while chunk := uploaded.stream.read(1 << 20):
        size += len(chunk)
    return f"{size}\n", 200


application = app
