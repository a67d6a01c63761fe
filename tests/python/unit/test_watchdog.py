"""The watchdog's policy for a dumped worker (tines.watchdog): which workers drain after a
stuck request instead of being killed once dumped, and when a draining one is killed anyway
(graceful_timeout, a stuck thread holding the GIL, a drain done without an exit). No process
is started: the scoreboard is a dict, and the kill is recorded instead of sent."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from typing import Any

import pytest

from tines import watchdog
from tines.config import load
from tines.watchdog import EXIT_WAIT, GIL_WAIT, PendingKill, Watchdog, drain_verdict

DUMPED = 100.0
DUMPED_NS = int(DUMPED * 1e9)


def thread(index: int, busy: bool, progress: float = 0.0) -> dict[str, Any]:
    return {"thread": index, "state": "busy" if busy else "idle", "progress_ns": int(progress * 1e9),
            "waiting_on_client": False, "dispatch_ns": 0, "method": "GET", "target": "/", "request": 1}


def reading(threads: list[dict[str, Any]], connections: int, pid: int = 7,
            interpreter_seen: float = DUMPED + 100.0) -> dict[str, Any]:
    """A slot; by default its interpreter probe has just taken the GIL, whenever it is read
    (it does every half second while the GIL is free: a record later than every ``now`` the
    tests judge at)."""
    return {"pid": pid, "threads": threads, "connections": connections, "dumped": True,
            "loop_heartbeat": 0.0, "interpreter_seen_ns": int(interpreter_seen * 1e9)}


def pending(stuck: frozenset[int] = frozenset({0})) -> PendingKill:
    return PendingKill("request_timeout", DUMPED + 30.0, drains=True, dumped_ns=DUMPED_NS, stuck=stuck)


def test_only_wsgi_workers_with_a_loop_apart_from_their_app_threads_drain() -> None:
    assert watchdog.drains_after_timeout(load({"mpm": "thread", "threads": 1}, {}))
    assert watchdog.drains_after_timeout(load({"mpm": "event", "threads": 4}, {}))
    assert not watchdog.drains_after_timeout(load({"mpm": "event", "threads": 0}, {}))
    assert not watchdog.drains_after_timeout(load({"mpm": "prefork"}, {}))


def test_a_drain_whose_other_requests_progress_goes_on_until_graceful_timeout() -> None:
    kill = pending()
    others_progress = reading([thread(0, True), thread(1, True, progress=DUMPED + 1.0)], connections=2)
    assert drain_verdict(kill, others_progress, DUMPED + GIL_WAIT + 1.0) is None
    assert drain_verdict(kill, others_progress, DUMPED + 29.9) is None
    assert drain_verdict(kill, others_progress, DUMPED + 30.0) == "graceful_timeout"


def test_a_neighbour_without_progress_is_left_to_finish_while_the_probe_takes_the_gil() -> None:
    # A neighbour computing for seconds with no output (no progress since the dump) while the
    # GIL is free: the drain waits on for it.
    kill = pending()
    slow = reading([thread(0, True), thread(1, True, progress=DUMPED - 0.5),
                    thread(2, True, progress=DUMPED - 2.0)], connections=3)
    assert drain_verdict(kill, slow, DUMPED + GIL_WAIT) is None
    assert drain_verdict(kill, slow, DUMPED + 29.9) is None
    assert drain_verdict(kill, slow, DUMPED + 30.0) == "graceful_timeout"


def test_a_probe_that_went_silent_after_reporting_means_the_gil_was_taken_since() -> None:
    # The stuck thread took the GIL for good a second after the dump: the probe's last record
    # stays there, and GIL_WAIT after it the worker is killed.
    kill = pending()
    last = DUMPED + 1.0
    stopped = reading([thread(0, True), thread(1, True, progress=DUMPED + 0.5)], connections=2,
                      interpreter_seen=last)
    assert drain_verdict(kill, stopped, DUMPED + GIL_WAIT) is None, "seen 2 s ago"
    assert drain_verdict(kill, stopped, last + GIL_WAIT - 0.1) is None
    assert drain_verdict(kill, stopped, last + GIL_WAIT) == "gil"


def test_an_interpreter_probe_that_keeps_taking_the_gil_clears_it_whatever_waits() -> None:
    # The other app threads idle, a kept-alive client's request queued for one of them: the
    # drain waits on, as the GIL is free.
    waiting = reading([thread(0, True), thread(1, False), thread(2, False)], connections=2)
    kill = pending()
    assert drain_verdict(kill, waiting, DUMPED + GIL_WAIT) is None
    assert drain_verdict(kill, waiting, DUMPED + GIL_WAIT + EXIT_WAIT + 1.0) is None


@pytest.mark.parametrize("seen", [0.0, DUMPED - 5.0], ids=["never", "before-the-dump"])
def test_an_interpreter_probe_silent_gil_wait_after_the_dump_means_the_gil_is_held(seen: float) -> None:
    kill = pending()
    idle_others = reading([thread(0, True), thread(1, False), thread(2, False)], connections=2,
                          interpreter_seen=seen)
    assert drain_verdict(kill, idle_others, DUMPED + GIL_WAIT - 0.1) is None, "not before GIL_WAIT"
    assert drain_verdict(kill, idle_others, DUMPED + GIL_WAIT) == "gil"
    # Whether or not other threads are busy, and even if one of them progressed.
    busy_other = reading([thread(0, True), thread(1, True, progress=DUMPED + 0.1)], connections=2,
                         interpreter_seen=seen)
    assert drain_verdict(pending(), busy_other, DUMPED + GIL_WAIT) == "gil"
    # Even with nothing else left: a drained worker exits by itself at once (in Rust, without
    # the GIL), so one still there GIL_WAIT after the dump is not given EXIT_WAIT more.
    alone = reading([thread(0, True)], connections=1, interpreter_seen=seen)
    assert drain_verdict(pending(), alone, DUMPED + GIL_WAIT) == "gil"


def test_the_stuck_thread_alone_tells_nothing_about_the_gil() -> None:
    alone = reading([thread(0, True), thread(1, False), thread(2, False)], connections=1)
    kill = pending()
    # Drained (only the stuck request left): it has EXIT_WAIT to exit by itself.
    assert drain_verdict(kill, alone, DUMPED + GIL_WAIT) is None
    assert drain_verdict(kill, alone, DUMPED + GIL_WAIT + EXIT_WAIT - 0.1) is None
    assert drain_verdict(kill, alone, DUMPED + GIL_WAIT + EXIT_WAIT) == "drained"


def test_a_drain_is_done_only_without_other_requests_or_connections() -> None:
    kill = pending(frozenset({0, 1}))
    kept_alive = reading([thread(0, True), thread(1, True), thread(2, False)], connections=3)
    assert drain_verdict(kill, kept_alive, DUMPED + 1.0) is None
    assert drain_verdict(kill, kept_alive, DUMPED + 1.0 + EXIT_WAIT) is None, "a connection is open"
    done = reading([thread(0, True), thread(1, True), thread(2, False)], connections=2)
    assert drain_verdict(kill, done, DUMPED + 5.0) is None
    # The drain is timed from when it was first seen done, and forgotten if it was not.
    assert drain_verdict(kill, kept_alive, DUMPED + 6.0) is None
    assert drain_verdict(kill, done, DUMPED + 7.0) is None
    assert drain_verdict(kill, done, DUMPED + 7.0 + EXIT_WAIT) == "drained"


@dataclass
class Worker:
    pid: int
    slot: int
    born: float = 0.0
    ready: bool = True
    stopping: bool = False


class Board:
    """The scoreboard's calls the watchdog makes, on one slot."""

    def __init__(self, slot: dict[str, Any]) -> None:
        self.slot = slot
        self.marked: list[tuple[int, int, int]] = []
        self.reasons: list[str] = []

    def read(self, slot: int) -> dict[str, Any]:
        return self.slot

    def mark_timed_out(self, slot: int, thread: int, request: int) -> None:
        self.marked.append((slot, thread, request))

    def set_exit_reason(self, slot: int, reason: str) -> None:
        self.reasons.append(reason)


@pytest.fixture
def signals(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: sent.append((pid, sig)))
    return sent


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [DUMPED]
    monkeypatch.setattr(watchdog.time, "monotonic", lambda: now[0])
    return now


def overdue_slot() -> dict[str, Any]:
    stuck = thread(0, True, progress=DUMPED - 2.0)
    other = thread(1, True, progress=DUMPED - 0.5)
    return reading([stuck, other, thread(2, False)], connections=2)


def test_a_thread_worker_is_dumped_then_left_to_drain_and_killed_when_the_gil_rule_says(
        signals: list[tuple[int, int]], clock: list[float]) -> None:
    # request_timeout well above GIL_WAIT, as in production: the neighbour, stopped since
    # just before the dump, is not overdue when the GIL rule judges; the interpreter probe
    # has not reported since the dump (the stuck thread holds the GIL).
    stuck = thread(0, True, progress=DUMPED - 10.0)
    other = thread(1, True, progress=DUMPED - 0.5)
    board = Board(reading([stuck, other, thread(2, False)], connections=2, interpreter_seen=0.0))
    dog = Watchdog(load({"mpm": "thread", "threads": 3, "request_timeout": 10, "graceful_timeout": 30},
                        {}), board)
    worker = Worker(pid=7, slot=0)
    dog.check([worker])
    assert board.marked == [(0, 0, 1)] and board.reasons == ["request_timeout"]
    assert worker.stopping and signals == [(7, watchdog.DUMP_SIGNAL)]
    # Dumped (the flag is set): not killed for it; the other request has not moved yet.
    clock[0] = DUMPED + 1.0
    dog.check([worker])
    assert signals == [(7, watchdog.DUMP_SIGNAL)]
    assert dog.next_wake([worker]) == pytest.approx(watchdog.DRAIN_POLL)
    clock[0] = DUMPED + GIL_WAIT
    dog.check([worker])
    assert signals[1:] == [(7, signal.SIGKILL)]
    dog.check([worker])
    assert len(signals) == 2, "killed once"


def test_a_prefork_worker_is_killed_once_dumped(signals: list[tuple[int, int]], clock: list[float]) -> None:
    slot = reading([thread(0, True, progress=DUMPED - 2.0)], connections=1)
    board = Board(slot)
    dog = Watchdog(load({"mpm": "prefork", "request_timeout": 1}, {}), board)
    worker = Worker(pid=7, slot=0)
    dog.check([worker])
    clock[0] = DUMPED + 0.01
    dog.check([worker])
    assert signals == [(7, watchdog.DUMP_SIGNAL), (7, signal.SIGKILL)]


def test_a_request_that_overruns_after_the_dump_is_marked_and_signalled_too(
        signals: list[tuple[int, int]], clock: list[float]) -> None:
    # The neighbour overruns 0.5 s after the dump: it gets its own mark and signal. The
    # interpreter probe keeps taking the GIL, so no GIL kill follows.
    board = Board(overdue_slot())
    board.slot["connections"] = 3  # a kept-alive client too: not drained yet
    dog = Watchdog(load({"mpm": "event", "threads": 3, "request_timeout": 1, "graceful_timeout": 30}, {}),
                   board)
    worker = Worker(pid=7, slot=0)
    dog.check([worker])
    clock[0] = DUMPED + 0.5
    dog.check([worker])
    assert board.marked == [(0, 0, 1), (0, 1, 1)]
    assert signals == [(7, watchdog.DUMP_SIGNAL)] * 2
    assert dog.pending[7].stuck == {0, 1}
    dog.check([worker])
    assert len(board.marked) == 2, "judged once"
    clock[0] = DUMPED + GIL_WAIT + 1.0
    dog.check([worker])
    assert len(signals) == 2, "no GIL kill: the probe reports"
