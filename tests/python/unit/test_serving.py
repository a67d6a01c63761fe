"""The words for which interface runs and which MPM serves it (``tines.serving``), and the
worker's ``interface`` message that tells the master."""

from __future__ import annotations

import pytest

from tines import serving
from tines import worker as worker_process


def test_plurals() -> None:
    assert [serving.plural(n, "worker") for n in (0, 1, 2)] == ["0 workers", "1 worker", "2 workers"]


@pytest.mark.parametrize("setting, interface", [("auto", None), ("wsgi", "wsgi"), ("asgi", "asgi3"),
                                                ("asgi2", "asgi2")])
def test_the_interface_setting_fixes_the_interface_except_auto(setting: str, interface: str | None) -> None:
    assert serving.known_interface(setting) == interface


def test_an_asgi_app_is_never_said_to_run_on_prefork() -> None:
    for interface in ("asgi3", "asgi2"):
        assert serving.serving_mpm(interface, "prefork") == "event"
        line = serving.workers_line(interface, "prefork", 1)
        assert "prefork" not in line and "event MPM's reactor" in line and line.startswith("1 worker, ")
        start = serving.start_line(interface, "prefork", False, "2 workers")
        assert "prefork" not in start and "event MPM's reactor" in start
        assert serving.title_tag(interface, "prefork") == "asgi event"
    assert serving.workers_line("asgi3", "prefork", 2) == (
        "2 workers, ASGI 3 app on the event MPM's reactor and an asyncio loop per worker")


def test_a_wsgi_app_runs_on_the_mpm_setting() -> None:
    assert serving.serving_mpm("wsgi", "thread") == "thread"
    assert serving.workers_line("wsgi", "thread", 3) == "3 workers, WSGI app on mpm thread"
    assert serving.start_line("wsgi", "prefork", False, "1 worker") == "Using mpm prefork with 1 worker for a WSGI app"
    assert serving.title_tag("wsgi", "event") == "event"


def test_before_the_app_is_loaded_the_start_line_names_only_an_mpm_that_was_set() -> None:
    # A default mpm is not named (the app may be ASGI); a set one is (an ASGI app refuses any other than event).
    assert serving.start_line(None, "prefork", False, "2 workers") == (
        "Starting 2 workers; the ready line says which interface and MPM serve the app")
    assert serving.start_line(None, "thread", True, "a dynamic pool: start 1") == (
        "Using mpm thread with a dynamic pool: start 1")
    assert serving.title_tag(None, "prefork") == "loading"


def test_the_interface_message_round_trips_between_other_messages() -> None:
    buffer = bytearray(worker_process.encode_interface(41, 3, "asgi3") + worker_process.encode_ready(41, 3))
    partial = worker_process.encode_interface(42, 0, "wsgi")
    buffer += partial[:5]
    assert worker_process.decode(buffer) == [("interface", 41, 3, "asgi3"), ("ready", 41, 3, "")]
    buffer += partial[5:]
    assert worker_process.decode(buffer) == [("interface", 42, 0, "wsgi")] and not buffer


def test_ctrl_c_waits_for_a_lifespan_shutdown_and_names_it_only_for_an_asgi_app() -> None:
    # A WSGI app has no lifespan shutdown: no line about one, no wait for one.
    assert serving.interrupt_line("wsgi", 3.0) == "INT: quick stop (Ctrl-C again: at once)"
    assert serving.interrupt_wait("wsgi", 3.0) == 0.0
    for interface in ("asgi3", "asgi2"):
        assert serving.interrupt_line(interface, 3.0) == (
            "INT: quick stop, the ASGI lifespan shutdown given up to 3 s (Ctrl-C again: at once)")
        assert serving.interrupt_wait(interface, 3.0) == 3.0
    # Not known yet (interface auto, no worker said): it may be ASGI, whose shutdown must not be cut.
    assert serving.interrupt_line(None, 2.5) == (
        "INT: quick stop, an ASGI app's lifespan shutdown given up to 2.5 s (Ctrl-C again: at once)")
    assert serving.interrupt_wait(None, 2.5) == 2.5
