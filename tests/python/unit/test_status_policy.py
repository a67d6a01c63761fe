"""The status process's decisions (tines.status): when it is due to start, how its deaths are
paced, where it may listen. No process is started: the test names the process's pid."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tines.config import load
from tines.errors import ConfigError
from tines.sockets import bind_all
from tines.status import RESTART_DELAY_MAX, StatusProcess

PID = 4242
EXITED_1 = 1 << 8


@pytest.fixture
def status(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[StatusProcess]:
    """A status listener bound on a free port, no process yet."""
    monkeypatch.chdir(tmp_path)
    process = StatusProcess(load({"app": "hello:app", "status_bind": "127.0.0.1:0"}, environ={}))
    process.bind([])
    yield process
    process.stop()


def test_without_status_bind_there_is_never_a_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    process = StatusProcess(load({"app": "hello:app"}, environ={}))
    process.bind([])
    assert process.listeners() == [] and not process.due(0.0)


def test_it_is_due_once_bound_and_not_while_one_runs(status: StatusProcess) -> None:
    assert status.due(0.0)
    status.pid = PID  # what start records
    assert not status.due(0.0)
    assert not status.reaped(PID + 1, 0, 0.0)  # a worker's pid
    assert status.reaped(PID, signal.SIGTERM, 0.0)  # stopped by the master: no backoff
    assert status.due(0.0)


def test_a_dying_status_process_is_started_again_later_each_time_up_to_the_cap(status: StatusProcess) -> None:
    waits = []
    now = 0.0
    for _ in range(10):
        status.pid = PID
        assert status.reaped(PID, EXITED_1, now)
        assert not status.due(now)
        wait = status.next_start - now
        assert status.due(now + wait)
        waits.append(wait)
        now += wait
    assert waits[:3] == pytest.approx([0.1, 0.2, 0.4])
    assert max(waits) == pytest.approx(RESTART_DELAY_MAX) and waits[-1] == pytest.approx(RESTART_DELAY_MAX)


def test_the_status_listener_must_not_be_a_public_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    public = bind_all(["127.0.0.1:0"], 16)
    try:
        address = public[0].address
        process = StatusProcess(load({"app": "hello:app", "bind": [address], "status_bind": address}, environ={}))
        with pytest.raises(ConfigError, match="also a public bind"):
            process.bind(public)
        assert process.listeners() == []
    finally:
        for listener in public:
            listener.close()
