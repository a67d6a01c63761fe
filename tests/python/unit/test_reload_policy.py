"""The reload policy (tines.reload): the rolling replacement, the batch size, which changed
settings need a restart, and the decisions the master carries out (with no process)."""

from __future__ import annotations

from tines import reload
from tines.config import Config, load
from tines.generation import Generation, Worker
from tines.hooks import Hooks
from tines.pool import Pool, PoolSettings
from tines.reload import Capacity, Decision, Reloader, Step, batch_size, plan, restart_only_changes


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


# --- the reload's decisions (Reloader): what the master is asked to do, with no process ----------

def generation(number: int, **settings: object) -> Generation:
    return Generation(number=number, cfg=config(**settings), worker_settings={}, hooks=Hooks(), pool=None,
                      memory_merge=False)


def serving(count: int, number: int = 1) -> list[Worker]:
    """``count`` ready workers of generation ``number`` (pids 100...)."""
    return [Worker(pid=100 + n, slot=n, generation=number, born=float(n), ready=True) for n in range(count)]


def reloader() -> Reloader:
    return Reloader(overrides={}, capacity=Capacity(slots=16, threads=1))


def test_a_hup_waits_for_the_first_generation_and_for_the_reload_in_progress() -> None:
    hup = reloader()
    assert not hup.request(announced=False) and hup.queued
    assert hup.step([], 2, announced=False, wants_workers=True) == Decision()
    assert hup.step([], 2, announced=True, wants_workers=True) == Decision(begin=True)
    assert reloader().request(announced=True)
    hup.start(generation(1, workers=2), 2, generation(2, workers=2), serving(2))
    assert not hup.request(announced=True) and hup.queued  # runs when this one ends


def test_nothing_starts_or_retires_while_an_upgrade_does_not_want_workers() -> None:
    hup = reloader()
    hup.start(generation(1, workers=2), 2, generation(2, workers=2), serving(2))
    hup.queued = True
    new = [Worker(pid=200, slot=5, generation=2, ready=True)]
    assert hup.step(serving(2) + new, 2, announced=True, wants_workers=False) == Decision()
    assert hup.active


def test_a_reload_puts_the_new_generation_in_force_and_starts_its_first_batch() -> None:
    hup = reloader()
    old, new = generation(1, workers=4), generation(2, workers=4)
    decision = hup.start(old, 4, new, serving(4))
    assert decision == Decision(put_in_force=new, workers=4, spawn=1)
    assert hup.active and hup.latest_generation == 2
    assert hup.attempt is not None and hup.attempt.serving is old and hup.attempt.old_at_start == 4


def test_old_workers_go_as_new_ones_are_ready_and_a_waiting_hup_runs_at_the_end() -> None:
    hup = reloader()
    old = serving(2)
    hup.start(generation(1, workers=2), 2, generation(2, workers=2), old)
    first = Worker(pid=200, slot=2, generation=2, ready=True)
    step = hup.step([*old, first], 2, announced=True, wants_workers=True)
    assert step == Decision(retire=(100,))  # the longest-serving old worker, at the ceiling
    old[0].stopping = True
    second = Worker(pid=201, slot=3, generation=2)
    assert hup.step([*old, first], 2, announced=True, wants_workers=True).spawn == 0  # 100 still counts
    hup.request(announced=True)
    second.ready = True
    done = hup.step([old[1], first, second], 2, announced=True, wants_workers=True)
    assert done == Decision(retire=(101,), finished=True, begin=True)
    assert not hup.active and not hup.last_failed


def test_a_booting_old_worker_is_retired_before_a_serving_one() -> None:
    hup = reloader()
    old = serving(2)
    old[1].ready = False  # a replacement started before the HUP
    hup.start(generation(1, workers=2), 2, generation(2, workers=2), old)
    new = Worker(pid=200, slot=2, generation=2, ready=True)
    assert hup.step([*old, new], 2, announced=True, wants_workers=True).retire == (101,)


def test_a_new_worker_that_cannot_boot_puts_the_serving_generation_back() -> None:
    hup = reloader()
    old = generation(1, workers=2)
    workers = serving(2)
    hup.start(old, 3, generation(2, workers=2), workers)
    new = [Worker(pid=200, slot=2, generation=2), Worker(pid=201, slot=3, generation=2, stopping=True)]
    decision = hup.on_boot_error(new[0], "ImportError: no module", 2, [*workers, *new])
    assert decision == Decision(retire=(200,), why="reload abandoned", put_in_force=old, workers=3,
                                finished=False)
    assert not hup.active and hup.last_failed
    # Its other workers are still the reload's business (not the crash-loop guard's), with nothing to do.
    assert hup.on_death_before_ready(new[1], 256, 1, workers) == Decision()
    assert hup.on_death_before_ready(workers[0], 256, 1, workers) is None  # the serving generation's
    assert hup.on_boot_error(workers[0], "error", 1, workers) is None
    # The abandoned number is not given again: the next reload's generation is 3.
    assert hup.latest_generation == 2
    assert hup.start(old, 2, generation(3), workers).put_in_force is not None


def test_a_death_before_ready_in_the_new_generation_abandons_the_reload_too() -> None:
    hup = reloader()
    workers = serving(1)
    hup.start(generation(1), 1, generation(2), workers)
    new = Worker(pid=200, slot=1, generation=2)
    decision = hup.on_death_before_ready(new, 9, 2, [*workers, new])  # SIGKILL
    assert decision is not None and decision.finished is False and decision.retire == (200,)


def test_the_dynamic_pool_keeps_the_capacity_that_served_within_its_bounds() -> None:
    hup = reloader()
    settings = PoolSettings(max_workers=6, start_workers=2, min_spare=1, max_spare=2, threads=1, in_threads=False)
    new = Generation(number=2, cfg=config(max_workers=6), worker_settings={}, hooks=Hooks(), pool=Pool(settings),
                     memory_merge=False)
    assert hup.start(generation(1), 5, new, serving(5)).workers == 5
    small = reloader()
    assert small.start(generation(1), 1, new, serving(1)).workers == 2  # at least start_workers
    large = reloader()
    assert large.start(generation(1), 8, new, serving(8)).workers == 6  # at most max_workers
