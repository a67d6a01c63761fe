"""Process per request against its limits: the pure parts of benches/isolation.py (issue 36).

A round measures, for each app, the machine's fork limit (benches/fork_limit.py) and then, one
after the other, each row on each scenario: Tines prefork with a process per request, the same
prefork reusing its worker, the minimal fork-per-connection server
(benches/fork_per_connection.py), and gunicorn's and uWSGI's process per request
(``--max-requests 1``). Rows are judged by the median of per-round ratios, so a
machine whose speed drifts between rounds (a shared 2-core VM moves 2x with its load) touches
both sides of each ratio alike. Nothing here starts a process: ``tests/python/unit/
test_bench_isolation.py`` covers it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, TypeGuard

from model import Scenario, Spread, rate

PER_REQUEST = "tines-prefork-per-request"
REUSE = "tines-prefork"
FORK_PER_CONNECTION = "fork-per-connection"
GUNICORN_PER_REQUEST = "gunicorn-sync-per-request"
UWSGI_PER_REQUEST = "uwsgi-per-request"
ROWS = (PER_REQUEST, REUSE, FORK_PER_CONNECTION, GUNICORN_PER_REQUEST, UWSGI_PER_REQUEST)
"""Every row (the peers' two are left out with ``--no-peers``: their cells then say so)."""
FORK_LIMIT = "fork-limit"
# The same probe in a process of the Tines master's size: its own modules imported beside the
# app (MASTER_MODULES). Reported beside the judged limit: it shows what the server's own memory
# costs each fork.
FORK_LIMIT_MASTER = "fork-limit-master"
LIMITS = {FORK_LIMIT: "the app alone", FORK_LIMIT_MASTER: "the app and Tines' master modules"}
MASTER_MODULES = ("tines.arbiter", "tines.worker")
# Issue 36: process per request reaches at least this share of the fork limit (hello).
FORK_LIMIT_SHARE = 0.5
# TreeFrog's prefork MPM on its own /blog/index, one connection at a time (httperf, its docs).
TREEFROG_BLOG_RPS = 40.0
CONNECTIONS = (1, 50)
# The seed's measurements (issue 36): hello, `tines bench -c 1 --no-keepalive`.
SEED_TABLE = (
    "| setting | req/s | p50 | p99 |",
    "| --- | ---: | ---: | ---: |",
    "| reuse, `-w 1` (Connection: close) | 4,047-11,900 | 0.05 ms | 1.7 ms |",
    "| process per request, `-w 1` | 7-97 | 36 ms | 770 ms |",
    "| process per request, `-w 4` | 17.6 | 11.7 ms | 1,549 ms |",
    "| process per request, dynamic pool (start 4, spares 2-4, max 8) | 113 | 7.6 ms | 26 ms |",
)


def scenarios(apps: list[str]) -> list[Scenario]:
    """Every table: each app with Connection: close, one connection, then 50."""
    return [Scenario(app, "close", c) for app in apps for c in CONNECTIONS]


def run_key(row: str, scenario: Scenario, round_: int) -> str:
    return f"{scenario.name}|{row}|round{round_}"


def limit_key(app: str, round_: int, kind: str = FORK_LIMIT) -> str:
    return f"{app}|{kind}|round{round_}"


def good(run: dict[str, Any] | None) -> TypeGuard[dict[str, Any]]:
    """A run that succeeded and served something."""
    return run is not None and not run.get("failed") and rate(run) > 0


def p99_ms(run: dict[str, Any]) -> float:
    return float(run["latency_us"]["p99"]) / 1000


def round_ratios(runs: dict[str, dict[str, Any]], scenario: Scenario,
                 rounds: int) -> dict[str, list[float]]:
    """Per round where both sides succeeded: per request / fork limit (``limit``; ``master``:
    the master-sized one), / reuse, / the fork-per-connection server (req/s), and per
    request's p99 / fork-per-connection's; / gunicorn's and / uWSGI's process per request."""
    out: dict[str, list[float]] = {"limit": [], "master": [], "reuse": [], "fpc": [],
                                   "p99_fpc": [], "gunicorn": [], "uwsgi": []}
    for r in range(1, rounds + 1):
        pr = runs.get(run_key(PER_REQUEST, scenario, r))
        if not good(pr):
            continue
        for kind, key in ((FORK_LIMIT, "limit"), (FORK_LIMIT_MASTER, "master")):
            limit = runs.get(limit_key(scenario.app, r, kind))
            if limit and not limit.get("failed") and limit["forks_per_sec"] > 0:
                out[key].append(rate(pr) / limit["forks_per_sec"])
        reuse = runs.get(run_key(REUSE, scenario, r))
        if good(reuse):
            out["reuse"].append(rate(pr) / rate(reuse))
        fpc = runs.get(run_key(FORK_PER_CONNECTION, scenario, r))
        if good(fpc):
            out["fpc"].append(rate(pr) / rate(fpc))
            if p99_ms(fpc) > 0:
                out["p99_fpc"].append(p99_ms(pr) / p99_ms(fpc))
        for name, key in ((GUNICORN_PER_REQUEST, "gunicorn"), (UWSGI_PER_REQUEST, "uwsgi")):
            peer = runs.get(run_key(name, scenario, r))
            if good(peer):
                out[key].append(rate(pr) / rate(peer))
    return out


@dataclass(frozen=True)
class Row:
    """One row of a scenario's table: medians over its successful rounds."""

    name: str
    rounds_ok: int
    rps: Spread | None
    p50_ms: float | None
    p99_ms: float | None
    mean_ms: float | None
    errors: int
    cpu_us: float | None


def row(name: str, runs: list[dict[str, Any]]) -> Row:
    ok = [r for r in runs if good(r)]

    def median(values: list[float]) -> float | None:
        return statistics.median(values) if values else None

    return Row(name, len(ok), Spread.of(rate(r) for r in ok),
               median([r["latency_us"]["p50"] / 1000 for r in ok]),
               median([p99_ms(r) for r in ok]),
               median([r["latency_us"]["mean"] / 1000 for r in ok]),
               sum(int(r["errors"]["total"]) for r in runs if not r.get("failed")),
               median([r["cpu_us_per_request"] for r in ok]))


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # pass, fail, not measured
    detail: str


def median_of(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def checks(runs: dict[str, dict[str, Any]], rounds: int) -> list[Check]:
    """Issue 36's judgement: hello's process per request reaches half the fork limit, one
    connection at a time and at 50 (the rate is the target there), by the median of per-round
    ratios."""
    out = []
    for scenario in scenarios(["hello"]):
        name = (f"{scenario.name}: process per request >= {FORK_LIMIT_SHARE:g} x the fork limit "
                "(median of per-round ratios)")
        all_ratios = round_ratios(runs, scenario, rounds)
        ratios = all_ratios["limit"]
        share = median_of(ratios)
        if share is None:
            out.append(Check(name, "not measured", "no round with both a per-request run and "
                                                   "a fork limit"))
            continue
        detail = (f"median {share:.2f} over {len(ratios)} round(s) "
                  f"({', '.join(f'{x:.2f}' for x in ratios)}); of the master-sized fork "
                  f"limit: {ratio_text(all_ratios['master'])}")
        out.append(Check(name, "pass" if share >= FORK_LIMIT_SHARE else "fail", detail))
    return out


# --------------------------------------------------------------------------- markdown


def num(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def ratio_text(values: list[float]) -> str:
    median = median_of(values)
    return "-" if median is None else f"{median:.2f} ({len(values)})"


def spread_text(s: Spread | None) -> str:
    if s is None:
        return "-"
    return f"{s.median:,.1f} ({s.low:,.1f}-{s.high:,.1f})"


def limit_rows(runs: dict[str, dict[str, Any]], app: str, rounds: int,
               kind: str) -> list[dict[str, Any]]:
    return [run for r in range(1, rounds + 1)
            if (run := runs.get(limit_key(app, r, kind))) and not run.get("failed")]


def scenario_lines(runs: dict[str, dict[str, Any]], scenario: Scenario, rounds: int) -> list[str]:
    lines = [f"### {scenario.app}, Connection: close, {scenario.connections} "
             f"connection{'s' if scenario.connections > 1 else ''}", "",
             "| row | rounds ok | req/s median (min-max) | p50 ms | p99 ms | mean ms | errors "
             "| server CPU µs/req |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name in ROWS:
        got = row(name, [run for r in range(1, rounds + 1)
                         if (run := runs.get(run_key(name, scenario, r)))])
        lines.append(f"| {name} | {got.rounds_ok}/{rounds} | {spread_text(got.rps)} | "
                     f"{num(got.p50_ms, 2)} | {num(got.p99_ms, 2)} | {num(got.mean_ms, 2)} | "
                     f"{got.errors} | {num(got.cpu_us)} |")
    for kind, what in LIMITS.items():
        limits = limit_rows(runs, scenario.app, rounds, kind)
        rss = statistics.median(x["rss_kib"] for x in limits) / 1024 if limits else 0.0
        lines.append(f"| {kind}: fork + _exit + waitpid, {what}, {rss:.0f} MiB RSS | "
                     f"{len(limits)}/{rounds} | "
                     f"{spread_text(Spread.of(x['forks_per_sec'] for x in limits))} "
                     f"| | | | | |")
    ratios = round_ratios(runs, scenario, rounds)
    lines += ["", "Per request against (median of per-round ratios, rounds): "
              f"the fork limit {ratio_text(ratios['limit'])} (master-sized "
              f"{ratio_text(ratios['master'])}), reuse {ratio_text(ratios['reuse'])}, "
              f"the fork-per-connection server {ratio_text(ratios['fpc'])}; p99 / the "
              f"fork-per-connection server's {ratio_text(ratios['p99_fpc'])}; gunicorn's process "
              f"per request {ratio_text(ratios['gunicorn'])}, uWSGI's {ratio_text(ratios['uwsgi'])}."]
    pr = row(PER_REQUEST, [run for r in range(1, rounds + 1)
                           if (run := runs.get(run_key(PER_REQUEST, scenario, r)))])
    if scenario.connections > 1 and pr.rps:
        lines.append(f"At {scenario.connections} connections the latency follows the rate: "
                     f"{scenario.connections} / {pr.rps.median:,.1f} req/s = "
                     f"{scenario.connections / pr.rps.median * 1000:,.1f} ms "
                     f"(measured mean {num(pr.mean_ms, 1)} ms).")
    if scenario.app == "blog" and scenario.connections == 1 and pr.rps:
        lines.append(f"Beside TreeFrog's prefork MPM on its own `/blog/index` "
                     f"({TREEFROG_BLOG_RPS:.0f} req/s, httperf, one connection at a time): "
                     f"{pr.rps.median / TREEFROG_BLOG_RPS:.1f}x.")
    return lines + [""]


def per_round_lines(runs: dict[str, dict[str, Any]], scenario: Scenario,
                    rounds: int) -> list[str]:
    lines = [f"| {scenario.name} round | fork limit/s | master-sized | per request | reuse "
             "| fork-per-conn. | gunicorn per request | uWSGI per request | per request p99 ms "
             "| fork-per-conn. p99 ms |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in range(1, rounds + 1):
        cells = []
        for kind in LIMITS:
            limit = runs.get(limit_key(scenario.app, r, kind))
            cells.append(num(limit["forks_per_sec"]) if limit and not limit.get("failed")
                         else "-")
        for name in ROWS:
            run = runs.get(run_key(name, scenario, r))
            cells.append(num(rate(run), 1) if good(run) else
                         (f"failed: {run['failed']}" if run else "-"))
        for name in (PER_REQUEST, FORK_PER_CONNECTION):
            run = runs.get(run_key(name, scenario, r))
            cells.append(num(p99_ms(run), 2) if run and good(run) else "-")
        lines.append(f"| {r} | " + " | ".join(cells) + " |")
    return lines + [""]


def markdown(meta: dict[str, Any], runs: dict[str, dict[str, Any]], apps: list[str],
             rounds: int, breakdown: dict[str, list[str]]) -> str:
    lines = [f"# Process per request against the fork limit ({meta['started']})", "",
             "Issue 36's bench (`make bench-isolation`, part of `make bench`; method in "
             "docs/benchmarks.md, \"Process per request\"). Every row one worker process pinned "
             "to CPU 1, the load (`tines bench`, Connection: close) on CPU 0; "
             f"{rounds} rounds, each measuring the fork limit and then every row back to back "
             f"({meta['plan']}).", ""]
    for check in checks(runs, rounds):
        lines.append(f"- **{check.status}**: {check.name}: {check.detail}")
    lines.append("")
    for scenario in scenarios(apps):
        lines += scenario_lines(runs, scenario, rounds)
    lines += ["## Each round", ""]
    for scenario in scenarios(apps):
        lines += per_round_lines(runs, scenario, rounds)
    for app, app_lines in breakdown.items():
        lines += [f"## Where a request's time goes (process per request, {app}, one "
                  "connection)", "", *app_lines, ""]
    lines += ["## The seed's measurements (issue 36, hello, one connection at a time)", "",
              *SEED_TABLE, "", "## Commands", ""]
    lines += [f"- {command}" for command in meta["commands"]]
    lines += ["", "## Machine", "", f"- {meta['machine']}", f"- versions: {meta['versions']}",
              ""]
    return "\n".join(lines)
