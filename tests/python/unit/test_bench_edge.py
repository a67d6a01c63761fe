"""benches/edge_model.py: issue 39's marks (static files against nginx, the rate limiter's extra
µs) and their verdicts, the bytes on the wire, and the report's sections."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

BENCHES = Path(__file__).resolve().parents[3] / "benches"
sys.path.insert(0, str(BENCHES))

import edge_model as em  # noqa: E402


def result(cell: str, server: str, round_index: int, cpu: float | None,
           failed: str | None = None, requests: int = 1000,
           bytes_read: int = 1_000_000) -> dict[str, Any]:
    return {"server": server, "cell": cell, "round": round_index, "cpu_us_per_request": cpu,
            "failed": failed, "requests": requests, "ok_per_sec": requests / 5.0,
            "bytes_read": bytes_read}


def static_mark(cell: str) -> em.Mark:
    return next(m for m in em.MARKS if m.cell == cell)


def test_the_static_marks_are_judged_by_the_clock_far_from_them_and_instructions_near() -> None:
    for cell in (em.STATIC_4K, em.STATIC_1M):
        mark = static_mark(cell)
        assert (mark.row, mark.peer, mark.ratio) == (em.TINES_STATIC, em.NGINX_SENDFILE, 1.15)
        fast = [result(cell, em.TINES_STATIC, i, 8.0) for i in range(3)] + [
            result(cell, em.NGINX_SENDFILE, i, 10.0) for i in range(3)]
        assert em.verdict(mark, fast, {})[0] == "pass"
        slow = [result(cell, em.TINES_STATIC, i, 20.0) for i in range(3)] + [
            result(cell, em.NGINX_SENDFILE, i, 10.0) for i in range(3)]
        assert em.verdict(mark, slow, {})[0] == "fail"
        near = [result(cell, em.TINES_STATIC, i, 11.5) for i in range(3)] + [
            result(cell, em.NGINX_SENDFILE, i, 10.0) for i in range(3)]
        assert em.verdict(mark, near, {})[0] == "inconclusive"
        counts = {em.TINES_STATIC: {cell: 1100.0}, em.NGINX_SENDFILE: {cell: 1000.0}}
        assert em.verdict(mark, near, counts)[0] == "pass"
        counts[em.TINES_STATIC][cell] = 1300.0
        assert em.verdict(mark, near, counts)[0] == "fail"


def test_the_rate_limiters_extra_is_instructions_at_the_off_rows_pace() -> None:
    mark = static_mark(em.HELLO)
    assert (mark.row, mark.peer, mark.extra_us) == (em.RATE_LIMIT_ON, em.RATE_LIMIT_OFF, 0.5)
    # 10,000 instructions in 5 µs: 2,000 instructions per µs; 600 more are 0.3 µs.
    assert em.extra_us(10_600.0, 10_000.0, 5.0) == 0.3
    runs = [result(em.HELLO, em.RATE_LIMIT_ON, i, 9.0) for i in range(3)] + [
        result(em.HELLO, em.RATE_LIMIT_OFF, i, 5.0) for i in range(3)]
    # The clock says 4 µs more (a noisy machine); the count says 0.3 µs: the count judges.
    counts = {em.RATE_LIMIT_ON: {em.HELLO: 10_600.0}, em.RATE_LIMIT_OFF: {em.HELLO: 10_000.0}}
    verdict, why = em.verdict(mark, runs, counts)
    assert verdict == "pass" and "+0.300 µs" in why
    counts[em.RATE_LIMIT_ON][em.HELLO] = 11_200.0
    assert em.verdict(mark, runs, counts)[0] == "fail"
    assert em.verdict(mark, runs, {})[0] == "not measured"


def test_bytes_on_the_wire_leave_failed_runs_out() -> None:
    runs = [result(em.BLOG, em.TINES_GZIP, 0, 50.0, bytes_read=800_000),
            result(em.BLOG, em.TINES_GZIP, 1, 50.0, bytes_read=1_000_000),
            result(em.BLOG, em.TINES_GZIP, 2, None, failed="start: x", bytes_read=9)]
    assert em.bytes_per_response(runs, em.BLOG, em.TINES_GZIP) == 900.0
    assert em.bytes_per_response(runs, em.BLOG, em.TINES_IDENTITY) is None


def test_the_report_names_every_cell_mark_and_skip() -> None:
    runs = [result(em.BLOG, em.TINES_GZIP, 0, 50.0, bytes_read=500_000),
            result(em.BLOG, em.TINES_IDENTITY, 0, 40.0, bytes_read=2_000_000)]
    skipped = {em.NGINX_GZIP: "nginx is not installed",
               em.TINES_STATIC: "not run: this build of Tines has no --static"}
    text = em.markdown(runs, {}, skipped, {"started": "now", "notes": ["a note"]})
    for cell in em.CELLS:
        assert f"## {cell}" in text
    assert "- a note" in text
    assert "nginx is not installed" in text
    assert text.count("not run: this build of Tines has no --static") >= 2  # both static marks
    assert "| tines-gzip | tines-identity | 1.250 | 1.250 | 0.250 |" in text
