"""The side-by-side benchmark suite: Tines (each MPM) against gunicorn (gthread), uWSGI,
Granian, bjoern and nginx's static answer, driven by ``tines bench`` with wrk as a cross-check.

``make bench`` runs the standard plan (5 runs per cell, about 33 minutes); ``make bench-full`` the whole matrix
in the background (``--full``: hours, resumable); ``BENCH_QUICK=1`` or ``--quick`` a tiny
matrix of 2 s cells and one run, for development. Method: docs/benchmarks.md.

Every measurement goes into a state file as soon as it is taken; a run started again with the
same state file (``--full`` always uses ``benches/results/tmp/full/state.json``; any plan
accepts ``--state PATH``) skips the cells already measured. The report (markdown, HTML with
inline SVG charts, JSON) is rendered from that file: ``--report-only`` renders it again.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, TypeVar

# benches/ is sys.path[0] when this file runs as a script.
import report as reporting
from apps import fortunes_db
from attack import AttackFailed, under_attack
from attack import description as attack_description
from loadgen import (LOAD_CPU, Load, LoadFailed, Tool, find_tines_bench, run_load,
                     tines_bench_command, wrk_command)
from model import PLANS, Plan, Scenario, State, StateMismatch, cell_key, estimate_seconds, matrix
from procfs import cpu_times, tree, tree_cpu_ticks, tree_memory
from provision import ensure_peers, ensure_tools, machine_info, tool_path, versions
from servers import (APPS, SERVER_CPU, Server, StartFailed, available_servers,
                     closes_after_close_request, display_command, free_port, start, stop,
                     tines_binary)
from uploads import UPLOAD_APPS, PrepareFailed, request_for

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benches" / "results"
TMP = RESULTS / "tmp"
FULL_STATE = TMP / "full" / "state.json"
# The load generator's standalone build (crates/loadgen), used when the CLI has no `bench`.
STANDALONE_BENCH = REPO / "target" / "release" / "tines-bench"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
BENCH_CPUS = [int(SERVER_CPU), int(LOAD_CPU)]
T = TypeVar("T")


def shown(path: Path) -> str:
    """``path`` relative to the repository when it is inside it."""
    try:
        return str(path.relative_to(REPO))
    except ValueError:
        return str(path)


def log(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- one measurement


def server_figures(result: dict[str, Any], cpu_ticks: int, wall_s: float,
                   load_cpu_s: float) -> None:
    """Server CPU per request and utilisation, and the generator's own CPU per request."""
    cpu_s = cpu_ticks / CLOCK_TICKS
    # Per successful (2xx/3xx) response: a row answering 503s must not look fast or cheap.
    # Without errors this is every completed response.
    requests = int(result["ok"])
    result["ok_per_sec"] = requests / result["elapsed_s"] if result["elapsed_s"] else 0.0
    result["cpu_seconds"] = cpu_s
    result["cpu_us_per_request"] = cpu_s * 1e6 / requests if requests else 0.0
    result["cpu_utilisation"] = cpu_s / wall_s if wall_s else 0.0
    result["load_cpu_us_per_request"] = load_cpu_s * 1e6 / requests if requests else 0.0


def measured(tool: Tool, load: Load, pid: int, log_path: Path, workdir: Path) -> dict[str, Any]:
    """One measured run of ``tool`` with the server tree's CPU read around it."""
    before, machine_before, t0 = tree_cpu_ticks(pid), cpu_times(BENCH_CPUS), time.monotonic()
    result = run_load(tool, load, log_path, workdir)
    after, machine_after, wall = tree_cpu_ticks(pid), cpu_times(BENCH_CPUS), time.monotonic() - t0
    server_figures(result, after - before, wall, result["load_cpu_seconds"])
    busy = (machine_after.busy - machine_before.busy) / CLOCK_TICKS
    result["other_cpu"] = (busy - result["cpu_seconds"] - result["load_cpu_seconds"]) / wall
    result["steal_cpu"] = (machine_after.steal - machine_before.steal) / CLOCK_TICKS / wall
    if result["ok"] == 0:
        result["failed"] = f"no successful response ({result['errors']['total']} errors)"
    return result


SETTLE_STEP_S = 0.1
SETTLE_IDLE_TICKS = 1
SETTLE_LIMIT_S = 15.0


def settle(pid: int) -> None:
    """Wait until the server tree is idle after the warm-up (at most SETTLE_LIMIT_S).

    The warm-up's load generator closes its connections when it ends, possibly with requests
    still queued in the server (1000 connections against a slow app): a server that still
    works them off when the measured run starts would count that work, and may refuse the
    new requests (the event MPM's max_queued_requests). Every server gets the same chance to
    drain: the tree's CPU time must stop growing (at most one tick per step).
    """
    end = time.monotonic() + SETTLE_LIMIT_S
    last = tree_cpu_ticks(pid)
    while time.monotonic() < end:
        time.sleep(SETTLE_STEP_S)
        now = tree_cpu_ticks(pid)
        if now - last <= SETTLE_IDLE_TICKS:
            return
        last = now


def measure(server: Server, scenario: Scenario, run: int, plan: Plan, primary: Tool,
            cross: Tool | None, workdir: Path, fortunes: Path) -> dict[str, Any]:
    """Start the server, warm it up, measure (and cross-check), stop it. Never raises for the
    server or the load: a failure is recorded as ``failed`` with its reason."""
    app = APPS[scenario.app]
    port = free_port()
    stem = f"{scenario.name.replace('/', '-')}-{server.name}-run{run}"
    log_path = workdir / f"{stem}.log"
    database = workdir / f"{stem}.sqlite3"
    env = {**os.environ, "BLOG_DB": str(database), "FORTUNES_DB": str(fortunes),
           "PYTHONUNBUFFERED": "1"}
    env.pop("VIRTUAL_ENV", None)
    base: dict[str, Any] = {"server": server.name, "scenario": scenario.name, "run": run,
                            "command": display_command(server, app), "failed": None}
    try:
        running = start(server, app, port, log_path, env, workdir)
    except StartFailed as error:
        return {**base, "failed": f"start: {error}"}
    url = f"{app.scheme}://127.0.0.1:{port}{app.url_path}"
    load = Load(url, scenario.connections, plan.duration_s, scenario.mode == "keep-alive",
                scenario.pipeline)
    try:
        if scenario.app in UPLOAD_APPS:
            sent = request_for(scenario.app, port, workdir)
            load = replace(load, method=sent.method, headers=sent.headers,
                           body_file=sent.body_file)
        honours_close = (closes_after_close_request(port, app.url_path)
                         if scenario.mode == "close" else None)
        run_load(primary, replace(load, duration_s=plan.warmup_s), log_path, workdir)
        settle(running.process.pid)
        result = {**base, **measured(primary, load, running.process.pid, log_path, workdir)}
        if scenario.attacked:
            return {**base, **attacked(result, primary, load, running.process.pid, log_path,
                                       workdir, port)}
        result["honours_close"] = honours_close
        memory = tree_memory(running.process.pid)
        result["memory"] = memory["processes"]
        for key in ("pss_total_kib", "master_pss_kib", "worker_uss_kib"):
            result[key] = memory[key]
        result["processes"] = len(tree(running.process.pid))
        result["load_average_1m"] = os.getloadavg()[0]
        # wrk speaks no WebSocket: a ws:// cell has no cross-check.
        if cross is not None and run == plan.cross_run and app.scheme == "http":
            cross_load = replace(load, duration_s=plan.cross_s)
            try:
                result["cross"] = measured(cross, cross_load, running.process.pid, log_path,
                                           workdir)
            except LoadFailed as error:
                result["cross"] = {"failed": str(error)}
        return result
    except (LoadFailed, OSError) as error:
        return {**base, "failed": f"load: {error}"}
    except PrepareFailed as error:
        return {**base, "failed": f"prepare: {error}"}
    finally:
        stop(running)
        for suffix in ("", "-wal", "-shm"):
            Path(f"{database}{suffix}").unlink(missing_ok=True)


def attacked(unattacked: dict[str, Any], primary: Tool, load: Load, pid: int, log_path: Path,
             workdir: Path, port: int) -> dict[str, Any]:
    """The attack row's second half, on the same warm server: the same load again while the
    slow-client attack holds its connections (attack.under_attack). The result is the attacked
    run's, with ``unattacked`` (the run just taken) and ``attack`` (the attackers' outcomes).
    A server that falls over under the attack (no successful response) is not a failed cell:
    its fraction is 0; only a failed unattacked run, or an attack that could not connect, is."""
    if unattacked.get("failed"):
        return unattacked
    try:
        result = under_attack(port, lambda: measured(primary, load, pid, log_path, workdir))
    except AttackFailed as error:
        return {**unattacked, "failed": f"attack: {error}"}
    except LoadFailed as error:  # the generator itself broke down, not the server
        return {**unattacked, "failed": f"load under attack: {error}"}
    result["fell_over"] = result.pop("failed", None)
    result["failed"] = None
    result["unattacked"] = unattacked
    result["memory"] = tree_memory(pid)["processes"]
    result["processes"] = len(tree(pid))
    result["load_average_1m"] = os.getloadavg()[0]
    return result


# --------------------------------------------------------------------------- the run


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        default=os.environ.get("BENCH_QUICK") == "1",
                        help="one 2 s run per cell, report in benches/results/tmp/ "
                             "(env BENCH_QUICK=1); with --full, the full matrix that way")
    parser.add_argument("--full", action="store_true",
                        help="the whole matrix (hours), resumable from "
                             "benches/results/tmp/full/state.json")
    parser.add_argument("--state", type=Path,
                        help="state file to write and resume from (default: a new one per run; "
                             "--full: benches/results/tmp/full/state.json)")
    parser.add_argument("--fresh", action="store_true",
                        help="discard the state file first instead of resuming")
    parser.add_argument("--redo-disturbed", action="store_true",
                        help="measure again the runs of the state file that other work on the "
                             "machine starved (other CPUs > 0.5 while the server was under 50%% "
                             "busy); the report lists them")
    parser.add_argument("--report-only", action="store_true",
                        help="render the report from the state file without measuring")
    parser.add_argument("--load-tool", choices=("auto", "tines-bench", "wrk"), default="auto",
                        help="primary load generator (auto: tines bench when this build has it, "
                             "else wrk)")
    parser.add_argument("--servers", help="comma-separated subset of the servers")
    parser.add_argument("--apps", help="comma-separated subset of: " + ", ".join(APPS))
    parser.add_argument("--modes", help="comma-separated subset of: keep-alive, close")
    parser.add_argument("--connections", help="comma-separated subset of connection counts")
    parser.add_argument("--previous", metavar="PATH",
                        help="the JSON report of the run to compare with (Tines rows worse than "
                             "in it are listed; default: the newest "
                             "benches/results/YYYY-MM-DD-HHMM.json older than this run; "
                             "'none' to skip the comparison)")
    return parser.parse_args(argv)


KEPT_REPORT = re.compile(r"\d{4}-\d{2}-\d{2}-\d{4}\.json")


def find_previous(results: Path, started: str) -> Path | None:
    """The newest kept standard report (``results/YYYY-MM-DD-HHMM.json``) older than the run
    started at ``started``: never the one being written, never a full, A/B or quick report."""
    older = sorted(path for path in results.glob("*.json")
                   if KEPT_REPORT.fullmatch(path.name) and path.stem < started)
    return older[-1] if older else None


class PreviousUnreadable(Exception):
    """The previous run's JSON cannot be read as a suite report; the message says why."""


def read_previous(path: Path) -> reporting.Previous:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise PreviousUnreadable(f"cannot read {path}: {error}") from error
    if (not isinstance(data, dict) or data.get("schema") != "tines-bench-suite/1"
            or not isinstance(data.get("cells"), dict)):
        raise PreviousUnreadable(f"{path} is not a suite report (schema tines-bench-suite/1 "
                                 "with cells)")
    return reporting.Previous(data, shown(path))


def previous_run(choice: str | None, started: str) -> tuple[reporting.Previous | None, str]:
    """The run to compare with and, when there is none, why. A ``--previous`` that cannot be
    read ends the run (exit 2, one line); a default one is reported as not measured."""
    if choice == "none":
        return None, "not compared (--previous none)"
    if choice:
        try:
            return read_previous(Path(choice)), ""
        except PreviousUnreadable as error:
            sys.stderr.write(f"bench: --previous: {error}\n")
            sys.exit(2)
    path = find_previous(RESULTS, started)
    if path is None:
        return None, f"no {shown(RESULTS)}/YYYY-MM-DD-HHMM.json older than this run"
    try:
        return read_previous(path), ""
    except PreviousUnreadable as error:
        return None, str(error)


def keep(items: list[T], wanted: str | None, key: Callable[[T], str]) -> list[T]:
    if not wanted:
        return items
    names = set(wanted.split(","))
    return [item for item in items if key(item) in names]


def choose_tools(choice: str) -> tuple[Tool, Tool | None, str]:
    """The primary load generator, the cross-check (wrk, unless wrk is the primary), and a
    note on the choice for the report."""
    wrk = Tool("wrk", (tool_path("wrk") or "wrk",))
    argv, how = find_tines_bench(tines_binary(), STANDALONE_BENCH)
    if choice == "wrk" or (choice == "auto" and argv is None):
        note = "primary wrk" + (f" ({how})" if choice == "auto" else " (--load-tool wrk)")
        return wrk, None, note
    if argv is None:
        sys.exit(f"bench: --load-tool tines-bench: {how}")
    return Tool("tines-bench", argv), wrk, f"primary {how}, wrk as a cross-check"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    plan = PLANS["quick" if args.quick else "full" if args.full else "standard"]
    stamp = time.strftime("%Y-%m-%d-%H%M")
    if args.state:
        state_path = args.state.resolve()
    elif args.full and not args.quick:
        state_path = FULL_STATE
    else:
        state_path = TMP / f"{plan.kind}{'-full' if args.full else ''}-{stamp}" / "state.json"
    if args.fresh and not args.report_only:
        state_path.unlink(missing_ok=True)
    if args.report_only and not state_path.exists():
        sys.stderr.write(f"bench: no state file at {state_path}\n")
        return 2
    workdir = state_path.parent
    workdir.mkdir(parents=True, exist_ok=True)
    lock = (workdir / "lock").open("w")
    try:
        if not args.report_only:  # rendering a report while a run goes on is fine
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        sys.stderr.write(f"bench: another run is using {state_path}\n")
        return 2

    if not args.report_only:
        ensure_tools(["wrk", "nginx"])
        ensure_peers()
    primary, cross, tools_note = choose_tools(args.load_tool)
    servers, skipped = available_servers()
    servers = keep(servers, args.servers, lambda s: s.name)
    for name, reason in skipped.items():
        log(f"skipping {name}: {reason}")
    serves = {s.name: s.apps for s in servers}
    cells = matrix("full" if args.full else "standard", [s.name for s in servers], serves)
    cells = [(sc, names) for sc, names in cells
             if (not args.apps or sc.app in args.apps.split(","))
             and (not args.modes or sc.mode in args.modes.split(","))
             and (not args.connections or str(sc.connections) in args.connections.split(","))]
    for app in {sc.app for sc, _ in cells}:
        if not APPS[app].file.exists():
            skipped[app] = f"`{APPS[app].file.relative_to(REPO)}` is missing"
    cells = [(sc, names) for sc, names in cells if sc.app not in skipped]

    meta = {"started": stamp, "machine": machine_info(), "versions": versions(tines_binary()),
            "primary": primary.name, "cross": cross.name if cross else "none", "tools": tools_note}
    try:
        state = State(state_path, plan.as_dict(), meta)
    except StateMismatch as error:
        sys.stderr.write(f"bench: {error}\n")
        return 2
    # Chosen before measuring, so a --previous that cannot be read stops the run at once.
    previous, no_previous = previous_run(args.previous, state.meta["started"])
    log(f"comparing with {previous.source}" if previous else f"previous run: {no_previous}")
    if state.resumed and not args.report_only:
        log(f"resuming {shown(state_path)}: {len(state.cells)} measurement(s) "
            "already done")
        if state.meta.get("versions") != meta["versions"] and not args.report_only:
            log("versions differ from the run being resumed; the report lists both")
            state.meta["resumed_with_versions"] = meta["versions"]
    by_name = {s.name: s for s in servers}

    if args.redo_disturbed and not args.report_only:
        redo = state.drop_disturbed()
        log(f"measuring again {len(redo)} disturbed run(s): {', '.join(redo) or 'none'}")
    if not args.report_only:
        raise_nofile()
        fortunes = fortunes_db.create(workdir / "fortunes.sqlite3")
        to_measure = [(run, sc, by_name[n]) for run in range(1, plan.runs + 1)
                      for sc, names in cells for n in names
                      if not state.done(cell_key(n, sc, run))]
        total = plan.runs * sum(len(names) for _, names in cells)
        log(f"{plan.kind} plan, {tools_note}: {len(to_measure)} of {total} measurements to take, "
            f"about {estimate_seconds(plan, cells) * len(to_measure) / max(total, 1) / 60:.0f} min; "
            f"logs and state in {shown(workdir)}")
        for index, (run, scenario, server) in enumerate(to_measure, 1):
            result = measure(server, scenario, run, plan, primary, cross, workdir, fortunes)
            state.record(cell_key(server.name, scenario, run), result)
            status = result["failed"] or (f"{result['ok_per_sec']:,.0f} req/s, "
                                          f"{result['cpu_us_per_request']:.1f} CPU µs/req, "
                                          f"{result['errors']['total']} errors")
            if result.get("cross") and not result["cross"].get("failed"):
                status += f"; wrk {result['cross']['ok_per_sec']:,.0f} req/s"
            log(f"[{index}/{len(to_measure)}] run {run} {scenario.name} {server.name}: {status}")

    planned = [cell_key(n, sc, run) for run in range(1, plan.runs + 1) for sc, names in cells
               for n in names]
    meta_out = {**state.meta, "commands": command_lines(servers, cells, plan, primary),
                "measured": sum(state.done(key) for key in planned), "planned": len(planned),
                "previous": previous.source if previous else None}
    url_paths = {name: app.url_path for name, app in APPS.items()}
    title = f"Benchmark {state.meta['started']}" + (" (full matrix)" if args.full else "")
    rendered = reporting.build(state.runs, cells, url_paths, plan, meta_out, skipped, title,
                               previous, no_previous)
    out_dir = TMP if plan.kind == "quick" or args.servers or args.apps or args.modes \
        or args.connections else RESULTS
    prefix = ("quick-" if plan.kind == "quick" else "") + ("full-" if args.full else "")
    base = out_dir / f"{prefix}{state.meta['started']}"
    out_dir.mkdir(parents=True, exist_ok=True)  # TMP is absent when --state points elsewhere
    markdown = reporting.markdown(rendered)
    base.with_suffix(".md").write_text(markdown)
    base.with_suffix(".html").write_text(reporting.html_page(rendered))
    base.with_suffix(".json").write_text(json.dumps(
        {"schema": "tines-bench-suite/1", "plan": plan.as_dict(), "meta": meta_out,
         "skipped": skipped, "cells": state.cells}, indent=1) + "\n")
    print(markdown)
    log(f"wrote {shown(base)}.{{md,html,json}}")
    return 0


def command_lines(servers: list[Server], cells: list[tuple[Scenario, list[str]]], plan: Plan,
                  primary: Tool) -> list[str]:
    """Every server's command per app, and the load generators', as the report shows them."""
    apps_used = []
    for scenario, _ in cells:
        if scenario.app not in apps_used:
            apps_used.append(scenario.app)
    out = []
    for server in servers:
        for app in apps_used:
            if any(server.name in names for scenario, names in cells if scenario.app == app):
                out.append(f"{server.name}, {app}: `{display_command(server, APPS[app])}`")
    sample = Load("URL", 50, plan.duration_s, True)
    bench = Tool("tines-bench", ("tines", "bench"))
    out.append("load (tines bench): `" + " ".join(tines_bench_command(bench, sample))
               + "` (+ `--no-keepalive`, `--pipeline 16`, `-c 1000` per scenario)")
    if any(scenario.attacked for scenario, _ in cells):
        out.append(f"{attack_description()}; the load as for hello keep-alive, measured once "
                   "without and once with the attack in each start")
    out.append("load (wrk): `" + " ".join(wrk_command(Tool("wrk", ("wrk",)), sample, TMP))
               .replace(str(REPO) + "/", "")
               + "` (+ `-H 'Connection: close'`; pipelined: a generated copy of the script "
                 "with a request() hook)")
    if primary.name == "wrk":
        out.append("tines bench was not used: not in this build")
    elif primary.argv[-1] != "bench":
        out.append(f"tines bench ran as `{' '.join(primary.argv)}`".replace(str(REPO) + "/", ""))
    return out


def raise_nofile() -> None:
    """1000 connections need more than the usual 1024 descriptors, in the load generator and
    the server alike: raise the soft limit to the hard one (inherited by every child)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def interrupted(_signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt


def script(entry: Callable[[], int], interrupted_line: str) -> None:
    """Run a bench script's ``entry`` and exit with its status. SIGTERM (a stopped session,
    `kill`) unwinds like Ctrl-C, so the server being measured is stopped; then
    ``interrupted_line`` goes to stderr and the exit status is 130."""
    signal.signal(signal.SIGTERM, interrupted)
    try:
        sys.exit(entry())
    except KeyboardInterrupt:
        sys.stderr.write(interrupted_line + "\n")
        sys.exit(130)


if __name__ == "__main__":
    # The state file keeps every finished measurement.
    script(main, "bench: interrupted; finished measurements are kept in the state file: run the "
                 "same command (with the same --state, or --full) to resume")
