"""The suite's pure parts: scenarios, cells, summaries, ratios, the issue-4 checks and the
resumable state file.

Nothing here starts a process or touches the network: ``tests/python/unit/test_bench_suite.py``
covers it without servers. ``run.py`` measures, ``report.py`` renders what this module sums up.
"""

from __future__ import annotations

import json
import os
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

# Rows that are not peers: nginx's static "OK" is the machine's limit, not a WSGI server.
LIMIT_SERVERS = frozenset({"nginx-static"})


def is_tines(server: str) -> bool:
    return server.startswith("tines-")


def is_peer(server: str) -> bool:
    return not is_tines(server) and server not in LIMIT_SERVERS


@dataclass(frozen=True)
class Scenario:
    """One table of the report: an app's URL under one connection mode and concurrency."""

    app: str  # hello, blog, plaintext, json, fortunes
    mode: str  # keep-alive or close
    connections: int
    pipeline: int = 1

    @property
    def name(self) -> str:
        tail = f"/p{self.pipeline}" if self.pipeline > 1 else ""
        return f"{self.app}/{self.mode}/c{self.connections}{tail}"

    @property
    def attacked(self) -> bool:
        """The slow-client attack row (issue 14): measured unattacked, then under the attack,
        in one start of the server (see ATTACK_APP)."""
        return self.app == ATTACK_APP

    @property
    def title(self) -> str:
        if self.attacked:
            return (f"hello, {self.mode}, {self.connections} connections, while under the "
                    "slow-client attack")
        extra = f", pipelined {self.pipeline} deep" if self.pipeline > 1 else ""
        plural = "s" if self.connections != 1 else ""
        return f"{self.app}, {self.mode}, {self.connections} connection{plural}{extra}"

    @staticmethod
    def parse(name: str) -> "Scenario":
        parts = name.split("/")
        pipeline = int(parts[3][1:]) if len(parts) > 3 else 1
        return Scenario(parts[0], parts[1], int(parts[2][1:]), pipeline)


def cell_key(server: str, scenario: Scenario, run: int) -> str:
    """The state file's key of one measurement."""
    return f"{scenario.name}|{server}|run{run}"


# --------------------------------------------------------------------------- summaries


@dataclass(frozen=True)
class Spread:
    """Median of a cell's runs with their minimum and maximum."""

    median: float
    low: float
    high: float
    n: int

    @staticmethod
    def of(values: Iterable[float]) -> "Spread | None":
        data = sorted(values)
        if not data:
            return None
        return Spread(statistics.median(data), data[0], data[-1], len(data))

    @property
    def relative(self) -> float:
        """(max - min) / median: 0.1 means the runs spread over 10% of the median."""
        return (self.high - self.low) / self.median if self.median else 0.0

    @property
    def max_over_min(self) -> float:
        """max / min of the runs (the house rule's spread: a ratio holds at <= 1.10); infinite
        when the minimum is not positive."""
        return self.high / self.low if self.low > 0 else float("inf")


@dataclass(frozen=True)
class CellSummary:
    """One row of a scenario's table: a server's runs summed up."""

    server: str
    runs_ok: int
    runs_planned: int
    failed: str | None  # the first failure's reason when no run succeeded
    rps: Spread | None = None
    p50_us: float = 0.0
    p99_us: float = 0.0
    errors: int = 0
    cpu_us: Spread | None = None
    cpu_busy: float = 0.0
    pss_total_kib: float = 0.0  # PSS summed over the server's processes
    master_pss_kib: float = 0.0
    worker_uss_kib: float = 0.0  # the largest worker's USS (the root's for one process)
    steal_cpu: float = 0.0
    other_cpu: float = 0.0  # busy CPUs 0-1 not used by the server or the load generator
    cross_rps: float | None = None  # the cross-check tool's req/s (median of its runs)
    cross_cpu_us: float | None = None  # server CPU µs/req under the cross-check tool
    load_cpu_us: float | None = None  # the primary load generator's own CPU µs/req
    cross_load_cpu_us: float | None = None
    ignores_close: bool = False  # kept a connection open after a ``Connection: close`` request


def rate(run: dict[str, Any]) -> float:
    """Successful (2xx/3xx) responses per second of a run."""
    return float(run.get("ok_per_sec", run["requests_per_sec"]))


def summarise(server: str, runs: list[dict[str, Any]], planned: int) -> CellSummary:
    """Medians over the successful runs of one server in one scenario."""
    good = [r for r in runs if not r.get("failed")]
    if not good:
        reason = runs[0].get("failed") if runs else "not run"
        return CellSummary(server, 0, planned, str(reason))
    crosses = [r["cross"] for r in good if r.get("cross") and not r["cross"].get("failed")]
    return CellSummary(
        server=server, runs_ok=len(good), runs_planned=planned, failed=None,
        rps=Spread.of(rate(r) for r in good),
        p50_us=statistics.median(r["latency_us"]["p50"] for r in good),
        p99_us=statistics.median(r["latency_us"]["p99"] for r in good),
        errors=sum(int(r["errors"]["total"]) for r in good),
        cpu_us=Spread.of(r["cpu_us_per_request"] for r in good),
        cpu_busy=statistics.median(r["cpu_utilisation"] for r in good),
        # Runs recorded before per-process memory (peak RSS over the tree) count as 0.
        pss_total_kib=statistics.median(r.get("pss_total_kib", 0) for r in good),
        master_pss_kib=statistics.median(r.get("master_pss_kib", 0) for r in good),
        worker_uss_kib=statistics.median(r.get("worker_uss_kib", 0) for r in good),
        steal_cpu=statistics.median(r.get("steal_cpu", 0.0) for r in good),
        other_cpu=statistics.median(r.get("other_cpu", 0.0) for r in good),
        cross_rps=statistics.median(rate(c) for c in crosses) if crosses else None,
        cross_cpu_us=statistics.median(c["cpu_us_per_request"] for c in crosses) if crosses else None,
        load_cpu_us=statistics.median(r.get("load_cpu_us_per_request", 0.0) for r in good),
        cross_load_cpu_us=(statistics.median(c.get("load_cpu_us_per_request", 0.0) for c in crosses)
                           if crosses else None),
        ignores_close=any(r.get("honours_close") is False for r in good),
    )


@dataclass(frozen=True)
class Best:
    """The best peer of a scenario on each metric (None when no peer succeeded)."""

    rps_server: str | None
    rps: float | None
    cpu_server: str | None
    cpu_us: float | None


def best_peer(rows: list[CellSummary], skip_ignores_close: bool = True) -> Best:
    """The peer with the highest median req/s and the one with the lowest median CPU µs/req.
    Tines rows and the machine's limit (nginx) are not peers; with ``skip_ignores_close`` (the
    load generator follows the server's keep-alive decision, as wrk does) neither is a row whose
    server kept connections open in a ``Connection: close`` scenario (not comparable)."""
    peers = [r for r in rows if is_peer(r.server) and r.rps and r.cpu_us
             and not (skip_ignores_close and r.ignores_close)]
    if not peers:
        return Best(None, None, None, None)
    fastest = max(peers, key=lambda r: r.rps.median if r.rps else 0.0)
    cheapest = min(peers, key=lambda r: r.cpu_us.median if r.cpu_us else float("inf"))
    return Best(fastest.server, fastest.rps.median if fastest.rps else None,
                cheapest.server, cheapest.cpu_us.median if cheapest.cpu_us else None)


def ratio(value: float | None, reference: float | None) -> float | None:
    """value / reference, or None when either is missing or the reference is 0."""
    if value is None or reference is None or reference == 0:
        return None
    return value / reference


# --------------------------------------------------------------------------- issue 4's targets


@dataclass(frozen=True)
class Check:
    """One target (issue 4's, 12's, 14's, 15's, or the previous-run comparison), evaluated on a
    run's medians."""

    name: str
    verdict: str  # "pass", "fail", "inconclusive" (issue 15's: spreads too wide) or "not measured"
    detail: str


HELLO_KA = Scenario("hello", "keep-alive", 50)
BLOG_KA = Scenario("blog", "keep-alive", 50)
HELLO_KA_1000 = Scenario("hello", "keep-alive", 1000)
BLOG_PREFORK_MARGIN = 1.05


def event_checks(table: dict[str, dict[str, CellSummary]]) -> list[Check]:
    """Issue 4's three targets from ``table[scenario name][server]``:

    1. event's server CPU per request on hello keep-alive (50 connections) is at most thread's;
    2. on the blog (keep-alive, 50 connections) at most prefork's plus 5%;
    3. event's req/s at 1000 connections (hello keep-alive) is at least thread's at 50.
    """

    def cell(scenario: Scenario, server: str) -> CellSummary | None:
        row = table.get(scenario.name, {}).get(server)
        return row if row and row.rps and row.cpu_us else None

    def missing(*pairs: tuple[Scenario, str]) -> str:
        gone = [f"{server} on {sc.name}" for sc, server in pairs if cell(sc, server) is None]
        return "no successful run of " + ", ".join(gone)

    def check(name: str, left: tuple[Scenario, str], right: tuple[Scenario, str],
              compare: Callable[[Spread, Spread], tuple[bool, str]],
              figure: Callable[[CellSummary], Spread | None]) -> Check:
        """``compare`` gets ``figure`` of the two cells; a missing cell is "not measured"."""
        one, other = cell(*left), cell(*right)
        a, b = (figure(one), figure(other)) if one and other else (None, None)
        if a is None or b is None:
            return Check(name, "not measured", missing(left, right))
        ok, detail = compare(a, b)
        return Check(name, "pass" if ok else "fail", detail)

    def blog_limit(event: Spread, prefork: Spread) -> tuple[bool, str]:
        limit = prefork.median * BLOG_PREFORK_MARGIN
        return (event.median <= limit,
                f"event {event.median:.1f} vs prefork {prefork.median:.1f} (limit {limit:.1f})")

    def cpu(row: CellSummary) -> Spread | None:
        return row.cpu_us

    def rps(row: CellSummary) -> Spread | None:
        return row.rps

    return [
        check("hello keep-alive: event's CPU µs/req <= thread's",
              (HELLO_KA, "tines-event"), (HELLO_KA, "tines-thread"),
              lambda event, thread: (event.median <= thread.median,
                                     f"event {event.median:.1f} vs thread {thread.median:.1f}"),
              cpu),
        check("blog keep-alive: event's CPU µs/req <= prefork's + 5%",
              (BLOG_KA, "tines-event"), (BLOG_KA, "tines-prefork"), blog_limit, cpu),
        check("hello keep-alive: event's req/s at 1000 connections >= thread's at 50",
              (HELLO_KA_1000, "tines-event"), (HELLO_KA, "tines-thread"),
              lambda event, thread: (event.median >= thread.median,
                                     f"event at 1000 {event.median:,.0f} vs thread at 50 "
                                     f"{thread.median:,.0f} req/s"),
              rps),
    ]


HELLO_CLOSE = Scenario("hello", "close", 50)
PROCESS_PER_REQUEST_SHARE = 0.2
"""Issue 12: process per request (``--max-requests 1 --preload``) reaches at least 1/5 of
prefork reusing its worker (the seed measured 14x between them)."""


def recycling_checks(table: dict[str, dict[str, CellSummary]]) -> list[Check]:
    """Issue 12's process-per-request target, on hello at 50 connections (keep-alive, and new
    connections): ``tines-prefork-per-request`` req/s >= 1/5 of ``tines-prefork``'s; the
    detail names the ratio."""
    checks = []
    for scenario in (HELLO_KA, HELLO_CLOSE):
        name = f"{scenario.name}: process per request (max_requests=1, preload) >= 1/5 of prefork reuse"
        cells = table.get(scenario.name, {})
        per_request, reuse = cells.get("tines-prefork-per-request"), cells.get("tines-prefork")
        if not (per_request and per_request.rps and reuse and reuse.rps):
            checks.append(Check(name, "not measured",
                                "no successful run of tines-prefork-per-request and tines-prefork"))
            continue
        share = per_request.rps.median / reuse.rps.median
        detail = (f"per request {per_request.rps.median:,.0f} vs reuse {reuse.rps.median:,.0f} req/s: "
                  f"1/{1 / share:.1f} of reuse" if share > 0 else "per request served nothing")
        checks.append(Check(name, "pass" if share >= PROCESS_PER_REQUEST_SHARE else "fail", detail))
    return checks


# --------------------------------------------------------------------------- issue 15's targets

FLASK_KA = Scenario("flask", "keep-alive", 50)
SPREAD_LIMIT = 1.10
"""Issue 15: a target's medians decide only when every cell involved has runs whose max/min
is at most this; otherwise the check is inconclusive (repeat the run, or report it so)."""
MIN_RUNS = 5
"""Issue 15: at least this many interleaved runs per cell before the medians decide."""
THREAD_EVENT_MARGIN = 1.10
NGINX_MARGIN = 1.10


def decided(name: str, holds: bool, detail: str,
            involved: list[tuple[str, Spread]]) -> Check:
    """Issue 15's verdict: "pass" or "fail" as ``holds`` says when every involved cell (a label
    and the spread of the figure compared) has at least MIN_RUNS runs with max/min within
    SPREAD_LIMIT; otherwise "inconclusive", naming the cells at fault. The detail always
    carries each cell's max/min."""
    spreads = ", ".join(f"{label} {s.max_over_min:.2f}" for label, s in involved)
    detail = f"{detail}; max/min {spreads}"
    wide = [label for label, s in involved if s.max_over_min > SPREAD_LIMIT]
    few = [f"{label} ({s.n})" for label, s in involved if s.n < MIN_RUNS]
    if not wide and not few:
        return Check(name, "pass" if holds else "fail", detail)
    why = ([f"max/min above {SPREAD_LIMIT:.2f}: {', '.join(wide)}"] if wide else []) + (
        [f"fewer than {MIN_RUNS} runs: {', '.join(few)}"] if few else [])
    return Check(name, "inconclusive",
                 f"{detail}; {'; '.join(why)} (the medians alone would "
                 f"{'pass' if holds else 'fail'})")


def cpu_target(table: dict[str, dict[str, CellSummary]], scenario: Scenario, server: str,
               reference: str, factor: float = 1.0) -> Check:
    """``server``'s median CPU µs/req on ``scenario`` at most ``factor`` x ``reference``'s."""
    times = "" if factor == 1.0 else f"{factor:.2f} x "
    name = (f"{scenario.app} {scenario.mode}: {server} CPU µs/req <= {times}{reference}'s")
    cells = table.get(scenario.name, {})
    one, other = cells.get(server), cells.get(reference)
    if not (one and one.cpu_us and one.rps and other and other.cpu_us and other.rps):
        gone = [s for s, row in ((server, one), (reference, other)) if not (row and row.cpu_us)]
        return Check(name, "not measured",
                     f"no successful run of {', '.join(gone)} on {scenario.name}")
    limit = other.cpu_us.median * factor
    detail = f"{server} {one.cpu_us.median:.1f} vs {reference} {other.cpu_us.median:.1f}"
    detail += f" (limit {limit:.1f})" if factor != 1.0 else ""
    return decided(name, one.cpu_us.median <= limit, detail,
                   [(server, one.cpu_us), (reference, other.cpu_us)])


def cheapest_checks(table: dict[str, dict[str, CellSummary]]) -> list[Check]:
    """Issue 15's targets, on server CPU µs/req at 50 connections (``decided``'s verdicts):

    - Flask "OK" keep-alive and the blog keep-alive: tines-prefork and tines-event at most
      bjoern's;
    - hello keep-alive: tines-prefork and tines-event at most 1.10 x nginx static's;
    - hello close: tines-prefork and tines-event at most bjoern's;
    - hello keep-alive: tines-thread at most 1.10 x tines-event's.
    """
    checks = []
    for scenario in (FLASK_KA, BLOG_KA):
        checks += [cpu_target(table, scenario, f"tines-{mpm}", "bjoern")
                   for mpm in ("prefork", "event")]
    checks += [cpu_target(table, HELLO_KA, f"tines-{mpm}", "nginx-static", NGINX_MARGIN)
               for mpm in ("prefork", "event")]
    checks += [cpu_target(table, HELLO_CLOSE, f"tines-{mpm}", "bjoern")
               for mpm in ("prefork", "event")]
    checks.append(cpu_target(table, HELLO_KA, "tines-thread", "tines-event", THREAD_EVENT_MARGIN))
    return checks


def asgi_checks(table: dict[str, dict[str, CellSummary]]) -> list[Check]:
    """Issue 17's targets at 50 connections, server CPU µs per request (ASGI hello keep-alive)
    and per message (WebSocket echo of small text messages): tines-asgi at most 0.6 x
    granian-asgi's, and at most uvicorn's (``decided``'s verdicts)."""
    checks = []
    for scenario in (ASGI_HELLO_KA, WS_ECHO):
        checks += [cpu_target(table, scenario, "tines-asgi", "granian-asgi", ASGI_MARGIN),
                   cpu_target(table, scenario, "tines-asgi", "uvicorn")]
    return checks


# --------------------------------------------------------------------------- the previous run


@dataclass(frozen=True)
class Worse:
    """A Tines row of this run worse than the same cell of the previous run: its median CPU
    µs/req rose, or its req/s fell, by more than the larger of the two runs' spreads."""

    scenario: str
    server: str
    metric: str  # "CPU µs/req", "req/s" or "failed"
    previous: float
    current: float
    change: float  # the worse-way ratio: current/previous for CPU, previous/current for req/s
    limit: float  # the larger max/min of the two runs


@dataclass(frozen=True)
class Comparison:
    """This run against a previous run's JSON (see ``compare_with_previous``)."""

    source: str  # the previous report's file, as shown
    started: str
    plan: str  # the previous run's plan: "standard, 3 run(s) of 5 s"
    plan_kind: str  # its kind alone: "standard", "quick", "full"
    cells: int  # Tines rows (scenario x server) in both runs
    worse: list[Worse]


def previous_table(cells: dict[str, dict[str, Any]]) -> dict[str, dict[str, CellSummary]]:
    """A previous run's JSON ``cells`` (``SCENARIO|SERVER|runN`` keys) summed up per scenario
    and server, as ``table[scenario name][server]``; the attack row is left out (its runs
    measure the attacked rate, compared in its own table)."""
    runs: dict[tuple[str, str], list[tuple[int, dict[str, Any]]]] = {}
    for key, result in cells.items():
        parts = key.split("|")
        if len(parts) != 3 or not parts[2].startswith("run") or not parts[2][3:].isdigit():
            continue
        scenario, server, run = parts
        if scenario.split("/")[0] == ATTACK_APP:
            continue
        runs.setdefault((scenario, server), []).append((int(run[3:]), result))
    table: dict[str, dict[str, CellSummary]] = {}
    for (scenario, server), found in runs.items():
        ordered = [result for _, result in sorted(found, key=lambda pair: pair[0])]
        table.setdefault(scenario, {})[server] = summarise(server, ordered, len(ordered))
    return table


def compare_with_previous(current: dict[str, dict[str, CellSummary]],
                          previous: dict[str, dict[str, CellSummary]], source: str,
                          meta: dict[str, Any]) -> Comparison:
    """Every Tines row present in both runs (same scenario and server) whose median CPU µs/req
    rose, or req/s fell, by more than the larger of the two runs' max/min (the ratio against
    the previous median is above it), or that failed now after succeeding before. ``meta`` is
    the previous JSON's ``plan`` and ``meta`` merged (for the labels)."""
    worse: list[Worse] = []
    compared = 0
    for scenario, rows in current.items():
        for server, now in rows.items():
            before = previous.get(scenario, {}).get(server)
            if not is_tines(server) or before is None or not (before.rps and before.cpu_us):
                continue
            compared += 1
            if not (now.rps and now.cpu_us):
                worse.append(Worse(scenario, server, "failed", before.rps.median, 0.0,
                                   float("inf"), 1.0))
                continue
            cpu_limit = max(now.cpu_us.max_over_min, before.cpu_us.max_over_min)
            cpu_change = ratio(now.cpu_us.median, before.cpu_us.median)
            if cpu_change is not None and cpu_change > cpu_limit:
                worse.append(Worse(scenario, server, "CPU µs/req", before.cpu_us.median,
                                   now.cpu_us.median, cpu_change, cpu_limit))
            rps_limit = max(now.rps.max_over_min, before.rps.max_over_min)
            rps_change = ratio(before.rps.median, now.rps.median)
            if rps_change is not None and rps_change > rps_limit:
                worse.append(Worse(scenario, server, "req/s", before.rps.median,
                                   now.rps.median, rps_change, rps_limit))
    plan = (f"{meta.get('kind', '?')}, {meta.get('runs', '?')} run(s) of "
            f"{meta.get('duration_s', '?')} s")
    return Comparison(source, str(meta.get("started", "?")), plan, str(meta.get("kind", "?")),
                      compared, worse)


def worse_label(row: Worse) -> str:
    if row.metric == "failed":
        return f"{row.server} on {row.scenario} failed (previously {row.previous:,.0f} req/s)"
    digits = 1 if row.metric == "CPU µs/req" else 0
    return (f"{row.server} on {row.scenario}: {row.metric} {row.previous:,.{digits}f} -> "
            f"{row.current:,.{digits}f} ({row.change:.2f}x worse, spread limit {row.limit:.2f})")


PREVIOUS_CHECK = "no Tines row worse than the previous run"


def previous_check(comparison: Comparison | None, why_not: str) -> Check:
    """The previous-run target: "pass" when no Tines row in both runs got worse, "fail" naming
    them, "not measured" without a previous run (``why_not`` says why) or common rows."""
    if comparison is None:
        return Check(PREVIOUS_CHECK, "not measured", why_not)
    if comparison.cells == 0:
        return Check(PREVIOUS_CHECK, "not measured",
                     f"no Tines row in both this run and {comparison.source}")
    if not comparison.worse:
        return Check(PREVIOUS_CHECK, "pass",
                     f"{comparison.cells} Tines row(s) compared with {comparison.source}, none "
                     "worse beyond the larger of the two runs' spreads")
    return Check(PREVIOUS_CHECK, "fail",
                 f"{len(comparison.worse)} worse than in {comparison.source}: "
                 + "; ".join(worse_label(row) for row in comparison.worse))


# --------------------------------------------------------------------------- the slow-client attack

ATTACK_APP = "attacked"
"""The app of the attack row: tests/python/e2e/apps/slow_clients_app.py, whose ``/`` answers
``OK`` as hello does, and whose ``/upload`` and ``/big`` the attackers use."""
ATTACK_SERVERS = ("tines-prefork", "tines-thread", "tines-event", "gunicorn-gthread",
                  "granian-wsgi")
ATTACK_TARGET = 0.9
"""Issue 14: under the attack, Tines keeps at least 9/10 of its unattacked hello rate."""


@dataclass(frozen=True)
class AttackSummary:
    """One server's row of the attack table: its unattacked and attacked rates (same starts)
    and the fraction kept, over the runs whose unattacked measurement succeeded."""

    server: str
    runs_ok: int
    runs_planned: int
    failed: str | None  # the first failure's reason when no run succeeded
    unattacked: Spread | None = None
    attacked: Spread | None = None
    fraction: Spread | None = None  # attacked / unattacked, per run
    errors: int = 0  # failed requests under the attack, summed over the runs
    in_flight: int = 0  # requests still unanswered when the attacked runs ended, summed
    fell_over: int = 0  # runs with no successful response under the attack
    attackers_left: float = 0.0  # median attackers still connected when the attacked run ended
    attackers: int = 0  # attackers per run


def summarise_attack(server: str, runs: list[dict[str, Any]], planned: int) -> AttackSummary:
    """Medians over one server's attack runs (run.measure records them: the attacked run's
    fields, ``unattacked`` with the same fields, ``attack`` with the attackers' outcomes)."""
    good = [r for r in runs if not r.get("failed")]
    if not good:
        reason = runs[0].get("failed") if runs else "not run"
        return AttackSummary(server, 0, planned, str(reason))

    def left(run: dict[str, Any]) -> int:
        attack = run.get("attack", {})
        return int(attack.get("uploaders", {}).get("connected", 0)
                   + attack.get("non_readers", {}).get("connected", 0))

    return AttackSummary(
        server=server, runs_ok=len(good), runs_planned=planned, failed=None,
        unattacked=Spread.of(rate(r["unattacked"]) for r in good),
        attacked=Spread.of(rate(r) for r in good),
        fraction=Spread.of(rate(r) / rate(r["unattacked"]) if rate(r["unattacked"]) else 0.0
                           for r in good),
        errors=sum(int(r["errors"]["total"]) for r in good),
        in_flight=sum(int(r.get("in_flight_at_end", 0)) for r in good),
        fell_over=sum(1 for r in good if not r.get("ok")),
        attackers_left=statistics.median(left(r) for r in good),
        attackers=max(int(r.get("attack", {}).get("attackers", 0)) for r in good))


def attack_checks(rows: list[AttackSummary]) -> list[Check]:
    """Issue 14's target per Tines row of the attack table: the median fraction of the
    unattacked rate kept under the attack is at least ATTACK_TARGET (reported, not asserted)."""
    checks = []
    for row in rows:
        if not is_tines(row.server):
            continue
        name = (f"hello keep-alive under the slow-client attack: {row.server} keeps "
                f">= {ATTACK_TARGET:.0%} of its unattacked rate")
        if row.fraction is None or row.unattacked is None or row.attacked is None:
            checks.append(Check(name, "not measured", f"no successful run ({row.failed})"))
            continue
        detail = (f"{row.fraction.median:.2f} ({row.attacked.median:,.0f} vs "
                  f"{row.unattacked.median:,.0f} req/s)")
        checks.append(Check(name, "pass" if row.fraction.median >= ATTACK_TARGET else "fail",
                            detail))
    return checks


# --------------------------------------------------------------------------- the state file


# A run was starved by other work on the shared machine when the benchmark CPUs were this busy
# with other processes while the server's own CPU stayed under DISTURBED_BUSY: its req/s is
# the neighbour's doing, not the server's.
DISTURBED_OTHER_CPU = 0.5
DISTURBED_BUSY = 0.5


def disturbed(run: dict[str, Any]) -> bool:
    """True for a successful run that other work starved (see DISTURBED_OTHER_CPU)."""
    return (not run.get("failed") and run.get("other_cpu", 0.0) > DISTURBED_OTHER_CPU
            and run.get("cpu_utilisation", 1.0) < DISTURBED_BUSY)


class StateMismatch(Exception):
    """The state file was written for another plan; resuming would mix incomparable runs."""


class State:
    """Every finished measurement of one suite run, keyed by ``cell_key``, in one JSON file.

    Written atomically (a temporary file renamed over it) after every measurement, so a run
    that is stopped at any point resumes where it stopped: finished cells are skipped. The file
    also holds the plan it was made for; opening it for another plan raises StateMismatch.
    """

    def __init__(self, path: Path, plan: dict[str, Any], meta: dict[str, Any]) -> None:
        self.path = path
        self.plan = plan
        self.meta = meta
        self.cells: dict[str, dict[str, Any]] = {}
        self.resumed = False
        if path.exists():
            data = json.loads(path.read_text())
            if data.get("plan") != plan:
                raise StateMismatch(
                    f"{path} was written for another plan ({data.get('plan')}); "
                    "remove it or pass --fresh to start over")
            self.cells = dict(data.get("cells", {}))
            self.meta = dict(data.get("meta", meta))
            self.resumed = True

    def done(self, key: str) -> bool:
        return key in self.cells

    def record(self, key: str, result: dict[str, Any]) -> None:
        self.cells[key] = result
        self.save()

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(self.path.name + ".tmp")
        temporary.write_text(json.dumps({"schema": "tines-bench-state/1", "plan": self.plan,
                                         "meta": self.meta, "cells": self.cells}, indent=1))
        os.replace(temporary, self.path)

    def drop_disturbed(self) -> list[str]:
        """Forget the runs ``disturbed`` flags (they are measured again) and note their keys
        in ``meta["redone"]``; returns them."""
        keys = [k for k, v in self.cells.items() if disturbed(v)]
        for key in keys:
            del self.cells[key]
        self.meta["redone"] = sorted(set(self.meta.get("redone", [])) | set(keys))
        self.save()
        return keys

    def runs(self, scenario: Scenario, server: str) -> list[dict[str, Any]]:
        """The recorded runs of one cell, in run order."""
        prefix = f"{scenario.name}|{server}|run"
        found = [(int(k[len(prefix):]), v) for k, v in self.cells.items() if k.startswith(prefix)]
        return [v for _, v in sorted(found)]


# --------------------------------------------------------------------------- matrices


@dataclass(frozen=True)
class Plan:
    """How long and how often to measure, and which matrix."""

    kind: str  # "quick", "standard" or "full"
    runs: int
    warmup_s: float
    duration_s: float
    cross_s: float  # the wrk cross-check run's length (one per cell, in the middle run)

    @property
    def cross_run(self) -> int:
        """The run in which each cell also gets its wrk cross-check: the middle one."""
        return (self.runs + 1) // 2

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "runs": self.runs, "warmup_s": self.warmup_s,
                "duration_s": self.duration_s, "cross_s": self.cross_s}


PLANS = {
    # Development: one short run per cell (BENCH_QUICK=1 or --quick).
    "quick": Plan("quick", runs=1, warmup_s=1, duration_s=2, cross_s=2),
    # make bench: 5 runs per cell (issue 15's targets need at least 5), about 34 minutes on the
    # 2-core machine (estimate_seconds; run.py prints it).
    "standard": Plan("standard", runs=5, warmup_s=1, duration_s=5, cross_s=3),
    # make bench-full: hours, in the background, resumable.
    "full": Plan("full", runs=3, warmup_s=2, duration_s=10, cross_s=5),
}
# The event MPM's extra cells (issue 4) at 1000 connections, with thread for comparison. The
# standard plan keeps only hello keep-alive there (issue 4's third target); the full plan has
# hello and blog, keep-alive and close.
C1000_SERVERS = ("tines-thread", "tines-event")
# Rough cost of one server start + stop, for the time estimate only.
START_STOP_S = 1.5
# Rough cost of connecting the attackers and of closing them, for the time estimate only.
ATTACK_SETUP_S = 1.0


ASGI_APPS = frozenset({"asgi-hello", "ws-echo"})
"""The ASGI apps: only servers that name them run them (a server that serves "every app" runs
every WSGI one)."""
ASGI_HELLO_KA = Scenario("asgi-hello", "keep-alive", 50)
WS_ECHO = Scenario("ws-echo", "keep-alive", 50)
ASGI_MARGIN = 0.6
"""Issue 17: Tines' ASGI hello keep-alive server CPU per request at most this x Granian's."""


def matrix(kind: str, servers: list[str],
           serves: dict[str, frozenset[str] | None]) -> list[tuple[Scenario, list[str]]]:
    """The scenarios of a plan and, for each, the servers measured, in table order.

    ``serves[server]`` is the set of apps a server can run (None: every app). quick and
    standard: hello and blog, keep-alive and close, and flask (the Flask "OK" route, issue 15)
    keep-alive, at 50 connections for every server; hello keep-alive at 1000 for tines-thread
    and tines-event (issue 4); ASGI hello keep-alive and WebSocket echo at 50 for the ASGI
    servers (issue 17). full: hello, blog and flask at 1, 50 and 1000 connections,
    keep-alive and close; plaintext pipelined 16 deep at 50 and 1000; json and fortunes
    keep-alive at 1, 50 and 1000; ASGI hello keep-alive and WebSocket echo at 1, 50 and 1000;
    every server on every scenario it can run. Every plan ends
    with the slow-client attack row (hello keep-alive at 50 connections, unattacked and then
    attacked in each start) for ATTACK_SERVERS.
    """
    def who(app: str, only: tuple[str, ...] | None = None) -> list[str]:
        return [s for s in servers
                if ((serves.get(s) is None and app not in ASGI_APPS) or app in (serves.get(s) or ()))
                and (only is None or s in only)]

    cells: list[tuple[Scenario, list[str]]] = []
    if kind in ("quick", "standard"):
        for app in ("hello", "blog"):
            for mode in ("keep-alive", "close"):
                cells.append((Scenario(app, mode, 50), who(app)))
        cells.append((FLASK_KA, who("flask")))
        cells.append((HELLO_KA_1000, who("hello", C1000_SERVERS)))
        cells.append((ASGI_HELLO_KA, who("asgi-hello")))
        cells.append((WS_ECHO, who("ws-echo")))
    elif kind == "full":
        for connections in (1, 50, 1000):
            for app in ("hello", "blog", "flask"):
                for mode in ("keep-alive", "close"):
                    cells.append((Scenario(app, mode, connections), who(app)))
        for connections in (50, 1000):
            cells.append((Scenario("plaintext", "keep-alive", connections, 16), who("plaintext")))
        for app in ("json", "fortunes"):
            for connections in (1, 50, 1000):
                cells.append((Scenario(app, "keep-alive", connections), who(app)))
        for connections in (1, 50, 1000):
            cells.append((Scenario("asgi-hello", "keep-alive", connections), who("asgi-hello")))
            cells.append((Scenario("ws-echo", "keep-alive", connections), who("ws-echo")))
    else:
        raise ValueError(f"unknown plan {kind!r}")
    cells.append((Scenario(ATTACK_APP, "keep-alive", 50), who(ATTACK_APP, ATTACK_SERVERS)))
    return [(scenario, names) for scenario, names in cells if names]


def estimate_seconds(plan: Plan, cells: list[tuple[Scenario, list[str]]]) -> float:
    """Rough wall time of a plan: every start, warm-up, measurement and cross-check."""
    starts = plan.runs * sum(len(names) for _, names in cells)
    crosses = sum(len(names) for scenario, names in cells if not scenario.attacked)
    # An attack cell measures twice per start (unattacked, then attacked), with no cross-check.
    attacked = plan.runs * sum(len(names) for scenario, names in cells if scenario.attacked)
    return (starts * (START_STOP_S + plan.warmup_s + plan.duration_s) + crosses * plan.cross_s
            + attacked * (ATTACK_SETUP_S + plan.duration_s))
