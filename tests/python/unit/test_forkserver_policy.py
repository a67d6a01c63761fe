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


def test_every_loss_backs_off_and_a_fork_server_that_served_a_while_starts_the_backoff_over() -> None:
    # A loss found by reaping it and one found by asking it for a fork (a broken pipe, no
    # reply) both go through lost(): the next start waits, twice as long after each quick loss.
    server = forkserver.ForkServer()
    server.started = 100.0
    server.lost(100.5)
    assert server.next_start == pytest.approx(100.5 + forkserver.RESTART_DELAY)
    assert not server.due(100.5) and server.due(100.5 + forkserver.RESTART_DELAY)
    server.started = 101.0
    server.lost(101.1)
    assert server.next_start == pytest.approx(101.1 + 2 * forkserver.RESTART_DELAY)
    for _ in range(10):
        server.lost(101.2)
    assert server.next_start == pytest.approx(101.2 + forkserver.RESTART_DELAY_MAX)
    # One that served STABLE_AFTER seconds: its loss is a first one again.
    server.started = 200.0
    server.lost(200.0 + forkserver.STABLE_AFTER)
    assert server.next_start == pytest.approx(200.0 + forkserver.STABLE_AFTER + forkserver.RESTART_DELAY)
