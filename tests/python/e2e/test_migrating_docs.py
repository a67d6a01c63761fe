"""docs/migrating.md's examples, run; and issue 40's uvicorn command line behind a prefix.

Every fenced block of docs/migrating.md preceded by an HTML comment ``<!-- test ... -->`` is an
example this module runs:

- ``<!-- test file=NAME -->``: a file (``gunicorn.conf.py``, ``tines.toml``, ``static/site.css``)
  written into the directory later commands run in, when they name it (or a file they use does).
- ``<!-- test -->`` before a one-command ``sh`` block: the command is run in that directory, with
  ``tines`` as this interpreter's ``python -m tines``, port ``8000`` made ``0`` (a free port) and
  ``0.0.0.0`` made ``127.0.0.1``. ``tines check-config ...`` must exit 0; any other command must
  serve: ``--ready-fd`` is appended, and once the ready line came, ``GET /`` must answer 200 with
  the JSON of the app the command names (``main:app`` FastAPI, ``myproject.wsgi:application``
  WSGI; both in tests/python/e2e/apps/migrating).
- ``<!-- test GET PATH EXPECT -->`` asks for PATH instead; EXPECT is a JSON object (keys the
  app's answer must have, with these values) or a JSON string (text the answer, or check-config's
  output, must contain).

A ``tines`` command in an ``sh`` block without the comment fails ``test_every_command_is_run``:
the doc cannot show one that no test runs.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import select
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import APPS, READY_DEADLINE, ROOT, wait_until

DOC = ROOT / "docs" / "migrating.md"
MIGRATING_APPS = APPS / "migrating"
MARK = re.compile(r"<!-- test(?: file=(?P<file>\S+))?(?: GET (?P<path>\S+))?(?: (?P<expect>.+?))? -->$")
FENCE = re.compile(r"^```(?P<lang>[a-z]*)$")


@dataclass(frozen=True)
class Example:
    """One tested block of the doc: a file, or a command with the files it may use."""

    line: int
    section: str
    text: str
    file: str | None = None
    path: str = "/"
    expect: object = None
    files: dict[str, str] = field(default_factory=dict)

    @property
    def id(self) -> str:
        """The example's test id: its line in the doc and its first words."""
        return f"line{self.line}-" + "-".join(self.text.split()[:3])


def read_doc() -> tuple[list[Example], list[tuple[int, str]]]:
    """The doc's tested command examples (each with the files shown before it), and its
    unmarked ``sh`` blocks that run ``tines`` (line, text)."""
    lines = DOC.read_text(encoding="utf-8").splitlines()
    examples: list[Example] = []
    unmarked: list[tuple[int, str]] = []
    files: dict[str, str] = {}
    section = ""
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.startswith("## "):
            section = line[3:]
        mark = MARK.match(line)
        fence = FENCE.match(lines[index + 1] if mark else line)
        if fence is None:
            index += 1
            continue
        start = index + (2 if mark else 1)
        end = lines.index("```", start)
        text = "\n".join(lines[start:end]) + "\n"
        if mark is None:
            if fence["lang"] == "sh" and text.lstrip().startswith("tines"):
                unmarked.append((start, text))
        elif mark["file"]:
            files[mark["file"]] = text
        else:
            expect = json.loads(mark["expect"]) if mark["expect"] else None
            examples.append(Example(start, section, text, path=mark["path"] or "/", expect=expect,
                                    files=dict(files)))
        index = end + 1
    return examples, unmarked


EXAMPLES, UNMARKED = read_doc()


def localised(text: str) -> str:
    """The doc's addresses made the test's: a free port, the loopback address only."""
    return re.sub(r"\b8000\b", "0", text.replace("0.0.0.0", "127.0.0.1"))


def write_files_used(example: Example, directory: Path) -> str:
    """Write the doc's files that the command names, or that a file it uses names (a TOML file
    naming the static directory), into ``directory``; the command and those files' text."""
    used: dict[str, str] = {}
    texts = [example.text]
    while texts:
        text = texts.pop()
        for name, content in example.files.items():
            if name not in used and re.search(rf"(?<![\w/.]){re.escape(name.split('/')[0])}\b", text):
                used[name] = content
                texts.append(content)
    for name, content in used.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(localised(content), encoding="utf-8")
    return "\n".join([example.text, *used.values()])


def command_of(example: Example) -> list[str]:
    """The example's one command, as argv for this interpreter."""
    commands = [line for line in example.text.replace("\\\n", " ").splitlines()
                if line.strip() and not line.lstrip().startswith("#")]
    assert len(commands) == 1, f"docs/migrating.md line {example.line}: one command per tested block"
    argv = shlex.split(localised(commands[0]))
    assert argv[0] == "tines", f"docs/migrating.md line {example.line}: a tested command runs tines"
    return [sys.executable, "-m", "tines", *argv[1:]]


def environment() -> dict[str, str]:
    """The server's environment: the doc's apps importable, nothing else changed."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(MIGRATING_APPS), env.get("PYTHONPATH", "")]))
    return env


class Serving:
    """A command started with ``--ready-fd``, in its own process group, until its ready line."""

    def __init__(self, argv: list[str], cwd: Path) -> None:
        self.log_path = cwd / "server.log"
        read_fd, write_fd = os.pipe()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([*argv, "--ready-fd", str(write_fd)], stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=log, pass_fds=(write_fd,), start_new_session=True,
                                         env=environment(), cwd=cwd)
        os.close(write_fd)
        try:
            ready = self._ready_line(read_fd)
        except BaseException:
            self.kill()
            raise
        finally:
            os.close(read_fd)
        self.port = int(str(ready["binds"][0]).rpartition(":")[2])

    def _ready_line(self, read_fd: int) -> dict[str, list[object]]:
        data = b""
        end = time.monotonic() + READY_DEADLINE
        while not data.endswith(b"\n"):
            remaining = end - time.monotonic()
            assert remaining > 0, f"no ready line in time; log:\n{self.log()}"
            readable, _, _ = select.select([read_fd], [], [], remaining)
            if readable:
                chunk = os.read(read_fd, 4096)
                assert chunk, f"exited before ready (status {self.proc.wait(10)}); log:\n{self.log()}"
                data += chunk
        return json.loads(data)  # type: ignore[no-any-return]

    def log(self) -> str:
        """What the server wrote so far."""
        return self.log_path.read_text(errors="replace")

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        """One GET on a new connection; its status and body."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=20)
        try:
            connection.request("GET", path, headers=headers or {})
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def kill(self) -> None:
        """SIGKILL the process group and reap the master."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(10)


def check_answer(example: Example, text: str, status: int, body: bytes, log: str) -> None:
    """The answer is 200 and says what the example's comment expects; ``text`` is the command
    and its files, which name the app (``main:app`` is the ASGI one)."""
    where = f"docs/migrating.md line {example.line}"
    assert status == 200, f"{where}: {status} {body[:200]!r}; log:\n{log}"
    if isinstance(example.expect, str):
        assert example.expect in body.decode(), f"{where}: {example.expect!r} not in {body[:200]!r}"
        return
    seen = json.loads(body)
    assert seen["interface"] == ("asgi" if "main:app" in text else "wsgi"), f"{where}: {seen}"
    for key, value in (example.expect or {}).items():  # type: ignore[attr-defined]
        assert seen[key] == value, f"{where}: {key} is {seen[key]!r}, not {value!r}"


def test_every_command_is_run() -> None:
    """Each `tines` command line in the doc is a tested example, and each server has some."""
    assert UNMARKED == [], f"docs/migrating.md: tines commands no test runs: {UNMARKED}"
    sections = {example.section for example in EXAMPLES}
    for server in ("gunicorn", "uvicorn", "uWSGI", "Granian"):
        assert f"From {server}" in sections, f"docs/migrating.md: no tested example from {server}"


@pytest.mark.parametrize("example", EXAMPLES, ids=[example.id for example in EXAMPLES])
def test_doc_example_answers(example: Example, tmp_path: Path) -> None:
    """The example's command starts and answers as the doc says (check-config: exits 0 and
    says what the doc says it says)."""
    text = write_files_used(example, tmp_path)
    argv = command_of(example)
    if argv[3] == "check-config":
        done = subprocess.run(argv, cwd=tmp_path, env=environment(), capture_output=True, text=True,
                              timeout=READY_DEADLINE)
        output = done.stdout + done.stderr
        assert done.returncode == 0, f"docs/migrating.md line {example.line}: exit {done.returncode}\n{output}"
        if isinstance(example.expect, str):
            assert example.expect in output, f"docs/migrating.md line {example.line}: {output}"
        return
    server = Serving(argv, tmp_path)
    try:
        status, body = server.get(example.path)
        check_answer(example, text, status, body, server.log())
    finally:
        server.kill()


LOG_CONFIG = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"marked": {"format": "MIGRATED %(levelname)s %(name)s %(message)s"}},
    "handlers": {"file": {"class": "logging.FileHandler", "filename": "app.log", "formatter": "marked"}},
    "root": {"level": "INFO", "handlers": ["file"]},
}


def test_uvicorn_command_line_behind_a_prefix(tmp_path: Path) -> None:
    """uvicorn's command line for a FastAPI app behind `/api`, as a uvicorn user types it: for
    `/items` (a proxy that strips the prefix) the app sees the `root_path` and `path` uvicorn
    gives, and the same for `/api/items` (a proxy that does not: uvicorn would make it
    `/api/api/items`); the scheme and client the trusted proxy (this test, at 127.0.0.1) sent;
    and its logging goes through the `--log-config` file, not the error log. (uvicorn 0.54 run
    with these flags answers `/items` with this JSON and writes these records.)"""
    (tmp_path / "logging.json").write_text(json.dumps(LOG_CONFIG), encoding="utf-8")
    argv = [sys.executable, "-m", "tines", "main:app", "--host", "127.0.0.1", "--port", "0", "--workers", "2",
            "--root-path", "/api", "--proxy-headers", "--forwarded-allow-ips", "127.0.0.1",
            "--log-config", "logging.json"]
    server = Serving(argv, tmp_path)
    forwarded = {"X-Forwarded-For": "203.0.113.7", "X-Forwarded-Proto": "https"}
    try:
        for path in ("/items", "/api/items"):
            status, body = server.get(path, forwarded)
            assert status == 200, (path, status, body, server.log())
            assert json.loads(body) == {"interface": "asgi", "root_path": "/api", "path": "/api/items",
                                        "scheme": "https", "client": "203.0.113.7"}, path
        status, body = server.get("/items")
        assert status == 200 and json.loads(body)["scheme"] == "http", body
        app_log = tmp_path / "app.log"
        wait_until(lambda: app_log.exists() and app_log.read_text().count("MIGRATED INFO main served /api/items") == 3,
                   what="the app's three records in the --log-config file")
        assert "served /api/items" not in server.log(), "the app's records went to the error log too"
    finally:
        server.kill()
