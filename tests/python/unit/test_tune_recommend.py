"""tines.tune.recommend on recorded measurements (tune_fixtures/*.json: real `tines tune` runs of
benches/apps/tune/*.py on this 2-CPU machine; tune_fixtures/README.md says how to record them
again) for apps whose right answer is known, and the rules' arithmetic on edited copies."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest

from tines.config import load, tomllib
from tines import pool
from tines.tune import recommend, report
from tines.tune.plan import read_requests_file
from tines.tune.measure import TuneError

FIXTURES = Path(__file__).parent / "tune_fixtures"
MiB = 1024 * 1024


def fixture(name: str) -> dict[str, Any]:
    return dict(json.loads((FIXTURES / f"{name}.json").read_text()))


def value(rec: recommend.Recommendation, setting: str) -> Any:
    item = rec.item(setting)
    assert item is not None, f"no {setting} in {[i.setting for i in rec.items]}"
    return item.value


def test_a_cpu_bound_app_gets_prefork_with_one_worker_per_cpu() -> None:
    doc = fixture("cpu_bound")
    rec = recommend.recommend(doc)
    assert rec.summary["workload"]["bound"] == "cpu"
    assert value(rec, "mpm") == "prefork"
    assert value(rec, "workers") == doc["machine"]["target_cpus"] == 2
    assert rec.item("threads") is None
    assert "W/C" in rec.item("workers").why  # type: ignore[union-attr]
    # Told for another machine: the CPUs given, not this one's.
    doc["machine"]["target_cpus"] = 16
    assert value(recommend.recommend(doc), "workers") == 16


def test_an_app_that_sleeps_50_ms_gets_the_event_mpm_with_many_threads() -> None:
    doc = fixture("sleepy")
    rec = recommend.recommend(doc)
    work = rec.summary["workload"]
    assert work["bound"] == "wait"
    assert 45_000 < work["wait_us"] < 60_000, work
    assert value(rec, "mpm") in ("event", "thread")
    threads = value(rec, "threads")
    # Goetz's sizing with the measured W/C, per worker (one worker per CPU).
    assert threads == min(recommend.MAX_THREADS, math.ceil(1 + work["wait_ratio"]))
    assert threads >= 32
    assert value(rec, "workers") == 2


def test_a_probe_whose_cpu_time_reads_zero_ticks_is_still_an_app_that_waits() -> None:
    # 39 requests of 50 ms sleep in a 2 s probe used a few ms of CPU: under the 10 ms clock
    # tick of /proc, it can read 0 (a make bench run on a busy machine did). W/C must then
    # be bounded by the clock's resolution, not taken as 0 (which called the app CPU-bound).
    doc = fixture("sleepy")
    step = doc["probe"]["step"]
    step.update(server_cpu_s=0.0, cpu_us_per_request=0.0, served=39, app_us_per_request=50_199.0,
                cpu_tick_s=0.01)
    rec = recommend.recommend(doc)
    work = rec.summary["workload"]
    assert work["cpu_bounded"] and work["cpu_us"] == pytest.approx(10_000 / 39)
    assert work["bound"] == "wait" and work["wait_ratio"] > 150, work
    assert value(rec, "mpm") in ("event", "thread")
    assert value(rec, "threads") >= 32
    assert "at most" in rec.item("mpm").why  # type: ignore[union-attr]
    # A probe that read its CPU is taken as it is.
    assert not recommend.workload(fixture("sleepy"))["cpu_bounded"]


def test_a_leaking_app_gets_max_requests_from_its_leak_rate() -> None:
    doc = fixture("leaky")
    rec = recommend.recommend(doc)
    rate = recommend.leak_rate(doc)
    assert rate is not None and rate["leaks"]
    # The app keeps 50,000 bytes per request (plus the bytearray's header).
    assert 45_000 < rate["bytes_per_request"] < 56_000, rate
    assert rate["r2"] > 0.9
    max_requests = value(rec, "max_requests")
    assert isinstance(max_requests, int) and max_requests > 0
    assert value(rec, "max_requests_jitter") == max(1, max_requests // 10)
    assert value(rec, "max_worker_memory").endswith("MiB")


def test_the_issue_example_50_kb_per_request_and_256_mib_per_worker() -> None:
    """A worker that grows 50 KB per request with a 256 MiB share of the budget gives a number:
    the share's headroom over the slope."""
    doc = fixture("leaky")
    rate = recommend.leak_rate(doc)
    assert rate is not None
    variant = recommend.memory_variant(doc, False)
    assert variant is not None
    shared = recommend.worker_figures(variant)["shared"]
    rec = recommend.recommend(doc)
    workers = value(rec, "workers")
    slots = workers + recommend.reload_batch(workers)
    doc["machine"]["memory_budget"] = shared + 256 * MiB * slots
    rec = recommend.recommend(doc)
    assert value(rec, "max_worker_memory") == "256MiB"
    expected = int((256 * MiB - rate["uss_fresh"]) / rate["bytes_per_request"])
    assert value(rec, "max_requests") == expected
    assert 4_000 < expected < 256 * MiB / 45_000


def test_apps_that_do_not_grow_need_no_recycling() -> None:
    for name in ("cpu_bound", "sleepy", "big_import"):
        rec = recommend.recommend(fixture(name))
        item = rec.item("max_requests")
        assert item is not None and item.value is None and "not needed" in item.why, (name, item)
        assert rec.item("max_worker_memory").value is None  # type: ignore[union-attr]


def test_an_app_that_allocates_50_mb_at_import_gets_preload_with_the_saving() -> None:
    doc = fixture("big_import")
    rec = recommend.recommend(doc)
    item = rec.item("preload")
    assert item is not None and item.value is True
    assert item.evidence["saving_per_worker"] > 40 * MiB
    assert "MiB" in item.why
    # A small app's preload saves too little to be worth the notice.
    assert value(recommend.recommend(fixture("sleepy")), "preload") is None


def test_max_workers_is_the_mod_perl_formula_capped_by_the_cpus() -> None:
    doc = fixture("big_import")
    rec = recommend.recommend(doc)
    item = rec.item("max_workers")
    assert item is not None
    ev = item.evidence
    assert ev["slots"] == int((ev["budget"] - ev["shared"]) // ev["uss"])
    assert ev["fits_with_reload"] + recommend.reload_batch(ev["fits_with_reload"]) <= ev["slots"]
    assert item.value == min(ev["fits_with_reload"], ev["cpu_cap"])
    assert "memory budget" in item.why and "shared" in item.why and "USS" in item.why
    # A small budget makes memory the limit, and then the workers follow it: without preload
    # (about 54 MiB each), room for two workers holds one and its reload_batch.
    doc["memory"] = [v for v in doc["memory"] if not v["shape"]["preload"]]
    alone = recommend.worker_figures(doc["memory"][0])
    doc["machine"]["memory_budget"] = alone["shared"] + 2.5 * alone["uss"]
    rec = recommend.recommend(doc)
    assert value(rec, "max_workers") == 1
    assert value(rec, "workers") == 1
    assert any("Memory limits" in note for note in rec.notes)


def test_fit_under_keeps_room_for_the_reload_batch() -> None:
    assert recommend.fit_under(1) == 0
    assert recommend.fit_under(2) == 1
    assert recommend.fit_under(10) == 8  # 8 + 2
    assert recommend.fit_under(100) == 80  # 80 + 20


def test_linear_fit() -> None:
    slope, intercept, r2 = recommend.linear_fit([(0, 10), (1, 12), (2, 14), (3, 16)])
    assert (slope, intercept, r2) == (2.0, 10.0, 1.0)
    assert recommend.linear_fit([(0, 5), (1, 5), (2, 5)])[0] == 0.0


def test_bursty_gives_a_dynamic_pool_instead_of_a_fixed_count() -> None:
    doc = fixture("sleepy")
    doc["options"]["bursty"] = True
    rec = recommend.recommend(doc)
    settings = rec.settings()
    assert "workers" not in settings and settings["max_workers"] >= 1
    assert settings["min_spare_threads"] >= 1
    assert settings["max_spare_threads"] > settings["min_spare_threads"]
    assert "Little's law" in rec.item("min_spare_threads").why  # type: ignore[union-attr]
    assert_pool_accepts(settings)


def assert_pool_accepts(settings: dict[str, Any]) -> None:
    """The settings pass the checks `serve` makes before it forks (tines.pool.settings)."""
    cfg = load({"app": "x:app", **{k: str(v) for k, v in settings.items()}}, environ={})
    pool.settings(cfg, cpu_count=2)


@pytest.mark.parametrize("name", ["cpu_bound", "sleepy", "leaky", "big_import"])
@pytest.mark.parametrize("budget", [64 * MiB, 4 * 1024 * MiB])
def test_every_bursty_pool_passes_the_pools_checks(name: str, budget: int) -> None:
    doc = fixture(name)
    doc["options"]["bursty"] = True
    doc["machine"]["memory_budget"] = budget
    settings = recommend.recommend(doc).settings()
    assert "max_workers" in settings and "workers" not in settings
    assert_pool_accepts(settings)


def test_bursty_for_an_asgi_app_keeps_a_fixed_count() -> None:
    doc = fixture("sleepy")
    doc["options"]["bursty"] = True
    doc["interface"] = "asgi"
    rec = recommend.recommend(doc)
    item = rec.item("min_spare_threads")
    assert item is not None and item.value is None and "ASGI" in item.why
    settings = rec.settings()
    assert "start_workers" not in settings and rec.item("threads") is None
    assert settings["workers"] == 2 and "max_workers" not in settings
    assert_pool_accepts(rec.settings())


def test_a_budget_below_the_shared_memory_says_so_with_no_negative_figure() -> None:
    for name in ("cpu_bound", "leaky", "sleepy"):
        doc = fixture(name)
        doc["machine"]["memory_budget"] = 5 * MiB
        rec = recommend.recommend(doc)
        text = " ".join(item.why for item in rec.items) + " ".join(rec.notes)
        assert "-" + "1" not in text.replace(" - ", " ") and "= -" not in text, text
        assert any("the workers share" in note and "alone" in note for note in rec.notes), rec.notes
        assert value(rec, "max_workers") == 1


def test_the_reasons_carry_the_formulas_values() -> None:
    doc = fixture("leaky")
    rec = recommend.recommend(doc)
    why = rec.item("max_requests").why  # type: ignore[union-attr]
    assert "(budget " in why and "- shared " in why and "reload_batch" in why
    big = recommend.recommend(fixture("big_import")).item("max_workers")
    assert big is not None and "one process per CPU = 2" in big.why  # W/C 0.08: CPU-bound
    sleepy = recommend.recommend(fixture("sleepy")).item("max_workers")
    assert sleepy is not None and "one worker per CPU = 2" in sleepy.why


def test_a_budget_too_small_is_said_and_gives_no_nonsense() -> None:
    doc = fixture("leaky")
    doc["machine"]["memory_budget"] = 10 * MiB
    rec = recommend.recommend(doc)
    assert value(rec, "max_workers") == 1 and value(rec, "workers") == 1
    item = rec.item("max_requests")
    assert item is not None and item.value is None and "no room to grow" in item.why
    assert rec.item("max_worker_memory") is None
    assert any("does not hold one worker" in note or "alone" in note for note in rec.notes)
    assert "Memory lowers it" in rec.item("workers").why  # type: ignore[union-attr]
    # Above the shared memory but short of a worker and its reload room: said as such.
    alone = recommend.worker_figures(recommend.memory_variant(doc, False))  # type: ignore[arg-type]
    doc["machine"]["memory_budget"] = alone["shared"] + 1.5 * recommend.leak_rate(doc)["uss_fresh"]  # type: ignore[index]
    assert any("does not hold one worker" in note for note in recommend.recommend(doc).notes)
    doc["options"]["bursty"] = True
    assert_pool_accepts(recommend.recommend(doc).settings())


def test_memory_per_worker_counts_the_chosen_configurations_workers() -> None:
    """The event workers with 221 threads grew bigger than the probe's prefork workers: the
    pool is sized by the bigger."""
    doc = fixture("sleepy")
    rec = recommend.recommend(doc)
    chosen = next(c for c in doc["configs"] if c["shape"]["name"] == rec.summary["configuration"])
    biggest = max(w["uss"] for w in chosen["memory_after"]["workers"])
    item = rec.item("max_workers")
    assert item is not None and item.evidence["uss"] == biggest
    assert chosen["shape"]["name"] in item.why


def test_a_measured_sibling_with_fewer_threads_sets_the_threads() -> None:
    doc = fixture("sleepy")
    event = next(c for c in doc["configs"] if c["shape"]["mpm"] == "event")
    sibling = copy.deepcopy(event)
    sibling["shape"]["threads"] = 60
    sibling["shape"]["name"] = "event x1, 60 threads"
    for step in sibling["sweep"]:
        step["rps"] *= 0.97  # as fast, within a sweep's noise
    doc["configs"].append(sibling)
    rec = recommend.recommend(doc)
    assert value(rec, "threads") == 60
    assert "fewer threads" in rec.item("threads").why  # type: ignore[union-attr]
    for step in sibling["sweep"]:
        step["rps"] *= 0.9  # clearly slower: the formula's count stays
    assert value(recommend.recommend(doc), "threads") == event["shape"]["threads"]


def test_phases_left_out_still_give_a_recommendation() -> None:
    """What a short budget or an early failure leaves: no sweeps, no preload run, no leak run."""
    doc = fixture("cpu_bound")
    doc["configs"] = []
    doc["memory"] = [v for v in doc["memory"] if not v["shape"]["preload"]]
    doc["leak"] = None
    doc["skipped"] = ["the sweep of prefork x1 (budget)"]
    doc["failed"] = {"phase": "the sweeps", "error": "the server exited", "detail": ""}
    rec = recommend.recommend(doc)
    assert value(rec, "mpm") == "prefork" and value(rec, "workers") == 2
    assert "not measured" in rec.item("preload").why  # type: ignore[union-attr]
    assert "not measured" in rec.item("max_requests").why  # type: ignore[union-attr]
    assert any("stopped early" in note for note in rec.notes)
    assert any("Skipped" in note for note in rec.notes)
    tomllib.loads(report.toml(rec, doc))
    report.report_html(rec, doc)
    report.text(rec, doc)


def test_keepalive_follows_the_declared_client_mix(tmp_path: Path) -> None:
    requests = tmp_path / "requests.txt"
    requests.write_text("# tines-tune: visit=12 think=3s\n/\nPOST /form\nhttp://example.com/x?y=1\n")
    listed, clients = read_requests_file(requests)
    assert listed == ["/", "POST /form", "/x?y=1"]
    assert clients == {"visit": 12, "think_s": 3.0}
    doc = fixture("sleepy")
    doc["clients"] = clients
    rec = recommend.recommend(doc)
    assert value(rec, "keepalive_timeout") == 5  # 1.5 x 3 s, event holds idle connections cheaply
    assert value(rec, "max_keepalive_requests") == 30
    doc = fixture("cpu_bound")
    doc["clients"] = clients
    assert value(recommend.recommend(doc), "keepalive_timeout") == 2  # prefork: a connection holds a worker
    bad = tmp_path / "bad.txt"
    bad.write_text("# tines-tune: visits=3\n/\n")
    with pytest.raises(TuneError, match="visit=N"):
        read_requests_file(bad)


@pytest.mark.parametrize("name", ["cpu_bound", "sleepy", "leaky", "big_import"])
def test_the_toml_loads_as_a_config_and_the_report_has_its_plots(name: str, tmp_path: Path) -> None:
    doc = fixture(name)
    rec = recommend.recommend(doc)
    text = report.toml(rec, doc)
    table = tomllib.loads(text)
    assert table == {"app": doc["app"], **rec.settings()}
    path = tmp_path / "tines.toml"
    path.write_text(text)
    cfg = load({"config": str(path)}, environ={})
    assert cfg.mpm == value(rec, "mpm")
    page = report.report_html(rec, doc)
    assert page.count("<svg") >= 5 and "<script" not in page
    summary = report.text(rec, doc)
    assert summary.index("Recommended settings:") < summary.index("Why:") < summary.index("Measured")


def test_an_interrupted_run_before_any_measurement_recommends_nothing() -> None:
    doc = fixture("cpu_bound")
    doc.update(probe=None, configs=[], memory=[], leak=None, interrupted=True)
    rec = recommend.recommend(doc)
    assert rec.items == [] and any("Nothing was measured" in note for note in rec.notes)
    assert any("interrupted" in note for note in rec.notes)
    assert "Recommended settings:" in report.text(rec, doc)
    report.report_html(rec, doc)


def test_a_document_of_another_schema_is_refused() -> None:
    doc = copy.deepcopy(fixture("cpu_bound"))
    doc["schema"] = "tines-tune/0"
    with pytest.raises(ValueError, match="tines-tune/1"):
        recommend.recommend(doc)


@pytest.mark.parametrize("name", ["cpu_bound", "sleepy", "leaky", "big_import"])
def test_each_cost_per_request_is_one_figure_in_the_text_the_tables_and_the_chart(name: str) -> None:
    """Issue 40: the text said 455 µs of CPU per request (the probe, one connection at a time)
    where the table and the chart said 258 µs (the peak, where a batch shares the server's
    wake-ups), both unlabelled. Each measurement is now named with its connections, and its
    figures are the same wherever they appear."""
    doc = fixture(name)
    rec = recommend.recommend(doc)
    costs = recommend.request_costs(doc)
    assert costs[0].label.startswith("probe, ") and costs[0].connections == 1
    assert len(costs) == 1 + len([c for c in doc["configs"] if recommend.peak(c)])
    work = recommend.workload(doc)
    assert (costs[0].cpu_us, costs[0].server_us, costs[0].app_cpu_us, costs[0].wait_us) == (
        work["cpu_us"], work["server_us"], work["app_cpu_us"], work["wait_us"])
    summary = report.text(rec, doc)
    page = report.report_html(rec, doc)
    # The recommendation's reason gives the probe's CPU per request, and says it is the probe's.
    why = " ".join(item.why for item in rec.items)
    assert f"one connection at a time (the probe), a request takes {recommend.us(work['cpu_us'])}" in why
    for cost in costs:
        line = recommend.cost_text(cost)
        assert line in summary
        cells = (f"<td>{cost.connections}</td><td>{recommend.us(cost.cpu_us)}</td><td>{recommend.us(cost.server_us)}"
                 f"</td><td>{recommend.us(cost.app_cpu_us)}</td><td>{recommend.us(cost.wait_us)}</td>")
        assert cells in page
        assert f"<title>app CPU: {recommend.us(cost.app_cpu_us)}</title>" in page
        if cost.server_us is not None:
            assert f"<title>server (Tines): {recommend.us(cost.server_us)}</title>" in page
    for cost in costs[1:]:
        # The configurations table's CPU column: the chart's figure, not another reading.
        assert f"<td>{recommend.us(cost.cpu_us)} ({recommend.us(cost.server_us)})</td>" in page
    # The bars and the words split a request's time by one rule.
    sleepy = recommend.split_time(227.0, 30.0, 50_000.0)
    assert sleepy == (30.0, 197.0, 49_803.0)
    assert recommend.split_time(600.0, None, 100.0) == (None, 100.0, 0.0)
    assert recommend.split_time(20.0, 30.0, 5.0) == (20.0, 0.0, 5.0)


def test_an_uncalibrated_run_shows_its_whole_cpu_in_the_server_and_app_bar() -> None:
    """Review of issue 40, item 7: a run whose calibration was skipped (interrupted, or out of
    time) has no server cost, so the chart's one CPU bar is "server + app CPU": all of the
    request's CPU, the figure the table's CPU column and the text give. It showed the app's
    share (capped at its wall time: 585 µs where the table said 623 µs for the same request)."""
    doc = copy.deepcopy(fixture("cpu_bound"))
    doc["calibration"] = {}
    for config in doc["configs"]:
        config.pop("server_us", None)
    rec = recommend.recommend(doc)
    costs = recommend.request_costs(doc)
    page = report.report_html(rec, doc)
    summary = report.text(rec, doc)
    assert costs and all(cost.server_us is None for cost in costs)
    # The fixture's requests take more CPU than the app's wall time: the case that disagreed.
    assert all(cost.app_cpu_us < cost.cpu_us for cost in costs)
    for cost in costs:
        assert recommend.cost_text(cost) in summary
        assert f"<td>{cost.connections}</td><td>{recommend.us(cost.cpu_us)}</td>" in page
        assert f"<title>server + app CPU: {recommend.us(cost.cpu_us)}</title>" in page
    assert "<title>server (Tines):" not in page
