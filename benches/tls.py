"""The TLS rows of ``make bench`` (issue 37): Tines prefork and event over TLS against nginx
(TLS, static ``OK``), Granian and uvicorn, the same ECDSA P-256 leaf and intermediate for
every server, one worker pinned to CPU 1 and ``tines bench`` (``https://``) on CPU 0.

``make bench-tls`` (also a step of ``make bench``) or ``.venv/bin/python benches/tls.py``.
The set-up installs nginx (apt-get) and Granian, uvicorn, uvloop and httptools into
``benches/.venv-peers`` when missing, and makes a root, an intermediate and a leaf for
``localhost`` and 127.0.0.1 with openssl (``results/tmp/tls/``; the client trusts the root with
``--cacert``). Cells (tls_model.CELLS), each run in rounds (``--runs``, 5 by default) whose
server order turns by one, every server started fresh per round:

- ``keep-alive``: hello, 50 keep-alive connections: server CPU per request;
- ``handshake-full``: a new connection per request, ``--no-resumption``: CPU per connection;
- ``handshake-resumed``: the same, resumption on (the report shows the share resumed);
- ``idle-10k`` (nginx and Tines event): 10,000 TLS keep-alive connections, each after one
  request, held idle; the server tree's PSS growth per connection (procfs).

``--instructions`` adds callgrind counts (the judge where a ratio is within 15% of its mark,
tls_model): each server under ``valgrind --tool=callgrind``, every process of its tree zeroed,
N requests (connections), dumped, the tree's instructions over N. A Tines build without
``--certfile`` (before issue 37's server side) skips the Tines rows with the reason. Writes
``results/tls-STAMP.{md,json}`` (``--out NAME``: ``results/NAME.*``).
"""

from __future__ import annotations

import argparse
import socket
import ssl
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paired
import tls_model as tm
from loadgen import Load, LoadFailed, Tool, run_load
from procfs import tree, tree_memory
from provision import PEERS_VENV, machine_info, tool_path, versions
from run import TMP, measured, script, settle
from servers import (APPS, App, Probe, Server, StartFailed, free_port, start, stop,
                     tines_binary, tines_command)

WORKDIR = TMP / "tls"
PEERS = ("granian", "uvicorn", "uvloop", "httptools")
IDLE_CONNECTIONS = 10_000
CONNECTIONS = {"keep-alive": 50, "handshake-full": 10, "handshake-resumed": 10}
INSTRUCTION_COUNTS = {"keep-alive": 100_000, "handshake-full": 1_000, "handshake-resumed": 1_000}
"""Requests (connections) counted under callgrind. The keep-alive count opens its 50
connections with full handshakes (a new tines bench has no session to resume): 100,000
requests keep their share small (about 1,400 instructions a request at nginx's 2.8 million a
handshake)."""


def log(message: str) -> None:
    print(f"bench-tls: {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- certificates


@dataclass(frozen=True)
class Material:
    """The files every server and the client use."""

    root: Path  # the CA the client trusts (--cacert)
    chain: Path  # leaf then intermediate
    key: Path  # the leaf's key (PKCS#8)


def make_material(directory: Path) -> Material:
    """A root, an intermediate and a leaf for localhost and 127.0.0.1, all ECDSA P-256, made
    with openssl (valid 30 days: made again by every run)."""
    directory.mkdir(parents=True, exist_ok=True)

    def openssl(*words: str) -> None:
        subprocess.run(["openssl", *words], check=True, capture_output=True, cwd=directory)

    def ext(name: str, lines: str) -> str:
        (directory / name).write_text(lines)
        return name

    for name in ("root", "inter", "leaf"):
        openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                "-out", f"{name}.key")
    openssl("req", "-x509", "-new", "-key", "root.key", "-subj", "/CN=Tines bench TLS root",
            "-days", "30", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-out", "root.pem")
    openssl("req", "-new", "-key", "inter.key", "-subj", "/CN=Tines bench TLS intermediate",
            "-out", "inter.csr")
    openssl("x509", "-req", "-in", "inter.csr", "-CA", "root.pem", "-CAkey", "root.key",
            "-set_serial", "2", "-days", "30", "-out", "inter.pem", "-extfile",
            ext("inter.ext", "basicConstraints=critical,CA:TRUE,pathlen:0\n"
                             "keyUsage=critical,keyCertSign,cRLSign\n"))
    openssl("req", "-new", "-key", "leaf.key", "-subj", "/CN=localhost", "-out", "leaf.csr")
    openssl("x509", "-req", "-in", "leaf.csr", "-CA", "inter.pem", "-CAkey", "inter.key",
            "-set_serial", "3", "-days", "30", "-out", "leaf.pem", "-extfile",
            ext("leaf.ext", "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                            "extendedKeyUsage=serverAuth\n"
                            "subjectAltName=DNS:localhost,IP:127.0.0.1\n"))
    chain = directory / "chain.pem"
    chain.write_text((directory / "leaf.pem").read_text() + (directory / "inter.pem").read_text())
    return Material(directory / "root.pem", chain, directory / "leaf.key")


def https_probe(material: Material) -> Probe:
    """A ``servers.Probe`` over TLS, checking the chain against the root."""
    context = ssl.create_default_context(cafile=str(material.root))

    def probe(port: int, path: str) -> int | None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2.0) as raw:
                with context.wrap_socket(raw, server_hostname="localhost") as s:
                    s.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
                              .encode())
                    head = s.recv(64)
            return int(head.split()[1]) if head.startswith(b"HTTP/1.") else None
        except (OSError, ValueError, IndexError):
            return None
    return probe


# --------------------------------------------------------------------------- the servers

NGINX_TLS_CONF = """\
# nginx for the TLS rows: one worker, the static answer over TLS, tickets on (no session
# cache: resumption by tickets alone, as Tines'), nothing logged. The worker keeps the
# master's user (as every other server here; callgrind_control reaches it then).
user root;
worker_processes 1;
worker_rlimit_nofile 20000;
daemon off;
master_process on;
pid {workdir}/nginx-tls-{port}.pid;
error_log stderr warn;
events {{ worker_connections 12000; }}
http {{
""" + paired.NGINX_HTTP + """\
    server {{
        listen 127.0.0.1:{port} ssl;
        ssl_certificate {chain};
        ssl_certificate_key {key};
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_session_tickets on;
        location = / {{ default_type text/plain; return 200 "OK"; }}
    }}
}}
"""


def servers(material: Material) -> list[tuple[Server, App]]:
    """Every TLS row and the app it serves (hello; uvicorn serves the ASGI hello)."""
    chain, key = str(material.chain), str(material.key)

    def nginx(_app: App, port: int, _ready_fd: int | None, workdir: Path) -> list[str]:
        conf = workdir / f"nginx-tls-{port}.conf"
        conf.write_text(NGINX_TLS_CONF.format(workdir=workdir, stem="nginx-tls", port=port, chain=chain,
                                               key=key))
        return [tool_path("nginx") or "nginx", "-e", "stderr", "-p", str(workdir), "-c", str(conf)]

    def granian(app: App, port: int, _ready_fd: int | None, _workdir: Path) -> list[str]:
        return [str(PEERS_VENV / "bin" / "granian"), "--interface", "wsgi", "--host", "127.0.0.1",
                "--port", str(port), "--workers", "1", "--blocking-threads", "1",
                "--ssl-certificate", chain, "--ssl-keyfile", key,
                "--working-dir", str(app.file.parent), app.module_target]

    def uvicorn(app: App, port: int, _ready_fd: int | None, _workdir: Path) -> list[str]:
        return [str(PEERS_VENV / "bin" / "uvicorn"), "--host", "127.0.0.1", "--port", str(port),
                "--workers", "1", "--loop", "uvloop", "--http", "httptools", "--no-access-log",
                "--log-level", "warning", "--ssl-certfile", chain, "--ssl-keyfile", key,
                "--app-dir", str(app.file.parent), app.module_target]

    # Keep-alive unlimited as nginx's here; room for the idle cell; a boot that callgrind slows.
    tls = ("--certfile", chain, "--keyfile", key, "--max-keepalive-requests", "0",
           "--keepalive-timeout", "300", "--max-connections", str(IDLE_CONNECTIONS + 100),
           "--boot-timeout", "300")
    return [
        (Server("tines-prefork-tls", tines_command("prefork", None, extra=tls), uses_ready_fd=True),
         APPS["hello"]),
        (Server("tines-event-tls", tines_command("event", None, extra=tls), uses_ready_fd=True),
         APPS["hello"]),
        (Server("nginx-tls", nginx), APPS["hello"]),
        (Server("granian-tls", granian), APPS["hello"]),
        (Server("uvicorn-tls", uvicorn), APPS["asgi-hello"]),
    ]


def skipped_rows(help_text: str) -> dict[str, str]:
    """Rows this machine or build cannot run, and why."""
    skipped = {}
    if "--certfile" not in help_text:
        for row in tm.TINES_ROWS:
            skipped[row] = ("not run yet: this build of Tines serves no TLS (`tines serve --help` "
                            "has no --certfile)")
    if tool_path("nginx") is None:
        skipped["nginx-tls"] = "nginx is not installed"
    for row, binary in (("granian-tls", "granian"), ("uvicorn-tls", "uvicorn")):
        if not (PEERS_VENV / "bin" / binary).exists():
            skipped[row] = f"{binary} is not in benches/.venv-peers"
    return skipped


# --------------------------------------------------------------------------- measurements


def bench_tool(bench: Path, material: Material, cell: str) -> Tool:
    flags = ["--cacert", str(material.root)]
    if cell == "handshake-full":
        flags.append("--no-resumption")
    return Tool("tines-bench", (str(bench), *flags))


def load_for(cell: str, port: int, duration_s: float) -> Load:
    return Load(f"https://localhost:{port}/", CONNECTIONS[cell], duration_s,
                keepalive=cell == "keep-alive")


def measure_round(server: Server, app: App, cells: list[str], round_index: int,
                  arguments: argparse.Namespace, material: Material,
                  bench: Path) -> list[dict[str, Any]]:
    """One fresh start of ``server``, then each cell: warm-up, settle, measured run."""
    base = {"server": server.name, "round": round_index}
    port = free_port()
    log_path = WORKDIR / f"{server.name}-round{round_index}.log"
    try:
        running = start(server, app, port, log_path, paired.environment(), WORKDIR,
                        probe=https_probe(material))
    except StartFailed as error:
        return [{**base, "cell": cell, "failed": f"start: {error}"} for cell in cells]
    results = []
    try:
        for cell in cells:
            tool = bench_tool(bench, material, cell)
            try:
                run_load(tool, load_for(cell, port, arguments.warmup), log_path, WORKDIR)
                settle(running.process.pid)
                result = measured(tool, load_for(cell, port, arguments.duration),
                                  running.process.pid, log_path, WORKDIR)
            except (LoadFailed, OSError) as error:
                results.append({**base, "cell": cell, "failed": f"load: {error}"})
                continue
            handshakes = result.get("tls_handshakes") or {}
            done = int(handshakes.get("full", 0)) + int(handshakes.get("resumed", 0))
            if cell != "keep-alive" and done:
                result["resumed_share"] = int(handshakes.get("resumed", 0)) / done
            if result.get("tls_errors"):
                result["failed"] = f"{result['tls_errors']} TLS errors"
            results.append({**base, "cell": cell, **result})
            log(f"round {round_index + 1} {cell} {server.name}: "
                f"{result.get('cpu_us_per_request', 0):.1f} µs, {result['ok']} ok")
    finally:
        stop(running)
    return results


def idle_round(server: Server, app: App, round_index: int, material: Material,
               connections: int) -> dict[str, Any]:
    """``connections`` TLS keep-alive connections, one request each, held idle: the server
    tree's PSS growth per connection."""
    base = {"server": server.name, "round": round_index, "cell": tm.IDLE_CELL}
    port = free_port()
    log_path = WORKDIR / f"{server.name}-idle{round_index}.log"
    try:
        running = start(server, app, port, log_path, paired.environment(), WORKDIR,
                        probe=https_probe(material))
    except StartFailed as error:
        return {**base, "failed": f"start: {error}"}
    context = ssl.create_default_context(cafile=str(material.root))
    held: list[ssl.SSLSocket] = []
    try:
        session = None
        # A first connection (its handshake and request warm the worker), then the baseline.
        for _ in range(2):
            held.append(idle_connection(context, port, session))
            session = held[-1].session
        settle(running.process.pid)
        before = tree_memory(running.process.pid)["pss_total_kib"]
        while len(held) < connections + 2:
            held.append(idle_connection(context, port, session))
            session = held[-1].session or session
        settle(running.process.pid)
        after = tree_memory(running.process.pid)["pss_total_kib"]
        growth = (after - before) * 1024 / connections
        log(f"round {round_index + 1} idle {server.name}: {growth:,.0f} B/connection")
        return {**base, "pss_before_kib": before, "pss_after_kib": after,
                "connections": connections, "pss_per_connection": growth,
                "processes": len(tree(running.process.pid))}
    except OSError as error:
        return {**base, "failed": f"after {len(held)} connections: {error}"}
    finally:
        for sock in held:
            sock.close()
        stop(running)


def idle_connection(context: ssl.SSLContext, port: int,
                    session: ssl.SSLSession | None) -> ssl.SSLSocket:
    """A TLS connection (resuming ``session`` when given) that has had one keep-alive
    request answered (``OK``, Content-Length 2)."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=30.0)
    sock = context.wrap_socket(raw, server_hostname="localhost", session=session)
    sock.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
    data = b""
    while not (b"\r\n\r\n" in data and data.endswith(b"OK")):
        chunk = sock.recv(4096)
        if not chunk:
            raise OSError("the server closed an idle connection's first request")
        data += chunk
    return sock


# --------------------------------------------------------------------------- instructions


def instructions(server: Server, app: App, cell: str, material: Material, bench: Path,
                 scale: float) -> float | None:
    """Instructions of the server's tree per request (connection) in ``cell``, by callgrind;
    None when the run failed (logged)."""
    with paired.callgrind_dir("tls") as out_dir:
        port = free_port()
        log_path = WORKDIR / f"{server.name}-callgrind-{cell}.log"
        try:
            running = start(server, app, port, log_path, paired.environment(), WORKDIR,
                            probe=https_probe(material), **paired.under_callgrind(out_dir))
        except StartFailed as error:
            log(f"callgrind {server.name} {cell}: start: {error}")
            return None
        try:
            count = max(10, int(INSTRUCTION_COUNTS[cell] * scale))
            exactly(bench, material, cell, port, count // 10)
            pids = [s.pid for s in tree(running.process.pid)]
            return paired.callgrind_count(
                pids, lambda requests: exactly(bench, material, cell, port, requests), count,
                out_dir)
        except (subprocess.SubprocessError, OSError, RuntimeError) as error:
            log(f"callgrind {server.name} {cell}: {error}")
            return None
        finally:
            stop(running)


def exactly(bench: Path, material: Material, cell: str, port: int, count: int) -> None:
    """Exactly ``count`` requests of ``cell``, every one answered 2xx."""
    flags = ["--cacert", str(material.root)]
    if cell != "keep-alive":
        flags.append("--no-keepalive")
    if cell == "handshake-full":
        flags.append("--no-resumption")
    paired.exactly(bench, f"https://localhost:{port}/", CONNECTIONS[cell], count, flags)


# --------------------------------------------------------------------------- the whole


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    paired.add_common_arguments(parser, "cell", "tls")
    parser.add_argument("--servers", help="comma-separated rows (default: all)")
    parser.add_argument("--cells", help=f"comma-separated cells of {', '.join(tm.CELLS)}, "
                                        f"{tm.IDLE_CELL} (default: all)")
    parser.add_argument("--idle-connections", type=int, default=IDLE_CONNECTIONS)
    parser.add_argument("--instructions", action="store_true",
                        help="also count instructions with callgrind (the judge within 15%%)")
    parser.add_argument("--instruction-scale", type=float, default=1.0,
                        help="scale the counted requests (100,000 keep-alive, 1,000 connections "
                             "per handshake cell) by this factor")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    arguments = parse_args(argv)
    begun = paired.begin(arguments, tm.markdown, WORKDIR, PEERS, log)
    if isinstance(begun, int):
        return begun
    bench, started = begun
    material = make_material(WORKDIR / "certs")
    rows = servers(material)
    skipped = skipped_rows(paired.serve_help(log) or "")
    if arguments.servers:
        wanted = set(arguments.servers.split(","))
        rows = [(s, a) for s, a in rows if s.name in wanted]
    cells = arguments.cells.split(",") if arguments.cells else [*tm.CELLS, tm.IDLE_CELL]
    runnable = [(s, a) for s, a in rows if s.name not in skipped]
    results: list[dict[str, Any]] = []
    timed = [c for c in cells if c in tm.CELLS]
    for round_index in range(arguments.runs):
        for name in tm.order([s.name for s, _ in runnable], round_index):
            server, app = next((s, a) for s, a in runnable if s.name == name)
            if timed:
                results += measure_round(server, app, timed, round_index, arguments, material,
                                         bench)
        if tm.IDLE_CELL in cells:
            idle = [s.name for s, _ in runnable if s.name in tm.IDLE_ROWS]
            for name in tm.order(idle, round_index):
                server, app = next((s, a) for s, a in runnable if s.name == name)
                results.append(idle_round(server, app, round_index, material,
                                          arguments.idle_connections))
    counts: dict[str, dict[str, float]] = {}
    if arguments.instructions:
        for server, app in runnable:
            for cell in timed:
                value = instructions(server, app, cell, material, bench,
                                     arguments.instruction_scale)
                log(f"instructions {server.name} {cell}: {value or 0:,.0f}")
                if value is not None:
                    counts.setdefault(server.name, {})[cell] = value
    meta = {"started": started, "machine": machine_info(), "versions": versions(tines_binary()),
            "plan": {"runs": arguments.runs, "duration_s": arguments.duration,
                     "warmup_s": arguments.warmup, "connections": CONNECTIONS,
                     "idle_connections": arguments.idle_connections,
                     "instruction_counts": INSTRUCTION_COUNTS if arguments.instructions else None},
            "notes": [
                "one worker pinned to CPU 1, tines bench (https://, --cacert the root) on CPU 0; "
                "ECDSA P-256 leaf + intermediate (openssl) for every server",
                f"{arguments.runs} rounds, server order turned by one each round; verdict: median "
                "of per-round ratios, callgrind instructions judge within 15% of a mark",
                "apps: nginx its static OK, Granian and Tines the WSGI hello (examples/hello.py), "
                "uvicorn the ASGI hello (examples/asgi_hello.py)",
                f"load average at start: {machine_info()['load_average_at_start']}",
            ]}
    return paired.write_report(arguments, "tls", meta, skipped, results, counts, tm.markdown,
                               log)


if __name__ == "__main__":
    script(main, "bench-tls: interrupted")
