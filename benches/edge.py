"""Issue 39's rows of ``make bench``: what people put nginx in front for, measured against nginx
doing it: static files (4 KiB and 1 MiB, Tines' mount against nginx's sendfile), the blog page
gzipped (by Tines, by nginx ``gzip on`` proxying to Tines, and not at all), and hello
keep-alive with the rate limiter on (never reached) against off.

``make bench-edge`` (also a step of ``make bench``) or ``.venv/bin/python benches/edge.py``.
The set-up installs nginx (apt-get) when missing and writes the files served into a temporary
directory; nginx runs with its own prefix there, on 127.0.0.1, one worker. Each server (and,
for the proxy row, the Tines behind nginx) is pinned to CPU 1 and started fresh per round,
warmed up, settled, measured; ``tines bench`` runs on CPU 0. ``--runs`` rounds (5 by default)
per cell whose rows' order turns by one each round, so the rows of a round form pairs
(edge_model says how they are judged). ``--instructions`` adds callgrind's instructions per
request (user space only; ``perf stat`` counts no instructions on this VM) for the rows of the
marks. A build of Tines whose ``tines serve --help`` lacks a row's flag skips that row with
the reason. Writes ``results/edge-STAMP.{md,json}`` (``--out NAME``: ``results/NAME.*``).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import edge_model as em
import paired
from loadgen import Load, LoadFailed, Tool, run_load
from procfs import cpu_times, tree, tree_cpu_ticks
from provision import machine_info, tool_path, versions
from run import BENCH_CPUS, TMP, script, server_figures, settle
from servers import (APPS, REPO, App, Running, Server, StartFailed, free_port, start, stop,
                     tines_binary, tines_command)

WORKDIR = TMP / "edge"
DEFAULT_INSTRUCTION_REQUESTS = 10_000
BLOG_HOOKS = REPO / "examples" / "blog" / "tines_hooks.py"
GZIP = ("Accept-Encoding: gzip",)
UNLIMITED = ("--max-keepalive-requests", "0")


def log(message: str) -> None:
    print(f"bench-edge: {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- the rows


@dataclass(frozen=True)
class Row:
    """One row of a cell: its server, the app (whose URL is the one measured), the headers
    every request sends, and, for the proxy row, the Tines behind it."""

    cell: str
    server: Server
    app: App
    headers: tuple[str, ...] = ()
    upstream: Server | None = None
    callgrind: Server | None = None
    """The server as counted under callgrind, when it differs (nginx in one process)."""


NGINX_HEAD = """\
# nginx for issue 39's rows: one worker, nothing logged, every path under its prefix.
worker_processes 1;
daemon off;
master_process {master};
pid {workdir}/nginx-{port}.pid;
error_log stderr warn;
events {{ worker_connections 1024; }}
http {{
""" + paired.NGINX_HTTP + """\
    default_type application/octet-stream;
"""

NGINX_STATIC = NGINX_HEAD + """\
    sendfile on;
    tcp_nopush on;
    server {{
        listen 127.0.0.1:{port};
        location /static/ {{ alias {root}/; }}
    }}
}}
"""

NGINX_GZIP_PROXY = NGINX_HEAD + """\
    gzip on;
    gzip_comp_level {level};
    gzip_min_length 1024;
    gzip_vary on;
    gzip_proxied any;
    upstream tines {{ server 127.0.0.1:{upstream}; keepalive 64; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://tines;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
        }}
    }}
}}
"""


def nginx_server(name: str, template: str, single: bool = False, **fields: Any) -> Server:
    """nginx with ``template`` (its prefix the workdir) written per port; ``single``: in one
    process (``master_process off``), as callgrind counts it: callgrind_control got no answer
    from the worker a root master forks (and which runs as nobody) here."""
    def command(_app: App, port: int, _ready_fd: int | None, workdir: Path) -> list[str]:
        conf = workdir / f"{name}-{port}.conf"
        conf.write_text(template.format(workdir=workdir, stem="nginx", port=port,
                                        master="off" if single else "on", **fields))
        return [tool_path("nginx") or "nginx", "-e", "stderr", "-p", str(workdir), "-c",
                str(conf)]
    return Server(name, command)


def tines(name: str, *flags: str) -> Server:
    """One Tines worker (event MPM) with ``flags``."""
    return Server(name, tines_command("event", None, extra=(*UNLIMITED, *flags)),
                  uses_ready_fd=True)


def rows(root: Path, upstream_port: list[int]) -> list[Row]:
    """Every row of every cell. ``upstream_port`` holds the port of the Tines behind the proxy
    row, set by ``measure_round`` before nginx's command is made."""
    hello, blog = APPS["hello"], APPS["blog"]
    static = ("--static", f"/static={root}")
    blog_flags = ("--hooks", str(BLOG_HOOKS))
    every: list[Row] = []
    for cell in (em.STATIC_4K, em.STATIC_1M):
        name, _size = em.FILES[cell]
        app = App(cell, hello.file, hello.attr, f"/static/{name}")
        # Counted with --static-follow-symlinks: a plain openat where the default makes an
        # openat2 (RESOLVE_BENEATH), which valgrind 3.19 does not know (ENOSYS: every file
        # would be a 404 under callgrind). The user-space work is the same; the kernel's path
        # walk, which differs, is not counted either way.
        every += [Row(cell, tines(em.TINES_STATIC, *static), app,
                      callgrind=tines(em.TINES_STATIC, *static, "--static-follow-symlinks")),
                  Row(cell, nginx_server(em.NGINX_SENDFILE, NGINX_STATIC, root=root), app,
                      callgrind=nginx_server(em.NGINX_SENDFILE, NGINX_STATIC, single=True,
                                             root=root))]

    def proxy(app: App, port: int, ready_fd: int | None, workdir: Path) -> list[str]:
        # The upstream's port is known only once it has started (start_row sets it).
        return nginx_server(em.NGINX_GZIP, NGINX_GZIP_PROXY, level=em.GZIP_LEVEL,
                            upstream=upstream_port[0]).command(app, port, ready_fd, workdir)

    every += [
        Row(em.BLOG, tines(em.TINES_GZIP, *blog_flags, "--compression", "gzip"), blog, GZIP),
        Row(em.BLOG, Server(em.NGINX_GZIP, proxy), blog, GZIP, upstream=tines("tines-upstream", *blog_flags)),
        Row(em.BLOG, tines(em.TINES_IDENTITY, *blog_flags), blog, GZIP),
        Row(em.HELLO, tines(em.RATE_LIMIT_ON, "--rate-limit", em.RATE_LIMIT), hello),
        Row(em.HELLO, tines(em.RATE_LIMIT_OFF), hello),
    ]
    return every


def skipped_rows(help_text: str | None) -> dict[str, str]:
    """Rows this machine or this build of Tines cannot run, and why."""
    skipped: dict[str, str] = {}
    if tool_path("nginx") is None:
        skipped[em.NGINX_SENDFILE] = skipped[em.NGINX_GZIP] = "nginx is not installed"
    if help_text is None:
        for cell, names in em.ROWS.items():
            for name in names:
                if name.startswith("tines-"):
                    skipped[name] = f"no tines at {tines_binary()} (make build)"
        return skipped
    for row, setting in em.NEEDS.items():
        flag = "--" + setting.replace("_", "-")
        if f"{flag} " not in help_text and f"{flag}\n" not in help_text and f"{flag}," not in help_text:
            skipped[row] = f"not run: this build of Tines has no {flag} (`tines serve --help`)"
    return skipped


def make_files(root: Path) -> None:
    """The files served: random bytes (incompressible, as images are), the same every run."""
    root.mkdir(parents=True, exist_ok=True)
    generator = random.Random(39)
    for name, size in em.FILES.values():
        (root / name).write_bytes(generator.randbytes(size))
        os.chmod(root / name, 0o644)


# --------------------------------------------------------------------------- measurements


def environment() -> dict[str, str]:
    return paired.environment(BLOG_DB=str(WORKDIR / "blog.sqlite3"))


def url(port: int, app: App) -> str:
    return f"http://127.0.0.1:{port}{app.url_path}"


def start_row(row: Row, port: int, stem: str, workdir: Path, upstream_port: list[int],
              wrapper: tuple[str, ...] = (),
              ready_deadline_s: float | None = None) -> list[Running]:
    """The row's processes, upstream first; each ready before the next starts."""
    started: list[Running] = []
    extra: dict[str, Any] = {"wrapper": wrapper}
    if ready_deadline_s is not None:
        extra["ready_deadline_s"] = ready_deadline_s
    try:
        if row.upstream is not None:
            upstream_port[0] = free_port()
            started.append(start(row.upstream, row.app, upstream_port[0],
                                 workdir / f"{stem}-upstream.log", environment(), workdir))
        started.append(start(row.server, row.app, port, workdir / f"{stem}.log", environment(),
                             workdir, **extra))
    except BaseException:
        for running in reversed(started):
            stop(running)
        raise
    return started


def measured(tool: Tool, load: Load, pids: list[int], log_path: Path) -> dict[str, Any]:
    """One measured run with the CPU of every server tree in ``pids`` read around it."""
    def ticks() -> int:
        return sum(tree_cpu_ticks(pid) for pid in pids)
    before, machine_before, t0 = ticks(), cpu_times(BENCH_CPUS), time.monotonic()
    result = run_load(tool, load, log_path, WORKDIR)
    after, machine_after, wall = ticks(), cpu_times(BENCH_CPUS), time.monotonic() - t0
    server_figures(result, after - before, wall, result["load_cpu_seconds"])
    clock_ticks = os.sysconf("SC_CLK_TCK")
    busy = (machine_after.busy - machine_before.busy) / clock_ticks
    result["other_cpu"] = (busy - result["cpu_seconds"] - result["load_cpu_seconds"]) / wall
    if result["ok"] == 0 or result["errors"]["total"]:
        result["failed"] = f"{result['ok']} ok, errors {result['errors']}"
    return result


def measure_round(row: Row, round_index: int, arguments: argparse.Namespace, bench: Path,
                  upstream_port: list[int]) -> dict[str, Any]:
    """One fresh start of the row: warm-up, settle, measured run, stop."""
    base = {"server": row.server.name, "round": round_index, "cell": row.cell}
    port = free_port()
    stem = f"{row.cell}-{row.server.name}-round{round_index}"
    try:
        started = start_row(row, port, stem, WORKDIR, upstream_port)
    except StartFailed as error:
        return {**base, "failed": f"start: {error}"}
    try:
        tool = Tool("tines-bench", (str(bench),))
        connections = em.CONNECTIONS[row.cell]
        warm = Load(url(port, row.app), connections, arguments.warmup, headers=row.headers)
        run_load(tool, warm, WORKDIR / f"{stem}.log", WORKDIR)
        for running in started:
            settle(running.process.pid)
        load = Load(url(port, row.app), connections, arguments.duration, headers=row.headers)
        result = measured(tool, load, [r.process.pid for r in started],
                          WORKDIR / f"{stem}.log")
    except (LoadFailed, OSError) as error:
        return {**base, "failed": f"load: {error}"}
    finally:
        for running in reversed(started):
            stop(running)
    log(f"round {round_index + 1} {row.cell} {row.server.name}: "
        f"{result.get('cpu_us_per_request', 0):.2f} µs/request, {result['ok']} ok, "
        f"{result['bytes_read'] / max(1, result['requests']):,.0f} bytes/response")
    return {**base, **result}


def instructions(row: Row, bench: Path, requests: int,
                 upstream_port: list[int]) -> float | None:
    """Instructions of the server's tree per request, by callgrind (user space only)."""
    with paired.callgrind_dir("edge") as out_dir:
        port = free_port()
        counted = row if row.callgrind is None else replace(row, server=row.callgrind)
        try:
            started = start_row(counted, port, f"{row.cell}-{row.server.name}-callgrind",
                                WORKDIR, upstream_port, **paired.under_callgrind(out_dir))
        except StartFailed as error:
            log(f"callgrind {row.cell} {row.server.name}: start: {error}")
            return None
        try:
            exactly(bench, row, port, max(10, requests // 10))
            # The workers only: a master serves no request (nginx runs as one process here).
            root = started[-1].process.pid
            pids = [s.pid for s in tree(root) if s.pid != root] or [root]
            return paired.callgrind_count(pids, lambda count: exactly(bench, row, port, count),
                                          requests, out_dir)
        except (subprocess.SubprocessError, OSError, RuntimeError, ValueError) as error:
            log(f"callgrind {row.cell} {row.server.name}: {error}")
            return None
        finally:
            for running in reversed(started):
                stop(running)


def exactly(bench: Path, row: Row, port: int, count: int) -> None:
    """Exactly ``count`` requests of the row's load, every one answered 2xx."""
    headers = [word for header in row.headers for word in ("-H", header)]
    paired.exactly(bench, url(port, row.app), em.CONNECTIONS[row.cell], count, headers)


# --------------------------------------------------------------------------- the whole


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    paired.add_common_arguments(parser, "cell", "edge")
    parser.add_argument("--cells", help=f"comma-separated cells of {', '.join(em.CELLS)} "
                                        "(default: all)")
    paired.add_instruction_arguments(parser, " (the marks' rows)", DEFAULT_INSTRUCTION_REQUESTS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    arguments = parse_args(argv)
    begun = paired.begin(arguments, em.markdown, WORKDIR, (), log)
    if isinstance(begun, int):
        return begun
    bench, started_at = begun
    # The files live outside the repository, world-readable: nginx started by root serves
    # them from an unprivileged worker (nobody), which cannot enter a private checkout.
    files = Path(tempfile.mkdtemp(prefix="tines-edge-static-"))
    os.chmod(files, 0o755)
    try:
        make_files(files)
        return run_all(arguments, bench, files, started_at)
    finally:
        shutil.rmtree(files, ignore_errors=True)


def run_all(arguments: argparse.Namespace, bench: Path, files: Path, started_at: str) -> int:
    skipped = skipped_rows(paired.serve_help(log))
    upstream_port = [0]
    cells = arguments.cells.split(",") if arguments.cells else list(em.CELLS)
    every = [r for r in rows(files, upstream_port) if r.cell in cells]
    runnable = [r for r in every if r.server.name not in skipped]
    results: list[dict[str, Any]] = []
    for cell in cells:
        in_cell = [r for r in runnable if r.cell == cell]
        for round_index in range(arguments.runs):
            for name in em.order([r.server.name for r in in_cell], round_index):
                row = next(r for r in in_cell if r.server.name == name)
                results.append(measure_round(row, round_index, arguments, bench, upstream_port))
    counts: dict[str, dict[str, float]] = {}
    if arguments.instructions:
        wanted = {(m.cell, name) for m in em.MARKS for name in (m.row, m.peer)}
        for row in runnable:
            if (row.cell, row.server.name) in wanted:
                value = instructions(row, bench, arguments.instruction_requests, upstream_port)
                log(f"instructions {row.cell} {row.server.name}: {value or 0:,.0f} per request")
                if value is not None:
                    counts.setdefault(row.server.name, {})[row.cell] = value
    meta = {"started": started_at, "machine": machine_info(),
            "versions": versions(tines_binary()),
            "plan": {"runs": arguments.runs, "duration_s": arguments.duration,
                     "warmup_s": arguments.warmup, "connections": em.CONNECTIONS,
                     "instruction_requests": (arguments.instruction_requests
                                              if arguments.instructions else None)},
            "notes": notes(arguments)}
    return paired.write_report(arguments, "edge", meta, skipped, results, counts, em.markdown,
                               log)


def notes(arguments: argparse.Namespace) -> list[str]:
    return [
        "one server process pinned to CPU 1 (Tines: one event-MPM worker; nginx: one worker; "
        "the proxy row: nginx and the Tines behind it, CPU summed), tines bench on CPU 0, "
        "keep-alive, connections per cell: "
        + ", ".join(f"{cell} {n}" for cell, n in em.CONNECTIONS.items()),
        f"{arguments.runs} rounds per cell, rows' order turned by one each round; verdict: "
        "median of per-round ratios of server CPU per request (paired_model's rules), callgrind "
        "instructions judge within 15% of a mark; the rate limiter's +0.5 µs mark is judged by "
        "instructions, turned into µs at the off row's pace",
        "static files: random bytes (incompressible), nginx `sendfile on; tcp_nopush on;` "
        "without open_file_cache; callgrind counts user space only: sendfile's copy is the "
        "kernel's, in the CPU figures and not in the instruction counts; Tines is counted with "
        "--static-follow-symlinks (openat, not openat2, which valgrind 3.19 answers ENOSYS)",
        f"blog: GET /blog/ with `Accept-Encoding: gzip`, gzip level {em.GZIP_LEVEL} on both "
        "Tines and nginx (gzip_comp_level; nginx's default is 1); bytes/response is what "
        "tines bench read (head and body)",
        f"rate limiter on: --rate-limit {em.RATE_LIMIT} (never reached), 127.0.0.1 not "
        "allowlisted",
        f"Tines: {tines_binary()}",
        f"load average at start: {machine_info()['load_average_at_start']}",
    ]


if __name__ == "__main__":
    script(main, "bench-edge: interrupted")
