"""``--root-path`` (docs/wsgi.md, docs/asgi.md, ADR 0040): what a WSGI and an ASGI app see of a
request for ``/items`` (the proxy stripped the prefix) and for ``/api/items`` (it did not), on
real servers; and the frameworks (Flask, Starlette) routing and building URLs under the prefix.
Also the one-line refusal of a bad value, before the server starts.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
from typing import Any

import pytest
from websockets.sync.client import connect

from conftest import APPS


def get_all(port: int, paths: list[str]) -> list[dict[str, str]]:
    """GETs each path in turn on one keep-alive connection (the worker's environ template
    remembers the last path: each answer must be the request's own); the JSON answers."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    answers = []
    try:
        for path in paths:
            connection.request("GET", path)
            response = connection.getresponse()
            assert response.status == 200, (path, response.status)
            answers.append(json.loads(response.read()))
    finally:
        connection.close()
    return answers


@pytest.mark.parametrize("mpm", ["prefork", "thread"])
def test_wsgi_gets_script_name_and_path_info_split_at_the_root(tines_server: Any, mpm: str) -> None:
    server = tines_server("root_path_app:wsgi", "-w", "1", "--mpm", mpm, "--root-path", "/api")
    paths = ["/items", "/api/items", "/api/items", "/api", "/apix/items", "/api/it%65ms?x=1", "/items"]
    assert [(answer["SCRIPT_NAME"], answer["PATH_INFO"]) for answer in get_all(server.port, paths)] == [
        ("/api", "/items"),       # the proxy stripped the prefix
        ("/api", "/items"),       # it did not: gunicorn's split
        ("/api", "/items"),
        ("/api", ""),             # the root itself
        ("/api", "/apix/items"),  # not under /api: a segment boundary, not a string prefix
        ("/api", "/items"),       # compared once decoded, as PATH_INFO is
        ("/api", "/items"),
    ]


def test_without_a_root_path_wsgi_sees_the_whole_path(tines_server: Any) -> None:
    server = tines_server("root_path_app:wsgi", "-w", "1")
    assert get_all(server.port, ["/api/items"]) == [{"SCRIPT_NAME": "", "PATH_INFO": "/api/items"}]


def test_asgi_gets_root_path_and_a_path_that_holds_it(tines_server: Any) -> None:
    server = tines_server("root_path_app:asgi", "-w", "1", "--root-path", "/api")
    paths = ["/items", "/api/items", "/api", "/apix", "/api/it%65ms", "/it%65ms"]
    assert get_all(server.port, paths) == [
        {"root_path": "/api", "path": "/api/items", "raw_path": "/api/items"},  # uvicorn's rule
        {"root_path": "/api", "path": "/api/items", "raw_path": "/api/items"},  # already under it
        {"root_path": "/api", "path": "/api", "raw_path": "/api"},
        {"root_path": "/api", "path": "/api/apix", "raw_path": "/api/apix"},
        {"root_path": "/api", "path": "/api/items", "raw_path": "/api/it%65ms"},
        {"root_path": "/api", "path": "/api/items", "raw_path": "/api/it%65ms"},
    ]


def test_a_websocket_scope_gets_the_same_root_path_and_path(tines_server: Any) -> None:
    server = tines_server("root_path_app:asgi", "-w", "1", "--root-path", "/api")
    seen = []
    for path in ["/ws", "/api/ws"]:
        with connect(f"ws://127.0.0.1:{server.port}{path}", open_timeout=30) as websocket:
            seen.append(json.loads(websocket.recv(timeout=30)))
    assert seen == [{"root_path": "/api", "path": "/api/ws", "raw_path": "/api/ws"}] * 2


def test_without_a_root_path_asgi_sees_an_empty_one(tines_server: Any) -> None:
    server = tines_server("root_path_app:asgi", "-w", "1")
    assert get_all(server.port, ["/api/items"]) == [
        {"root_path": "", "path": "/api/items", "raw_path": "/api/items"}]


def test_flask_routes_under_the_root_and_builds_urls_with_it(tines_server: Any) -> None:
    server = tines_server("root_path_app:flask_app", "-w", "1", "--root-path", "/api")
    expected = {"script_root": "/api", "path": "/items", "url": "/api/items"}
    assert get_all(server.port, ["/items", "/api/items"]) == [expected, expected]


def test_starlette_routes_under_the_root_and_builds_urls_with_it(tines_server: Any) -> None:
    server = tines_server("root_path_app:starlette_app", "-w", "1", "--root-path", "/api")
    expected = {"root_path": "/api", "path": "/api/items", "url": f"http://127.0.0.1:{server.port}/api/items"}
    assert get_all(server.port, ["/items", "/api/items"]) == [expected, expected]


@pytest.mark.parametrize(("value", "says"), [
    ("api", "must start with /"),
    ("/api/", "must not end with / (use '/api')"),
    ("/", 'must not end with / (use "")'),
    ("/a b", "must be printable ASCII without spaces, ?, # or %"),
])
def test_a_bad_root_path_is_one_line_and_exit_2(value: str, says: str) -> None:
    done = subprocess.run([sys.executable, "-m", "tines", "serve", "root_path_app:wsgi", "-b", "127.0.0.1:0",
                           "--root-path", value], capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(APPS), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "root_path" in lines[0] and says in lines[0], done.stderr
