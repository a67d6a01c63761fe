"""tines.duties: a failing master duty is logged (name, traceback, rate-limited) and the caller
goes on; the exceptions that stop the master pass through."""

from __future__ import annotations

import logging

import pytest

from tines.duties import REPORT_INTERVAL, Duties


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Stop(Exception):
    """Stands for the arbiter's Stop: the exception that is how the master leaves its loop."""


def fails() -> None:
    raise OSError("the proc entry vanished")


@pytest.fixture
def duties(caplog: pytest.LogCaptureFixture) -> tuple[Duties, Clock]:
    caplog.set_level(logging.DEBUG, logger="test.duties")
    clock = Clock()
    return Duties(logging.getLogger("test.duties"), passes=(Stop,), clock=clock), clock


def errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.levelno == logging.ERROR]


def test_a_failing_duty_is_logged_with_its_name_and_traceback_and_the_caller_goes_on(
        duties: tuple[Duties, Clock], caplog: pytest.LogCaptureFixture) -> None:
    guard, _ = duties
    assert guard.run("sampling", fails) is False
    [line] = errors(caplog)
    assert line.startswith("master duty 'sampling' failed, the master goes on: OSError: the proc entry vanished")
    assert "Traceback (most recent call last)" in line and "in fails" in line
    assert guard.run("sampling", lambda: None) is True


def test_a_duty_failing_every_second_logs_one_traceback_a_minute_with_the_count_between(
        duties: tuple[Duties, Clock], caplog: pytest.LogCaptureFixture) -> None:
    guard, clock = duties
    for _ in range(int(REPORT_INTERVAL)):
        guard.run("pool", fails)
        clock.now += 1.0
    guard.run("pool", fails)
    lines = errors(caplog)
    assert len(lines) == 2
    assert "not logged" not in lines[0]
    assert f"({int(REPORT_INTERVAL) - 1} more failures not logged since the last report)" in lines[1]
    assert sum("failed again" in record.getMessage() for record in caplog.records
               if record.levelno == logging.DEBUG) == int(REPORT_INTERVAL) - 1


def test_a_duty_that_works_again_says_so_once_and_the_next_failure_is_logged_in_full(
        duties: tuple[Duties, Clock], caplog: pytest.LogCaptureFixture) -> None:
    guard, _ = duties
    guard.run("pool", fails)
    guard.run("pool", fails)
    guard.run("pool", lambda: None)
    guard.run("pool", lambda: None)
    works = [r.getMessage() for r in caplog.records if "works again" in r.getMessage()]
    assert works == ["master duty 'pool' works again after 2 failures"]
    guard.run("pool", fails)
    assert len(errors(caplog)) == 2


def test_each_duty_has_its_own_rate_limit(duties: tuple[Duties, Clock], caplog: pytest.LogCaptureFixture) -> None:
    guard, _ = duties
    guard.run("pool", fails)
    guard.run("sampling", fails)
    assert [line.split(" failed")[0] for line in errors(caplog)] == ["master duty 'pool'", "master duty 'sampling'"]


def test_the_exceptions_that_stop_the_master_pass_through(duties: tuple[Duties, Clock]) -> None:
    guard, _ = duties

    def stops() -> None:
        raise Stop()

    def interrupted() -> None:
        raise KeyboardInterrupt()

    with pytest.raises(Stop):
        guard.run("pool", stops)
    with pytest.raises(KeyboardInterrupt):
        guard.run("pool", interrupted)
