"""tines.pool: the dynamic pool's settings (defaults, checks) and its policy, over plain data."""

from __future__ import annotations

import pytest

from tines import pool
from tines.config import load
from tines.errors import ConfigError
from tines.pool import SPAWN_RATE_MAX, Pool, PoolSettings, WorkerSample


@pytest.fixture(autouse=True)
def in_empty_directory(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """No ./tines.toml is read."""
    monkeypatch.chdir(tmp_path)  # type: ignore[arg-type]


def resolve(cores: int = 4, **given: object) -> PoolSettings | None:
    return pool.settings(load(given, environ={}), cpu_count=cores)


def refusal(cores: int = 4, **given: object) -> str:
    with pytest.raises(ConfigError) as error:
        resolve(cores, **given)
    message = str(error.value)
    assert "\n" not in message
    return message


def worker(pid: int, active: int = 0, connections: int = 0, ready: bool = True, stopping: bool = False,
           current: bool = True, slot: int | None = None) -> WorkerSample:
    return WorkerSample(pid=pid, slot=pid if slot is None else slot, ready=ready, stopping=stopping,
                        current=current, active=active, connections=connections)


def prefork(min_spare: int = 2, max_spare: int = 4, max_workers: int = 10) -> Pool:
    return Pool(PoolSettings(max_workers=max_workers, start_workers=min_spare, min_spare=min_spare,
                             max_spare=max_spare, threads=1, in_threads=False))


def threaded(min_spare: int, max_spare: int, threads: int = 4, max_workers: int = 10) -> Pool:
    return Pool(PoolSettings(max_workers=max_workers, start_workers=1, min_spare=min_spare,
                             max_spare=max_spare, threads=threads, in_threads=True))


# --- settings ------------------------------------------------------------------------------------

def test_without_max_workers_the_worker_count_is_fixed() -> None:
    assert resolve() is None
    assert pool.describe_mode(load({"workers": 3}, environ={}), None).startswith("fixed: 3 workers")


def test_prefork_defaults_are_one_idle_worker_per_core_and_as_many_more_at_most() -> None:
    assert resolve(cores=4, max_workers=64) == PoolSettings(
        max_workers=64, start_workers=4, min_spare=4, max_spare=8, threads=1, in_threads=False)


def test_thread_defaults_count_app_threads() -> None:
    assert resolve(cores=2, max_workers=16, mpm="thread", threads=8) == PoolSettings(
        max_workers=16, start_workers=2, min_spare=16, max_spare=32, threads=8, in_threads=True)


def test_defaults_stay_within_a_small_max_workers_and_a_given_max_spare() -> None:
    settings = resolve(cores=8, max_workers=2)
    assert settings is not None and (settings.min_spare, settings.start_workers) == (2, 2)
    settings = resolve(cores=8, max_workers=20, max_spare_workers=3)
    assert settings is not None and (settings.min_spare, settings.max_spare) == (2, 3)


def test_pool_bounds_without_max_workers_are_refused() -> None:
    assert refusal(min_spare_workers=2).startswith("min_spare_workers (cli) needs max_workers")


def test_workers_given_beside_max_workers_is_refused() -> None:
    assert refusal(workers=4, max_workers=8) == (
        "workers 4 (cli) fixes the worker count, max_workers 8 (cli) turns on the dynamic pool: "
        "give one of them")


def test_max_spare_must_leave_room_above_min_spare() -> None:
    assert refusal(max_workers=8, min_spare_workers=3, max_spare_workers=3).startswith(
        "max_spare_workers 3 (cli) must be at least min_spare_workers + 1 = 4")
    assert refusal(max_workers=8, mpm="event", threads=4, min_spare_threads=4, max_spare_threads=6).startswith(
        "max_spare_threads 6 (cli) must be at least min_spare_threads + 4 threads (one worker) = 8")


def test_min_spare_beyond_what_max_workers_holds_is_refused() -> None:
    assert refusal(max_workers=2, min_spare_workers=3) == (
        "min_spare_workers 3 (cli) is more than max_workers 2 (cli) can ever hold idle")
    assert refusal(max_workers=2, mpm="thread", threads=4, min_spare_threads=9) == (
        "min_spare_threads 9 (cli) is more than max_workers 2 (cli) x 4 threads = 8 can ever hold idle")


def test_start_workers_above_max_workers_is_refused() -> None:
    assert refusal(max_workers=4, start_workers=5) == (
        "start_workers 5 (cli) is more than max_workers 4 (cli)")


def test_spare_bounds_of_the_other_kind_are_reported_as_ignored() -> None:
    from tines.config import ignored_settings

    [line] = ignored_settings(load({"max_workers": 4, "min_spare_threads": 8}, environ={}))
    assert line.startswith("min_spare_threads 8 (cli) is ignored by mpm prefork")


# --- the policy ----------------------------------------------------------------------------------

def test_while_short_of_spares_the_spawn_count_doubles_each_check() -> None:
    policy = prefork(min_spare=1, max_spare=4, max_workers=100)
    busy = [worker(1, active=1)]
    counts = []
    for _ in range(5):
        decision = policy.check(busy)
        counts.append(decision.spawn)
        busy += [worker(100 + len(busy) + n, active=1) for n in range(decision.spawn)]  # all taken at once
    # More than the shortage of one: queued connections take each new worker as it comes up.
    assert counts == [1, 2, 4, 8, 16]


def test_the_spawn_count_stops_at_max_workers() -> None:
    policy = prefork(min_spare=1, max_spare=4, max_workers=5)
    policy.spawn_rate = 8
    decision = policy.check([worker(1, active=1), worker(2, active=1)])
    assert decision.spawn == 3 and decision.limit_reached is None


def test_the_spawn_rate_is_capped() -> None:
    policy = prefork(min_spare=1000, max_spare=2000, max_workers=5000)
    busy: list[WorkerSample] = []
    counts = []
    for _ in range(8):
        decision = policy.check(busy)
        counts.append(decision.spawn)
        busy += [worker(10_000 + len(busy) + n, active=1) for n in range(decision.spawn)]
    assert counts == [1, 2, 4, 8, 16, SPAWN_RATE_MAX, SPAWN_RATE_MAX, SPAWN_RATE_MAX]


def test_booting_workers_and_owed_starts_count_as_future_spares() -> None:
    policy = prefork(min_spare=2, max_spare=4)
    assert policy.check([worker(1, active=1), worker(2, ready=False), worker(3, ready=False)]).spawn == 0
    assert policy.check([worker(1, active=1), worker(2, ready=False)], pending=1).spawn == 0
    decision = policy.check([worker(1, active=1), worker(2, ready=False)])
    assert decision.spawn == 1 and decision.message == "spawning 1 worker (idle 0 + booting 1 < min_spare_workers 2)"


def test_the_rate_starts_again_at_one_once_the_pool_is_not_short() -> None:
    policy = prefork(min_spare=8, max_spare=12)
    assert policy.check([]).spawn == 1
    assert policy.check([worker(1, active=1)]).spawn == 2
    assert policy.check([worker(n) for n in range(8)]).spawn == 0
    assert policy.check([worker(n, active=1) for n in range(8)]).spawn == 1


def test_surplus_retires_the_idle_worker_holding_the_fewest_connections_one_per_check() -> None:
    policy = prefork(min_spare=1, max_spare=2)
    workers = [worker(1, connections=3), worker(2, connections=1), worker(3, connections=2),
               worker(4, active=1, connections=0)]
    decision = policy.check(workers)
    assert (decision.spawn, decision.retire) == (0, 2)
    assert decision.message == "idle 3 > max_spare_workers 2, fewest connections 1"


def test_between_the_bounds_nothing_changes() -> None:
    policy = prefork(min_spare=1, max_spare=3)
    decision = policy.check([worker(1), worker(2), worker(3, active=1)])
    assert (decision.spawn, decision.retire, decision.limit_reached) == (0, None, None)


def test_max_workers_counts_draining_workers_and_is_logged_once_per_episode() -> None:
    policy = prefork(min_spare=1, max_spare=2, max_workers=3)
    at_limit = [worker(1, active=1), worker(2, active=1), worker(3, stopping=True)]
    first = policy.check(at_limit)
    assert first.spawn == 0
    assert first.limit_reached == "max_workers reached: 2 busy, 1 draining; raise it (max_workers 3) or see docs/pool.md"
    assert policy.check(at_limit).limit_reached is None
    assert policy.check(at_limit).limit_reached is None
    # The draining worker leaves: room for one more, same episode (still short).
    assert policy.check(at_limit[:2]).spawn == 1
    assert policy.check(at_limit[:2] + [worker(4, active=1)]).limit_reached is None
    # Not short any more: the episode is over; the next shortage at the cap is logged again.
    assert policy.check([worker(1), worker(2, active=1), worker(4, active=1)]).limit_reached is None
    assert policy.check([worker(1, active=1), worker(2, active=1), worker(4, active=1)]).limit_reached is not None


def test_an_older_generation_not_yet_stopped_is_outside_the_pool() -> None:
    policy = prefork(min_spare=1, max_spare=2, max_workers=2)
    old = [worker(10, current=False), worker(11, current=False)]
    decision = policy.check(old)
    assert decision.spawn == 1  # the new generation starts though two old workers still run


def test_thread_spares_are_idle_app_threads() -> None:
    policy = threaded(min_spare=2, max_spare=8, threads=4)
    assert policy.check([worker(1, active=2)]).spawn == 0  # 2 idle threads
    decision = policy.check([worker(1, active=3)])
    assert decision.spawn == 1 and decision.message == "spawning 1 worker (idle 1 < min_spare_threads 2)"
    assert policy.check([worker(1, active=1), worker(2, ready=False)]).spawn == 0  # 3 idle + 4 booting


def test_thread_spawns_count_workers_at_the_same_rate() -> None:
    policy = threaded(min_spare=2, max_spare=20, threads=4)
    assert [policy.check([worker(1, active=4)]).spawn for _ in range(3)] == [1, 2, 4]


def test_thread_surplus_retires_the_worker_with_the_fewest_connections_that_has_an_idle_thread() -> None:
    policy = threaded(min_spare=2, max_spare=6, threads=4)
    workers = [worker(1, active=4, connections=4), worker(2, active=1, connections=2), worker(3, connections=5)]
    decision = policy.check(workers)  # 0 + 3 + 4 = 7 idle threads > 6
    assert decision.retire == 2 and decision.message == "idle 7 > max_spare_threads 6, fewest connections 2"


def test_ttin_raises_both_bounds_by_one_worker_and_starts_one_when_there_is_room() -> None:
    policy = threaded(min_spare=4, max_spare=12, threads=4, max_workers=4)
    three = [worker(1), worker(2), worker(3)]
    decision = policy.grow(three)
    assert decision.spawn == 1 and decision.message == "TTIN: idle threads now kept between 8 and 16; spawning 1 worker"
    refused = policy.grow(three + [worker(4)])
    assert refused.spawn == 0 and refused.message.startswith("TTIN: not raised")
    assert (policy.min_spare, policy.max_spare) == (8, 16)


def test_ttin_at_max_workers_only_moves_the_bounds() -> None:
    policy = prefork(min_spare=1, max_spare=2, max_workers=3)
    decision = policy.grow([worker(1, active=1), worker(2, active=1), worker(3, stopping=True)])
    assert decision.spawn == 0 and decision.message.endswith("no worker started: max_workers 3 reached")
    assert (policy.min_spare, policy.max_spare) == (2, 3)


def test_ttou_lowers_both_bounds_and_retires_the_idle_worker_with_the_fewest_connections() -> None:
    policy = prefork(min_spare=2, max_spare=4)
    decision = policy.shrink([worker(1, connections=2), worker(2, connections=1), worker(3, active=1)])
    assert decision.retire == 2
    assert decision.message == "TTOU: idle workers now kept between 1 and 3, fewest connections 1"


def test_ttou_retires_no_worker_the_new_min_spare_still_needs() -> None:
    policy = prefork(min_spare=3, max_spare=5)
    decision = policy.shrink([worker(1), worker(2, active=1)])  # short already: 1 idle < 2
    assert decision.retire is None and decision.message.endswith("no idle worker to retire")
    policy = prefork(min_spare=1, max_spare=2)
    refused = policy.shrink([worker(1), worker(2)])
    assert refused.retire is None and refused.message.startswith("TTOU: not lowered")
