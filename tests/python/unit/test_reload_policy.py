"""The reload policy's pure parts (tines.reload): the rolling replacement, the batch size, and
which changed settings need a restart."""

from __future__ import annotations

from tines import reload
from tines.config import Config, load
from tines.reload import Capacity, Step, batch_size, plan, restart_only_changes


def config(**settings: object) -> Config:
    return load({"app": "hello:app", **settings}, environ={})


def replay(old: int, target: int, batch: int) -> tuple[int, int]:
    """Run ``plan`` to the end with every start ready at the next look and every retired worker
    gone at the one after; return (the most processes seen, the least serving capacity seen)."""
    old_live, new_ready, booting, draining = old, 0, 0, 0
    most, least = old, old
    for _ in range(100):
        step = plan(old, target, batch, old_live, new_ready, booting, old_live + new_ready + booting + draining)
        old_live -= step.retire
        draining = step.retire  # the previous ones exited
        least = min(least, old_live + new_ready)
        if step.done:
            return most, least
        new_ready += booting
        booting = step.spawn
        most = max(most, old_live + new_ready + booting + draining)
    raise AssertionError("the reload never finished")


def test_the_first_look_starts_one_batch_and_retires_nobody() -> None:
    assert plan(4, 4, 1, old_live=4, new_ready=0, new_booting=0, processes=4) == Step(spawn=1, retire=0, done=False)
    assert plan(8, 8, 2, old_live=8, new_ready=0, new_booting=0, processes=8) == Step(spawn=2, retire=0, done=False)


def test_an_old_worker_is_retired_for_each_new_one_that_is_ready() -> None:
    step = plan(4, 4, 1, old_live=4, new_ready=1, new_booting=0, processes=5)
    assert step.retire == 1 and step.spawn == 0  # at the ceiling until the retired one exits
    assert plan(4, 4, 1, old_live=3, new_ready=1, new_booting=0, processes=4).spawn == 1


def test_no_start_while_a_retired_worker_still_counts_at_the_ceiling() -> None:
    assert plan(4, 4, 1, old_live=2, new_ready=2, new_booting=0, processes=5).spawn == 0


def test_the_reload_is_done_when_the_new_generation_is_complete_and_the_old_retired() -> None:
    assert plan(2, 2, 1, old_live=1, new_ready=2, new_booting=0, processes=4) == Step(spawn=0, retire=1, done=True)
    assert not plan(2, 2, 1, old_live=1, new_ready=1, new_booting=0, processes=3).done


def test_a_smaller_new_generation_retires_the_rest_of_the_old_once_complete() -> None:
    assert plan(4, 2, 1, old_live=3, new_ready=1, new_booting=0, processes=4).retire == 0
    assert plan(4, 2, 1, old_live=3, new_ready=2, new_booting=0, processes=5) == Step(spawn=0, retire=3, done=True)


def test_capacity_never_dips_and_processes_stay_within_the_larger_count_plus_the_batch() -> None:
    for old, target, batch in [(4, 4, 1), (4, 4, 2), (2, 3, 1), (3, 2, 1), (8, 8, 3), (1, 1, 1), (5, 9, 2)]:
        most, least = replay(old, target, batch)
        assert most <= max(old, target) + batch, (old, target, batch, most)
        assert least >= min(old, target), (old, target, batch, least)


def test_the_batch_is_a_quarter_of_the_workers_at_least_one_unless_set() -> None:
    assert [batch_size(None, n) for n in (1, 3, 4, 7, 8, 16)] == [1, 1, 1, 1, 2, 4]
    assert batch_size(3, 16) == 3


def test_a_changed_bind_user_or_preload_needs_a_restart_and_the_rest_does_not() -> None:
    capacity = Capacity(slots=10, threads=1)
    old = config(bind=["127.0.0.1:8000"], workers=2)
    new = config(bind=["127.0.0.1:9000"], workers=3, preload=True, max_requests=10)
    changes = restart_only_changes(old, new, capacity)
    assert set(changes) == {"bind", "preload"}
    assert "bound once" in changes["bind"]
    assert restart_only_changes(old, old, capacity) == {}


def test_a_worker_count_beyond_half_the_scoreboard_needs_a_restart() -> None:
    capacity = Capacity(slots=10, threads=1)
    old = config(workers=2)
    assert restart_only_changes(old, config(workers=5), capacity) == {}
    changes = restart_only_changes(old, config(workers=6), capacity)
    assert set(changes) == {"workers"} and "workers 6 is more than the 5 workers" in changes["workers"]
    pool = restart_only_changes(old, config(max_workers=8), capacity)
    assert set(pool) == {"max_workers", "workers"}  # both kept: the worker mode stays as it was


def test_more_app_threads_than_the_scoreboard_holds_need_a_restart() -> None:
    capacity = Capacity(slots=10, threads=2)
    old = config(mpm="thread", threads=2)
    assert restart_only_changes(old, config(mpm="event", threads=2), capacity) == {}
    assert set(restart_only_changes(old, config(mpm="thread", threads=4), capacity)) == {"threads"}
    prefork = config(mpm="prefork", threads=4)
    assert set(restart_only_changes(prefork, config(mpm="thread", threads=4), Capacity(10, 1))) == {"mpm"}


def test_every_restart_only_setting_is_a_setting() -> None:
    from tines.config import SETTINGS

    assert set(reload.RESTART_ONLY) <= set(SETTINGS)
