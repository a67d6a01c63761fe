"""The crash-loop guard (tines.exits.CrashGuard): when the next worker may start after deaths
before ready and crashes after ready, and when the master gives up. No process is started."""

from __future__ import annotations

import pytest

from tines.exits import BACKOFF_MAX, CRASH_WINDOW, EXIT_BOOT_FAILURES, CrashGuard, Stop, crashed


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
    guard.crashed_after_ready(100.0)
    assert guard.next_spawn == 0.0
    guard.crashed_after_ready(101.0)
    assert guard.next_spawn == pytest.approx(101.1)
    guard.crashed_after_ready(102.0)
    assert guard.next_spawn == pytest.approx(102.2)
    # Crashes older than the window are forgotten: the next one is a first one again.
    guard.crashed_after_ready(102.0 + CRASH_WINDOW + 1)
    assert guard.next_spawn == pytest.approx(102.2)
    assert len(guard.crash_times) == 1


def test_the_crash_delay_never_passes_the_maximum_nor_moves_a_later_start_earlier() -> None:
    guard = CrashGuard(next_spawn=500.0)
    for second in range(20):
        guard.crashed_after_ready(200.0 + second * 0.1)
    assert guard.next_spawn == 500.0
    guard = CrashGuard()
    for second in range(20):
        guard.crashed_after_ready(200.0 + second * 0.1)
    assert guard.next_spawn == pytest.approx(201.9 + BACKOFF_MAX)


def test_a_crash_is_a_signal_or_a_non_zero_exit() -> None:
    assert crashed(9) and crashed(1 << 8)  # SIGKILL; exit status 1
    assert not crashed(0)
