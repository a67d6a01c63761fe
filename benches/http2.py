"""The HTTP/2 rows of ``make bench`` (issue 38): hello over h2c with 10 streams per connection,
Tines against Granian (h2c and h2 over TLS), Hypercorn, gunicorn and nginx (h2 over TLS,
static ``OK``), and Tines' own HTTP/1.1 keep-alive beside it; one worker pinned to CPU 1 and
``tines bench`` (``--h2c`` / ``--http2 --streams 10``) on CPU 0.

``make bench-h2`` (also a step of ``make bench``) or ``.venv/bin/python benches/http2.py``.
The set-up installs nginx (apt-get) and Granian, Hypercorn, gunicorn and h2 into
``benches/.venv-peers`` when missing, and makes a root, an intermediate and a leaf for the TLS
rows (tls.make_material, ``results/tmp/http2/``). Rows (http2_model.ROWS), each started fresh
per round, warmed up, settled, measured; ``--runs`` rounds (5 by default) whose order turns by
one, so each Tines row and each peer form a pair in every round:

- ``tines-event-h2c``, ``granian-h2c``, ``hypercorn-h2c``, ``gunicorn-h2c``: h2c with prior
  knowledge, 5 connections of 10 streams;
- ``tines-event-h2``, ``granian-h2``, ``nginx-h2``: h2 over TLS by ALPN, the same load;
- ``tines-event-h1``: HTTP/1.1 keep-alive, 50 connections (as many requests in flight).

The server's CPU per request is read from /proc around each measured run; the load
generator's own CPU per request is reported beside it. ``--instructions`` adds callgrind's
instructions per request (``perf stat`` counts no instructions on this VM) for the rows of
``--instruction-rows`` (by default the two Tines rows the marks compare and Granian h2c).
Tines runs from the venv running this script (``tines_binary()``): a Tines whose ``tines serve
--help`` knows no ``h2c:`` bind skips its HTTP/2 rows with the reason. Writes
``results/http2-STAMP.{md,json}`` (``--out NAME``: ``results/NAME.*``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import http2_model as hm
import paired
from loadgen import Load, LoadFailed, Tool, run_load
from procfs import tree
from provision import PEERS_VENV, machine_info, peer_versions, tool_path, versions
from run import TMP, measured, script, settle
from servers import (APPS, App, Probe, Server, StartFailed, free_port, http_status, start, stop,
                     tines_binary, tines_command)
from tls import Material, make_material

WORKDIR = TMP / "http2"
PEERS = ("granian", "hypercorn", "gunicorn", "h2")
"""The peers' packages (h2: gunicorn's HTTP/2, its ``[http2]`` extra)."""
INSTRUCTION_REQUESTS = 20_000
DEFAULT_INSTRUCTION_ROWS = (hm.TINES_H2C, hm.TINES_H1, "granian-h2c")
GUNICORN_THREADS = 4


def log(message: str) -> None:
    print(f"bench-h2: {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- the rows


@dataclass(frozen=True)
class Row:
    """A server, the app it serves, and how the load reaches it (h2c, h2 or HTTP/1.1)."""

    server: Server
    app: App
    protocol: str


NGINX_H2_CONF = """\
# nginx for the HTTP/2 rows: one worker, the static answer over h2 (TLS), nothing logged.
user root;
worker_processes 1;
daemon off;
master_process on;
pid {workdir}/nginx-h2-{port}.pid;
error_log stderr warn;
events {{ worker_connections 1024; }}
http {{
""" + paired.NGINX_HTTP + """\
    server {{
        listen 127.0.0.1:{port} ssl http2;
        ssl_certificate {chain};
        ssl_certificate_key {key};
        ssl_protocols TLSv1.2 TLSv1.3;
        location = / {{ default_type text/plain; return 200 "OK"; }}
    }}
}}
"""


def rows(material: Material) -> list[Row]:
    """Every HTTP/2 row (and the HTTP/1.1 baseline) with its app."""
    chain, key = str(material.chain), str(material.key)
    granian = str(PEERS_VENV / "bin" / "granian")

    def tines_h2c(app: App, port: int, ready_fd: int | None, _workdir: Path) -> list[str]:
        cmd = [str(tines_binary()), "serve", app.file_target, "-b", f"h2c:127.0.0.1:{port}",
               "-w", "1", "--mpm", "event", "--max-keepalive-requests", "0"]
        return cmd + (["--ready-fd", str(ready_fd)] if ready_fd is not None else [])

    def granian_h2(tls: bool) -> Any:
        def command(app: App, port: int, _ready_fd: int | None, _workdir: Path) -> list[str]:
            cmd = [granian, "--interface", "wsgi", "--http", "2", "--host", "127.0.0.1",
                   "--port", str(port), "--workers", "1", "--blocking-threads", "1",
                   "--working-dir", str(app.file.parent)]
            if tls:
                cmd += ["--ssl-certificate", chain, "--ssl-keyfile", key]
            return cmd + [app.module_target]
        return command

    def hypercorn(app: App, port: int, _ready_fd: int | None, _workdir: Path) -> list[str]:
        # Cleartext: h2c with prior knowledge (and HTTP/1.1) on the same bind.
        # Run from the repository: the app is named as a module of examples/.
        return [str(PEERS_VENV / "bin" / "hypercorn"), "--bind", f"127.0.0.1:{port}",
                "--workers", "1", "--log-level", "warning",
                f"{app.file.parent.name}.{app.module_target}"]

    def gunicorn(app: App, port: int, _ready_fd: int | None, _workdir: Path) -> list[str]:
        # gunicorn 27: HTTP/2 by --http-protocols h2 on the gthread worker, h2c with prior
        # knowledge by --http2-cleartext (from the forwarded-allow-ips peers: 127.0.0.1).
        return [str(PEERS_VENV / "bin" / "gunicorn"), "-b", f"127.0.0.1:{port}", "-w", "1",
                "-k", "gthread", "--threads", str(GUNICORN_THREADS), "--http-protocols", "h2",
                "--http2-cleartext", "prior-knowledge", "--chdir", str(app.file.parent),
                app.module_target]

    def nginx(_app: App, port: int, _ready_fd: int | None, workdir: Path) -> list[str]:
        conf = workdir / f"nginx-h2-{port}.conf"
        conf.write_text(NGINX_H2_CONF.format(workdir=workdir, stem="nginx-h2", port=port, chain=chain,
                                              key=key))
        return [tool_path("nginx") or "nginx", "-e", "stderr", "-p", str(workdir), "-c", str(conf)]

    unlimited = ("--max-keepalive-requests", "0")
    hello, asgi_hello = APPS["hello"], APPS["asgi-hello"]
    return [
        Row(Server(hm.TINES_H2C, tines_h2c, uses_ready_fd=True), hello, "h2c"),
        Row(Server(hm.TINES_H2, tines_command(
            "event", None, extra=("--certfile", chain, "--keyfile", key, *unlimited)),
            uses_ready_fd=True), hello, "h2"),
        Row(Server(hm.TINES_H1, tines_command("event", None, extra=unlimited),
                   uses_ready_fd=True), hello, "h1"),
        Row(Server("granian-h2c", granian_h2(False)), hello, "h2c"),
        Row(Server("granian-h2", granian_h2(True)), hello, "h2"),
        Row(Server("hypercorn-h2c", hypercorn), asgi_hello, "h2c"),
        Row(Server("gunicorn-h2c", gunicorn), hello, "h2c"),
        Row(Server("nginx-h2", nginx), hello, "h2"),
    ]


def skipped_rows(help_text: str | None) -> dict[str, str]:
    """Rows this machine or Tines build cannot run, and why."""
    skipped: dict[str, str] = {}
    if help_text is None:
        for row in hm.TINES_ROWS:
            skipped[row] = f"no tines at {tines_binary()} (make build)"
    elif "h2c" not in help_text:
        for row in hm.TINES_H2_ROWS:
            skipped[row] = ("not run yet: this build of Tines serves no HTTP/2 (`tines serve "
                            "--help` names no h2c: bind)")
    if tool_path("nginx") is None:
        skipped["nginx-h2"] = "nginx is not installed"
    for row, binary in (("granian-h2c", "granian"), ("granian-h2", "granian"),
                        ("hypercorn-h2c", "hypercorn"), ("gunicorn-h2c", "gunicorn")):
        if not (PEERS_VENV / "bin" / binary).exists():
            skipped[row] = f"{binary} is not in benches/.venv-peers"
    return skipped


# --------------------------------------------------------------------------- measurements


def flags(protocol: str, material: Material) -> tuple[str, ...]:
    """``tines bench`` flags for a row's protocol."""
    if protocol == "h2c":
        return ("--h2c", "--streams", str(hm.STREAMS))
    if protocol == "h2":
        return ("--http2", "--streams", str(hm.STREAMS), "--cacert", str(material.root))
    return ()


def url(protocol: str, port: int) -> str:
    return f"https://localhost:{port}/" if protocol == "h2" else f"http://127.0.0.1:{port}/"


def load_for(row: Row, port: int, duration_s: float) -> Load:
    connections = hm.H1_CONNECTIONS if row.protocol == "h1" else hm.H2_CONNECTIONS
    return Load(url(row.protocol, port), connections, duration_s)


def bench_probe(bench: Path, protocol: str, material: Material) -> Probe:
    """A ``servers.Probe`` speaking the row's HTTP/2 (one request by ``tines bench``): an
    h2c-only server answers no HTTP/1.1 probe."""
    if protocol == "h1":
        return http_status

    def probe(port: int, path: str) -> int | None:
        command = [str(bench), *flags(protocol, material), "-n", "1", "-c", "1", "-t", "1",
                   "--json", "--timeout", "2s", "--connect-timeout", "2s",
                   url(protocol, port).rstrip("/") + path]
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=10)
            report = json.loads(result.stdout)
        except (OSError, subprocess.TimeoutExpired, ValueError):
            return None
        codes = report.get("status_counts") or {}
        return int(next(iter(codes))) if codes else None
    return probe


def measure_round(row: Row, round_index: int, arguments: argparse.Namespace,
                  material: Material, bench: Path) -> dict[str, Any]:
    """One fresh start of the row's server: warm-up, settle, measured run, stop."""
    base = {"server": row.server.name, "round": round_index, "cell": hm.CELL,
            "protocol": row.protocol}
    port = free_port()
    log_path = WORKDIR / f"{row.server.name}-round{round_index}.log"
    try:
        running = start(row.server, row.app, port, log_path, paired.environment(), WORKDIR,
                        probe=bench_probe(bench, row.protocol, material))
    except StartFailed as error:
        return {**base, "failed": f"start: {error}"}
    try:
        tool = Tool("tines-bench", (str(bench), *flags(row.protocol, material)))
        run_load(tool, load_for(row, port, arguments.warmup), log_path, WORKDIR)
        settle(running.process.pid)
        result = measured(tool, load_for(row, port, arguments.duration), running.process.pid,
                          log_path, WORKDIR)
    except (LoadFailed, OSError) as error:
        return {**base, "failed": f"load: {error}"}
    finally:
        stop(running)
    if result.get("tls_errors"):
        result["failed"] = f"{result['tls_errors']} TLS errors"
    client = hm.load_cpu_per_request(result)
    log(f"round {round_index + 1} {row.server.name}: {result.get('cpu_us_per_request', 0):.1f} "
        f"µs/request, {result['ok']} ok, load generator {client or 0:.1f} µs/request")
    return {**base, **result}


def instructions(row: Row, material: Material, bench: Path, requests: int) -> float | None:
    """Instructions of the server's tree per request, by callgrind; None when the run failed."""
    with paired.callgrind_dir("h2") as out_dir:
        port = free_port()
        log_path = WORKDIR / f"{row.server.name}-callgrind.log"
        try:
            running = start(row.server, row.app, port, log_path, paired.environment(), WORKDIR,
                            probe=bench_probe(bench, row.protocol, material),
                            **paired.under_callgrind(out_dir))
        except StartFailed as error:
            log(f"callgrind {row.server.name}: start: {error}")
            return None
        try:
            exactly(bench, row, material, port, max(10, requests // 10))
            pids = [s.pid for s in tree(running.process.pid)]
            return paired.callgrind_count(
                pids, lambda count: exactly(bench, row, material, port, count), requests, out_dir)
        except (subprocess.SubprocessError, OSError, RuntimeError, ValueError) as error:
            log(f"callgrind {row.server.name}: {error}")
            return None
        finally:
            stop(running)


def exactly(bench: Path, row: Row, material: Material, port: int, count: int) -> None:
    """Exactly ``count`` requests of the row's load, every one answered 2xx."""
    connections = hm.H1_CONNECTIONS if row.protocol == "h1" else hm.H2_CONNECTIONS
    paired.exactly(bench, url(row.protocol, port), connections, count,
                   flags(row.protocol, material))


# --------------------------------------------------------------------------- the whole


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    paired.add_common_arguments(parser, "row", "http2")
    parser.add_argument("--servers", help=f"comma-separated rows of {', '.join(hm.ROWS)} "
                                          "(default: all)")
    paired.add_instruction_arguments(parser, "", INSTRUCTION_REQUESTS)
    parser.add_argument("--instruction-rows",
                        default=",".join(DEFAULT_INSTRUCTION_ROWS),
                        help="rows counted with --instructions (default: %(default)s)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    arguments = parse_args(argv)
    begun = paired.begin(arguments, hm.markdown, WORKDIR, PEERS, log)
    if isinstance(begun, int):
        return begun
    bench, started = begun
    material = make_material(WORKDIR / "certs")
    skipped = skipped_rows(paired.serve_help(log))
    every = rows(material)
    if arguments.servers:
        wanted = set(arguments.servers.split(","))
        every = [r for r in every if r.server.name in wanted]
    runnable = [r for r in every if r.server.name not in skipped]
    results: list[dict[str, Any]] = []
    for round_index in range(arguments.runs):
        for name in hm.order([r.server.name for r in runnable], round_index):
            row = next(r for r in runnable if r.server.name == name)
            results.append(measure_round(row, round_index, arguments, material, bench))
    counts: dict[str, float] = {}
    if arguments.instructions:
        wanted_rows = set(arguments.instruction_rows.split(","))
        for row in runnable:
            if row.server.name in wanted_rows:
                value = instructions(row, material, bench, arguments.instruction_requests)
                log(f"instructions {row.server.name}: {value or 0:,.0f} per request")
                if value is not None:
                    counts[row.server.name] = value
    tines = tines_binary()
    meta = {"started": started, "machine": machine_info(),
            "versions": {**versions(tines), **peer_versions(list(PEERS))},
            "plan": {"runs": arguments.runs, "duration_s": arguments.duration,
                     "warmup_s": arguments.warmup, "streams": hm.STREAMS,
                     "h2_connections": hm.H2_CONNECTIONS, "h1_connections": hm.H1_CONNECTIONS,
                     "instruction_requests": (arguments.instruction_requests
                                              if arguments.instructions else None)},
            "notes": [
                "one worker pinned to CPU 1, tines bench on CPU 0; HTTP/2 rows: "
                f"{hm.H2_CONNECTIONS} connections x {hm.STREAMS} streams (h2c by prior "
                "knowledge, h2 by ALPN with --cacert the root); HTTP/1.1 baseline: "
                f"{hm.H1_CONNECTIONS} keep-alive connections",
                f"{arguments.runs} rounds, order turned by one each round; verdict: median of "
                "per-round ratios (paired_model's rules), callgrind instructions judge within 15% "
                "of a mark and always for the mark against HTTP/1.1",
                "apps: nginx its static OK, Hypercorn the ASGI hello (examples/asgi_hello.py), "
                "every other row the WSGI hello (examples/hello.py); Tines event MPM, Granian "
                f"1 blocking thread, gunicorn gthread with {GUNICORN_THREADS} threads",
                f"Tines: {tines}",
                f"load average at start: {machine_info()['load_average_at_start']}",
            ]}
    return paired.write_report(arguments, "http2", meta, skipped, results, counts, hm.markdown,
                               log)


if __name__ == "__main__":
    script(main, "bench-h2: interrupted")
