"""End-to-end benchmark: Tines against gunicorn (gthread) and Granian (WSGI), with wrk.

``make bench`` runs this file with the dev virtualenv's Python after building Tines. It installs
what it needs itself (``wrk`` with apt-get when missing; gunicorn, Granian and the blog's Flask,
pinned to the dev venv's versions, into the separate venv ``benches/.venv-peers``), then measures
every server on every scenario and writes ``benches/results/YYYY-MM-DD-HHMM.{md,json}``.

Method
------
* **One server at a time, pinned.** Each server runs alone, with one worker process, on CPU 1
  (``taskset -c 1``, inherited by every process and thread it starts); the load generator runs on
  CPU 0 (``taskset -c 0 wrk -t1 -c50``). Traffic is loopback only. On a shared 2-core machine
  this keeps the server from competing with wrk, but not with neighbours: read the spread.
* **Scenarios.** App (``hello``: a 2-byte WSGI response; ``blog``: the Flask + SQLite index page
  at ``/blog/``) x connection mode (keep-alive; ``Connection: close``, one request per
  connection), 50 connections each.
* **Interleaved runs.** ``for run in 1..3: for scenario: for server: start, warm up, measure,
  stop``. A slow drift of the machine (a noisy neighbour, thermal state) then touches every
  server alike instead of whichever happened to run last. Each start gets a fresh port and,
  for the blog, a fresh SQLite file (``BLOG_DB``). A 2 s wrk run after each start is discarded.
* **Readiness** is a signal, never a sleep: Tines writes ``{"event": "ready", ...}`` to
  ``--ready-fd``; the peers (and Tines if that line never comes) are polled with a TCP connect
  and ``GET`` until it answers 200, for at most 30 s. A server that does not start is reported
  as failed in the table; the harness goes on.
* **CPU per request.** Right before and right after the measured wrk run, the harness sums
  ``utime + stime + cutime + cstime`` (``/proc/<pid>/stat``, clock ticks) over the server's
  whole process tree (the master and every descendant found through ``ppid`` links; a
  process's times include all of its threads; ``cutime``/``cstime`` keep the time of a child
  reaped during the run). The difference divided by the requests wrk completed is the server's
  CPU cost per request in microseconds: the number that matters on a CPU-bound box, and less
  sensitive to the neighbours than requests/s.
* **Interference.** The harness also records, per run, the time the hypervisor stole from
  CPUs 0 and 1 and their busy time not charged to the server or wrk (``/proc/stat``), the
  noise that pinning cannot remove on a shared VM; the table shows the stolen time.
* **Memory.** RSS is the sum of ``VmRSS`` over the same tree at the end of the measured run
  (shared pages are counted once per process, so prefork master + worker overcounts a little).

The table gives medians of the runs with their min-max spread, and each server's CPU
microseconds per request relative to Granian's. Speed is reported, never asserted.

``BENCH_QUICK=1`` (or ``--quick``): one run of 3 s (1 s warm-up), written to
``benches/results/tmp/`` instead of ``benches/results/``. See ``--help`` for filters.
"""

from __future__ import annotations

import argparse
import enum
import json
import os
import resource
import select
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

# benches/ is sys.path[0] when this file runs as a script.
from procfs import cpu_times, tree, tree_cpu_ticks, tree_rss_kib
from provision import PEERS_VENV, ensure_peers, ensure_wrk, machine_info, run_quiet, versions

REPO = Path(__file__).resolve().parent.parent
BENCHES = REPO / "benches"
RESULTS = BENCHES / "results"
TMP = RESULTS / "tmp"
WRK_SCRIPT = BENCHES / "wrk_report.lua"
EXAMPLES = REPO / "examples"

# The server gets CPU 1, wrk CPU 0: on the 2-core machine this is the only split that keeps
# them apart.
SERVER_CPU = "1"
LOAD_CPU = "0"
# 50 connections: well above one worker's concurrency (1 or 4), so the server is saturated and
# idle keep-alive connections pile up, as they do behind a real proxy.
CONNECTIONS = 50
# A server that takes longer than this to answer its first request has failed to start.
READY_DEADLINE_S = 30.0
# Polling interval while waiting for a port to answer (not a readiness sleep: we poll).
POLL_INTERVAL_S = 0.05
# Graceful stop window before SIGKILL; the load has ended, so nothing should be in flight.
STOP_GRACE_S = 5.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
BENCH_CPUS = [int(SERVER_CPU), int(LOAD_CPU)]


# --------------------------------------------------------------------------- model


class Mode(enum.Enum):
    """How wrk uses its connections."""

    KEEP_ALIVE = "keep-alive"
    CLOSE = "close"

    def wrk_headers(self) -> list[str]:
        return ["-H", "Connection: close"] if self is Mode.CLOSE else []


@dataclass(frozen=True)
class App:
    """A WSGI app every server loads from the same file."""

    name: str
    file: Path  # examples/hello.py
    attr: str
    url_path: str

    @property
    def module_target(self) -> str:
        """``module:attr`` for servers that import by module name, run with the file's directory
        on ``sys.path`` (gunicorn ``--chdir``, Granian ``--working-dir``)."""
        return f"{self.file.stem}:{self.attr}"

    @property
    def file_target(self) -> str:
        """``path/to/file.py:attr`` relative to the repository, for Tines."""
        return f"{self.file.relative_to(REPO)}:{self.attr}"


@dataclass(frozen=True)
class Server:
    """A server under test: how to build its command line for an app and port."""

    name: str
    command: Callable[[App, int, int | None], list[str]]
    uses_ready_fd: bool


@dataclass(frozen=True)
class Scenario:
    """One table of the report: an app under one connection mode."""

    app: App
    mode: Mode

    @property
    def name(self) -> str:
        return f"{self.app.name}/{self.mode.value}"


@dataclass(frozen=True)
class Plan:
    """How long and how often to measure."""

    runs: int
    warmup_s: int
    duration_s: int
    quick: bool


@dataclass
class Measurement:
    """One measured run of one server on one scenario (a row of the JSON ``runs`` list)."""

    server: str
    scenario: str
    run: int
    command: list[str]
    failed: str | None = None
    requests: int = 0
    requests_per_second: float = 0.0
    latency_us: dict[str, float] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    cpu_seconds: float = 0.0
    cpu_us_per_request: float = 0.0
    # Server CPU seconds per second of load: near 1.0, the server (pinned to one CPU) was the
    # bottleneck; well below, something else was (wrk, the network stack on CPU 0, a neighbour).
    cpu_utilisation: float = 0.0
    rss_kib_end: int = 0
    processes: int = 0
    # Interference, in CPUs (CPU seconds per second) on the two benchmark CPUs during the run:
    # busy time not used by the server tree or wrk (neighbours, interrupt work not charged to a
    # process), and time stolen by the hypervisor. Well above ~0.1, the run is suspect.
    other_cpu: float = 0.0
    steal_cpu: float = 0.0
    load_average_1m: float = 0.0

    @property
    def error_total(self) -> int:
        return sum(self.errors.values())


class StartFailed(Exception):
    """The server did not become ready; the message says why."""


# --------------------------------------------------------------------------- servers


def tines_binary() -> Path:
    """The ``tines`` of the venv running this script (``make bench``: ``.venv``)."""
    candidate = Path(sys.executable).parent / "tines"
    return candidate if candidate.exists() else REPO / ".venv" / "bin" / "tines"


def tines_command(mpm: str, threads: int) -> Callable[[App, int, int | None], list[str]]:
    def command(app: App, port: int, ready_fd: int | None) -> list[str]:
        cmd = [str(tines_binary()), "serve", app.file_target, "-b", f"127.0.0.1:{port}",
               "-w", "1", "--mpm", mpm]
        if mpm == "thread":
            cmd += ["--threads", str(threads)]
        if ready_fd is not None:
            cmd += ["--ready-fd", str(ready_fd)]
        return cmd
    return command


def gunicorn_command(app: App, port: int, _ready_fd: int | None) -> list[str]:
    return [str(PEERS_VENV / "bin" / "gunicorn"), "-k", "gthread", "-w", "1", "--threads", "4",
            "-b", f"127.0.0.1:{port}", "--chdir", str(app.file.parent), app.module_target]


def granian_command(app: App, port: int, _ready_fd: int | None) -> list[str]:
    return [str(PEERS_VENV / "bin" / "granian"), "--interface", "wsgi", "--host", "127.0.0.1",
            "--port", str(port), "--workers", "1", "--blocking-threads", "1",
            "--working-dir", str(app.file.parent), app.module_target]


SERVERS = [
    Server("tines-prefork", tines_command("prefork", 1), uses_ready_fd=True),
    Server("tines-thread", tines_command("thread", 4), uses_ready_fd=True),
    Server("gunicorn-gthread", gunicorn_command, uses_ready_fd=False),
    Server("granian-wsgi", granian_command, uses_ready_fd=False),
]
BASELINE = "granian-wsgi"

APPS = [
    App("hello", EXAMPLES / "hello.py", "app", "/"),
    App("blog", EXAMPLES / "blog" / "app.py", "app", "/blog/"),
]


# --------------------------------------------------------------------------- a server's life


@dataclass
class Running:
    """A started server: its process (the group leader), command line and log file."""

    process: subprocess.Popen[bytes]
    command: list[str]
    log: Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_status(port: int, path: str) -> int | None:
    """Status code of one ``GET path`` on a fresh connection, or None if it fails."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2.0) as s:
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
                      .encode())
            head = s.recv(64)
        return int(head.split()[1]) if head.startswith(b"HTTP/1.") else None
    except (OSError, ValueError, IndexError):
        return None


def log_tail(log: Path) -> str:
    """The server log's last line that mentions an error (else its last line), shortened."""
    try:
        lines = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or [""])[-1][-200:]


def wait_ready_line(ready_read: int, deadline: float) -> bool:
    """True once the ready JSON line arrives; False if the pipe closes without one."""
    buffer = b""
    while time.monotonic() < deadline:
        readable, _, _ = select.select([ready_read], [], [], deadline - time.monotonic())
        if not readable:
            break
        chunk = os.read(ready_read, 4096)
        if not chunk:
            return False
        buffer += chunk
        if b"\n" in buffer:
            event = json.loads(buffer.split(b"\n", 1)[0])
            return bool(event.get("event") == "ready")
    raise StartFailed(f"no ready line within {READY_DEADLINE_S:.0f} s")


def wait_port(running: Running, port: int, path: str, deadline: float) -> None:
    """Poll ``GET path`` until it answers 200, the server exits, or the deadline passes."""
    last: int | None = None
    while time.monotonic() < deadline:
        if running.process.poll() is not None:
            raise StartFailed(f"exited with {running.process.returncode}: {log_tail(running.log)}")
        last = http_status(port, path)
        if last == 200:
            return
        time.sleep(POLL_INTERVAL_S)
    raise StartFailed(f"no 200 on {path} within {READY_DEADLINE_S:.0f} s (last: {last})")


def start(server: Server, app: App, port: int, log: Path, env: dict[str, str]) -> Running:
    """Start ``server`` pinned to SERVER_CPU in its own process group and wait until it serves."""
    ready_read, ready_write = os.pipe() if server.uses_ready_fd else (-1, -1)
    command = server.command(app, port, ready_write if server.uses_ready_fd else None)
    # Append mode: wrk's output is appended to the same log while the server writes to it.
    with log.open("ab") as out:
        process = subprocess.Popen(
            ["taskset", "-c", SERVER_CPU, *command], cwd=REPO, env=env, stdin=subprocess.DEVNULL,
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            pass_fds=(ready_write,) if server.uses_ready_fd else ())
    running = Running(process, command, log)
    deadline = time.monotonic() + READY_DEADLINE_S
    try:
        if server.uses_ready_fd:
            os.close(ready_write)
            try:
                wait_ready_line(ready_read, deadline)
            except (ValueError, json.JSONDecodeError):
                pass  # an unreadable line: fall back to polling
        # Also the smoke test for every server: the app must answer 200 before we load it.
        wait_port(running, port, app.url_path, deadline)
    except BaseException:
        stop(running)
        raise
    finally:
        if server.uses_ready_fd:
            os.close(ready_read)
    return running


def stop(running: Running) -> None:
    """SIGTERM the server's process group, SIGKILL it after STOP_GRACE_S, and reap it."""
    pgid = running.process.pid  # start_new_session: the group id is the leader's pid
    try:
        os.killpg(pgid, signal.SIGTERM)
        running.process.wait(timeout=STOP_GRACE_S)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(pgid, signal.SIGKILL)  # also any worker left behind by its master
    except ProcessLookupError:
        pass
    running.process.wait()


# --------------------------------------------------------------------------- load


def run_wrk(port: int, scenario: Scenario, duration_s: int, log: Path) -> dict[str, Any]:
    """One wrk run from LOAD_CPU; returns the reporter's JSON (see wrk_report.lua)."""
    command = ["taskset", "-c", LOAD_CPU, "wrk", "-t1", f"-c{CONNECTIONS}", f"-d{duration_s}s",
               "--latency", "-s", str(WRK_SCRIPT), *scenario.mode.wrk_headers(),
               f"http://127.0.0.1:{port}{scenario.app.url_path}"]
    result = run_quiet(command, timeout=duration_s + 60)
    with log.open("a") as out:
        out.write(f"\n$ {' '.join(command)}\n{result.stdout}{result.stderr}")
    for line in result.stdout.splitlines():
        if line.startswith("BENCH-JSON "):
            report: dict[str, Any] = json.loads(line.removeprefix("BENCH-JSON "))
            return report
    raise RuntimeError(f"wrk gave no report: {result.stderr.strip()[-300:]}")


def measure(server: Server, scenario: Scenario, run: int, plan: Plan, workdir: Path) -> Measurement:
    """Start the server, warm it up, measure one wrk run, stop it. Never raises for the server."""
    port = free_port()
    stem = f"{scenario.app.name}-{scenario.mode.value}-{server.name}-run{run}"
    log = workdir / f"{stem}.log"
    database = workdir / f"{stem}.sqlite3"
    env = {**os.environ, "BLOG_DB": str(database), "PYTHONUNBUFFERED": "1"}
    env.pop("VIRTUAL_ENV", None)
    result = Measurement(server.name, scenario.name, run, server.command(scenario.app, 0, None))
    try:
        running = start(server, scenario.app, port, log, env)
    except StartFailed as error:
        result.failed = str(error)
        return result
    try:
        result.command = running.command
        run_wrk(port, scenario, plan.warmup_s, log)
        before = tree_cpu_ticks(running.process.pid)
        machine_before, wrk_before = cpu_times(BENCH_CPUS), children_cpu_seconds()
        report = run_wrk(port, scenario, plan.duration_s, log)
        after = tree_cpu_ticks(running.process.pid)
        machine_after, wrk_after = cpu_times(BENCH_CPUS), children_cpu_seconds()
        result.rss_kib_end = tree_rss_kib(running.process.pid)
        result.processes = len(tree(running.process.pid))
        result.load_average_1m = os.getloadavg()[0]
        fill(result, report, (after - before) / CLOCK_TICKS)
        wall = report["duration_us"] / 1e6
        result.other_cpu = ((machine_after.busy - machine_before.busy) / CLOCK_TICKS
                            - result.cpu_seconds - (wrk_after - wrk_before)) / wall
        result.steal_cpu = (machine_after.steal - machine_before.steal) / CLOCK_TICKS / wall
    except Exception as error:  # the harness reports a broken measurement and goes on
        result.failed = f"load: {type(error).__name__}: {error}"
    finally:
        stop(running)
        for suffix in ("", "-wal", "-shm"):
            Path(f"{database}{suffix}").unlink(missing_ok=True)
    return result


def children_cpu_seconds() -> float:
    """User + system CPU of this process's waited-for children (wrk runs), in seconds."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def fill(result: Measurement, report: dict[str, Any], cpu_seconds: float) -> None:
    requests = int(report["requests"])
    result.requests = requests
    result.requests_per_second = requests / (report["duration_us"] / 1e6)
    result.latency_us = {k: float(v) for k, v in report["latency_us"].items()}
    result.errors = {k: int(v) for k, v in report["errors"].items()}
    result.cpu_seconds = cpu_seconds
    result.cpu_us_per_request = cpu_seconds * 1e6 / requests if requests else 0.0
    result.cpu_utilisation = cpu_seconds / (report["duration_us"] / 1e6)
    if requests == 0:
        result.failed = "no request completed"


# --------------------------------------------------------------------------- report


def fmt_ms(us: float) -> str:
    return f"{us / 1000:.2f}"


def summary_row(server: str, runs: list[Measurement], baseline_cpu: float | None,
                planned: int) -> str:
    good = [m for m in runs if m.failed is None]
    if not good:
        reason = runs[0].failed if runs else "not run"
        return f"| {server} | failed: {reason} |" + " |" * 10
    rps = [m.requests_per_second for m in good]
    cpu = [m.cpu_us_per_request for m in good]
    cpu_median = statistics.median(cpu)
    ratio = f"{cpu_median / baseline_cpu:.2f}" if baseline_cpu else "n/a"
    note = f" ({len(good)}/{planned} runs)" if len(good) < planned else ""
    return (f"| {server}{note} | {statistics.median(rps):,.0f} | {min(rps):,.0f}–{max(rps):,.0f}"
            f" | {fmt_ms(statistics.median(m.latency_us['p50'] for m in good))}"
            f" | {fmt_ms(statistics.median(m.latency_us['p99'] for m in good))}"
            f" | {sum(m.error_total for m in good)}"
            f" | {cpu_median:.0f} | {min(cpu):.0f}–{max(cpu):.0f}"
            f" | {statistics.median(m.cpu_utilisation for m in good):.0%}"
            f" | {statistics.median(m.rss_kib_end for m in good) / 1024:.1f} | {ratio}"
            f" | {statistics.median(m.steal_cpu for m in good):.2f} |")


def baseline_cpu(runs: list[Measurement]) -> float | None:
    good = [m.cpu_us_per_request for m in runs if m.server == BASELINE and m.failed is None]
    return statistics.median(good) if good else None


def render(results: list[Measurement], scenarios: list[Scenario], servers: list[Server],
           skipped: dict[str, str], meta: dict[str, Any], plan: Plan) -> str:
    lines = [f"# Benchmark {meta['started']}", ""]
    if plan.quick:
        lines += ["**Quick run (BENCH_QUICK): one short run per cell; for development only.**", ""]
    lines += [f"{plan.runs} interleaved run(s) per cell; wrk -t1 -c{CONNECTIONS} "
              f"-d{plan.duration_s}s after a {plan.warmup_s} s warm-up; server on CPU "
              f"{SERVER_CPU}, wrk on CPU {LOAD_CPU}. Medians, with the min–max spread of the runs. "
              "Errors: socket errors + non-2xx/3xx, summed over the runs. "
              "CPU µs/req: user+sys CPU of the server's process tree / requests; "
              "server CPU busy: that CPU time / wall time (100% = the server's CPU was saturated). "
              "RSS: sum of VmRSS over the tree at the end of the run. "
              "Stolen CPUs: CPU time the hypervisor took from CPUs 0 and 1 per second of the run "
              "(noise: compare rows only when it is small).", ""]
    header = ("| server | req/s | req/s spread | p50 ms | p99 ms | errors | CPU µs/req "
              "| CPU spread | server CPU busy | RSS MiB | CPU/req vs Granian | stolen CPUs |")
    for scenario in scenarios:
        lines += [f"## {scenario.app.name}, {scenario.mode.value} "
                  f"(`GET {scenario.app.url_path}`, {CONNECTIONS} connections)", ""]
        if scenario.app.name in skipped:
            lines += [f"Skipped: {skipped[scenario.app.name]}", ""]
            continue
        runs = [m for m in results if m.scenario == scenario.name]
        base = baseline_cpu(runs)
        lines += [header, "| --- |" + " ---: |" * 11]
        for server in servers:
            lines.append(summary_row(server.name, [m for m in runs if m.server == server.name],
                                     base, plan.runs))
        lines.append("")
    lines += ["## Command lines", "", "Each prefixed with `taskset -c 1`; `PORT` is a free port "
              "picked per start; peers run from `benches/.venv-peers`.", ""]
    for server in servers:
        for app in APPS:
            cmd = " ".join(server.command(app, 0, 3 if server.uses_ready_fd else None))
            cmd = cmd.replace(str(REPO) + "/", "").replace("127.0.0.1:0", "127.0.0.1:PORT")
            cmd = cmd.replace("--port 0", "--port PORT")
            lines.append(f"- {server.name}, {app.name}: `{cmd}`")
    lines += ["", f"- load: `taskset -c {LOAD_CPU} wrk -t1 -c{CONNECTIONS} -d{plan.duration_s}s "
              "--latency -s benches/wrk_report.lua [-H 'Connection: close'] URL`", "",
              "## Machine and versions", ""]
    for key, value in {**meta["machine"], **meta["versions"]}.items():
        lines.append(f"- {key}: {value}")
    good = [m for m in results if m.failed is None]
    if good:
        other = [m.other_cpu for m in good]
        steal = [m.steal_cpu for m in good]
        lines.append(f"- interference during the measured runs, in CPUs: other busy "
                     f"{min(other):.2f}–{max(other):.2f} (median {statistics.median(other):.2f}), "
                     f"stolen {min(steal):.2f}–{max(steal):.2f}")
    return "\n".join(lines) + "\n"



# --------------------------------------------------------------------------- main


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", default=os.environ.get("BENCH_QUICK") == "1",
                        help="one run of 3 s, written to benches/results/tmp/ (env BENCH_QUICK=1)")
    parser.add_argument("--servers", help="comma-separated subset of: "
                        + ", ".join(s.name for s in SERVERS))
    parser.add_argument("--apps", help="comma-separated subset of: " + ", ".join(a.name for a in APPS))
    parser.add_argument("--modes", help="comma-separated subset of: keep-alive, close")
    return parser.parse_args()


def pick(items: list[Any], names: str | None, key: Callable[[Any], str]) -> list[Any]:
    if not names:
        return items
    wanted = names.split(",")
    return [item for item in items if key(item) in wanted]


def main() -> int:
    args = parse_args()
    plan = Plan(runs=1, warmup_s=1, duration_s=3, quick=True) if args.quick else \
        Plan(runs=3, warmup_s=2, duration_s=10, quick=False)
    servers = pick(SERVERS, args.servers, lambda s: s.name)
    apps = pick(APPS, args.apps, lambda a: a.name)
    modes = pick(list(Mode), args.modes, lambda m: m.value)
    ensure_wrk()
    ensure_peers()
    skipped = {a.name: f"`{a.file.relative_to(REPO)}` is missing" for a in apps if not a.file.exists()}
    scenarios = [Scenario(app, mode) for app in apps for mode in modes]
    runnable = [s for s in scenarios if s.app.name not in skipped]
    stamp = time.strftime("%Y-%m-%d-%H%M")
    meta = {"started": stamp, "machine": machine_info(), "versions": versions(tines_binary())}
    TMP.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix=f"{stamp}-", dir=TMP))
    total = plan.runs * len(runnable) * len(servers)
    print(f"bench: {total} measurements, logs in {workdir.relative_to(REPO)}", file=sys.stderr)
    results: list[Measurement] = []
    for run in range(1, plan.runs + 1):
        for scenario in runnable:
            for server in servers:
                m = measure(server, scenario, run, plan, workdir)
                results.append(m)
                status = m.failed or (f"{m.requests_per_second:,.0f} req/s, "
                                      f"{m.cpu_us_per_request:.0f} CPU µs/req")
                print(f"bench: [{len(results)}/{total}] run {run} {scenario.name} "
                      f"{server.name}: {status}", file=sys.stderr)
    markdown = render(results, scenarios, servers, skipped, meta, plan)
    out_dir = TMP if plan.quick else RESULTS
    document = {"schema": "tines-bench/1", **meta,
                "plan": {"runs": plan.runs, "warmup_s": plan.warmup_s,
                         "duration_s": plan.duration_s, "connections": CONNECTIONS,
                         "server_cpu": SERVER_CPU, "load_cpu": LOAD_CPU, "quick": plan.quick},
                "skipped": skipped, "runs": [vars(m) for m in results]}
    (out_dir / f"{stamp}.md").write_text(markdown)
    (out_dir / f"{stamp}.json").write_text(json.dumps(document, indent=2) + "\n")
    print(markdown)
    print(f"bench: wrote {(out_dir / stamp).relative_to(REPO)}.{{md,json}}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
