"""The crash-loop guard (tines.exits.CrashGuard): when the next worker may start after deaths
before ready and crashes after ready, the floor it keeps serving through requests of death, and
when the master gives up; and what a crashed worker had in flight (tines.exits.InFlight). No
process is started."""

from __future__ import annotations

import pytest

from typing import Any

from tines.exits import (BACKOFF_MAX, CRASH_WINDOW, EXIT_BOOT_FAILURES, CrashGuard, InFlight, Stop,
                         crash_floor, crashed)


def test_deaths_before_ready_back_off_doubling_and_give_up_at_the_limit() -> None:
    guard = CrashGuard()
    delays = []
    for now in (10.0, 20.0, 30.0, 40.0):
        guard.died_before_ready(now, limit=5, serving=0, reload_failed=False)
        delays.append(guard.next_spawn - now)
    assert delays == pytest.approx([0.1, 0.2, 0.4, 0.8])
    with pytest.raises(Stop) as stop:
        guard.died_before_ready(50.0, limit=5, serving=0, reload_failed=False)
    assert stop.value.status == EXIT_BOOT_FAILURES


def test_a_ready_worker_resets_the_count() -> None:
    guard = CrashGuard()
    guard.died_before_ready(1.0, limit=2, serving=0, reload_failed=False)
    guard.ready()
    guard.died_before_ready(2.0, limit=2, serving=0, reload_failed=False)  # the first again: no Stop
    assert guard.next_spawn == pytest.approx(2.1)


def test_code_a_reload_could_not_boot_keeps_the_old_workers_and_retries_slowly() -> None:
    guard = CrashGuard()
    guard.died_before_ready(1.0, limit=1, serving=2, reload_failed=True)
    assert guard.next_spawn == 1.0 + BACKOFF_MAX
    with pytest.raises(Stop):
        CrashGuard().died_before_ready(1.0, limit=1, serving=0, reload_failed=True)  # nothing serves
    with pytest.raises(Stop):
        CrashGuard().died_before_ready(1.0, limit=1, serving=2, reload_failed=False)


def test_one_crash_after_ready_is_replaced_at_once_and_more_within_the_window_slow_down() -> None:
    guard = CrashGuard()
    guard.crashed_after_ready(100.0, serving=False, floor=1)
    assert guard.next_spawn == 0.0
    guard.crashed_after_ready(101.0, serving=False, floor=1)
    assert guard.next_spawn == pytest.approx(101.1)
    guard.crashed_after_ready(102.0, serving=False, floor=1)
    assert guard.next_spawn == pytest.approx(102.2)
    # Crashes older than the window are forgotten: the next one is a first one again.
    guard.crashed_after_ready(102.0 + CRASH_WINDOW + 1, serving=False, floor=1)
    assert guard.next_spawn == pytest.approx(102.2)
    assert len(guard.crash_times) == 1


def test_the_crash_delay_never_passes_the_maximum_nor_moves_a_later_start_earlier() -> None:
    guard = CrashGuard(next_spawn=500.0)
    for second in range(20):
        guard.crashed_after_ready(200.0 + second * 0.1, serving=False, floor=1)
    assert guard.next_spawn == 500.0
    guard = CrashGuard()
    for second in range(20):
        guard.crashed_after_ready(200.0 + second * 0.1, serving=False, floor=1)
    assert guard.next_spawn == pytest.approx(201.9 + BACKOFF_MAX)


def test_a_crash_is_a_signal_or_a_non_zero_exit() -> None:
    assert crashed(9) and crashed(1 << 8)  # SIGKILL; exit status 1
    assert not crashed(0)


def test_the_floor_is_half_the_workers_rounded_up_and_at_least_one() -> None:
    assert [crash_floor(workers) for workers in (1, 2, 3, 4, 8)] == [1, 1, 2, 2, 4]


def test_before_any_crash_every_start_is_allowed() -> None:
    guard = CrashGuard()
    assert guard.take_start(1.0, live=0, floor=1)
    assert guard.take_start(1.0, live=5, floor=3)


def test_requests_of_death_keep_the_floor_serving_while_the_others_wait() -> None:
    guard = CrashGuard()
    now = 100.0
    for _ in range(10):  # both workers of two die of requests, again and again
        guard.crashed_after_ready(now, serving=True, floor=1)
        guard.crashed_after_ready(now, serving=True, floor=1)
        # The floor (one worker) starts at once, paid by a deadly request; the second waits.
        assert guard.take_start(now, live=0, floor=1)
        assert not guard.take_start(now, live=1, floor=1)
        now += 0.01
    assert guard.next_spawn > now
    # Once the backoff is over, the others start again.
    assert guard.take_start(guard.next_spawn, live=1, floor=1)


def test_a_paid_start_is_used_once_and_they_never_pile_up_beyond_the_floor() -> None:
    guard = CrashGuard()
    for second in range(5):
        guard.crashed_after_ready(10.0 + second * 0.01, serving=True, floor=2)
    assert guard.paid_starts == 2
    assert guard.take_start(10.1, live=0, floor=2)
    assert guard.take_start(10.1, live=1, floor=2)
    assert not guard.take_start(10.1, live=0, floor=2)  # five deaths, but two paid starts held


def test_deaths_stay_bounded_by_the_deadly_requests() -> None:
    # A worker that takes a deadly request dies and is replaced: every start beyond the
    # workers themselves follows a death, and none happens without one.
    guard = CrashGuard()
    workers, live, starts, deaths, now = 2, 2, 2, 0, 0.0
    for _ in range(2000):  # an attacker at 200/s for 10 s, each request taken by a live worker
        now += 0.005
        if live:
            live -= 1
            deaths += 1
            guard.crashed_after_ready(now, serving=True, floor=crash_floor(workers))
        while live < workers and guard.take_start(now, live, crash_floor(workers)):
            live += 1
            starts += 1
    assert deaths == 2000 and starts <= deaths + workers


def test_a_crash_loop_between_requests_waits_out_the_backoff_below_the_floor_too() -> None:
    # Every worker crashes by itself soon after ready, with no request in flight: nothing
    # pays for its replacement, so the backoff holds every start (no fork storm).
    guard = CrashGuard()
    live, starts, now, crash_at = 0, 0, 0.0, None
    while now < 60.0:
        if crash_at is not None and now >= crash_at:  # 10 ms after its start, by itself
            live, crash_at = 0, None
            guard.crashed_after_ready(now, serving=False, floor=1)
        if not live and guard.take_start(now, live, floor=1):
            live, starts, crash_at = 1, starts + 1, now + 0.01
        now += 0.001
    # Unchecked, one worker every 10 ms: 6,000 starts in the minute.
    assert starts <= 60, starts


def test_a_death_before_ready_takes_back_the_paid_starts() -> None:
    guard = CrashGuard()
    guard.crashed_after_ready(1.0, serving=True, floor=1)
    guard.crashed_after_ready(1.0, serving=True, floor=1)
    guard.died_before_ready(1.0, limit=5, serving=0, reload_failed=False)
    assert guard.paid_starts == 0
    assert not guard.take_start(1.0, live=0, floor=1)  # the boot backoff holds


def test_thousands_of_crashes_in_the_window_keep_the_maximum_delay() -> None:
    guard = CrashGuard()
    for crash in range(3000):
        guard.crashed_after_ready(50.0 + crash * 0.001, serving=True, floor=1)
    assert guard.next_spawn == pytest.approx(52.999 + BACKOFF_MAX)


def reading(*threads: tuple[str, str, str], asgi_active: int = -1) -> dict[str, Any]:
    """A ``Scoreboard.read`` of a slot with these (state, method, target) sub-slots."""
    return {"loop_heartbeat": 1.0 if asgi_active >= 0 else 0.0, "active": max(asgi_active, 0),
            "threads": [{"state": state, "method": method, "target": target}
                        for state, method, target in threads]}


def test_a_crash_names_the_request_in_flight() -> None:
    in_flight = InFlight.of(reading(("busy", "GET", "/exit?x=1")))
    assert in_flight.serving
    assert in_flight.describe() == "while serving GET /exit?x=1"


def test_a_crash_between_requests_says_none_was_in_flight() -> None:
    in_flight = InFlight.of(reading(("idle", "GET", "/served-before")))
    assert not in_flight.serving
    assert in_flight.describe() == "between requests (none in flight)"


def test_with_several_app_threads_every_request_in_flight_is_named() -> None:
    in_flight = InFlight.of(reading(("busy", "GET", "/a"), ("idle", "GET", "/b"), ("busy", "POST", "/c")))
    assert in_flight.describe() == "with 2 requests in flight: GET /a, POST /c"


def test_an_asgi_worker_says_how_many_were_in_flight_not_which() -> None:
    assert InFlight.of(reading(("busy", "GET", "/stale"), asgi_active=3)).describe() == (
        "with 3 request(s) in flight (an ASGI worker: which ones is not recorded)")
    assert not InFlight.of(reading(asgi_active=0)).serving


def test_a_request_recorded_half_way_is_not_named() -> None:
    # The worker died while writing the sub-slot: the scoreboard gives empty strings.
    assert InFlight.of(reading(("busy", "", ""))).describe() == "while serving a request (not recorded)"


def test_control_bytes_and_backslashes_do_not_reach_the_log_raw() -> None:
    in_flight = InFlight.of(reading(("busy", "GET", "/a\\x0a\n\x1b[31m\u00e9 b")))
    assert in_flight.describe() == r"while serving GET /a\x5cx0a\x0a\x1b[31m\xe9\x20b"
