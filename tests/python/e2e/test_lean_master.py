"""What a real master holds when it forks, and what its workers hold once their app is loaded
(the hooks of apps/module_census.py write it down): for a WSGI app, neither loads asyncio,
ssl or importlib.metadata (every fork copies what the master holds, docs/mpm.md); for a
preloaded ASGI app, the master loads the ASGI loop once, for its workers to inherit."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest

from conftest import http_get

get = functools.partial(http_get, close=True)

NOT_FOR_WSGI = ("asyncio", "ssl", "importlib.metadata", "email", "zipfile", "concurrent.futures",
                "tines.asgi", "tempfile", "subprocess")


def censuses(directory: Path, hook: str) -> list[list[str]]:
    """The module lists the ``hook`` wrote, one per process (the last call's; all there by the
    ready line: pre_fork runs before each fork, post_worker_init before the worker is ready)."""
    return [json.loads(path.read_text()) for path in sorted(directory.glob(f"{hook}-*.json"))]


@pytest.mark.parametrize("preload", [True, False], ids=["preload", "no-preload"])
def test_a_wsgi_master_and_its_workers_hold_no_asyncio(tines_server: Any, tmp_path: Path, preload: bool) -> None:
    server = tines_server("examples/hello.py:app", "-w", "2", "--hooks", "module_census",
                          *(["--preload"] if preload else []), env={"TINES_TEST_CENSUS_DIR": str(tmp_path)})
    assert get(server.port) == (200, b"OK")
    [master] = censuses(tmp_path, "pre_fork")
    workers = censuses(tmp_path, "post_worker_init")
    assert len(workers) == 2
    for modules in [master, *workers]:
        assert "tines.worker" in modules
        assert [name for name in NOT_FOR_WSGI if name in modules] == []
    assert ("hello" in master) == preload


def test_a_preloaded_asgi_app_has_its_loop_loaded_in_the_master(tines_server: Any, tmp_path: Path) -> None:
    server = tines_server("examples/asgi_hello.py:app", "-w", "1", "--hooks", "module_census", "--preload",
                          env={"TINES_TEST_CENSUS_DIR": str(tmp_path)})
    assert get(server.port) == (200, b"OK")
    [master] = censuses(tmp_path, "pre_fork")
    assert "tines.asgi" in master and "asyncio" in master
    assert "importlib.metadata" not in master
