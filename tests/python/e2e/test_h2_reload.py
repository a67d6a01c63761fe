"""HUP and USR2 under an HTTP/2 load lose no request. h2load (``-c 4 -m 10``: four
connections, ten streams at a time on each; one stream on prefork, which allows one) runs
round after round while the test sends HUP once a round is in progress (h2load's own progress
line, not a sleep), waits for the reload's log line and a whole round against the new workers,
then does the same with USR2 and the new master. A raw client keeping ten streams open counts
exactly: every stream it sent before the GOAWAY is answered, none refused.

h2load (nghttp2 1.52) does not open a new connection after a GOAWAY: the requests it had not
yet sent on a connection the server closes gracefully are counted as failed ("Process Request
Failure"), though the server never saw them (checked against a throwaway server that sends
GOAWAY after 50 streams), and so are requests it had queued when the GOAWAY came. So a round
that straddles a drain is judged by its answers (each one a success), each round after a
handover must be served whole (0 failed, 0 errored), and the raw client counts the streams."""

from __future__ import annotations

import re
import shutil
import signal
import socket
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
from h2_frames import H2Connection
from h2_tools import ASGI, WSGI, H2loadResult, h2load_command, one_stream, parse_h2load, serve_h2c
from hyperframe.frame import GoAwayFrame, PingFrame, RstStreamFrame

from conftest import alive, children, wait_until

ROUND = 5000
"""Requests per h2load round."""


def read_pid(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


class Rounds:
    """h2load rounds, one after another in a thread, until ``stop``; each round's counts and
    whether it started after a given mark."""

    def __init__(self, command: list[str]) -> None:
        stdbuf = shutil.which("stdbuf")  # h2load's progress lines, not held in a pipe's buffer
        self.command = [*([stdbuf, "-oL"] if stdbuf else []), *command]
        self.results: list[tuple[int, int, H2loadResult]] = []
        """Each finished round: the marks when it started and when it ended, its counts."""
        self.mark = 0
        self.progressed = threading.Event()
        self.stopping = threading.Event()
        self.proc: subprocess.Popen[str] | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopping.is_set():
            started_at = self.mark
            self.proc = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                         stderr=subprocess.STDOUT, text=True)
            assert self.proc.stdout is not None
            lines = []
            for line in self.proc.stdout:
                lines.append(line)
                if re.match(r"progress: [1-9]\d% done", line):
                    self.progressed.set()
            self.proc.wait()
            self.results.append((started_at, self.mark, parse_h2load("".join(lines))))

    def in_progress(self) -> None:
        """Wait until a round is under way (past 10%, not finished)."""
        self.progressed.clear()
        wait_until(self.progressed.is_set, 60, "an h2load round in progress")

    def clean_round_at(self, mark: int) -> None:
        """Wait until a round that started and ended at ``mark`` has finished."""
        wait_until(lambda: any(start == end == mark for start, end, _ in self.results), 120,
                   f"an h2load round within mark {mark}")

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(120)
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("served", [(WSGI, "prefork"), (WSGI, "thread", "--threads", "4"),
                                    (WSGI, "event", "--threads", "2"), (ASGI,)],
                         ids=["prefork", "thread", "event", "asgi"])
def test_hup_then_usr2_under_an_h2_load_lose_no_request(tines_server: Any, tmp_path: Path,
                                                        served: tuple[str, ...]) -> None:
    pid_file = tmp_path / "tines.pid"
    server, port = serve_h2c(tines_server, served, "--pid-file", str(pid_file), "--drain-timeout", "10",
                             workers=2)
    rounds = Rounds(h2load_command(f"http://127.0.0.1:{port}/", ROUND, 4, 1 if one_stream(served) else 10))
    master = server.pid
    try:
        # Marks: 0 before HUP, 1 from HUP to its reload's end, 2 until USR2, 3 until the new
        # master took over, 4 after.
        rounds.in_progress()
        rounds.mark = 1
        server.signal(signal.SIGHUP)
        server.wait_for_log(r"reload done: generation 2 serves with 2 workers", deadline=60)
        rounds.mark = 2
        rounds.clean_round_at(2)
        rounds.in_progress()
        rounds.mark = 3
        server.signal(signal.SIGUSR2)
        master = wait_until(lambda: read_pid(pid_file) not in (None, server.pid) and read_pid(pid_file), 60,
                            "the new master's pid in the pid file")  # type: ignore[assignment]
        server.wait_for_log(rf"upgrade: new master {master} is ready", deadline=60)
        assert server.wait(60) == 0  # the old master retired its workers and left
        rounds.mark = 4
        rounds.clean_round_at(4)
    finally:
        rounds.stop()
    for start, end, result in rounds.results:
        print(f"round from mark {start} to {end}: {result.total} total, {result.done} started and done, "
              f"{result.succeeded} succeeded, {result.failed} failed")
        # Whatever drain a round met, every answer was a success (no 5xx, no timeout). Its
        # "started" requests may include some it queued but never sent: nghttp2 refuses
        # those itself once the GOAWAY came (the raw-client test below counts exactly).
        assert result.succeeded == result.ok and result.timeout == 0, result.output[-3000:]
        if start == end and start % 2 == 0:  # met no drain: served whole
            assert (result.succeeded, result.failed, result.errored) == (ROUND, 0, 0), result.output[-3000:]
    # Rounds were under way at each signal.
    assert any(start <= 1 <= end for start, end, _ in rounds.results), "a round met the HUP"
    assert any(start <= 3 <= end for start, end, _ in rounds.results), "a round met the USR2"
    assert alive(master) and len(children(master)) == 2
    server.kill()
    wait_until(lambda: not alive(master), what="the new master gone")


def answer_pings(connection: H2Connection) -> GoAwayFrame | None:
    """Wait for the GOAWAY that ends the two steps (its last stream id below 2^31-1, or the
    connection's close), answering each PING on the way as a client does: the server sends
    its final GOAWAY once the PING after the first one comes back."""
    answered: set[bytes] = set()
    while True:
        found = connection.wait_for(lambda f: (isinstance(f, GoAwayFrame) and f.last_stream_id < 2**31 - 1)
                                    or (isinstance(f, PingFrame) and "ACK" not in f.flags
                                        and f.opaque_data not in answered), "a PING or the final GOAWAY", 60)
        if found is None or isinstance(found, GoAwayFrame):
            return found
        assert isinstance(found, PingFrame)
        answered.add(found.opaque_data)
        ack = PingFrame(0, found.opaque_data)
        ack.flags.add("ACK")
        connection.send(ack)


@pytest.mark.parametrize("served", [(WSGI, "thread", "--threads", "4"), (WSGI, "event", "--threads", "2")],
                         ids=["thread", "event"])
def test_hup_lets_an_open_stream_finish_after_a_two_step_goaway(tines_server: Any, served: tuple[str, ...]) -> None:
    server, port = serve_h2c(tines_server, served, "--drain-timeout", "60", "--graceful-timeout", "60")
    with socket.create_server(("127.0.0.1", 0)) as gate_listener, H2Connection(port) as connection:
        gate_listener.settimeout(20)
        connection.settle()
        held = connection.send_request(f"/hold?port={gate_listener.getsockname()[1]}")
        gate, _ = gate_listener.accept()  # the app holds the stream
        with gate:
            server.signal(signal.SIGHUP)
            # First a GOAWAY that refuses nothing (2^31-1) and a PING; once the PING comes
            # back, the real last stream id: the held stream's.
            first = connection.goaway(60)
            assert first is not None and (first.error_code, first.last_stream_id) == (0, 2**31 - 1), \
                connection.describe()
            final = answer_pings(connection)
            assert final is not None and (final.error_code, final.last_stream_id) == (0, held), connection.describe()
        # Released: the open stream finishes, then the connection ends.
        answer = connection.response(held, 60)
        assert (answer.status, answer.body, answer.reset) == (200, b"released", None), connection.describe()
        connection.wait_closed(60)
    server.wait_for_log(r"reload done: generation 2 serves with 1 worker\b", deadline=60)


@pytest.mark.parametrize("served", [(WSGI, "prefork"), (WSGI, "event", "--threads", "0")], ids=["prefork", "event-inline"])
def test_hup_lets_a_stream_held_on_the_loops_thread_finish(tines_server: Any, served: tuple[str, ...]) -> None:
    # The app holds the worker's only thread: the GOAWAY can only follow its return.
    server, port = serve_h2c(tines_server, served, "--drain-timeout", "60", "--graceful-timeout", "60")
    with socket.create_server(("127.0.0.1", 0)) as gate_listener, H2Connection(port) as connection:
        gate_listener.settimeout(20)
        connection.settle()
        held = connection.send_request(f"/hold?port={gate_listener.getsockname()[1]}")
        gate, _ = gate_listener.accept()
        with gate:
            server.signal(signal.SIGHUP)
            server.wait_for_log(r"reload done: generation 2 serves with 1 worker\b", deadline=60)
        answer = connection.response(held, 60)
        assert (answer.status, answer.body, answer.reset) == (200, b"released", None), connection.describe()
        final = answer_pings(connection)
        assert final is not None and final.error_code == 0 and final.last_stream_id >= held, connection.describe()
        connection.wait_closed(60)


@pytest.mark.parametrize("served", [(WSGI, "prefork"), (WSGI, "thread", "--threads", "4"),
                                    (WSGI, "event", "--threads", "2"), (ASGI,)],
                         ids=["prefork", "thread", "event", "asgi"])
def test_every_stream_sent_before_the_goaway_is_answered(tines_server: Any, served: tuple[str, ...]) -> None:
    server, port = serve_h2c(tines_server, served, "--drain-timeout", "30")
    at_once = 1 if one_stream(served) else 10
    with H2Connection(port) as connection:
        connection.settle()
        sent: list[int] = []
        answered_pings: set[bytes] = set()
        seen = 0
        ended: set[int] = set()
        going = hup = False
        while not connection.closed:
            with connection.condition:
                if len(connection.frames) == seen and not connection.closed:
                    connection.condition.wait(20)
                new, seen = connection.frames[seen:], len(connection.frames)
            assert new or connection.closed, f"nothing came for 20 s: {connection.describe()}"
            for frame in new:
                if isinstance(frame, PingFrame) and "ACK" not in frame.flags and frame.opaque_data not in answered_pings:
                    answered_pings.add(frame.opaque_data)
                    ack = PingFrame(0, frame.opaque_data)
                    ack.flags.add("ACK")
                    connection.send(ack)
                going = going or isinstance(frame, GoAwayFrame)
                if frame.stream_id and ("END_STREAM" in frame.flags or isinstance(frame, RstStreamFrame)):
                    ended.add(frame.stream_id)
                    assert not isinstance(frame, RstStreamFrame), connection.describe()
            # Keep ``at_once`` streams open until the first GOAWAY (a client opens none after).
            while not going and len(sent) - len(ended) < at_once:
                sent.append(connection.send_request("/"))
            if len(sent) >= 200 and not hup:  # the HUP comes while the streams flow
                server.signal(signal.SIGHUP)
                hup = True
        goaways = [frame for frame in connection.frames if isinstance(frame, GoAwayFrame)]
    assert [(g.error_code, g.last_stream_id) for g in goaways] == [(0, 2**31 - 1), (0, max(sent))], goaways
    assert sorted(ended) == sent, f"unanswered: {sorted(set(sent) - ended)[:20]}"
    server.wait_for_log(r"reload done: generation 2 serves with 1 worker\b", deadline=60)
