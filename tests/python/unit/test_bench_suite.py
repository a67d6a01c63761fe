"""The benchmark suite's pure parts (benches/): medians and spreads, the best-peer ratio, the
issue-4 checks, the resumable state file, the load generators' command lines and output
mapping, the matrices, the report (markdown and self-contained HTML) and the TechEmpower-style
apps. Fast: no server, no load generator, no network."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCHES = Path(__file__).resolve().parents[3] / "benches"
sys.path.insert(0, str(BENCHES))

import loadgen  # noqa: E402
import model  # noqa: E402
import procfs  # noqa: E402
import report  # noqa: E402
import servers  # noqa: E402
from model import CellSummary, Scenario, Spread, State  # noqa: E402


def load_file(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(rps: float, cpu: float, *, p50: float = 1000, p99: float = 5000, errors: int = 0,
        failed: str | None = None, rss: int = 40960, cross: dict[str, Any] | None = None
        ) -> dict[str, Any]:
    """A recorded measurement as run.py stores it."""
    result: dict[str, Any] = {
        "failed": failed, "requests_per_sec": rps, "cpu_us_per_request": cpu,
        "latency_us": {"p50": p50, "p99": p99}, "errors": {"total": errors},
        "cpu_utilisation": 0.9, "pss_total_kib": rss, "master_pss_kib": rss // 4,
        "worker_uss_kib": rss // 8, "steal_cpu": 0.01,
        "load_cpu_us_per_request": 10.0}
    if cross is not None:
        result["cross"] = cross
    return result


def summary(server: str, rps: float, cpu: float) -> CellSummary:
    return model.summarise(server, [run(rps, cpu)], 1)


# --------------------------------------------------------------------------- medians and spreads


def test_spread_is_median_with_min_and_max() -> None:
    s = Spread.of([30.0, 10.0, 20.0])
    assert s is not None
    assert (s.median, s.low, s.high, s.n) == (20.0, 10.0, 30.0, 3)
    assert s.relative == pytest.approx(1.0)
    even = Spread.of([4.0, 1.0, 3.0, 2.0])
    assert even is not None and even.median == 2.5
    assert Spread.of([]) is None


def test_summarise_keeps_good_runs_and_sums_errors() -> None:
    runs = [run(100, 50, errors=2, p99=9000), run(300, 30, errors=1, p99=7000),
            run(0, 0, failed="load: boom"), run(200, 40, p99=8000)]
    row = model.summarise("granian-wsgi", runs, 4)
    assert row.failed is None and row.runs_ok == 3 and row.runs_planned == 4
    assert row.rps == Spread(200, 100, 300, 3)
    assert row.cpu_us == Spread(40, 30, 50, 3)
    assert row.errors == 3
    assert row.p99_us == 8000
    assert row.cross_rps is None


def test_summarise_all_failed_keeps_the_first_reason() -> None:
    row = model.summarise("uwsgi", [run(0, 0, failed="start: exited with 1"),
                                    run(0, 0, failed="other")], 3)
    assert row.failed == "start: exited with 1" and row.rps is None and row.runs_ok == 0
    assert model.summarise("uwsgi", [], 3).failed == "not run"


def test_summarise_cross_check_ignores_failed_cross_runs() -> None:
    cross_ok = {"requests_per_sec": 900.0, "cpu_us_per_request": 20.0,
                "load_cpu_us_per_request": 12.0}
    row = model.summarise("tines-thread", [run(1000, 19, cross=cross_ok),
                                           run(1100, 18, cross={"failed": "wrk died"})], 2)
    assert row.cross_rps == 900.0 and row.cross_cpu_us == 20.0 and row.cross_load_cpu_us == 12.0


# --------------------------------------------------------------------------- ratios


def test_best_peer_ignores_tines_and_nginx() -> None:
    rows = [summary("tines-prefork", 50_000, 10), summary("nginx-static", 90_000, 5),
            summary("gunicorn-gthread", 3_000, 300), summary("granian-wsgi", 40_000, 20),
            summary("uwsgi", 35_000, 18), model.summarise("tines-event", [], 3)]
    best = model.best_peer(rows)
    assert (best.rps_server, best.rps) == ("granian-wsgi", 40_000)
    assert (best.cpu_server, best.cpu_us) == ("uwsgi", 18)
    assert model.best_peer([summary("tines-thread", 1, 1)]).rps is None


def test_ratio_handles_missing_values() -> None:
    assert model.ratio(30, 20) == 1.5
    assert model.ratio(None, 20) is None
    assert model.ratio(30, None) is None
    assert model.ratio(30, 0) is None


# --------------------------------------------------------------------------- issue 4's checks


def table_of(**cells: dict[str, tuple[float, float]]) -> dict[str, dict[str, CellSummary]]:
    """table_of(hello_ka={"tines-event": (rps, cpu)}, ...) keyed by scenario name."""
    names = {"hello_ka": "hello/keep-alive/c50", "blog_ka": "blog/keep-alive/c50",
             "hello_ka_1000": "hello/keep-alive/c1000"}
    return {names[k]: {server: summary(server, rps, cpu) for server, (rps, cpu) in v.items()}
            for k, v in cells.items()}


def test_event_checks_pass_and_fail_with_figures() -> None:
    table = table_of(
        hello_ka={"tines-event": (40_000, 20.0), "tines-thread": (30_000, 25.0)},
        blog_ka={"tines-event": (1_500, 630.0), "tines-prefork": (1_550, 600.0)},
        hello_ka_1000={"tines-event": (29_000, 22.0)})
    first, second, third = model.event_checks(table)
    assert first.verdict == "pass" and "20.0" in first.detail and "25.0" in first.detail
    assert second.verdict == "pass" and "limit 630.0" in second.detail  # exactly +5%: passes
    assert third.verdict == "fail" and "29,000" in third.detail and "30,000" in third.detail


def test_event_checks_blog_margin_is_five_percent() -> None:
    table = table_of(blog_ka={"tines-event": (1_500, 630.1), "tines-prefork": (1_550, 600.0)})
    assert model.event_checks(table)[1].verdict == "fail"


def test_event_checks_not_measured_names_what_is_missing() -> None:
    checks = model.event_checks(table_of(hello_ka={"tines-thread": (30_000, 25.0)}))
    assert [c.verdict for c in checks] == ["not measured"] * 3
    assert "tines-event on hello/keep-alive/c50" in checks[0].detail
    assert "tines-thread" not in checks[0].detail


# --------------------------------------------------------------------------- issue 15's checks


def cell(server: str, cpu: list[float], rps: float = 10_000.0) -> CellSummary:
    """A summary with the given runs' CPU µs/req (their number is the runs')."""
    return model.summarise(server, [run(rps, value) for value in cpu], len(cpu))


def cheapest(**cells: dict[str, CellSummary]) -> dict[str, model.Check]:
    """issue 15's checks, keyed by name, on table_of-style scenario keys."""
    names = {"hello_ka": "hello/keep-alive/c50", "hello_close": "hello/close/c50",
             "blog_ka": "blog/keep-alive/c50", "flask_ka": "flask/keep-alive/c50"}
    table = {names[key]: value for key, value in cells.items()}
    return {check.name: check for check in model.cheapest_checks(table)}


FIVE = [100.0, 101.0, 102.0, 103.0, 104.0]


def test_issue_15_targets_compare_tines_with_bjoern_nginx_and_event() -> None:
    checks = cheapest(
        flask_ka={"tines-prefork": cell("tines-prefork", FIVE),
                  "tines-event": cell("tines-event", [x + 10 for x in FIVE]),
                  "bjoern": cell("bjoern", [x + 2 for x in FIVE])},
        hello_ka={"tines-prefork": cell("tines-prefork", [10.9] * 5),
                  "tines-event": cell("tines-event", [11.1] * 5),
                  "tines-thread": cell("tines-thread", [12.1] * 5),
                  "nginx-static": cell("nginx-static", [10.0] * 5)},
        hello_close={"tines-prefork": cell("tines-prefork", [30.0] * 5),
                     "bjoern": cell("bjoern", [30.0] * 5)})
    assert list(checks) == [
        "flask keep-alive: tines-prefork CPU µs/req <= bjoern's",
        "flask keep-alive: tines-event CPU µs/req <= bjoern's",
        "blog keep-alive: tines-prefork CPU µs/req <= bjoern's",
        "blog keep-alive: tines-event CPU µs/req <= bjoern's",
        "hello keep-alive: tines-prefork CPU µs/req <= 1.10 x nginx-static's",
        "hello keep-alive: tines-event CPU µs/req <= 1.10 x nginx-static's",
        "hello close: tines-prefork CPU µs/req <= bjoern's",
        "hello close: tines-event CPU µs/req <= bjoern's",
        "hello keep-alive: tines-thread CPU µs/req <= 1.10 x tines-event's"]
    verdicts = [check.verdict for check in checks.values()]
    assert verdicts == ["pass", "fail", "not measured", "not measured", "pass", "fail", "pass",
                        "not measured", "pass"]
    flask = checks["flask keep-alive: tines-prefork CPU µs/req <= bjoern's"]
    assert flask.detail == "tines-prefork 102.0 vs bjoern 104.0; max/min tines-prefork 1.04, bjoern 1.04"
    nginx = checks["hello keep-alive: tines-event CPU µs/req <= 1.10 x nginx-static's"]
    assert "tines-event 11.1 vs nginx-static 10.0 (limit 11.0)" in nginx.detail
    gone = checks["hello close: tines-event CPU µs/req <= bjoern's"]
    assert gone.detail == "no successful run of tines-event on hello/close/c50"


def test_an_issue_15_target_is_inconclusive_when_a_cells_runs_spread_beyond_1_10() -> None:
    wide = [100.0, 100.0, 100.0, 100.0, 111.0]  # max/min 1.11
    checks = cheapest(blog_ka={"tines-prefork": cell("tines-prefork", FIVE),
                               "tines-event": cell("tines-event", [90.0, 90.0, 95.0, 99.0, 99.0]),
                               "bjoern": cell("bjoern", wide)})
    prefork = checks["blog keep-alive: tines-prefork CPU µs/req <= bjoern's"]
    assert prefork.verdict == "inconclusive"
    assert "max/min above 1.10: bjoern" in prefork.detail and "bjoern 1.11" in prefork.detail
    assert "(the medians alone would fail)" in prefork.detail  # 102 against bjoern's 100
    # max/min exactly 1.10 still decides.
    event = checks["blog keep-alive: tines-event CPU µs/req <= bjoern's"]
    assert event.verdict == "inconclusive" and "tines-event" not in event.detail.split("above")[1]
    level = cheapest(blog_ka={"tines-prefork": cell("tines-prefork", [100.0, 100, 100, 100, 110]),
                              "bjoern": cell("bjoern", [101.0] * 5)})
    assert level["blog keep-alive: tines-prefork CPU µs/req <= bjoern's"].verdict == "pass"


def test_an_issue_15_target_is_inconclusive_with_fewer_than_five_runs() -> None:
    checks = cheapest(hello_close={"tines-prefork": cell("tines-prefork", [30.0] * 4),
                                   "bjoern": cell("bjoern", [40.0] * 5)})
    check = checks["hello close: tines-prefork CPU µs/req <= bjoern's"]
    assert check.verdict == "inconclusive"
    assert "fewer than 5 runs: tines-prefork (4)" in check.detail
    assert "(the medians alone would pass)" in check.detail


# --------------------------------------------------------------------------- the previous run


def cells_json(*rows: tuple[str, str, list[tuple[float, float]]]) -> dict[str, Any]:
    """A suite JSON's ``cells``: (scenario, server, [(req/s, CPU µs/req) per run])."""
    return {f"{scenario}|{server}|run{number}": run(rps, cpu)
            for scenario, server, runs in rows for number, (rps, cpu) in enumerate(runs, 1)}


def test_the_previous_runs_cells_are_summed_up_per_scenario_and_server() -> None:
    cells = cells_json(("hello/keep-alive/c50", "tines-prefork", [(100, 10.0), (300, 12.0),
                                                                  (200, 11.0)]),
                       ("attacked/keep-alive/c50", "tines-prefork", [(50, 20.0)]))
    cells["hello/keep-alive/c50|tines-prefork|run4"] = run(0, 0, failed="start: boom")
    cells["a key of another kind"] = run(1, 1)
    table = model.previous_table(cells)
    assert list(table) == ["hello/keep-alive/c50"]  # the attack row has its own table
    row = table["hello/keep-alive/c50"]["tines-prefork"]
    assert row.rps == Spread(200, 100, 300, 3) and (row.runs_ok, row.runs_planned) == (3, 4)


def test_a_tines_row_is_worse_only_beyond_the_larger_spread_of_the_two_runs() -> None:
    hello = "hello/keep-alive/c50"
    previous = model.previous_table(cells_json(
        (hello, "tines-prefork", [(10_000, 10.0), (10_500, 10.5)]),  # max/min 1.05
        (hello, "tines-event", [(10_000, 10.0), (10_000, 10.0)]),
        (hello, "tines-thread", [(10_000, 10.0)]),
        (hello, "bjoern", [(10_000, 10.0)]),
        ("blog/keep-alive/c50", "tines-event", [(1_000, 100.0)])))
    current = {hello: {
        "tines-prefork": cell("tines-prefork", [10.9, 11.0], rps=10_250),  # 1.07x > 1.05 limit
        "tines-event": cell("tines-event", [10.0, 10.0], rps=9_000),  # req/s 1.11x lower
        "tines-thread": model.summarise("tines-thread", [run(0, 0, failed="start: boom")], 1),
        "bjoern": cell("bjoern", [20.0])},  # a peer: never flagged
        "flask/keep-alive/c50": {"tines-event": cell("tines-event", [50.0])}}  # not in previous
    comparison = model.compare_with_previous(current, previous, "old.json",
                                             {"kind": "standard", "runs": 5, "duration_s": 5,
                                              "started": "2026-01-01-0000"})
    assert comparison.cells == 3 and comparison.plan == "standard, 5 run(s) of 5 s"
    worse = {(w.server, w.metric): w for w in comparison.worse}
    assert set(worse) == {("tines-prefork", "CPU µs/req"), ("tines-event", "req/s"),
                          ("tines-thread", "failed")}
    cpu = worse[("tines-prefork", "CPU µs/req")]
    assert (cpu.previous, cpu.current, cpu.limit) == (10.25, 10.95, 1.05)
    assert cpu.change == pytest.approx(10.95 / 10.25)
    # Within the spread (10.25 -> 10.5 is 1.024x against 1.05): not worse.
    within = model.compare_with_previous({hello: {"tines-prefork": cell("tines-prefork",
                                                                        [10.5, 10.5],
                                                                        rps=10_250)}},
                                         previous, "old.json", {})
    assert within.cells == 1 and within.worse == []
    check = model.previous_check(comparison, "")
    assert check.verdict == "fail" and check.detail.startswith("3 worse than in old.json: ")
    assert "tines-prefork on hello/keep-alive/c50: CPU µs/req 10.2 -> 10.9" in check.detail
    assert model.previous_check(within, "").verdict == "pass"


def test_the_previous_run_check_is_not_measured_without_a_previous_run_or_common_rows() -> None:
    none = model.previous_check(None, "not compared (--previous none)")
    assert (none.verdict, none.detail) == ("not measured", "not compared (--previous none)")
    empty = model.compare_with_previous({"hello/keep-alive/c50": {"tines-prefork": cell(
        "tines-prefork", [10.0])}}, {}, "old.json", {})
    assert model.previous_check(empty, "").verdict == "not measured"


def test_the_report_lists_the_rows_worse_than_in_the_previous_run() -> None:
    hello = Scenario("hello", "keep-alive", 50)
    runs = {"tines-prefork": [run(50_000, 14.0)] * 5, "bjoern": [run(50_000, 12.0)] * 5}
    previous = report.Previous({"schema": "tines-bench-suite/1",
                                "plan": {"kind": "quick", "runs": 1, "duration_s": 2},
                                "meta": {"started": "2026-01-01-0000"},
                                "cells": cells_json((hello.name, "tines-prefork",
                                                     [(60_000, 12.0)]))},
                               "benches/results/2026-01-01-0000.json")
    built = report.build(lambda sc, server: runs[server], [(hello, ["tines-prefork", "bjoern"])],
                         {"hello": "/"}, model.PLANS["standard"],
                         {"started": "x", "primary": "tines-bench", "cross": "wrk"}, {}, "T",
                         previous)
    text = report.markdown(built)
    assert "## Against the previous run" in text
    assert "**A quick run against this standard one" in text
    assert "| hello/keep-alive/c50 | tines-prefork | CPU µs/req | 12.0 | 14.0 | 1.17× | 1.00× |" in text
    assert "| hello/keep-alive/c50 | tines-prefork | req/s | 60,000 | 50,000 | 1.20× | 1.00× |" in text
    assert "- **FAIL**: no Tines row worse than the previous run: 2 worse than in" in text
    page = report.html_page(built)
    assert "Against the previous run" in page and "**" not in page


def test_the_previous_run_is_the_newest_kept_standard_report_before_this_one(
        tmp_path: Path) -> None:
    import run as harness

    for name in ("2026-01-01-0000.json", "2026-01-02-0000.json", "2026-01-03-0000.json",
                 "quick-2026-01-02-1200.json", "full-2026-01-02-1300.json",
                 "ab-2026-01-02-1400.json", "2026-01-02-1500.md"):
        (tmp_path / name).write_text("{}")
    assert harness.find_previous(tmp_path, "2026-01-03-0000") == tmp_path / "2026-01-02-0000.json"
    assert harness.find_previous(tmp_path, "2026-01-01-0000") is None
    (tmp_path / "2026-01-02-0000.json").write_text('{"schema": "tines-bench/1", "runs": []}')
    with pytest.raises(harness.PreviousUnreadable, match="not a suite report"):
        harness.read_previous(tmp_path / "2026-01-02-0000.json")
    with pytest.raises(SystemExit) as stopped:
        harness.previous_run(str(tmp_path / "absent.json"), "2026-01-03-0000")
    assert stopped.value.code == 2
    assert harness.previous_run("none", "x") == (None, "not compared (--previous none)")


def test_a_filtered_report_is_written_where_its_directory_did_not_exist_yet(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """--report-only on a state file kept outside benches/results/ (the quick runs' advice):
    the report goes to the (monkeypatched, absent) results/tmp directory, which is created."""
    import run as harness

    hello = Scenario("hello", "keep-alive", 50)
    state = State(tmp_path / "state" / "state.json", model.PLANS["quick"].as_dict(),
                  {"started": "2026-01-01-0000", "primary": "tines-bench", "cross": "wrk"})
    state.record(model.cell_key("tines-prefork", hello, 1), run(50_000, 10.0))
    state.record(model.cell_key("bjoern", hello, 1), run(48_000, 10.5))
    monkeypatch.setattr(harness, "TMP", tmp_path / "reports")
    assert harness.main(["--quick", "--report-only", "--state", str(state.path),
                         "--servers", "tines-prefork,bjoern", "--apps", "hello",
                         "--modes", "keep-alive", "--previous", "none"]) == 0
    text = (tmp_path / "reports" / "quick-2026-01-01-0000.md").read_text()
    assert "| hello/keep-alive/c50 | 10.0 | 10.5 | 0.95× (prefork) |" in text
    assert "no Tines row worse than the previous run: not compared (--previous none)" in text
    assert json.loads((tmp_path / "reports" / "quick-2026-01-01-0000.json").read_text()
                      )["meta"]["previous"] is None
    capsys.readouterr()


# --------------------------------------------------------------------------- bjoern and flask


def test_bjoern_runs_the_app_file_in_the_peers_python_on_every_app_but_the_attack_row() -> None:
    bjoern = next(s for s in servers.wsgi_servers() if s.name == "bjoern")
    assert bjoern.apps == frozenset(servers.APPS) - {model.ATTACK_APP} - model.ASGI_APPS
    assert not bjoern.uses_ready_fd  # polled, like the other peers
    command = bjoern.command(servers.APPS["flask"], 8080, None, Path("/tmp"))
    assert command == [str(servers.PEERS_VENV / "bin" / "python"), str(servers.BJOERN_SERVE),
                       "benches/apps/flask_ok.py:app", "127.0.0.1", "8080"]
    assert servers.display_command(bjoern, servers.APPS["hello"]) == (
        "benches/.venv-peers/bin/python benches/bjoern_serve.py examples/hello.py:app "
        "127.0.0.1 PORT")
    assert servers.APPS["flask"].url_path == "/ok"
    assert "bjoern" in provision_module().PEER_PACKAGES


def provision_module() -> ModuleType:
    import provision

    return provision


def test_a_dev_package_is_installed_when_its_header_is_there_or_dpkg_says_so(
        tmp_path: Path) -> None:
    provision = provision_module()
    header = tmp_path / "ev.h"
    header.write_text("")
    assert provision.dev_package_installed("no-such-package-tines-test", header)
    assert not provision.dev_package_installed("no-such-package-tines-test", tmp_path / "no.h")
    assert provision.DEV_PACKAGES["bjoern"] == {"libev-dev": Path("/usr/include/ev.h")}


def test_the_flask_ok_app_answers_ok() -> None:
    flask_ok = load_file("bench_flask_ok", BENCHES / "apps" / "flask_ok.py")
    client = flask_ok.app.test_client()
    answer = client.get("/ok")
    assert (answer.status_code, answer.data) == (200, b"OK")


# --------------------------------------------------------------------------- the state file

PLAN = {"kind": "full", "runs": 3, "warmup_s": 2, "duration_s": 10, "cross_s": 5}


def test_state_records_and_resumes(tmp_path: Path) -> None:
    path = tmp_path / "full" / "state.json"
    hello = Scenario("hello", "keep-alive", 50)
    state = State(path, PLAN, {"started": "A"})
    assert not state.resumed
    state.record(model.cell_key("uwsgi", hello, 1), run(1, 1))
    state.record(model.cell_key("uwsgi", hello, 10), run(10, 1))
    state.record(model.cell_key("uwsgi", hello, 2), run(2, 1))
    assert not list(path.parent.glob("*.tmp")), "written through a renamed temporary file"
    again = State(path, PLAN, {"started": "B"})
    assert again.resumed and again.meta == {"started": "A"}
    assert again.done(model.cell_key("uwsgi", hello, 10))
    assert not again.done(model.cell_key("uwsgi", hello, 3))
    assert not again.done(model.cell_key("granian-wsgi", hello, 1))
    assert [r["requests_per_sec"] for r in again.runs(hello, "uwsgi")] == [1, 2, 10]
    assert again.runs(Scenario("hello", "keep-alive", 1000), "uwsgi") == []


def test_state_refuses_another_plan(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    State(path, PLAN, {}).save()
    with pytest.raises(model.StateMismatch, match="--fresh"):
        State(path, {**PLAN, "duration_s": 5}, {})


def test_scenario_names_round_trip() -> None:
    for scenario in (Scenario("hello", "close", 1), Scenario("plaintext", "keep-alive", 1000, 16)):
        assert Scenario.parse(scenario.name) == scenario
    assert Scenario("plaintext", "keep-alive", 50, 16).name == "plaintext/keep-alive/c50/p16"


def test_process_per_request_check_names_the_share_of_prefork_reuse() -> None:
    table = {"hello/keep-alive/c50": {"tines-prefork": summary("tines-prefork", 50_000, 10.0),
                                      "tines-prefork-per-request": summary("tines-prefork-per-request",
                                                                           12_500, 80.0)},
             "hello/close/c50": {"tines-prefork": summary("tines-prefork", 20_000, 30.0),
                                 "tines-prefork-per-request": summary("tines-prefork-per-request",
                                                                      3_000, 200.0)}}
    keep_alive, close = model.recycling_checks(table)
    assert keep_alive.verdict == "pass" and "1/4.0 of reuse" in keep_alive.detail
    assert close.verdict == "fail" and "1/6.7 of reuse" in close.detail
    assert [c.verdict for c in model.recycling_checks({})] == ["not measured", "not measured"]


def test_asgi_checks_compare_tines_with_granian_at_0_6_and_with_uvicorn() -> None:
    cell = model.ASGI_HELLO_KA.name
    table = {cell: {"tines-asgi": summary("tines-asgi", 50_000, 14.0),
                    "granian-asgi": summary("granian-asgi", 30_000, 25.0),
                    "uvicorn": summary("uvicorn", 25_000, 29.0)}}
    granian, uvicorn, ws_granian, ws_uvicorn = model.asgi_checks(table)
    assert ws_granian.verdict == ws_uvicorn.verdict == "not measured"
    assert "0.60 x granian-asgi's" in granian.name and "(limit 15.0)" in granian.detail
    assert granian.verdict in ("pass", "inconclusive") and "tines-asgi 14.0 vs granian-asgi 25.0" in granian.detail
    assert uvicorn.name.endswith("tines-asgi CPU µs/req <= uvicorn's")
    assert [c.verdict for c in model.asgi_checks({})] == ["not measured"] * 4


def test_the_process_per_request_row_is_prefork_with_max_requests_1_and_preload() -> None:
    server = servers.process_per_request_server()
    command = server.command(servers.APPS["hello"], 8080, None, Path("/tmp"))
    assert server.name == servers.PROCESS_PER_REQUEST and server.apps == frozenset({"hello"})
    assert command[command.index("--mpm") + 1] == "prefork"
    assert command[command.index("--max-requests") + 1] == "1" and "--preload" in command
    assert server.name in [s.name for s in servers.wsgi_servers()]


# --------------------------------------------------------------------------- matrices

ALL = ["tines-prefork", "tines-thread", "tines-event", "gunicorn-gthread", "uwsgi",
       "granian-wsgi", "bjoern", "nginx-static"]
ASGI = ["tines-asgi", "uvicorn", "granian-asgi"]
SERVES: dict[str, frozenset[str] | None] = {
    **{s.name: s.apps for s in servers.wsgi_servers()}, "nginx-static": frozenset({"hello", "plaintext"}),
    **{name: model.ASGI_APPS for name in ASGI}}


def test_standard_matrix() -> None:
    cells = dict((sc.name, names) for sc, names in model.matrix("standard", ALL, SERVES))
    assert cells["hello/keep-alive/c50"] == ALL
    assert cells["blog/close/c50"] == ALL[:-1]
    assert cells["flask/keep-alive/c50"] == ALL[:-1]
    assert cells["hello/keep-alive/c1000"] == ["tines-thread", "tines-event"]
    assert cells["attacked/keep-alive/c50"] == ["tines-prefork", "tines-thread", "tines-event",
                                                 "gunicorn-gthread", "granian-wsgi"]
    assert list(cells) == ["hello/keep-alive/c50", "hello/close/c50", "blog/keep-alive/c50",
                           "blog/close/c50", "flask/keep-alive/c50", "hello/keep-alive/c1000",
                           "attacked/keep-alive/c50"]
    with_asgi = dict((sc.name, names) for sc, names in model.matrix("standard", ALL + ASGI, SERVES))
    assert with_asgi["asgi-hello/keep-alive/c50"] == ASGI
    assert with_asgi["ws-echo/keep-alive/c50"] == ASGI
    assert with_asgi["hello/keep-alive/c50"] == ALL  # the ASGI servers run no WSGI app
    without_event = dict((sc.name, names) for sc, names in
                         model.matrix("standard", [s for s in ALL if s != "tines-event"], SERVES))
    assert without_event["hello/keep-alive/c1000"] == ["tines-thread"]
    plan = model.PLANS["standard"]
    assert plan.runs >= model.MIN_RUNS  # issue 15's targets can decide on a standard run
    every = [s.name for s in servers.wsgi_servers()] + ASGI
    minutes = model.estimate_seconds(plan, model.matrix("standard", every, SERVES)) / 60
    assert 25 <= minutes <= 38, minutes


def test_full_matrix() -> None:
    cells = dict((sc.name, names) for sc, names in model.matrix("full", ALL, SERVES))
    assert cells["hello/keep-alive/c1"] == ALL
    assert cells["blog/close/c1000"] == ALL[:-1]
    assert cells["flask/close/c1"] == ALL[:-1]
    assert cells["plaintext/keep-alive/c50/p16"] == ALL
    assert cells["fortunes/keep-alive/c1000"] == ALL[:-1]
    assert "json/close/c50" not in cells
    assert len(cells) == 18 + 2 + 6 + 1
    assert "attacked/keep-alive/c50" in cells
    full_asgi = dict((sc.name, names) for sc, names in model.matrix("full", ALL + ASGI, SERVES))
    assert [full_asgi[f"asgi-hello/keep-alive/c{n}"] for n in (1, 50, 1000)] == [ASGI] * 3
    assert [full_asgi[f"ws-echo/keep-alive/c{n}"] for n in (1, 50, 1000)] == [ASGI] * 3
    with pytest.raises(ValueError):
        model.matrix("huge", ALL, SERVES)


# --------------------------------------------------------------------------- load generators

LOAD = loadgen.Load("http://127.0.0.1:9/x", 1000, 5, keepalive=False)


def test_tines_bench_command() -> None:
    tool = loadgen.Tool("tines-bench", ("tines", "bench"))
    assert loadgen.tines_bench_command(tool, LOAD) == [
        "tines", "bench", "-c", "1000", "-t", "1", "-d", "5s", "--json", "--no-keepalive",
        "http://127.0.0.1:9/x"]
    piped = loadgen.Load("http://h/p", 50, 0.5, keepalive=True, pipeline=16)
    assert loadgen.tines_bench_command(tool, piped)[7:] == ["500ms", "--json", "--pipeline", "16",
                                                           "http://h/p"]


def test_an_upload_load_posts_its_body_file_with_its_headers(tmp_path: Path) -> None:
    import uploads

    body = uploads.upload_body(tmp_path)
    data = body.read_bytes()
    assert data.startswith(f"--{uploads.BOUNDARY}\r\n".encode())
    assert data.endswith(f"\r\n--{uploads.BOUNDARY}--\r\n".encode())
    head_end = data.index(b"\r\n\r\n") + 4
    assert len(data) - head_end - len(f"\r\n--{uploads.BOUNDARY}--\r\n") == uploads.UPLOAD_SIZE
    request = uploads.request_for("upload", 9, tmp_path)
    load = loadgen.Load("http://h/upload", 4, 5, method=request.method, headers=request.headers,
                        body_file=request.body_file)
    tool = loadgen.Tool("tines-bench", ("tines", "bench"))
    assert loadgen.tines_bench_command(tool, load)[8:] == [
        "--json", "-m", "POST", "-H",
        f"Content-Type: multipart/form-data; boundary={uploads.BOUNDARY}",
        "--body-file", str(body), "http://h/upload"]
    with pytest.raises(loadgen.LoadFailed):
        loadgen.wrk_command(loadgen.Tool("wrk", ("wrk",)), load, tmp_path)
    with pytest.raises(ValueError):
        uploads.request_for("hello", 9, tmp_path)


def test_wrk_command_and_pipeline_script(tmp_path: Path) -> None:
    tool = loadgen.Tool("wrk", ("wrk",))
    assert loadgen.wrk_command(tool, LOAD, tmp_path) == [
        "wrk", "-t1", "-c1000", "-d5s", "--latency", "-s", str(loadgen.WRK_REPORT),
        "-H", "Connection: close", "http://127.0.0.1:9/x"]
    piped = loadgen.Load("http://h/p", 50, 2, pipeline=16)
    command = loadgen.wrk_command(tool, piped, tmp_path)
    script = Path(command[command.index("-s") + 1]).read_text()
    assert "local depth = 16" in script and "request = function()" in script
    assert "BENCH-JSON" in script  # the reporter is kept


WRK_JSON = {"requests": 1000, "duration_us": 2_000_000, "bytes": 64000,
            "errors": {"connect": 1, "read": 2, "write": 3, "timeout": 4, "status": 5},
            "latency_us": {"min": 50, "mean": 900.5, "stdev": 100.0, "max": 9000, "p50": 800,
                           "p75": 950, "p90": 1100, "p99": 4000, "p99_9": 8000, "p99_99": 9000}}


def test_wrk_report_maps_onto_tines_bench_fields() -> None:
    fields = loadgen.parse_output(loadgen.Tool("wrk", ("wrk",)),
                                  "Running 2s test\nBENCH-JSON " + json.dumps(WRK_JSON) + "\n")
    assert fields["requests"] == 1000 and fields["ok"] == 995
    assert fields["errors"] == {"connect": 1, "reset": 5, "timeout": 4, "status": 5, "parse": 0,
                                "total": 15}
    assert fields["requests_per_sec"] == 500.0 and fields["elapsed_s"] == 2.0
    assert fields["latency_us"]["p99_9"] == 8000.0
    with pytest.raises(loadgen.LoadFailed):
        loadgen.parse_output(loadgen.Tool("wrk", ("wrk",)), "unable to connect\n")


def test_tines_bench_json_is_read_by_schema() -> None:
    document = {"schema": 1, "tool": "tines bench", "requests": 10, "ok": 9,
                "errors": {"connect": 0, "reset": 0, "timeout": 0, "status": 1, "parse": 0,
                           "total": 1},
                "requests_per_sec": 5.0, "elapsed_s": 2.0, "bytes_read": 100,
                "latency_us": {k: 1.0 for k in loadgen.LATENCY_FIELDS}, "timeline": []}
    tool = loadgen.Tool("tines-bench", ("tines", "bench"))
    fields = loadgen.parse_output(tool, json.dumps(document))
    assert fields["ok"] == 9 and fields["errors"]["total"] == 1 and fields["bytes_read"] == 100
    with pytest.raises(loadgen.LoadFailed, match="schema"):
        loadgen.from_tines_bench({**document, "schema": 2})
    with pytest.raises(loadgen.LoadFailed, match="interrupted"):
        loadgen.from_tines_bench({**document, "interrupted": True})


# --------------------------------------------------------------------------- servers


def test_mpms_are_read_from_serve_help() -> None:
    assert servers.tines_mpms("  [-w N] [--mpm {prefork,thread}] [--threads N]") == {
        "prefork", "thread"}
    assert servers.tines_mpms("--mpm {prefork,thread,event}") == {"prefork", "thread", "event"}
    assert servers.tines_mpms("no such flag") == set()


def test_the_asgi_servers_join_only_when_tines_serves_asgi_and_run_only_asgi_apps() -> None:
    added, skipped = servers.asgi_servers("--mpm {prefork,thread}")
    assert added == [] and set(skipped) == {"tines-asgi", "uvicorn", "granian-asgi"}
    assert "no ASGI" in skipped["uvicorn"]
    added, skipped = servers.asgi_servers("--mpm {prefork,thread,event} --interface {auto,wsgi,asgi,asgi2}")
    assert skipped == {} and [s.name for s in added] == ["tines-asgi", "uvicorn", "granian-asgi"]
    assert all(s.apps == model.ASGI_APPS for s in added)
    app = servers.APPS["asgi-hello"]
    tines, uvicorn, granian = (s.command(app, 8080, None, Path("/tmp")) for s in added)
    assert tines[tines.index("--loop") + 1] == "uvloop" and tines[tines.index("--mpm") + 1] == "event"
    assert "httptools" in uvicorn and "uvloop" in uvicorn and uvicorn[-1] == "asgi_hello:app"
    assert granian[granian.index("--interface") + 1] == "asgi" and granian[-1] == "asgi_hello:app"
    # No WSGI server is given the ASGI app.
    for server in servers.wsgi_servers():
        assert server.apps is None or not (server.apps & model.ASGI_APPS), server.name


def test_every_server_gets_the_same_app_file() -> None:
    app = servers.APPS["fortunes"]
    for server in servers.wsgi_servers():
        if server.apps is not None and "fortunes" not in server.apps:
            continue
        command = " ".join(server.command(app, 8080, None, Path("/tmp")))
        assert "techempower" in command, server.name
        assert "8080" in command, server.name


# --------------------------------------------------------------------------- the report


def sample_report(kind: str = "standard") -> report.Report:
    hello = Scenario("hello", "keep-alive", 50)
    blog = Scenario("blog", "close", 50)
    runs = {
        (hello.name, "tines-prefork"): [run(60_000, 12.0), run(62_000, 11.5), run(58_000, 12.5)],
        (hello.name, "granian-wsgi"): [run(50_000, 17.0, cross={
            "requests_per_sec": 49_000.0, "cpu_us_per_request": 17.5,
            "load_cpu_us_per_request": 9.0})],
        (hello.name, "nginx-static"): [run(70_000, 7.0)],
        (blog.name, "tines-prefork"): [run(1_400, 700.0)],
        (blog.name, "granian-wsgi"): [run(0, 0, failed="start: <boom> & exit")],
    }
    cells = [(hello, ["tines-prefork", "granian-wsgi", "nginx-static"]),
             (blog, ["tines-prefork", "granian-wsgi"])]
    meta = {"started": "2026-01-01-0000", "primary": "tines-bench", "cross": "wrk",
            "machine": {"nproc": 2}, "versions": {"tines": "tines 0.1.0"},
            "commands": ["tines-prefork, hello: `tines serve ...`"]}
    return report.build(lambda sc, server: runs.get((sc.name, server), []), cells,
                        {"hello": "/", "blog": "/blog/"}, model.PLANS[kind], meta,
                        {"tines-event": "this build of Tines has no event MPM"}, "Benchmark X")


def test_server_memory_is_pss_and_uss_per_process_with_the_root_apart() -> None:
    import subprocess

    # This test process stands for a server's master, a child it starts for a worker.
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    try:
        memory = procfs.tree_memory(os.getpid())
    finally:
        child.communicate(b"")
    by_pid = {p["pid"]: p for p in memory["processes"]}
    assert by_pid[os.getpid()]["role"] == "master" and by_pid[child.pid]["role"] == "worker"
    assert memory["pss_total_kib"] == sum(p["pss_kib"] for p in memory["processes"])
    assert memory["master_pss_kib"] == by_pid[os.getpid()]["pss_kib"] > 0
    assert memory["worker_uss_kib"] == max(p["uss_kib"] for p in memory["processes"] if p["role"] == "worker")
    assert all(0 < p["uss_kib"] <= p["pss_kib"] for p in memory["processes"])


def test_markdown_report() -> None:
    text = report.markdown(sample_report())
    assert text.startswith("# Benchmark X\n")
    main = text.split("## Main table: requests per second (median)\n\n", 1)[1].split("\n\n")[0]
    lines = main.splitlines()
    assert lines[0] == ("| scenario | tines-prefork | granian-wsgi | nginx-static "
                        "| best Tines ÷ best peer |")
    assert lines[2] == "| hello/keep-alive/c50 | 60,000 | 50,000 | 70,000 | 1.20× (prefork) |"
    assert lines[3] == "| blog/close/c50 | 1,400 | failed |  | – |"
    assert "| hello/keep-alive/c50 | 12.0 | 17.0 | 7.0 | 0.71× (prefork) |" in text
    assert ("| tines-prefork (3/5 runs) | 60,000 | 58,000–62,000 | 1.00 | 5.00 | 0 | 12.0 "
            "| 11.5–12.5 | 90% "
            "| 40.0 | 10.0 | 5.0 | 1.20× | 0.71× | – | 0.00 | 0.01 |") in text
    assert "| granian-wsgi | failed: start: <boom> & exit |" in text
    assert "| hello/keep-alive/c50 | granian-wsgi | 50,000 | 49,000 | 1.02× | 10.0 | 9.0 |" in text
    assert "- tines-event: this build of Tines has no event MPM" in text
    # Issue 4's three checks, issue 12's two process-per-request checks, eight of issue 15's
    # nine, issue 17's four ASGI ones and the previous run's (none given); hello keep-alive
    # against nginx has too few runs.
    assert text.count("**NOT MEASURED**") == 5 + 8 + 4 + 1
    assert "- **INCONCLUSIVE**: hello keep-alive: tines-prefork CPU µs/req <= 1.10 x nginx-static's" in text
    assert "no previous run to compare with" in text and "## Against the previous run" not in text
    assert "Quick run" not in text
    assert "Quick run" in report.markdown(sample_report("quick"))


def test_html_report_is_self_contained_and_escaped() -> None:
    page = report.html_page(sample_report())
    assert page.startswith("<!DOCTYPE html>")
    assert page.count("<svg ") == 4  # req/s and CPU charts for the two scenarios with data...
    # ...but the blog has one good row only: still charted; the failed row only in the table.
    assert "<script" not in page
    assert not re.search(r"(src|href)\s*=", page), "nothing is loaded from anywhere"
    assert "http://" not in page and "https://" not in page
    assert "start: &lt;boom&gt; &amp; exit" in page and "<boom>" not in page
    assert 'class="not">NOT MEASURED' in page
    assert page.count("<table>") == 2 + 2 + 1  # main tables, two scenarios, cross-check


def test_svg_bars_scale_to_the_highest_value() -> None:
    svg = report.svg_bars("t", [("tines-a", 100.0, 90.0, 110.0), ("granian-wsgi", 50.0, 50.0, 50.0)],
                          "u")
    widths = [float(w) for w in re.findall(r'<rect [^>]*width="([\d.]+)"', svg)]
    assert widths[0] == pytest.approx(2 * widths[1])
    assert svg.count("<line ") == 1  # a whisker only where the runs spread
    assert report.COLOURS["tines"] in svg and report.COLOURS["peer"] in svg


# --------------------------------------------------------------------------- the apps


def call(app: Any, path: str) -> tuple[str, dict[str, str], bytes]:
    seen: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        seen["status"], seen["headers"] = status, dict(headers)

    body = b"".join(app({"PATH_INFO": path, "REQUEST_METHOD": "GET",
                         "wsgi.input": io.BytesIO()}, start_response))
    assert int(seen["headers"]["Content-Length"]) == len(body)
    return seen["status"], seen["headers"], body


def test_techempower_apps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fortunes_db = load_file("bench_fortunes_db", BENCHES / "apps" / "fortunes_db.py")
    techempower = load_file("bench_techempower", BENCHES / "apps" / "techempower.py")
    monkeypatch.setenv("FORTUNES_DB", str(fortunes_db.create(tmp_path / "f.sqlite3")))
    assert call(techempower.app, "/plaintext")[::2] == ("200 OK", b"Hello, World!")
    status, headers, body = call(techempower.app, "/json")
    assert headers["Content-Type"] == "application/json"
    assert json.loads(body) == {"message": "Hello, World!"}
    status, headers, body = call(techempower.app, "/fortunes")
    assert headers["Content-Type"] == "text/html; charset=utf-8"
    page = body.decode()
    messages = re.findall(r"<tr><td>(\d+)</td><td>(.*?)</td></tr>", page)
    assert len(messages) == len(fortunes_db.FORTUNES) + 1
    assert [m for _, m in messages] == sorted(m for _, m in messages)
    assert ("0", techempower.ADDED_FORTUNE) in messages
    assert "&lt;script&gt;alert(&quot;This should not be displayed" in page
    assert "<script>" not in page
    assert "\u30d5\u30ec\u30fc\u30e0\u30ef\u30fc\u30af" in page
    assert call(techempower.app, "/nope")[0] == "404 Not Found"


def test_a_row_that_ignored_connection_close_is_marked() -> None:
    hello = Scenario("hello", "close", 50)
    runs = {"uwsgi": [{**run(30_000, 20.0), "honours_close": False}],
            "granian-wsgi": [{**run(7_000, 60.0), "honours_close": True}]}
    built = report.build(lambda sc, server: runs[server], [(hello, ["uwsgi", "granian-wsgi"])],
                         {"hello": "/"}, model.PLANS["quick"],
                         {"started": "x", "primary": "wrk", "cross": "none"}, {}, "T")
    text = report.markdown(built)
    assert "| uwsgi † | 30,000 |" in text and "| granian-wsgi | 7,000 |" in text
    assert text.count("† kept the connection open") == 1
    assert "Best peer: granian-wsgi by req/s (7,000)" in text  # uwsgi is left out with wrk
    with_bench = report.build(lambda sc, server: runs[server],
                              [(hello, ["uwsgi", "granian-wsgi"])], {"hello": "/"},
                              model.PLANS["quick"],
                              {"started": "x", "primary": "tines-bench", "cross": "wrk"}, {}, "T")
    assert "Best peer: uwsgi by req/s (30,000)" in report.markdown(with_bench)


@pytest.mark.parametrize("closes", [True, False])
def test_close_probe_sees_whether_the_server_closes(closes: bool) -> None:
    """A one-shot socket server on 127.0.0.1 that answers and then closes, or keeps the
    connection open until the test ends."""
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    done = threading.Event()

    def serve() -> None:
        conn, _ = listener.accept()
        conn.recv(4096)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nOK")
        if not closes:
            done.wait(5)
        conn.close()

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        port = listener.getsockname()[1]
        assert servers.closes_after_close_request(port, "/", timeout=0.3) is closes
    finally:
        done.set()
        thread.join()
        listener.close()


def test_rates_count_successful_responses_and_errors_are_flagged() -> None:
    hello = Scenario("hello", "keep-alive", 1000)
    answered_503 = {**run(4_000, 190.0, errors=6_000), "ok_per_sec": 850.0}
    runs = {"tines-event": [answered_503], "tines-thread": [run(2_300, 500.0)]}
    row = model.summarise("tines-event", runs["tines-event"], 1)
    assert row.rps is not None and row.rps.median == 850.0
    built = report.build(lambda sc, server: runs[server],
                         [(hello, ["tines-thread", "tines-event"])], {"hello": "/"},
                         model.PLANS["quick"], {"started": "x", "primary": "tines-bench",
                                                "cross": "wrk"}, {}, "T")
    text = report.markdown(built)
    assert "| hello/keep-alive/c1000 | 2,300 | 850 ⚠ | – |" in text
    assert "⚠: the row had failed requests" in text


def test_disturbed_runs_are_dropped_for_measuring_again(tmp_path: Path) -> None:
    hello = Scenario("hello", "keep-alive", 50)
    state = State(tmp_path / "state.json", PLAN, {})
    starved = {**run(24, 840.0), "other_cpu": 1.7, "cpu_utilisation": 0.02}
    saturated_but_busy_machine = {**run(2_500, 380.0), "other_cpu": 0.9, "cpu_utilisation": 0.98}
    quiet = {**run(2_900, 340.0), "other_cpu": 0.0, "cpu_utilisation": 0.98}
    failed = {**run(0, 0, failed="start: boom"), "other_cpu": 1.5, "cpu_utilisation": 0.0}
    for number, result in enumerate((starved, saturated_but_busy_machine, quiet, failed), 1):
        state.record(model.cell_key("tines-prefork", hello, number), result)
    assert state.drop_disturbed() == ["hello/keep-alive/c50|tines-prefork|run1"]
    again = State(tmp_path / "state.json", PLAN, {})
    assert not again.done(model.cell_key("tines-prefork", hello, 1))
    assert again.done(model.cell_key("tines-prefork", hello, 2))
    assert again.meta["redone"] == ["hello/keep-alive/c50|tines-prefork|run1"]
    built = report.build(again.runs, [(hello, ["tines-prefork"])], {"hello": "/"},
                         model.PLANS["standard"], {**again.meta, "started": "x",
                                                   "primary": "tines-bench", "cross": "wrk"},
                         {}, "T")
    assert "1 run(s) starved by other work" in report.markdown(built)


def test_a_partial_state_is_reported_as_partial() -> None:
    hello = Scenario("hello", "keep-alive", 50)
    meta = {"started": "x", "primary": "tines-bench", "cross": "wrk"}
    def build(measured: int) -> str:
        built = report.build(lambda sc, server: [run(1.0, 1.0)], [(hello, ["uwsgi"])],
                             {"hello": "/"}, model.PLANS["full"],
                             {**meta, "measured": measured, "planned": 3}, {}, "T")
        return report.markdown(built)
    assert "**Partial: 1 of 3 measurements so far" in build(1)
    assert "Partial" not in build(3)


# --------------------------------------------------------------------------- the slow-client attack

ATTACKED = Scenario(model.ATTACK_APP, "keep-alive", 50)


def attacked_run(unattacked_rps: float, attacked_rps: float, errors: int = 0,
                 left: int = 100) -> dict[str, Any]:
    """An attack-row measurement as run.attacked records it."""
    result = run(attacked_rps, 12.0, errors=errors)
    result.update(ok=int(attacked_rps), unattacked=run(unattacked_rps, 11.0),
                  in_flight_at_end=0 if attacked_rps else 50,
                  attack={"attackers": 100, "uploaders": {"connected": left // 2},
                          "non_readers": {"connected": left - left // 2}})
    return result


def test_the_attack_row_is_the_attacked_rate_over_the_same_starts_unattacked_rate() -> None:
    row = model.summarise_attack("tines-event", [attacked_run(10_000, 9_500),
                                                 attacked_run(12_000, 6_000, left=40),
                                                 attacked_run(10_000, 10_000)], 3)
    assert row.fraction is not None and row.unattacked is not None and row.attacked is not None
    assert (row.fraction.median, row.fraction.low, row.fraction.high) == (0.95, 0.5, 1.0)
    assert (row.unattacked.median, row.attacked.median) == (10_000, 9_500)
    assert (row.attackers_left, row.attackers, row.fell_over) == (100, 100, 0)
    assert ATTACKED.attacked and not Scenario("hello", "keep-alive", 50).attacked
    assert "slow-client attack" in ATTACKED.title


def test_a_server_that_falls_over_under_the_attack_keeps_nothing_and_fails_its_target() -> None:
    fell = model.summarise_attack("tines-prefork", [attacked_run(10_000, 0, errors=50)], 1)
    assert fell.fraction is not None and fell.fraction.median == 0.0
    assert (fell.fell_over, fell.errors) == (1, 50)
    kept = model.summarise_attack("tines-thread", [attacked_run(10_000, 9_000)], 1)
    peer = model.summarise_attack("gunicorn-gthread", [attacked_run(10_000, 0)], 1)
    missing = model.summarise_attack("tines-event", [run(0, 0, failed="attack: 3 of 50")], 1)
    checks = model.attack_checks([fell, kept, peer, missing])
    assert [(c.verdict, c.name.split(": ")[1].split()[0]) for c in checks] == [
        ("fail", "tines-prefork"), ("pass", "tines-thread"), ("not measured", "tines-event")]
    assert "0.90 (9,000 vs 10,000 req/s)" in checks[1].detail
    assert "attack: 3 of 50" in checks[2].detail


def test_the_report_shows_the_attack_row_in_its_own_table() -> None:
    hello = Scenario("hello", "keep-alive", 50)
    runs = {(hello.name, "tines-prefork"): [run(60_000, 12.0)],
            (ATTACKED.name, "tines-prefork"): [attacked_run(10_000, 0, errors=50, left=100)],
            (ATTACKED.name, "granian-wsgi"): [attacked_run(20_000, 19_000, left=60)]}
    cells = [(hello, ["tines-prefork"]), (ATTACKED, ["tines-prefork", "granian-wsgi"])]
    built = report.build(lambda sc, server: runs.get((sc.name, server), []), cells,
                         {"hello": "/", model.ATTACK_APP: "/"}, model.PLANS["quick"],
                         {"started": "X", "primary": "tines-bench", "cross": "wrk"}, {}, "B")
    assert [t.scenario.name for t in built.tables] == ["hello/keep-alive/c50"]
    text = report.markdown(built)
    assert "## hello keep-alive while under the slow-client attack" in text
    assert "| tines-prefork | 10,000 | 0 | 0.00 | 0.00–0.00 | 50 | 50 | 1/1 | 100 of 100 |" in text
    assert "| granian-wsgi | 20,000 | 19,000 | 0.95 | 0.95–0.95 | 0 | 0 | 0/1 | 60 of 100 |" in text
    assert "**FAIL**: hello keep-alive under the slow-client attack: tines-prefork" in text
    assert "slow-client attack" in report.html_page(built)
