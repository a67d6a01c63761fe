"""Worker memory (docs/tuning.md): figures from smaps_rollup in the ready line, recycling above
``max_worker_memory`` with no failed request, the ``memory_merge`` opt-in, bad values."""

from __future__ import annotations

import functools
import re

from conftest import http_get, wait_until
from test_cli_errors import assert_one_line_error, tines
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
    status, body = get(server.port, "/")
    assert status == 200
    leaking = int(body)
    sample = re.compile(rf"worker {leaking} \(slot 0\) memory: RSS {SIZE}, PSS {SIZE}, USS {SIZE}")
    recycling = re.compile(rf"worker {leaking} \(slot 0\) USS ([0-9.]+) MiB > max_worker_memory 64 MiB: recycling")
    recycled = None
    for _ in range(40):  # 4 MiB each: 64 MiB is crossed within ~16 requests
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
    assert float(recycled.group(1)) > 64
    server.wait_for_log(rf"worker {leaking} \(slot 0\) exited with code 0")
    status, body = get(server.port, "/")
    assert status == 200 and int(body) != leaking
    log = server.log_text()
    assert log.index("max_worker_memory 64 MiB: recycling") < log.index(f"worker {leaking} (slot 0) exited")


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
