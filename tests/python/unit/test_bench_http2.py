"""benches/http2_model.py: the HTTP/2 rows' marks (issue 38) and their verdicts, and the report's
figures (server CPU, the load generator's own CPU per request, what was skipped)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

BENCHES = Path(__file__).resolve().parents[3] / "benches"
sys.path.insert(0, str(BENCHES))

import http2_model as hm  # noqa: E402


def result(server: str, round_index: int, cpu: float | None, failed: str | None = None,
           requests: int = 1000, load_cpu: float = 0.005) -> dict[str, Any]:
    return {"server": server, "cell": hm.CELL, "round": round_index, "cpu_us_per_request": cpu,
            "failed": failed, "requests": requests, "requests_per_sec": requests / 3.0,
            "load_cpu_seconds": load_cpu}


def test_the_granian_mark_is_judged_by_the_clock_far_from_it() -> None:
    mark = hm.MARKS[0]
    assert (mark.row, mark.peer, mark.ratio) == (hm.TINES_H2C, "granian-h2c", 0.6)
    assert hm.verdict(mark, [0.4, 0.45, 0.5], None)[0] == "pass"
    assert hm.verdict(mark, [0.8, 0.9, 0.85], None)[0] == "fail"
    # Within 15% of 0.6 the clock cannot tell: instructions judge, or nothing does.
    assert hm.verdict(mark, [0.62, 0.58, 0.6], None)[0] == "inconclusive"
    assert hm.verdict(mark, [0.62, 0.58, 0.6], 0.55)[0] == "pass"
    assert hm.verdict(mark, [], None)[0] == "not measured"


def test_the_mark_against_http1_is_judged_by_instructions_whenever_counted() -> None:
    mark = hm.MARKS[1]
    assert (mark.row, mark.peer, mark.ratio, mark.judge) == (hm.TINES_H2C, hm.TINES_H1, 1.3,
                                                              "instructions")
    # The clock says fail, far from the mark; the count says pass: the count judges.
    verdict, why = hm.verdict(mark, [1.8, 1.9], 1.2)
    assert verdict == "pass" and "instructions ratio 1.200" in why and "clock median" in why
    assert hm.verdict(mark, [1.0], 1.4)[0] == "fail"
    verdict, why = hm.verdict(mark, [1.0, 1.1], None)
    assert verdict == "pass" and "no instruction count" in why


def test_the_load_generators_cost_per_request_leaves_failed_runs_out() -> None:
    assert hm.load_cpu_per_request(result("granian-h2c", 0, 15.0, load_cpu=0.01)) == 10.0
    assert hm.load_cpu_per_request(result("granian-h2c", 0, None, failed="start: x")) is None
    assert hm.load_cpu_per_request(result("granian-h2c", 0, 15.0, requests=0)) is None


def test_the_report_has_a_row_per_server_and_says_why_a_mark_was_not_run() -> None:
    results = [result("granian-h2c", r, 15.0 + r, load_cpu=0.0096) for r in range(3)]
    results.append(result("nginx-h2", 0, None, failed="start: exited with 1"))
    skipped = {hm.TINES_H2C: "not run yet: no HTTP/2 in this build"}
    text = hm.markdown(results, {"granian-h2c": 98_765.0}, skipped, {"started": "now"})
    granian = next(line for line in text.splitlines() if line.startswith("| granian-h2c "))
    cells = [c.strip() for c in granian.strip("|").split("|")]
    assert cells[:5] == ["granian-h2c", "h2c", "16.00", "12%", "3"]
    assert cells[6] == "9.60" and cells[7] == "98,765"
    nginx = next(line for line in text.splitlines() if line.startswith("| nginx-h2 "))
    assert "start: exited with 1" in nginx and "| 0 |" in nginx
    assert f"| {hm.TINES_H2C} | h2c | not run |" in text
    marks = [line for line in text.splitlines() if line.startswith(f"| {hm.TINES_H2C} | ")
             and "not run" in line and "no HTTP/2" in line]
    assert len(marks) == 1 + len(hm.MARKS)  # the row itself and each mark
