"""The suite's report: markdown and a self-contained HTML page (inline SVG charts, inline CSS,
no script, nothing loaded from anywhere), both rendered from the state file's measurements.

``build(state_cells, cells, plan, meta, skipped)`` sums the raw runs up (model.summarise);
``markdown(report)`` and ``html_page(report)`` render it. Pure: no process, no file.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

from model import (ATTACK_TARGET, MIN_RUNS, SPREAD_LIMIT, AttackSummary, Best, CellSummary, Check,
                   Comparison, Plan, Scenario, asgi_checks, attack_checks, best_peer, cheapest_checks,
                   compare_with_previous, event_checks, is_peer, is_tines, previous_check,
                   previous_table, ratio, recycling_checks, summarise, summarise_attack)


@dataclass(frozen=True)
class Table:
    scenario: Scenario
    url_path: str
    rows: list[CellSummary]
    best: Best


@dataclass(frozen=True)
class Report:
    title: str
    plan: Plan
    meta: dict[str, Any]  # started, machine, versions, primary, cross, commands
    skipped: dict[str, str]  # server or app -> reason
    tables: list[Table]
    checks: list[Check]
    attack: list[AttackSummary] = field(default_factory=list)  # the slow-client attack row
    previous: Comparison | None = None  # this run against the previous run's JSON

    @property
    def servers(self) -> list[str]:
        """Every server that appears in a table, in first-seen order."""
        seen: list[str] = []
        for table in self.tables:
            for row in table.rows:
                if row.server not in seen:
                    seen.append(row.server)
        return seen


@dataclass(frozen=True)
class Previous:
    """The previous run to compare with: its JSON report (``"tines-bench-suite/1"``) as loaded,
    and its file as the report names it."""

    data: dict[str, Any]
    source: str


def build(runs_of: Any, cells: list[tuple[Scenario, list[str]]], url_paths: dict[str, str],
          plan: Plan, meta: dict[str, Any], skipped: dict[str, str], title: str,
          previous: Previous | None = None,
          no_previous: str = "no previous run to compare with") -> Report:
    """``runs_of(scenario, server)`` gives a cell's recorded runs (State.runs); ``previous``
    the run to compare with (``no_previous`` says why there is none)."""
    tables = []
    by_name: dict[str, dict[str, CellSummary]] = {}
    attack: list[AttackSummary] = []
    for scenario, servers in cells:
        if scenario.attacked:  # its own table: fractions of the same start's unattacked rate
            attack += [summarise_attack(server, runs_of(scenario, server), plan.runs)
                       for server in servers]
            continue
        rows = [summarise(server, runs_of(scenario, server), plan.runs) for server in servers]
        # tines bench --no-keepalive opens a connection per request whatever the server says;
        # wrk follows the server, so with wrk as the primary such a row is not comparable.
        best = best_peer(rows, skip_ignores_close=meta.get("primary") == "wrk")
        tables.append(Table(scenario, url_paths.get(scenario.app, "/"), rows, best))
        by_name[scenario.name] = {row.server: row for row in rows}
    comparison = None
    if previous is not None:
        comparison = compare_with_previous(
            by_name, previous_table(previous.data.get("cells", {})), previous.source,
            {**previous.data.get("plan", {}), **previous.data.get("meta", {})})
    checks = (event_checks(by_name) + recycling_checks(by_name) + attack_checks(attack)
              + cheapest_checks(by_name) + asgi_checks(by_name)
              + [previous_check(comparison, no_previous)])
    return Report(title, plan, meta, skipped, tables, checks, attack, comparison)


ATTACK_HEAD = ["server", "unattacked req/s", "attacked req/s", "attacked ÷ unattacked",
               "fraction spread", "errors under attack", "unanswered at the end", "fell over (runs)",
               "attackers still connected at the end"]

ATTACK_TEXT = ("hello keep-alive at 50 connections (`GET /` of "
               "tests/python/e2e/apps/slow_clients_app.py), measured twice in each start of "
               "the server: without, then while 50 slow uploaders (POST, Content-Length "
               "1,000,000, one byte per second) and 50 clients that never read a 10 MiB list "
               "body hold their connections (tests/python/slow_clients.py). The fraction is "
               "the attacked rate over the same start's unattacked rate, median over the runs, "
               f"with its min–max; issue 14's target for Tines is >= {ATTACK_TARGET}. A server "
               "that served nothing under the attack fell over (fraction 0). Errors: the load "
               "generator's failed requests; unanswered: its requests in flight when the run "
               "ended, summed over the runs (a closed loop always ends with some; a server "
               "that stalls ends with all 50 and no answers).")


def attack_rows(report: Report) -> list[list[str]]:
    out = []
    for row in report.attack:
        label = row.server + (f" ({row.runs_ok}/{row.runs_planned} runs)"
                              if 0 < row.runs_ok < row.runs_planned else "")
        if row.failed or not row.fraction or not row.unattacked or not row.attacked:
            out.append([label, f"failed: {row.failed}"] + [""] * (len(ATTACK_HEAD) - 2))
            continue
        out.append([label, num(row.unattacked.median), num(row.attacked.median),
                    f"{row.fraction.median:.2f}",
                    f"{row.fraction.low:.2f}–{row.fraction.high:.2f}", str(row.errors),
                    str(row.in_flight),
                    f"{row.fell_over}/{row.runs_ok}",
                    f"{row.attackers_left:g} of {row.attackers}"])
    return out


# --------------------------------------------------------------------------- formatting


def num(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "–"
    return f"{value:,.{digits}f}"


def ms(us: float) -> str:
    return f"{us / 1000:.2f}"


def times(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}×"


def spread(s: Any, digits: int = 0) -> str:
    return "–" if s is None else f"{s.low:,.{digits}f}–{s.high:,.{digits}f}"


def best_tines(rows: list[CellSummary], cpu: bool) -> CellSummary | None:
    tines = [r for r in rows if is_tines(r.server) and r.rps and r.cpu_us]
    if not tines:
        return None
    if cpu:
        return min(tines, key=lambda r: r.cpu_us.median if r.cpu_us else 0.0)
    return max(tines, key=lambda r: r.rps.median if r.rps else 0.0)


ERRORS_NOTE = ("⚠: the row had failed requests (see its scenario's table); req/s and CPU µs/req "
               "count successful (2xx/3xx) responses only.")


def main_table(report: Report, cpu: bool) -> list[list[str]]:
    """Rows scenarios, columns servers: req/s medians (or CPU µs/req), with the ratio of the
    best Tines row to the best peer."""
    servers = report.servers
    head = ["scenario", *servers,
            "cheapest Tines ÷ cheapest peer" if cpu else "best Tines ÷ best peer"]
    out = [head]
    for table in report.tables:
        by_server = {r.server: r for r in table.rows}
        line = [table.scenario.name]
        for server in servers:
            row = by_server.get(server)
            if row is None:
                line.append("")
            elif row.failed:
                line.append("failed")
            else:
                line.append((num(row.cpu_us.median if row.cpu_us else None, 1) if cpu
                             else num(row.rps.median if row.rps else None))
                            + (" ⚠" if row.errors else ""))
        top = best_tines(table.rows, cpu)
        if cpu:
            value = ratio(top.cpu_us.median if top and top.cpu_us else None, table.best.cpu_us)
        else:
            value = ratio(top.rps.median if top and top.rps else None, table.best.rps)
        line.append(f"{times(value)} ({top.server.removeprefix('tines-')})"
                    if top and value is not None else "–")
        out.append(line)
    return out


def any_errors(report: Report) -> bool:
    return any(row.errors for table in report.tables for row in table.rows)


DETAIL_HEAD = ["server", "req/s", "req/s spread", "p50 ms", "p99 ms", "errors", "CPU µs/req",
               "CPU spread", "server CPU busy", "PSS MiB (all)", "master PSS MiB",
               "worker USS MiB", "req/s ÷ best peer",
               "CPU ÷ cheapest peer", "wrk req/s", "other CPUs", "stolen CPUs"]


def detail_rows(table: Table) -> list[list[str]]:
    out = []
    for row in table.rows:
        label = row.server + (f" ({row.runs_ok}/{row.runs_planned} runs)"
                              if 0 < row.runs_ok < row.runs_planned else "")
        label += " †" if row.ignores_close else ""
        if row.failed or not row.rps or not row.cpu_us:
            out.append([label, f"failed: {row.failed}"] + [""] * (len(DETAIL_HEAD) - 2))
            continue
        out.append([label, num(row.rps.median), spread(row.rps), ms(row.p50_us), ms(row.p99_us),
                    str(row.errors), num(row.cpu_us.median, 1), spread(row.cpu_us, 1),
                    f"{row.cpu_busy:.0%}", f"{row.pss_total_kib / 1024:.1f}",
                    f"{row.master_pss_kib / 1024:.1f}", f"{row.worker_uss_kib / 1024:.1f}",
                    times(ratio(row.rps.median, table.best.rps)),
                    times(ratio(row.cpu_us.median, table.best.cpu_us)),
                    num(row.cross_rps), f"{row.other_cpu:.2f}", f"{row.steal_cpu:.2f}"])
    return out


CROSS_HEAD = ["scenario", "server", "primary req/s", "wrk req/s", "primary ÷ wrk",
              "primary load CPU µs/req", "wrk load CPU µs/req"]


def cross_rows(report: Report) -> list[list[str]]:
    out = []
    for table in report.tables:
        for row in table.rows:
            if row.cross_rps is None or not row.rps:
                continue
            out.append([table.scenario.name, row.server, num(row.rps.median), num(row.cross_rps),
                        times(ratio(row.rps.median, row.cross_rps)), num(row.load_cpu_us, 1),
                        num(row.cross_load_cpu_us, 1)])
    return out


IGNORES_CLOSE_NOTE = ("† kept the connection open after answering a `Connection: close` request "
                      "(checked once per start). `tines bench --no-keepalive` opens a new "
                      "connection for every request whatever the server does, but wrk follows "
                      "the server's keep-alive decision and reuses such connections: the row's "
                      "wrk figures are keep-alive figures, and when wrk is the primary load "
                      "generator the row is left out of the best-peer ratios.")


def table_notes(table: Table) -> list[str]:
    return [IGNORES_CLOSE_NOTE] if any(r.ignores_close for r in table.rows) else []


def best_line(table: Table) -> str:
    if table.best.rps_server is None:
        return "No peer succeeded in this scenario: no ratio."
    return (f"Best peer: {table.best.rps_server} by req/s ({num(table.best.rps)}), "
            f"{table.best.cpu_server} by CPU ({num(table.best.cpu_us, 1)} µs/req).")


def method_text(report: Report) -> str:
    plan, meta = report.plan, report.meta
    return (f"{plan.runs} interleaved run(s) per cell of {plan.duration_s:g} s after a "
            f"{plan.warmup_s:g} s warm-up; load from {meta['primary']} (one thread, on CPU 0), "
            f"cross-check: {meta['cross']}. Each server runs one worker process pinned to CPU 1. "
            "Medians, with the min–max spread of the runs. req/s: successful (2xx/3xx) responses "
            "per second. Errors: every failed request (connect, reset, timeout, bad status, "
            "parse), summed over the runs. CPU µs/req: user+sys CPU of the server's whole "
            "process tree (from /proc) / successful responses; "
            "server CPU busy: that CPU time / wall time (100% = saturated). Memory, after the "
            "measured run, per process from smaps_rollup (never RSS summed over the tree, which "
            "counts each shared page once per process): PSS of all the server's processes "
            "together, the master's (root process's) PSS, and the largest USS among the other "
            "processes (the root's for a one-process server such as bjoern: its figures are "
            "the master's). Ratios are to the best peer (gunicorn, uWSGI, Granian, bjoern; nginx "
            "is the machine's limit, not a peer). Other CPUs: busy time of CPUs 0 and 1 not "
            "used by the server or the load generator (other work on this shared machine), and "
            "stolen CPUs: time the hypervisor took from them, each per second of the run; a "
            "run with either well above 0.1 was disturbed: read its spread.")


TARGETS_HEAD = ("Targets: event MPM (issue 4), process per request (issue 12), slow clients "
                "(issue 14), the cheapest servers (issue 15), the previous run")
ISSUE15_TEXT = (f"Issue 15's targets (bjoern, nginx static and the thread MPM) decide on the "
                f"medians only when every cell involved has at least {MIN_RUNS} runs and their "
                f"max/min (of the figure compared) is at most {SPREAD_LIMIT:.2f}; otherwise they "
                "are INCONCLUSIVE: repeat the run on a quieter machine, or report them so.")

PREVIOUS_HEAD = ["scenario", "server", "figure", "previous", "now", "worse by", "spread limit"]


def previous_text(comparison: Comparison, plan: Plan) -> str:
    other = ("" if comparison.plan_kind == plan.kind else
             f" **A {comparison.plan_kind} run against this {plan.kind} one: runs of other "
             "lengths, read the rows as a hint only.**")
    found = f"{len(comparison.worse)} such:" if comparison.worse else "none is."
    return (f"Against {comparison.source} (started {comparison.started}; "
            f"{comparison.plan}).{other} {comparison.cells} Tines row(s) in both runs. A row "
            "is worse when its median CPU µs/req rose, or its req/s fell, by a ratio above the "
            f"larger max/min of the two runs' figures, or when it failed now; {found}")


def previous_rows(comparison: Comparison) -> list[list[str]]:
    out = []
    for row in comparison.worse:
        if row.metric == "failed":
            out.append([row.scenario, row.server, "failed", num(row.previous) + " req/s",
                        "failed", "", ""])
            continue
        digits = 1 if row.metric == "CPU µs/req" else 0
        out.append([row.scenario, row.server, row.metric, num(row.previous, digits),
                    num(row.current, digits), times(row.change), times(row.limit)])
    return out


def partial_text(report: Report) -> str:
    """A warning when the state file holds fewer measurements than the plan (a run still going
    on, or stopped), else ""."""
    measured, planned = report.meta.get("measured"), report.meta.get("planned")
    if measured is None or planned is None or measured >= planned:
        return ""
    return (f"Partial: {measured} of {planned} measurements so far; run the same command again "
            "to resume.")


def redone_text(report: Report) -> str:
    redone = report.meta.get("redone", [])
    return (f"{len(redone)} run(s) starved by other work on the machine (other CPUs > 0.5 while "
            "the server's CPU was under 50% busy) were measured again afterwards "
            "(`--redo-disturbed`), out of the interleaved order: "
            + ", ".join(f"`{key}`" for key in redone) + ".")


# --------------------------------------------------------------------------- markdown


def md_table(rows: list[list[str]], numeric_from: int = 1) -> list[str]:
    head, *body = rows
    align = ["---" if i < numeric_from else "---:" for i in range(len(head))]
    return ["| " + " | ".join(cells) + " |" for cells in [head, align, *body]]


def markdown(report: Report) -> str:
    lines = [f"# {report.title}", ""]
    if report.plan.kind == "quick":
        lines += ["**Quick run (BENCH_QUICK): one short run per cell; for development only.**", ""]
    lines += [method_text(report), ""]
    lines += [f"**{partial_text(report)}**", ""] if partial_text(report) else []
    lines += [redone_text(report), ""] if report.meta.get("redone") else []
    lines += ["## Main table: requests per second (median)", ""]
    lines += md_table(main_table(report, cpu=False)) + [""]
    lines += [ERRORS_NOTE, ""] if any_errors(report) else []
    lines += ["## Server CPU µs per request (median)", ""]
    lines += md_table(main_table(report, cpu=True)) + [""]
    lines += [f"## {TARGETS_HEAD}", "", ISSUE15_TEXT, ""]
    for check in report.checks:
        lines.append(f"- **{check.verdict.upper()}**: {check.name}: {check.detail}")
    lines.append("")
    if report.previous is not None:
        lines += ["## Against the previous run", "",
                  previous_text(report.previous, report.plan), ""]
        if report.previous.worse:
            lines += md_table([PREVIOUS_HEAD, *previous_rows(report.previous)],
                              numeric_from=3) + [""]
    if report.attack:
        lines += ["## hello keep-alive while under the slow-client attack", "", ATTACK_TEXT, ""]
        lines += md_table([ATTACK_HEAD, *attack_rows(report)]) + [""]
    if report.skipped:
        lines += ["## Skipped", ""]
        lines += [f"- {name}: {reason}" for name, reason in report.skipped.items()] + [""]
    for table in report.tables:
        lines += [f"## {table.scenario.title} (`GET {table.url_path}`)", "", best_line(table), ""]
        lines += md_table([DETAIL_HEAD, *detail_rows(table)]) + [""]
        lines += [note + "\n" for note in table_notes(table)]
    cross = cross_rows(report)
    if cross:
        lines += ["## Cross-check: the primary load generator against wrk", "",
                  "One wrk run per cell, on the same warm server right after the primary's "
                  "measured run. Load CPU: the generator's own user+sys CPU per request.", ""]
        lines += md_table([CROSS_HEAD, *cross], numeric_from=2) + [""]
    lines += ["## Command lines", "", "Each prefixed with `taskset -c 1` (servers) or "
              "`taskset -c 0` (load); `PORT` is a free port picked per start.", ""]
    lines += [f"- {line}" for line in report.meta.get("commands", [])] + [""]
    lines += ["## Machine and versions", ""]
    for key, value in {**report.meta.get("machine", {}), **report.meta.get("versions", {})}.items():
        lines.append(f"- {key}: {value}")
    if report.meta.get("resumed_with_versions"):
        lines.append(f"- resumed later with other versions: {report.meta['resumed_with_versions']}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- HTML

COLOURS = {"tines": "#c0392b", "peer": "#2c7fb8", "limit": "#999999"}


def colour(server: str) -> str:
    if is_tines(server):
        return COLOURS["tines"]
    return COLOURS["peer"] if is_peer(server) else COLOURS["limit"]


def svg_bars(title: str, bars: list[tuple[str, float, float, float]], unit: str) -> str:
    """A horizontal bar chart: (label, median, low, high) per bar, the min–max as a whisker."""
    label_w, plot_w, row_h, top = 150, 330, 22, 26
    width, height = label_w + plot_w + 90, top + row_h * len(bars) + 8
    top_value = max([high for _, _, _, high in bars] + [1e-9])
    scale = plot_w / top_value
    out = [f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
           f'role="img" aria-label="{html.escape(title)}">',
           f'<text x="0" y="16" font-size="13" font-weight="bold">{html.escape(title)}</text>']
    for i, (label, median, low, high) in enumerate(bars):
        y = top + i * row_h
        bar = max(1.0, median * scale)
        out.append(f'<text x="{label_w - 6}" y="{y + 15}" font-size="12" '
                   f'text-anchor="end">{html.escape(label)}</text>')
        out.append(f'<rect x="{label_w}" y="{y + 3}" width="{bar:.1f}" height="{row_h - 6}" '
                   f'fill="{colour(label)}"><title>{html.escape(label)}: {median:,.1f} '
                   f'{html.escape(unit)}</title></rect>')
        if high > low:
            x1, x2, mid = label_w + low * scale, label_w + high * scale, y + row_h / 2
            out.append(f'<line x1="{x1:.1f}" y1="{mid:.1f}" x2="{x2:.1f}" y2="{mid:.1f}" '
                       'stroke="#222" stroke-width="1.5"/>')
        out.append(f'<text x="{label_w + max(bar, high * scale) + 6:.1f}" y="{y + 15}" '
                   f'font-size="12">{median:,.0f}</text>')
    out.append("</svg>")
    return "".join(out)


def html_table(rows: list[list[str]]) -> str:
    head, *body = rows
    out = ['<div class="wide"><table><thead><tr>',
           *(f"<th>{html.escape(c)}</th>" for c in head), "</tr></thead><tbody>"]
    for cells in body:
        out.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    out.append("</tbody></table></div>")
    return "".join(out)


CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 7px;text-align:right;white-space:nowrap}
th:first-child,td:first-child{text-align:left}
.pass{color:#1a7f37;font-weight:bold}.fail{color:#c0392b;font-weight:bold}
.not{color:#777;font-weight:bold}.unsure{color:#b36b00;font-weight:bold}.charts{display:flex;flex-wrap:wrap;gap:1em}
.legend span{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px}
.wide{overflow-x:auto}
"""


def html_page(report: Report) -> str:
    e = html.escape
    parts = ["<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
             f"<title>{e(report.title)}</title><style>{CSS}</style></head><body>",
             f"<h1>{e(report.title)}</h1>"]
    if report.plan.kind == "quick":
        parts.append("<p><strong>Quick run: one short run per cell; for development only."
                     "</strong></p>")
    parts.append(f"<p>{e(method_text(report))}</p>")
    if partial_text(report):
        parts.append(f"<p><strong>{e(partial_text(report))}</strong></p>")
    if report.meta.get("redone"):
        parts.append(f"<p>{e(redone_text(report))}</p>")
    parts.append('<p class="legend">'
                 + "".join(f'<span style="background:{c}"></span>{e(n)}'
                           for n, c in (("Tines", COLOURS["tines"]), ("peers", COLOURS["peer"]),
                                        ("nginx static (the machine's limit)", COLOURS["limit"])))
                 + "; whiskers: min–max of the runs.</p>")
    parts.append("<h2>Main table: requests per second (median)</h2>")
    parts.append(html_table(main_table(report, cpu=False)))
    if any_errors(report):
        parts.append(f"<p>{e(ERRORS_NOTE)}</p>")
    parts.append("<h2>Server CPU µs per request (median)</h2>")
    parts.append(html_table(main_table(report, cpu=True)))
    parts.append(f"<h2>{e(TARGETS_HEAD)}</h2><p>{e(ISSUE15_TEXT)}</p><ul>")
    for check in report.checks:
        css = {"pass": "pass", "fail": "fail", "inconclusive": "unsure"}.get(check.verdict, "not")
        parts.append(f'<li><span class="{css}">{e(check.verdict.upper())}</span>: '
                     f"{e(check.name)}: {e(check.detail)}</li>")
    parts.append("</ul>")
    if report.previous is not None:
        text = previous_text(report.previous, report.plan).replace("**", "")
        parts.append(f"<h2>Against the previous run</h2><p>{e(text)}</p>")
        if report.previous.worse:
            parts.append(html_table([PREVIOUS_HEAD, *previous_rows(report.previous)]))
    if report.attack:
        parts.append("<h2>hello keep-alive while under the slow-client attack</h2>")
        parts.append(f"<p>{e(ATTACK_TEXT)}</p>")
        parts.append(html_table([ATTACK_HEAD, *attack_rows(report)]))
    if report.skipped:
        parts.append("<h2>Skipped</h2><ul>" + "".join(
            f"<li>{e(k)}: {e(v)}</li>" for k, v in report.skipped.items()) + "</ul>")
    for table in report.tables:
        parts.append(f"<h2>{e(table.scenario.title)} (<code>GET {e(table.url_path)}</code>)</h2>")
        parts.append(f"<p>{e(best_line(table))}</p>")
        good = [r for r in table.rows if r.rps and r.cpu_us]
        if good:
            rps = [(r.server, r.rps.median, r.rps.low, r.rps.high) for r in good if r.rps]
            cpu = [(r.server, r.cpu_us.median, r.cpu_us.low, r.cpu_us.high) for r in good if r.cpu_us]
            parts.append('<div class="charts">' + svg_bars("requests/s", rps, "req/s")
                         + svg_bars("server CPU µs per request", cpu, "µs") + "</div>")
        parts.append(html_table([DETAIL_HEAD, *detail_rows(table)]))
        parts += [f"<p>{e(note)}</p>" for note in table_notes(table)]
    cross = cross_rows(report)
    if cross:
        parts.append("<h2>Cross-check: the primary load generator against wrk</h2>")
        parts.append(html_table([CROSS_HEAD, *cross]))
    parts.append("<h2>Command lines</h2><ul>" + "".join(
        f"<li><code>{e(c)}</code></li>" for c in report.meta.get("commands", [])) + "</ul>")
    parts.append("<h2>Machine and versions</h2><ul>" + "".join(
        f"<li>{e(str(k))}: {e(str(v))}</li>"
        for k, v in {**report.meta.get("machine", {}), **report.meta.get("versions", {})}.items())
        + "</ul></body></html>")
    return "\n".join(parts) + "\n"
