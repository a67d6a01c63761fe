"""The master's sleep (tines.wakeup): what ends it and what it reports, with plain pipes and no
signal actually sent."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from tines.wakeup import SIGNAL_QUEUE_LIMIT, Wakeup


@pytest.fixture
def wakeup() -> Iterator[Wakeup]:
    opened = Wakeup()
    opened.open()
    yield opened
    for fd in opened.fds():
        os.close(fd)


def test_a_quiet_sleep_says_so(wakeup: Wakeup) -> None:
    assert wakeup.sleep(0.0, []) is None


def test_a_queued_signal_ends_the_sleep_at_once_and_a_burst_is_bounded(wakeup: Wakeup) -> None:
    for _ in range(SIGNAL_QUEUE_LIMIT + 3):
        wakeup.on_signal(signal.SIGHUP, None)
    assert list(wakeup.signals) == [signal.SIGHUP] * SIGNAL_QUEUE_LIMIT
    assert wakeup.sleep(60.0, []) == []


def test_the_wake_up_byte_is_drained_and_a_readable_watched_fd_is_reported(wakeup: Wakeup) -> None:
    os.write(wakeup.write, b"\x01")  # what signal.set_wakeup_fd writes
    assert wakeup.sleep(60.0, []) == [wakeup.read]
    assert wakeup.sleep(0.0, []) is None  # drained
    read, write = os.pipe()
    try:
        os.write(write, b"m")
        assert wakeup.sleep(60.0, [read]) == [read]
    finally:
        os.close(read)
        os.close(write)
