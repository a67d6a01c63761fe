"""Worker memory (docs/tuning.md): figures from smaps_rollup in the ready line, recycling above
``max_worker_memory`` with no failed request, the ``memory_merge`` opt-in, bad values."""

from __future__ import annotations

import functools
import os
import pwd
import re
from pathlib import Path
from typing import Any

import pytest

from conftest import NOBODY_REACHES_THE_APPS, NOBODY_SKIP_REASON, http_get, wait_until
from test_cli_errors import assert_one_line_error, tines
from test_status import fetch, status_port
from test_status import status as status_json
from tines import memory

APP = "memory_app:app"
SIZE = r"[0-9.]+ (?:B|KiB|MiB|GiB)"
get = functools.partial(http_get, close=True, timeout=60.0)


def test_the_ready_line_carries_the_workers_rss_pss_uss_and_shared_memory(tines_server: object) -> None:
    server = tines_server(APP, "--workers", "2")  # type: ignore[operator]
    lines = server.wait_for_log(rf"worker (\d+) \(slot \d\) ready in [0-9.]+ ms "
                                rf"\(RSS ({SIZE}), PSS ({SIZE}), USS ({SIZE}), shared ({SIZE})\)", count=2)
    assert sorted(int(line.group(1)) for line in lines) == server.worker_pids()


def test_a_leaking_worker_above_max_worker_memory_is_recycled_with_no_failed_request(tines_server: object) -> None:
    server = tines_server(APP, "--workers", "1", "--max-worker-memory", "64MiB",  # type: ignore[operator]
                          "--memory-sample-rate", "10", "--log-level", "debug")
    assert_recycled_at(server, "USS", 64, rf"RSS {SIZE}, PSS {SIZE}, USS {SIZE}")


@pytest.mark.skipif(not NOBODY_REACHES_THE_APPS, reason=NOBODY_SKIP_REASON)
def test_under_user_a_leaking_worker_is_recycled_at_max_worker_memory_on_its_rss(tines_server: object) -> None:
    # After the switch to nobody the workers' smaps_rollup is root's: the master reads their RSS
    # from /proc/PID/status (issue 41, item 6; before, sampling went off with a warning).
    nobody = pwd.getpwnam("nobody")
    server = tines_server(APP, "--workers", "1", "--user", "nobody", "--group", str(nobody.pw_gid),  # type: ignore[operator]
                          "--max-worker-memory", "128MiB", "--max-worker-memory-kind", "rss",
                          "--memory-sample-rate", "10", "--log-level", "debug",
                          "--status-bind", "127.0.0.1:0")
    worker = server.worker_pids()[0]
    status = Path(f"/proc/{worker}/status").read_text()
    uid_line = next(line for line in status.splitlines() if line.startswith("Uid:"))
    assert uid_line.split()[1:] == [str(nobody.pw_uid)] * 4
    assert_recycled_at(server, "RSS", 128, rf"RSS {SIZE}(?:, swap {SIZE})? \(PSS and USS unreadable\)")
    assert "memory figures are RSS only from now on" in server.log_text()
    # The status output says PSS and USS are not known, rather than 0.
    port = status_port(server)
    wait_until(lambda: status_json(port)["workers"][0]["memory"]["rss"] > 0, what="a sample in the scoreboard")
    figures = status_json(port)["workers"][0]["memory"]
    assert (figures["pss"], figures["uss"]) == (None, None) and figures["rss"] > 0
    assert "n/a" in fetch(port, "/")[2].decode()


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping privileges needs root")
def test_under_user_a_limit_on_uss_which_the_master_cannot_read_stops_the_start() -> None:
    if Path("/proc/sys/fs/suid_dumpable").read_text().strip() == "1":
        pytest.skip("fs.suid_dumpable is 1: the workers stay readable after the switch")
    assert_one_line_error(tines("check-config", "--user", "nobody", "--max-worker-memory", "512MiB",
                                "examples/hello.py:app"),
                          "max_worker_memory_kind uss (default) cannot be checked under user/group",
                          "set max_worker_memory_kind rss")


def assert_recycled_at(server: Any, kind: str, limit_mib: int, figures: str) -> None:
    """Grow the one worker by 4 MiB a request until the master recycles it above ``limit_mib``
    of ``kind``, with no failed request, and its replacement serves."""
    status, body = get(server.port, "/")
    assert status == 200
    leaking = int(body)
    sample = re.compile(rf"worker {leaking} \(slot 0\) memory: {figures}")
    recycling = re.compile(rf"worker {leaking} \(slot 0\) {kind} ([0-9.]+) MiB > max_worker_memory {limit_mib} MiB: "
                           "recycling")
    recycled = None
    for _ in range(limit_mib // 4 + 24):  # 4 MiB each: the limit is crossed within limit/4 requests
        status, body = get(server.port, "/grow?mib=4")
        assert status == 200
        if int(body) != leaking:
            # The sample that crossed the limit was logged a moment before its recycling line
            # (one turn of the master): the worker was retired after the check below, and its
            # replacement served this request. Only then may another worker answer.
            recycled = recycling.search(server.log_text())
            assert recycled is not None, server.log_text()
            break
        # Wait for a memory read taken after this response (it sees the growth), or for the
        # recycling line (the read that saw it may have come before this count).
        seen = len(sample.findall(server.log_text()))
        wait_until(lambda: len(sample.findall(server.log_text())) > seen or recycling.search(server.log_text()),
                   what="the next memory sample")
        recycled = recycling.search(server.log_text())
        if recycled is not None:
            break
    assert recycled is not None, server.log_text()
    assert float(recycled.group(1)) > limit_mib
    server.wait_for_log(rf"worker {leaking} \(slot 0\) exited with code 0")
    status, body = get(server.port, "/")
    assert status == 200 and int(body) != leaking
    log = server.log_text()
    assert log.index(f"max_worker_memory {limit_mib} MiB: recycling") < log.index(f"worker {leaking} (slot 0) exited")


def test_with_memory_merge_each_worker_is_opted_in_to_kernel_same_page_merging(tines_server: object) -> None:
    server = tines_server(APP, "--workers", "1", "--memory-merge")  # type: ignore[operator]
    assert get(server.port, "/merge") == (200, b"1")
    if memory.ksm_running() is False:
        server.wait_for_log(r"memory_merge: ksmd is not running \(/sys/kernel/mm/ksm/run is not 1\): "
                            r"workers opt in, but no page is merged until it runs")


def test_without_memory_merge_a_worker_is_not_opted_in(tines_server: object) -> None:
    server = tines_server(APP, "--workers", "1")  # type: ignore[operator]
    assert get(server.port, "/merge") == (200, b"0")
    assert "memory_merge" not in server.log_text()


def test_a_max_worker_memory_that_is_not_a_size_is_one_line_and_exit_2() -> None:
    assert_one_line_error(tines("serve", "--max-worker-memory", "banana", "examples/hello.py:app"),
                          "max_worker_memory must be a size", "'banana'")


def test_a_max_worker_memory_in_decimal_megabytes_is_refused_not_guessed() -> None:
    assert_one_line_error(tines("serve", "--max-worker-memory", "512MB", "examples/hello.py:app"),
                          "max_worker_memory must be a size", "'512MB'")


def test_an_unknown_max_worker_memory_kind_is_one_line_and_exit_2() -> None:
    assert_one_line_error(tines("serve", "--max-worker-memory-kind", "foo", "examples/hello.py:app"),
                          "max_worker_memory_kind must be one of uss, pss, rss", "'foo'")


def test_a_memory_sample_rate_above_ten_per_second_is_refused() -> None:
    assert_one_line_error(tines("serve", "--memory-sample-rate", "50", "examples/hello.py:app"),
                          "memory_sample_rate must be a number of reads per second")
