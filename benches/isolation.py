"""Process per request at fork speed (issue 36): Tines prefork with a process per request,
beside the same prefork reusing its worker, the machine's fork limit and the minimal
fork-per-connection server, measured in the same rounds with the same pinning.

``make bench-isolation`` (also the last step of ``make bench``) or
``.venv/bin/python benches/isolation.py``. The peers' rows (gunicorn's sync worker and uWSGI,
each with a process per request: ``--max-requests 1``, the app loaded in the master) run from
``benches/.venv-peers`` (created or completed first, as ``make bench`` does; ``--no-peers``
skips them). In each round, for hello and the blog: the fork
limit (benches/fork_limit.py, pinned to the server's CPU), then each row on each scenario
(Connection: close, 1 and 50 connections) back to back, each a fresh start, warm-up and
measured run through the suite's ``run.measure`` (server on CPU 1, ``tines bench`` on CPU 0).
Judged by the median of per-round ratios (isolation_model). Then, unless ``--no-breakdown``,
where one request's time goes (benches/fork_breakdown.py, perf). Writes
``benches/results/isolation-STAMP.{md,json}`` (``--out NAME``: ``results/NAME.*``). Method:
docs/benchmarks.md, "Process per request".
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# benches/ is sys.path[0] when this file runs as a script.
import isolation_model as im
from fork_breakdown import BreakdownFailed, breakdown
from loadgen import Load, Tool, tines_bench_command
from model import Plan
from provision import PEERS_VENV, ensure_peers, machine_info, versions
from run import RESULTS, TMP, choose_tools, measure, raise_nofile, script, shown
from servers import (APPS, REPO, SERVER_CPU, App, Server, display_command, tines_binary,
                     tines_command)

FORK_PER_CONNECTION = REPO / "benches" / "fork_per_connection.py"
FORK_LIMIT = REPO / "benches" / "fork_limit.py"
PER_REQUEST_FLAGS = "--max-requests 1 --preload"


def log(message: str) -> None:
    print(f"bench-isolation: {message}", file=sys.stderr, flush=True)


def fork_per_connection_command(app: App, port: int, ready_fd: int | None,
                                _workdir: Path) -> list[str]:
    """benches/fork_per_connection.py on this venv's Python (the app as Tines loads it)."""
    command = [sys.executable, str(FORK_PER_CONNECTION), app.file_target, "127.0.0.1", str(port)]
    return command + ([str(ready_fd)] if ready_fd is not None else [])


def gunicorn_per_request_command(app: App, port: int, _ready_fd: int | None,
                                 _workdir: Path) -> list[str]:
    """gunicorn's sync worker, one process, a new one after each request, the app imported
    in its master (``--preload``): Tines' per-request row in gunicorn's terms."""
    return [str(PEERS_VENV / "bin" / "gunicorn"), "-k", "sync", "-w", "1", "--max-requests", "1",
            "--preload", "-b", f"127.0.0.1:{port}", "--chdir", str(app.file.parent),
            app.module_target]


def uwsgi_per_request_command(app: App, port: int, _ready_fd: int | None,
                              _workdir: Path) -> list[str]:
    """uWSGI, one process, recycled after each request (``--max-requests 1``; with
    ``--min-worker-lifetime 0``, since by default a worker younger than 10 s is not recycled),
    the app loaded in its master before the fork (uWSGI's default without ``--lazy-apps``).
    uWSGI's master then throttles the respawns ("worker respawning too fast !!! i have to sleep
    a bit (2 seconds)"): that is its process per request, as it ships."""
    return [str(PEERS_VENV / "bin" / "uwsgi"), "--http11-socket", f"127.0.0.1:{port}",
            "--master", "--processes", "1", "--max-requests", "1", "--min-worker-lifetime", "0",
            "--chdir", str(app.file.parent),
            "--module", app.module_target, "--need-app", "--disable-logging", "--die-on-term"]


def rows(per_request_flags: str, reuse_flags: str, peers: bool = True) -> dict[str, Server]:
    """The rows: prefork with ``per_request_flags``, prefork with ``reuse_flags``, the
    fork-per-connection server and (``peers``) gunicorn's and uWSGI's process per request.
    Tines' flags follow its ``-w 1 --mpm prefork``, so a later ``-w`` replaces it."""
    peer_rows = {im.GUNICORN_PER_REQUEST: Server(im.GUNICORN_PER_REQUEST, gunicorn_per_request_command),
                 im.UWSGI_PER_REQUEST: Server(im.UWSGI_PER_REQUEST, uwsgi_per_request_command)}
    return {
        im.PER_REQUEST: Server(im.PER_REQUEST, tines_command(
            "prefork", None, extra=tuple(shlex.split(per_request_flags))), uses_ready_fd=True),
        im.REUSE: Server(im.REUSE, tines_command(
            "prefork", None, extra=tuple(shlex.split(reuse_flags))), uses_ready_fd=True),
        im.FORK_PER_CONNECTION: Server(im.FORK_PER_CONNECTION, fork_per_connection_command,
                                       uses_ready_fd=True),
        **(peer_rows if peers else {}),
    }


def fork_limit(app: App, seconds: float, workdir: Path,
               modules: tuple[str, ...] = ()) -> dict[str, Any]:
    """One probe of benches/fork_limit.py pinned to the server's CPU, with ``modules``
    imported beside the app; ``failed`` on error."""
    env = {**os.environ, "BLOG_DB": str(workdir / "fork-limit.sqlite3")}
    command = ["taskset", "-c", SERVER_CPU, sys.executable, str(FORK_LIMIT), app.file_target,
               f"{seconds:g}", *modules]
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=seconds * 5 + 60)
    try:
        return {**json.loads(result.stdout.strip().splitlines()[-1]), "failed": None}
    except (ValueError, IndexError):
        return {"failed": f"exit {result.returncode}: {result.stderr.strip()[-200:]}"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    parser.add_argument("--duration", type=float, default=3.0,
                        help="seconds of each measured run (default 3)")
    parser.add_argument("--warmup", type=float, default=1.0,
                        help="seconds of warm-up before each (default 1)")
    parser.add_argument("--fork-seconds", type=float, default=1.0,
                        help="seconds of each fork-limit probe (default 1)")
    parser.add_argument("--apps", default="hello,blog", help="comma-separated (default hello,blog)")
    parser.add_argument("--per-request-flags", default=PER_REQUEST_FLAGS,
                        help=f"tines serve flags of the per-request row (default "
                             f"'{PER_REQUEST_FLAGS}'); write --per-request-flags='...'")
    parser.add_argument("--reuse-flags", default="",
                        help="tines serve flags of the reuse row (default none)")
    parser.add_argument("--no-peers", action="store_true",
                        help="skip gunicorn's and uWSGI's rows (no benches/.venv-peers)")
    parser.add_argument("--no-breakdown", action="store_true",
                        help="skip the per-request breakdown (perf)")
    parser.add_argument("--out", help="report name under benches/results/ "
                                      "(default isolation-YYYY-MM-DD-HHMM)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    apps = args.apps.split(",")
    unknown = [a for a in apps if a not in ("hello", "blog")]
    if unknown or args.rounds < 1:
        sys.stderr.write(f"bench-isolation: --apps takes hello and blog (not {unknown}); "
                         "--rounds at least 1\n")
        return 2
    stamp = time.strftime("%Y-%m-%d-%H%M")
    workdir = TMP / f"isolation-{stamp}"
    workdir.mkdir(parents=True, exist_ok=True)
    plan = Plan("isolation", runs=args.rounds, warmup_s=args.warmup, duration_s=args.duration,
                cross_s=0)
    primary, _cross, _note = choose_tools("tines-bench")
    if not args.no_peers:
        ensure_peers()
    servers = rows(args.per_request_flags, args.reuse_flags, peers=not args.no_peers)
    scenarios = im.scenarios(apps)
    raise_nofile()
    runs: dict[str, dict[str, Any]] = {}
    steps = args.rounds * len(scenarios) * len(servers)
    log(f"{args.rounds} rounds, {steps} measurements, about "
        f"{(steps * (args.warmup + args.duration + 2.5) + args.rounds * len(apps) * args.fork_seconds * 2.4) / 60:.0f} min; "
        f"logs in {shown(workdir)}")
    for r in range(1, args.rounds + 1):
        for app in apps:
            for kind, modules in ((im.FORK_LIMIT, ()), (im.FORK_LIMIT_MASTER, im.MASTER_MODULES)):
                limit = fork_limit(APPS[app], args.fork_seconds, workdir, modules)
                runs[im.limit_key(app, r, kind)] = limit
                log(f"round {r} {app} {kind}: " + (
                    limit["failed"] or f"{limit['forks_per_sec']:,.0f}/s, {limit['rss_kib']} KiB"))
            for scenario in (s for s in scenarios if s.app == app):
                for name, server in servers.items():
                    result = measure(server, scenario, r, plan, primary, None, workdir,
                                     workdir / "fortunes.sqlite3")
                    runs[im.run_key(name, scenario, r)] = result
                    log(f"round {r} {scenario.name} {name}: " + (result["failed"] or (
                        f"{result['ok_per_sec']:,.1f} req/s, p99 "
                        f"{result['latency_us']['p99'] / 1000:,.2f} ms, "
                        f"{result['errors']['total']} errors")))
    lines: dict[str, list[str]] = {}
    for app in [] if args.no_breakdown else apps:
        try:
            lines[app] = breakdown(servers[im.PER_REQUEST], APPS[app], primary, workdir)
        except BreakdownFailed as error:
            lines[app] = [f"Not measured: {error}."]
    tines_versions = versions(tines_binary())
    meta = {"started": stamp, "machine": machine_info(),
            "versions": {k: tines_versions[k] for k in ("python", "tines")},
            "plan": f"warm-up {args.warmup:g} s, {args.duration:g} s measured per run, "
                    f"fork-limit probes of {args.fork_seconds:g} s",
            "commands": commands(servers, apps, primary, args.fork_seconds, args.duration)}
    base = RESULTS / (args.out or f"isolation-{stamp}")
    markdown = im.markdown(meta, runs, apps, args.rounds, lines)
    base.with_suffix(".md").write_text(markdown)
    base.with_suffix(".json").write_text(json.dumps(
        {"schema": "tines-bench-isolation/1", "meta": meta, "apps": apps, "rounds": args.rounds,
         "breakdown": lines, "runs": runs}, indent=1) + "\n")
    print(markdown)
    log(f"wrote {shown(base)}.{{md,json}}")
    return 0


def commands(servers: dict[str, Server], apps: list[str], primary: Tool, fork_seconds: float,
             duration: float) -> list[str]:
    """Each row's command per app, the probe's and the load's, as the report shows them."""
    out = [f"{name}, {app}: `"
           + display_command(server, APPS[app]).replace(" 127.0.0.1 0 ", " 127.0.0.1 PORT ") + "`"
           for name, server in servers.items() for app in apps]
    out += [f"{kind}, {app}: `taskset -c {SERVER_CPU} python {shown(FORK_LIMIT)} "
            f"{' '.join((APPS[app].file_target, f'{fork_seconds:g}', *modules))}`"
            for app in apps for kind, modules in ((im.FORK_LIMIT, ()),
                                                  (im.FORK_LIMIT_MASTER, im.MASTER_MODULES))]
    sample = Load("URL", 1, duration, keepalive=False)
    out.append("load: `" + " ".join(tines_bench_command(Tool(primary.name, ("tines", "bench")),
                                                        sample)) + "` (`-c 50` at 50 connections)")
    return out


if __name__ == "__main__":
    script(main, "bench-isolation: interrupted; nothing written")
