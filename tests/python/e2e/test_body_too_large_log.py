"""A request refused 413 for a body over ``max_body_size`` leaves one warning in the error log
naming the request, the limit and the setting (docs/limits.md): a Content-Length over it and a
chunked body that grows past it, on a WSGI and on an ASGI worker. Each case has a fresh worker,
whose first refusal is always logged. The line is rate-limited per worker: the rate and the
count of those held back are unit-tested in Rust with made-up times (crates/server/src/log.rs,
shared.rs); here a run of refusals checks, with no duration, that some are held back and each
line counts exactly those held back since the line before."""

from __future__ import annotations

import http.client
import re
import time
from typing import Any

import pytest


def post(port: int, path: str, size: int, chunked: bool) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.putrequest("POST", path)
        if chunked:
            connection.putheader("Transfer-Encoding", "chunked")
        else:
            connection.putheader("Content-Length", str(size))
        connection.endheaders()
        try:
            if chunked:
                piece = b"x" * 1000
                for _ in range(size // len(piece)):
                    connection.send(b"%x\r\n%s\r\n" % (len(piece), piece))
                connection.send(b"0\r\n\r\n")
            else:
                connection.send(b"x" * size)
        except OSError:
            pass  # answered before the body was read: the response is there
        return connection.getresponse().status
    finally:
        connection.close()


@pytest.mark.parametrize(("app", "chunked", "body"), [
    ("upload_limits:raw", False, r"its body of 20000 bytes \(Content-Length\)"),
    ("upload_limits:raw", True, "its chunked body"),
    ("asgi_app:app", False, r"its body of 20000 bytes \(Content-Length\)"),
])
def test_a_413_over_max_body_size_is_logged_naming_the_limit_and_the_setting(
        tines_server: Any, app: str, chunked: bool, body: str) -> None:
    server = tines_server(app, "-w", "1", "--max-body-size", "5000")
    assert post(server.port, "/upload?id=7", 20000, chunked) == 413
    server.wait_for_log(
        r"\[WARNING\] 413 for POST /upload\?id=7: " + body + r" is over max_body_size \(5000 bytes\); "
        r"raise max_body_size \(--max-body-size\) to accept such bodies\n")


DEADLINE = 60.0
"""How long refusals go on before the test gives up on a line saying some were held back (as
``wait_until``'s deadline: the throttle's one second, many times over, on a loaded machine)."""

LINE = re.compile(r"\[WARNING\] 413 for POST /upload\?n=(\d+): [^\n]*?"
                  r"(?: \((\d+) more such refusals? since the last such line, not logged\))?\n")


def test_refusals_are_held_back_and_each_line_counts_those_since_the_one_before(tines_server: Any) -> None:
    """Refusals one after another until a line says some were held back (the first one a
    second after the first line): with no throttle that line never comes. Then, whatever the
    times, the lines are in the order of the refusals, the first is the first refusal's with
    no count, and each one's count is exactly the refusals between it and the line before."""
    server = tines_server("upload_limits:raw", "-w", "1", "--max-body-size", "10")
    seen = ""
    end = time.monotonic() + DEADLINE
    with open(server.log_path, errors="replace") as log:
        n = 0
        while "not logged)\n" not in seen:
            if time.monotonic() > end:
                raise AssertionError(f"{n} refusals, none held back: the 413 line is not rate-limited\n"
                                     f"{seen[-2000:]}")
            assert post(server.port, f"/upload?n={n}", 100, False) == 413
            n += 1
            seen += log.read()
    seen = seen[:seen.rindex("\n") + 1]  # whole lines: a later one may be on its way
    lines = [(int(m[1]), int(m[2] or 0)) for m in LINE.finditer(seen)]
    assert lines[0] == (0, 0), seen
    assert any(held for _, held in lines)
    for (before, _), (refusal, held) in zip(lines, lines[1:]):
        assert refusal > before and held == refusal - before - 1, (before, refusal, held)
    assert seen.count("413 for") == len(lines)


def test_a_body_within_max_body_size_logs_nothing(tines_server: Any) -> None:
    server = tines_server("upload_limits:raw", "-w", "1", "--max-body-size", "5000")
    assert post(server.port, "/", 3000, False) == 200
    assert post(server.port, "/", 30000, False) == 413
    server.wait_for_log("413 for POST /: ")
    assert server.log_text().count("413 for") == 1


def test_a_413_for_a_body_over_the_whole_disk_budget_names_buffer_disk_total(tines_server: Any) -> None:
    """Under max_body_size, but larger than every byte of temporary file the worker may hold:
    it would wait for room for ever, so it is refused, and the line names the setting that
    refused it, not max_body_size's limit. (The body is larger than the head's read buffer,
    max_head_size, which would take a smaller one whole with the head.)"""
    server = tines_server("upload_limits:raw", "-w", "1", "--request-buffer-memory", "1024",
                          "--buffer-disk-total", "2000")
    assert post(server.port, "/big", 100_000, False) == 413
    server.wait_for_log(r"\[WARNING\] 413 for POST /big: its body would not fit in buffer_disk_total "
                        r"\(2000 bytes\) even alone; raise buffer_disk_total \(--buffer-disk-total\) "
                        r"or lower max_body_size \(104857600 bytes\)\n")


def test_a_streamed_body_over_max_body_size_is_logged_as_the_failed_read_it_is(tines_server: Any) -> None:
    """On stream_body_paths the app reads the body: the line says the read failed, and the
    status is the app's to choose (this app lets the error propagate: 413)."""
    server = tines_server("upload_limits:raw", "-w", "1", "--max-body-size", "5000", "--stream-body-paths", "/up")
    assert post(server.port, "/up", 20000, True) == 413
    server.wait_for_log(
        r"\[WARNING\] POST /up: its chunked body went over max_body_size \(5000 bytes\) as the app read it "
        r"\(stream_body_paths\): the read failed, 413 unless the app answers otherwise; "
        r"raise max_body_size \(--max-body-size\) to accept such bodies\n")
