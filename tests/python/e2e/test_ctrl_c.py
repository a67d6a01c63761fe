"""Ctrl-C (INT to the whole process group, as a terminal sends it) runs the ASGI lifespan
shutdown in every worker (a WSGI app has none: nothing is said or waited for); a second Ctrl-C
makes the stop immediate (docs/signals.md)."""

from __future__ import annotations

import errno
import os
import signal
import socket
from collections.abc import Callable
from pathlib import Path

from conftest import Server, wait_until


def lines(path: Path) -> list[tuple[int, str]]:
    if not path.exists():
        return []
    return [(int(pid), event) for pid, event in (line.split(None, 1) for line in path.read_text().splitlines())]


def events_of(path: Path, event: str) -> list[int]:
    return sorted(pid for pid, seen in lines(path) if seen == event)


def test_ctrl_c_runs_the_lifespan_shutdown_in_every_worker(tines_server: Callable[..., Server], tmp_path: Path) -> None:
    record = tmp_path / "lifespan.txt"
    server = tines_server("lifespan_lines:app", "--workers", "2", env={"LIFESPAN_FILE": str(record)})
    started = wait_until(lambda: len(events_of(record, "startup")) == 2 and events_of(record, "startup"),
                         what="both workers' lifespan startup")
    assert sorted(server.worker_pids()) == started
    os.killpg(server.pid, signal.SIGINT)
    assert server.wait() == 0
    assert events_of(record, "shutdown") == started
    log = server.log_text()
    assert "INT: quick stop, the ASGI lifespan shutdown given up to 3 s (Ctrl-C again: at once)" in log
    assert "sent SIGINT to 2 worker(s)" in log
    assert "killing" not in log
    assert "lifespan shutdown not done" not in log


def test_ctrl_c_cancels_the_requests_before_the_lifespan_shutdown(tines_server: Callable[..., Server],
                                                                   tmp_path: Path) -> None:
    record = tmp_path / "lifespan.txt"
    server = tines_server("lifespan_lines:app", "--workers", "1", env={"LIFESPAN_FILE": str(record)})
    [pid] = wait_until(lambda: events_of(record, "startup"), what="the lifespan startup")
    with socket.create_connection(("127.0.0.1", server.port)) as client:
        client.sendall(b"GET /hang HTTP/1.1\r\nHost: x\r\n\r\n")
        wait_until(lambda: events_of(record, "request-begin"), what="the request in the app")
        os.killpg(server.pid, signal.SIGINT)
        assert server.wait() == 0
    # The handler unwound before the shutdown began, not beside it (nor after it).
    assert [event for seen, event in lines(record) if seen == pid] == \
        ["startup", "request-begin", "request-cancelled", "shutdown"]
    assert "lifespan shutdown not done" not in server.log_text()


def test_a_second_ctrl_c_ends_a_lifespan_shutdown_at_once(tines_server: Callable[..., Server], tmp_path: Path) -> None:
    record = tmp_path / "lifespan.txt"
    # interrupt_timeout far beyond the test: only the second Ctrl-C can end the shutdown.
    server = tines_server("lifespan_lines:app", "--workers", "2", "--interrupt-timeout", "300",
                          env={"LIFESPAN_FILE": str(record), "LIFESPAN_STALL": "1"})
    started = wait_until(lambda: len(events_of(record, "startup")) == 2 and events_of(record, "startup"),
                         what="both workers' lifespan startup")
    os.killpg(server.pid, signal.SIGINT)
    # Each worker took the terminal's INT and the master's as one: both are in their shutdown.
    wait_until(lambda: events_of(record, "shutdown-begin") == started, what="both lifespan shutdowns begun")
    os.killpg(server.pid, signal.SIGINT)
    assert server.wait() == 0
    log = server.log_text()
    assert "sent SIGINT to 2 worker(s): waiting up to 302 s for them to exit" in log  # not capped
    assert "SIGINT during the stop: QUIT to the workers, at once" in log
    assert log.count("QUIT during the lifespan shutdown (Ctrl-C again): leaving at once") == 2
    assert events_of(record, "shutdown-cancelled") == started
    assert events_of(record, "shutdown") == []
    assert "lifespan shutdown not done" not in log
    assert "killing" not in log


def test_ctrl_c_on_a_wsgi_app_names_no_lifespan_shutdown_and_waits_for_none(
        tines_server: Callable[..., Server]) -> None:
    server = tines_server("examples/hello.py:app", "--workers", "2", "--interrupt-timeout", "300")
    os.killpg(server.pid, signal.SIGINT)
    assert server.wait() == 0
    log = server.log_text()
    assert "INT: quick stop (Ctrl-C again: at once)" in log
    assert "lifespan" not in log
    assert "sent SIGINT to 2 worker(s): waiting up to 2 s for them to exit" in log  # not 302 s


def test_quit_stays_immediate(tines_server: Callable[..., Server], tmp_path: Path) -> None:
    record = tmp_path / "lifespan.txt"
    server = tines_server("lifespan_lines:app", "--workers", "2", env={"LIFESPAN_FILE": str(record)})
    wait_until(lambda: len(events_of(record, "startup")) == 2, what="both workers' lifespan startup")
    os.killpg(server.pid, signal.SIGQUIT)
    assert server.wait() == 0
    assert "sent SIGQUIT to 2 worker(s)" in server.log_text()
    assert events_of(record, "shutdown") == []


def test_a_quit_late_in_an_interrupted_exit_finds_it_ignored(tines_server: Callable[..., Server],
                                                            tmp_path: Path) -> None:
    # After the interrupted shutdown a QUIT (the master's, on a second Ctrl-C) must not find
    # QUIT's default action, a core dump, while the worker is still leaving (here: in worker_exit).
    record = tmp_path / "hooks.txt"
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    server = tines_server("lifespan_lines:app", "--workers", "1", "--hooks", "exit_hooks",
                          "--interrupt-timeout", "300",
                          env={"LIFESPAN_FILE": str(tmp_path / "lifespan.txt"), "EXIT_HOOKS_FILE": str(record),
                               "EXIT_HOOKS_GATE": str(gate)})
    [pid] = wait_until(lambda: events_of(tmp_path / "lifespan.txt", "startup"), what="the lifespan startup")
    os.killpg(server.pid, signal.SIGINT)
    wait_until(lambda: events_of(record, "exit-begin") == [pid], what="the worker in worker_exit")
    os.kill(pid, signal.SIGQUIT)

    def open_gate() -> int | None:
        try:  # succeeds once the worker waits in its open of the FIFO's other end
            return os.open(gate, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as error:
            if error.errno == errno.ENXIO:
                return None
            raise

    os.close(wait_until(open_gate, what="the worker's worker_exit opening the gate"))  # type: ignore[arg-type]
    assert server.wait() == 0
    assert events_of(record, "exit-end") == [pid]
    assert events_of(tmp_path / "lifespan.txt", "shutdown") == [pid]
    assert "killing" not in server.log_text()
