"""benches/tls_model.py: the TLS rows' rounds, pairs and verdicts (issue 37's marks)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

BENCHES = Path(__file__).resolve().parents[3] / "benches"
sys.path.insert(0, str(BENCHES))

import tls_model as tm  # noqa: E402


def result(server: str, cell: str, round_index: int, cpu: float | None,
           failed: str | None = None) -> dict[str, Any]:
    return {"server": server, "cell": cell, "round": round_index, "cpu_us_per_request": cpu,
            "failed": failed}


def test_rounds_turn_the_order_by_one() -> None:
    rows = ["a", "b", "c"]
    assert [tm.order(rows, i) for i in range(4)] == [
        ["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]
    assert tm.order([], 3) == []


def test_pairs_are_taken_within_a_round_and_failed_runs_left_out() -> None:
    results = [
        result("tines-prefork-tls", "keep-alive", 0, 12.0),
        result("nginx-tls", "keep-alive", 0, 10.0),
        result("tines-prefork-tls", "keep-alive", 1, 30.0),
        result("nginx-tls", "keep-alive", 1, 20.0),
        result("tines-prefork-tls", "keep-alive", 2, 9.0),
        result("nginx-tls", "keep-alive", 2, None, failed="start: boom"),
        result("nginx-tls", "handshake-full", 0, 100.0),
    ]
    assert tm.pair_ratios(results, "keep-alive", "tines-prefork-tls", "nginx-tls") == [1.2, 1.5]
    middle, spread = tm.medians(results, "keep-alive", "tines-prefork-tls")
    assert middle == 12.0 and spread == (30.0 - 9.0) / 12.0


def test_the_idle_cell_is_judged_by_pss_per_connection() -> None:
    results = [{"server": "tines-event-tls", "cell": tm.IDLE_CELL, "round": 0,
                "pss_per_connection": 9000.0},
               {"server": "nginx-tls", "cell": tm.IDLE_CELL, "round": 0,
                "pss_per_connection": 15000.0}]
    assert tm.pair_ratios(results, tm.IDLE_CELL, "tines-event-tls", "nginx-tls") == [0.6]


def test_instructions_judge_only_within_15_percent_of_the_mark() -> None:
    mark = tm.Mark("keep-alive", "nginx-tls", 1.15)
    assert tm.verdict(mark, [0.9, 0.95, 0.97], None)[0] == "pass"
    assert tm.verdict(mark, [1.5, 1.6, 1.4], 1.0)[0] == "fail"  # the clock is far enough
    assert tm.verdict(mark, [1.2, 1.1, 1.25], None)[0] == "inconclusive"
    assert tm.verdict(mark, [1.2, 1.1, 1.25], 1.05)[0] == "pass"
    assert tm.verdict(mark, [1.2, 1.1, 1.25], 1.2)[0] == "fail"
    assert tm.verdict(mark, [], None)[0] == "not measured"
    counts = {"tines-prefork-tls": {"keep-alive": 300_000.0}, "nginx-tls": {"keep-alive": 200_000.0}}
    assert tm.instruction_ratio(counts, "keep-alive", "tines-prefork-tls", "nginx-tls") == 1.5
    assert tm.instruction_ratio(counts, "handshake-full", "tines-prefork-tls", "nginx-tls") is None


def test_rows_not_run_are_marked_in_the_report() -> None:
    results = [result("nginx-tls", "keep-alive", 0, 10.0)]
    skipped = {row: "not run yet: no --certfile" for row in tm.TINES_ROWS}
    text = tm.markdown(results, {}, skipped, {"started": "now", "notes": []})
    assert "| tines-prefork-tls | not run yet |" in text
    assert "| nginx-tls | 10.00 |" in text
    assert "| keep-alive | tines-event-tls | nginx-tls | 1.15 | | not run yet |" in text
