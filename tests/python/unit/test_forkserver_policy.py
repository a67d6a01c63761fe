"""When the master forks its workers through a fork server (tines.forkserver.wanted, ADR 0026)
and what the master sends it (the request's layout, shared with crates/python/src/fork_server.rs)."""

from __future__ import annotations

import struct

import pytest

from tines import forkserver
from tines.config import load


@pytest.fixture(autouse=True)
def in_empty_directory(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # type: ignore[arg-type]


def wanted(**given: object) -> bool:
    return forkserver.wanted(load(given, environ={}))


def test_a_fork_server_only_for_a_preloaded_process_per_request() -> None:
    assert wanted(max_requests=1, preload=True)
    assert wanted(max_requests=1, preload=True, max_workers=4)  # the dynamic pool forks through it too
    assert not wanted(max_requests=1)  # no preloaded state to keep: each worker loads the app
    assert not wanted(preload=True)  # max_requests 0: the workers are reused, forks are rare
    assert not wanted(max_requests=2, preload=True)


def test_a_request_is_the_nine_bytes_the_fork_server_reads() -> None:
    assert struct.calcsize(forkserver.REQUEST_FORMAT) == 9  # REQUEST_SIZE in fork_server.rs
    assert struct.pack(forkserver.REQUEST_FORMAT, 3, 2, True) == bytes([3, 0, 0, 0, 2, 0, 0, 0, 1])
    assert struct.calcsize(forkserver.REPLY_FORMAT) == 4
