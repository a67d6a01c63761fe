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


def test_the_process_per_request_row_is_prefork_with_max_requests_1_and_preload() -> None:
    server = servers.process_per_request_server()
    command = server.command(servers.APPS["hello"], 8080, None, Path("/tmp"))
    assert server.name == servers.PROCESS_PER_REQUEST and server.apps == frozenset({"hello"})
    assert command[command.index("--mpm") + 1] == "prefork"
    assert command[command.index("--max-requests") + 1] == "1" and "--preload" in command
    assert server.name in [s.name for s in servers.wsgi_servers()]


# --------------------------------------------------------------------------- matrices

ALL = ["tines-prefork", "tines-thread", "tines-event", "gunicorn-gthread", "uwsgi",
       "granian-wsgi", "nginx-static"]
SERVES: dict[str, frozenset[str] | None] = {
    **{s: None for s in ALL}, "nginx-static": frozenset({"hello", "plaintext"})}


def test_standard_matrix() -> None:
    cells = dict((sc.name, names) for sc, names in model.matrix("standard", ALL, SERVES))
    assert cells["hello/keep-alive/c50"] == ALL
    assert cells["blog/close/c50"] == ALL[:-1]
    assert cells["hello/close/c1000"] == ["tines-thread", "tines-event"]
    assert cells["blog/keep-alive/c1000"] == ["tines-thread", "tines-event"]
    assert cells["attacked/keep-alive/c50"] == ["tines-prefork", "tines-thread", "tines-event",
                                                 "gunicorn-gthread", "granian-wsgi"]
    assert len(cells) == 9
    without_event = dict((sc.name, names) for sc, names in
                         model.matrix("standard", [s for s in ALL if s != "tines-event"], SERVES))
    assert without_event["hello/keep-alive/c1000"] == ["tines-thread"]
    plan = model.PLANS["standard"]
    minutes = model.estimate_seconds(plan, model.matrix("standard", ALL, SERVES)) / 60
    assert 12 <= minutes <= 19, minutes


def test_full_matrix() -> None:
    cells = dict((sc.name, names) for sc, names in model.matrix("full", ALL, SERVES))
    assert cells["hello/keep-alive/c1"] == ALL
    assert cells["blog/close/c1000"] == ALL[:-1]
    assert cells["plaintext/keep-alive/c50/p16"] == ALL
    assert cells["fortunes/keep-alive/c1000"] == ALL[:-1]
    assert "json/close/c50" not in cells
    assert len(cells) == 12 + 2 + 6 + 1
    assert "attacked/keep-alive/c50" in cells
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


def test_asgi_extension_point_adds_no_cell_and_says_why() -> None:
    added, skipped = servers.asgi_servers("--mpm {prefork,thread}")
    assert added == [] and "no ASGI" in skipped["uvicorn"]


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
    assert ("| tines-prefork | 60,000 | 58,000–62,000 | 1.00 | 5.00 | 0 | 12.0 | 11.5–12.5 | 90% "
            "| 40.0 | 10.0 | 5.0 | 1.20× | 0.71× | – | 0.00 | 0.01 |") in text
    assert "| granian-wsgi | failed: start: <boom> & exit |" in text
    assert "| hello/keep-alive/c50 | granian-wsgi | 50,000 | 49,000 | 1.02× | 10.0 | 9.0 |" in text
    assert "- tines-event: this build of Tines has no event MPM" in text
    # Issue 4's three checks and issue 12's two process-per-request checks.
    assert text.count("**NOT MEASURED**") == 5
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
