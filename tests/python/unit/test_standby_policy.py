"""The standby policy (tines.standby): the count, and which standbys are promoted, retired,
started; the recycles' summary line (tines.fleet.RecycleLog); the scoreboard's size."""

from __future__ import annotations

import pytest

from tines import pool, standby, watchdog
from tines.config import load
from tines.errors import ConfigError
from tines.fleet import RECYCLE_SUMMARY_PERIOD, RecycleLog
from tines.standby import Plan, Standby


@pytest.fixture(autouse=True)
def in_empty_directory(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # type: ignore[arg-type]


def count(**given: object) -> int:
    return standby.count(load(given, environ={}))


def test_one_standby_by_default_with_a_process_per_request_and_none_otherwise() -> None:
    assert count(max_requests=1) == 1
    assert count() == 0
    assert count(max_requests=2) == 0
    assert count(max_requests=1, standby_workers=3) == 3
    assert count(max_requests=1, standby_workers=0) == 0
    assert count(standby_workers=2) == 2


def test_the_dynamic_pool_has_no_standbys_and_refuses_one_given() -> None:
    assert count(max_requests=1, max_workers=8) == 0
    with pytest.raises(ConfigError) as refused:
        pool.settings(load({"max_workers": 8, "standby_workers": 1}, environ={}), cpu_count=2)
    message = str(refused.value)
    assert "standby_workers 1" in message and "max_workers 8" in message and "\n" not in message
    assert pool.settings(load({"max_workers": 8, "standby_workers": 0}, environ={}), cpu_count=2) is not None


def one(pid: int, ready: bool = True, born: float = 0.0, current: bool = True) -> Standby:
    return Standby(pid=pid, ready=ready, born=born, current=current)


def test_a_missing_worker_promotes_the_oldest_booted_standby_and_a_new_one_is_started() -> None:
    standbys = [one(3, born=3.0), one(1, ready=False, born=1.0), one(2, born=2.0)]
    assert standby.plan(1, standbys, 3) == Plan(promote=(2,), start=1)
    assert standby.plan(2, standbys, 3) == Plan(promote=(2, 3), start=2)


def test_a_booting_standby_is_promoted_when_no_booted_one_is_left() -> None:
    assert standby.plan(2, [one(1, ready=False), one(2)], 1) == Plan(promote=(2, 1), start=1)


def test_more_missing_than_standbys_promotes_them_all_and_starts_the_count_again() -> None:
    assert standby.plan(4, [one(1)], 1) == Plan(promote=(1,), start=1)
    assert standby.plan(1, [], 2) == Plan(start=2)


def test_nothing_missing_keeps_the_count() -> None:
    assert standby.plan(0, [one(1)], 1) == Plan()
    assert standby.plan(0, [one(1)], 2) == Plan(start=1)
    assert standby.plan(-1, [one(1)], 1) == Plan()  # extra workers: the arbiter retires them


def test_an_older_generations_standbys_are_retired_never_promoted() -> None:
    assert standby.plan(1, [one(1, current=False), one(2, current=False)], 1) == Plan(retire=(1, 2), start=1)


def test_standbys_beyond_the_count_are_retired_newest_and_booting_first() -> None:
    standbys = [one(1, born=1.0), one(2, born=2.0), one(3, ready=False, born=0.5)]
    assert standby.plan(0, standbys, 1) == Plan(retire=(2, 3))
    assert standby.plan(0, standbys, 0) == Plan(retire=(1, 2, 3))


def test_recycles_are_summed_up_once_per_period() -> None:
    recycles = RecycleLog()
    assert not recycles.open and recycles.wait(5.0) is None and recycles.summary(100.0) is None
    recycles.count("max_requests", 10.0)
    recycles.count("max_requests", 12.0)
    assert recycles.open and recycles.wait(12.0) == pytest.approx(RECYCLE_SUMMARY_PERIOD - 2.0)
    assert recycles.summary(10.0 + RECYCLE_SUMMARY_PERIOD - 0.5) is None
    line = recycles.summary(10.0 + RECYCLE_SUMMARY_PERIOD)
    assert line == f"recycled 2 workers in the last {RECYCLE_SUMMARY_PERIOD:.0f} s (max_requests)"
    assert not recycles.open and recycles.summary(100.0) is None
    recycles.count("max_requests", 50.0)
    recycles.count("cpu_limit", 51.0)
    recycles.count("max_requests", 52.0)
    assert recycles.summary(50.0 + RECYCLE_SUMMARY_PERIOD) == \
        f"recycled 3 workers in the last {RECYCLE_SUMMARY_PERIOD:.0f} s (cpu_limit 1, max_requests 2)"


def test_the_scoreboard_has_room_for_standbys_and_with_a_process_per_request_for_exits() -> None:
    assert watchdog.scoreboard_slots(4) == 12
    assert watchdog.scoreboard_slots(4, 1) == 13
    assert watchdog.scoreboard_slots(4, 1, max_requests=1000) == 13
    assert watchdog.scoreboard_slots(1, 1, max_requests=1) == 10 + watchdog.EXIT_ROOM
    # The exit room is its own figure, so a reload's capacity can leave it out.
    assert watchdog.exit_room(2, max_requests=1) == watchdog.EXIT_ROOM
    assert watchdog.exit_room(40, max_requests=1) == 80
    assert watchdog.exit_room(40, max_requests=2) == 0
    assert watchdog.scoreboard_slots(40, 2, max_requests=1) == 84 + 84
