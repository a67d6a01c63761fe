"""The binary upgrade's decisions (tines.upgrade): what the old master is asked to do when its new
master is ready, dies, or WINCH / HUP come during the overlap. No process is started: the new
master is a pid the test names and its readiness pipe a plain pipe."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tines import upgrade
from tines.upgrade import Decision, Inheritance, Upgrade

NEW_MASTER = 4242


@pytest.fixture
def overlap(tmp_path: Path) -> Iterator[tuple[Upgrade, int]]:
    """An upgrade whose new master (NEW_MASTER) runs; the write end of its readiness pipe."""
    state = Upgrade(upgrade.Invocation((), str(tmp_path)), None, environ={})
    read, write = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
    state.new_pid, state.ready_read = NEW_MASTER, read
    yield state, write
    os.close(write)
    state.at_exit(os.getpid())


def test_nothing_happens_until_the_new_master_is_ready(overlap: tuple[Upgrade, int]) -> None:
    state, _ = overlap
    assert state.turn(workers=3, graceful_timeout=30.0, now=100.0) == Decision()
    assert state.wants_workers and state.in_overlap


def test_a_ready_new_master_gets_the_workers_retired_and_the_old_one_leaves_once_they_are_gone(
        overlap: tuple[Upgrade, int]) -> None:
    state, write = overlap
    os.write(write, upgrade.READY_BYTE)
    decision = state.turn(workers=3, graceful_timeout=30.0, now=100.0)
    assert decision == Decision(succeeded=NEW_MASTER, retire=f"upgrade: new master {NEW_MASTER} is ready")
    assert not state.wants_workers and state.watched() == []  # the pipe is closed
    assert state.turn(workers=3, graceful_timeout=30.0, now=110.0) == Decision()  # draining
    assert state.turn(workers=0, graceful_timeout=30.0, now=111.0) == Decision(leave=True)


def test_the_old_master_leaves_at_graceful_timeout_even_with_workers_left(overlap: tuple[Upgrade, int]) -> None:
    state, write = overlap
    os.write(write, upgrade.READY_BYTE)
    state.turn(workers=2, graceful_timeout=30.0, now=100.0)
    assert state.turn(workers=2, graceful_timeout=30.0, now=129.9) == Decision()
    assert state.turn(workers=2, graceful_timeout=30.0, now=130.0) == Decision(leave=True)


def test_a_ready_new_master_with_no_worker_left_here_is_left_to_at_once(overlap: tuple[Upgrade, int]) -> None:
    state, write = overlap
    os.write(write, upgrade.READY_BYTE)
    decision = state.turn(workers=0, graceful_timeout=30.0, now=100.0)
    assert decision.succeeded == NEW_MASTER and decision.leave


def test_a_new_master_dead_before_ready_is_a_rollback(overlap: tuple[Upgrade, int]) -> None:
    state, _ = overlap
    assert state.reaped(NEW_MASTER + 1, 0) is None  # not the new master: a worker
    assert state.reaped(NEW_MASTER, 1 << 8) == Decision(failed=True)  # exit status 1
    assert not state.in_overlap and state.wants_workers


def test_a_new_master_dead_after_ready_names_this_master_main_again(overlap: tuple[Upgrade, int]) -> None:
    state, write = overlap
    os.write(write, upgrade.READY_BYTE)
    state.turn(workers=2, graceful_timeout=30.0, now=100.0)
    assert state.reaped(NEW_MASTER, 9) == Decision(main_again=True, failed=True)  # SIGKILL
    assert state.wants_workers  # its workers are started again


def test_the_new_master_ending_while_this_one_stops_is_no_rollback(overlap: tuple[Upgrade, int]) -> None:
    state, _ = overlap
    state.final_stop()
    assert state.reaped(NEW_MASTER, 0) == Decision()


def test_winch_stops_the_workers_during_an_overlap_only_and_hup_starts_them_again(
        overlap: tuple[Upgrade, int], tmp_path: Path) -> None:
    state, _ = overlap
    assert state.winch(workers=2) == Decision(retire="WINCH during an upgrade")
    assert not state.wants_workers
    assert state.winch(workers=0) == Decision()  # already stopped
    state.hup()
    assert state.wants_workers
    alone = Upgrade(upgrade.Invocation((), str(tmp_path)), None, environ={})
    assert alone.winch(workers=2) == Decision()  # a terminal's resize


def test_no_new_master_is_started_before_ready_or_during_an_overlap(
        overlap: tuple[Upgrade, int], tmp_path: Path) -> None:
    state, _ = overlap
    passed = Inheritance(pid=os.getpid(), listeners=[], status=[], notify_socket=None)
    assert not state.start("USR2", announced=True, passed=passed)
    fresh = Upgrade(upgrade.Invocation((), str(tmp_path)), None, environ={})
    assert not fresh.start("USR2", announced=False, passed=passed)
    assert not fresh.in_overlap
