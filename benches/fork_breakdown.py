"""Where a process-per-request request's time goes, from kernel timestamps (perf tracepoints).

``fork_breakdown.py [--app hello|blog] [FLAGS]`` (or ``benches/isolation.py``, which runs it
for each of its apps after its rounds): starts Tines prefork with a process per request on the
app (hello by default), pinned to CPU 1 as the bench does,
records the scheduler's and a few system calls' tracepoints on CPU 1 with ``perf record -C 1``
while ``tines bench -c 1 --no-keepalive`` loads it from CPU 0, and follows each worker from the
master's fork to the master's reap:

- fork: the master's clone, enter to exit (the fork server's, ADR 0026, when it forks the
  workers: its clone makes them the master's children);
- child start: the child's first instant to its first ``accept4`` (ready to take a connection);
- idle: that ``accept4`` to its return with a connection (the spare waiting for a client; near 0
  when the request had to wait for the worker instead);
- request: the accepted connection to its ``close``;
- after: that ``close`` to ``exit_group`` (what the worker does between its response and its
  exit);
- exit: ``exit_group`` to the kernel's ``sched_process_exit`` (on the 6.18 kernel here that
  tracepoint fires before the address space is torn down: a 600 MiB child's ``exit`` phase took
  20 µs and its teardown 20 ms, in the next phase);
- teardown and reap: ``sched_process_exit`` to the master's ``wait4`` returning the pid (the
  address space unmapped, SIGCHLD, the master waking up and reaping).

These are wall times on the server's one CPU: a phase also holds whatever else ran there
meanwhile (the master, the next worker's start). The CPU each side spends per request comes
from the profile below.

Only the system call tracepoints are recorded (not every system call), so perf costs the
server little. Then, under the same load, a CPU profile (``cpu-clock`` samples at 1 kHz on CPU 1)
splits the master's and its workers' time between the kernel (fork's page-table copy,
copy-on-write faults, exit's unmapping), Python, Tines' extension and libc, and names their top
functions. The parsing is pure (``parse``, ``lifecycles``, ``summary``) and tested in
tests/python/unit/test_bench_isolation.py.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from loadgen import LOAD_CPU, Load, Tool, tines_bench_command
from procfs import children
from run import TMP, choose_tools
from servers import (APPS, SERVER_CPU, App, Server, StartFailed, free_port, start, stop,
                     tines_command)

EVENTS = ",".join([
    "sched:sched_process_fork", "sched:sched_process_exit",
    "syscalls:sys_enter_clone", "syscalls:sys_exit_clone",
    "syscalls:sys_enter_clone3", "syscalls:sys_exit_clone3",
    "syscalls:sys_enter_accept4", "syscalls:sys_exit_accept4",
    "syscalls:sys_enter_close", "syscalls:sys_enter_exit_group",
    "syscalls:sys_exit_wait4"])
LINE = re.compile(r"\s(\d+)/(\d+)\s+(\d+\.\d+):\s+([\w:]+):\s*(.*)$")
# The profile: CPU samples, and the forks that tell the master's children from other processes;
# each sample stands for about 1/SAMPLE_HZ s of CPU.
SAMPLE_HZ = 1000
PROFILE_EVENTS = f"cpu-clock/freq={SAMPLE_HZ}/,sched:sched_process_fork"
SAMPLE = re.compile(r"^\s*(\d+)\s+cpu-clock\S*:\s+[0-9a-f]+\s+(.*?)\s+\((.*)\)\s*$")
FORKED = re.compile(r"^\s*(\d+)\s+sched:sched_process_fork:.*\bchild_pid=(\d+)")
PHASES = (("fork", "fork in the master (clone)"),
          ("start", "child start, to its first accept4"),
          ("idle", "idle: ready, waiting for a connection"),
          ("request", "the request: accept4 to close"),
          ("after", "after the response, to exit_group"),
          ("exit", "exit: exit_group to sched_process_exit"),
          ("reap", "teardown and reap: to the master's wait4"))
# A worker's life on the request's path: every phase but the spare's idle wait.
LIFE = ("fork", "start", "request", "after", "exit", "reap")


class BreakdownFailed(Exception):
    """No breakdown: perf is missing or refused, the server did not start, or nothing was
    recorded; the message says which."""


@dataclass(frozen=True)
class Event:
    time: float
    pid: int
    tid: int
    name: str
    payload: str


def parse(text: str) -> list[Event]:
    """``perf script -F comm,pid,tid,time,event,trace`` lines as events (others skipped)."""
    out = []
    for line in text.splitlines():
        found = LINE.search(line)
        if found:
            out.append(Event(float(found.group(3)), int(found.group(1)), int(found.group(2)),
                             found.group(4), found.group(5)))
    return out


def returned(event: Event) -> int:
    """A ``sys_exit_*`` event's return value (``0xfffffffffffffff5`` is -11)."""
    value = int(event.payload.split()[0], 16)
    return value - (1 << 64) if value >= 1 << 63 else value


def first_argument(event: Event) -> int:
    """A ``sys_enter_*`` event's first argument (``fd: 0x00000004``)."""
    return int(event.payload.split(",")[0].split(":")[1], 16)


@dataclass
class Life:
    """One worker's instants, in seconds (None: not seen)."""

    pid: int
    clone_enter: float | None = None
    clone_exit: float | None = None
    first: float | None = None
    ready: float | None = None
    accepted: float | None = None
    conn: int | None = None
    closed: float | None = None
    exit_group: float | None = None
    exited: float | None = None
    reaped: float | None = None
    phases: dict[str, float] = field(default_factory=dict)


def lifecycles(events: Iterable[Event], master: int, fork_server: int | None = None) -> list[Life]:
    """Each child of ``master`` forked during the recording (by the master, or by its
    ``fork_server``), followed to its reap."""
    lives: dict[int, Life] = {}
    clone_enter: float | None = None
    forkers = {master, fork_server}
    for e in events:
        if e.pid in forkers:
            if e.name in ("syscalls:sys_enter_clone", "syscalls:sys_enter_clone3"):
                clone_enter = e.time
            elif e.name == "sched:sched_process_fork":
                forked = re.search(r"child_pid=(\d+)", e.payload)
                if forked:
                    lives[int(forked.group(1))] = Life(int(forked.group(1)), clone_enter)
            elif e.name in ("syscalls:sys_exit_clone", "syscalls:sys_exit_clone3"):
                if (forked_life := lives.get(returned(e))) is not None:
                    forked_life.clone_exit = e.time
            elif e.name == "syscalls:sys_exit_wait4":
                if (reaped := lives.get(returned(e))) is not None:
                    reaped.reaped = e.time
        if e.name == "sched:sched_process_exit":
            gone = re.search(r"\bpid=(\d+) prio=", e.payload)
            if gone and int(gone.group(1)) in lives and "group_dead=false" not in e.payload:
                lives[int(gone.group(1))].exited = e.time
            continue
        child = lives.get(e.pid)
        if child is None or e.pid in forkers:
            continue
        if child.first is None and e.tid == e.pid:
            child.first = e.time
        if e.name == "syscalls:sys_enter_accept4" and child.ready is None:
            child.ready = e.time
        elif e.name == "syscalls:sys_exit_accept4" and child.accepted is None and returned(e) >= 0:
            child.accepted, child.conn = e.time, returned(e)
        elif (e.name == "syscalls:sys_enter_close" and child.accepted is not None
              and child.closed is None and first_argument(e) == child.conn):
            child.closed = e.time
        elif e.name == "syscalls:sys_enter_exit_group" and child.exit_group is None:
            child.exit_group = e.time
    for life in lives.values():
        pairs = {"fork": (life.clone_enter, life.clone_exit), "start": (life.first, life.ready),
                 "idle": (life.ready, life.accepted), "request": (life.accepted, life.closed),
                 "after": (life.closed, life.exit_group),
                 "exit": (life.exit_group, life.exited), "reap": (life.exited, life.reaped)}
        life.phases = {name: (b - a) * 1e6 for name, (a, b) in pairs.items()
                       if a is not None and b is not None and b >= a}
    return list(lives.values())


def summary(lives: list[Life], client_p50_ms: float | None, rate: float | None) -> list[str]:
    """The breakdown as markdown: each phase's median and p90 over the workers that served a
    request, the life they add up to, its largest shares, and whether requests waited for a
    worker."""
    served = [life for life in lives if "request" in life.phases]
    if not served:
        return ["Not measured: no worker of the recording served a request."]
    lines = [f"{len(served)} workers that served a request (perf tracepoints on CPU 1, "
             "medians; the bench's own load, one connection, Connection: close).", "",
             "| phase | median µs | p90 µs | workers |", "| --- | ---: | ---: | ---: |"]
    medians: dict[str, float] = {}
    for name, title in PHASES:
        values = sorted(life.phases[name] for life in served if name in life.phases)
        if not values:
            lines.append(f"| {title} | - | - | 0 |")
            continue
        medians[name] = statistics.median(values)
        p90 = values[min(len(values) - 1, int(len(values) * 0.9))]
        lines.append(f"| {title} | {medians[name]:,.0f} | {p90:,.0f} | {len(values)} |")
    life = sum(medians.get(name, 0.0) for name in LIFE)
    accepted = sorted(life.accepted for life in served if life.accepted is not None)
    gaps = [b - a for a, b in zip(accepted, accepted[1:])]
    cycle = statistics.median(gaps) * 1e6 if gaps else None
    lines.append("")
    text = f"A worker's life from fork to reap, its idle wait left out: {life:,.0f} µs"
    if cycle:
        text += f"; one request every {cycle:,.0f} µs (median gap between accepts)"
    if rate:
        text += f", {rate:,.1f} req/s by the client"
    if client_p50_ms is not None:
        text += f", client p50 {client_p50_ms:.2f} ms"
    lines.append(text + ".")
    if life:
        top = sorted(((medians.get(n, 0.0), n) for n in LIFE), reverse=True)[:2]
        lines.append("Largest shares of that life: " + ", ".join(
            f"{n} {v / life:.0%}" for v, n in top) + "." + (
            " The spare was not ready when the client connected (idle near 0): requests waited "
            "for a worker's start." if medians.get("idle", 1e9) < 100 else
            " The spare was ready before the client connected (idle > 0.1 ms): the next "
            "request did not wait for a fork."))
    return lines


def place(dso: str) -> str:
    """Where a sampled instruction is: the kernel, Python, Tines' extension, libc, or other."""
    name = dso.rsplit("/", 1)[-1]
    if name == "[kernel.kallsyms]":
        return "kernel"
    if name.startswith("libpython"):
        return "Python (libpython)"
    if name.startswith("_core."):
        return "Tines' extension (_core)"
    return "libc" if name.startswith("libc.") else "other"


def profile(text: str, master: int, rate: float | None = None, top: int = 8,
            fork_server: int | None = None) -> list[str]:
    """CPU samples of the master, its ``fork_server`` (counted as the master's: the master's
    side of each fork) and their children (``perf script -F pid,event,ip,sym,dso,trace`` of
    PROFILE_EVENTS) as markdown: the split between them, their CPU per request, where their
    time is (kernel, Python, ...), and their top functions; ``rate``: the client's req/s
    meanwhile (sampling slows the server a little)."""
    children: set[int] = set()
    functions: dict[str, Counter[str]] = {"master": Counter(), "workers": Counter()}
    places: dict[str, Counter[str]] = {"master": Counter(), "workers": Counter()}
    server_samples = 0
    for line in text.splitlines():
        if forked := FORKED.match(line):
            if int(forked.group(1)) in (master, fork_server) and int(forked.group(2)) != fork_server:
                children.add(int(forked.group(2)))
            continue
        sample = SAMPLE.match(line)
        if sample is None:
            continue
        pid = int(sample.group(1))
        server_samples += pid == fork_server
        role = "master" if pid in (master, fork_server) else "workers" if pid in children else None
        if role is not None:
            functions[role][sample.group(2)] += 1
            places[role][place(sample.group(3))] += 1
    total = {role: sum(count.values()) for role, count in functions.items()}
    both = total["master"] + total["workers"]
    if not both:
        return ["No CPU sample of the server was recorded."]

    def share(count: int, role: str) -> str:
        return f"{count / total[role]:.0%}" if total[role] else "-"

    lines = [f"CPU samples on CPU 1 (perf, cpu-clock at {SAMPLE_HZ / 1000:g} kHz, the same "
             f"load): the master {total['master'] / both:.0%} of the server's"
             + (f" (its fork server {server_samples / both:.0%})" if fork_server is not None else "")
             + f", the workers {total['workers'] / both:.0%}."]
    if children:
        master_us, workers_us = (total[role] * 1e6 / SAMPLE_HZ / len(children)
                                 for role in ("master", "workers"))
        lines[0] += (f" Per request ({len(children)} workers forked in the recording): about "
                     f"{master_us:,.0f} µs of the master's CPU and {workers_us:,.0f} µs of its "
                     f"workers', so at most {1e6 / (master_us + workers_us):,.0f} req/s on the "
                     "one CPU" + (f" ({rate:,.1f} req/s by the client meanwhile)." if rate
                                  else "."))
    lines += ["", "| where | master | workers |", "| --- | ---: | ---: |"]
    for where in ("kernel", "Python (libpython)", "Tines' extension (_core)", "libc", "other"):
        lines.append(f"| {where} | {share(places['master'][where], 'master')} | "
                     f"{share(places['workers'][where], 'workers')} |")
    lines += ["", "| master's top functions | share | workers' top functions | share |",
              "| --- | ---: | --- | ---: |"]
    tops = {role: count.most_common(top) for role, count in functions.items()}
    for i in range(max(len(tops["master"]), len(tops["workers"]))):
        cells = []
        for role in ("master", "workers"):
            name, count = tops[role][i] if i < len(tops[role]) else ("", 0)
            cells += [f"`{name}`" if name else "", share(count, role) if name else ""]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def record(perf: str, events: str, data: Path, primary: Tool, load: Load) -> tuple[str, str]:
    """``perf record`` of ``events`` on CPU 1 while ``tines bench`` runs ``load`` on CPU 0;
    ``perf script``'s text and the load generator's JSON document (or ``{}``)."""
    recorded = subprocess.run(
        [perf, "record", "-q", "-C", SERVER_CPU, "-e", events, "-o", str(data), "--",
         "taskset", "-c", LOAD_CPU, *tines_bench_command(primary, load)],
        capture_output=True, text=True, timeout=load.duration_s + 120)
    if recorded.returncode != 0:
        raise BreakdownFailed(f"perf record: exit {recorded.returncode}: "
                              f"{recorded.stderr.strip()[-200:]}")
    fields = ("comm,pid,tid,time,event,trace" if events == EVENTS
              else "pid,event,ip,sym,dso,trace")
    script = subprocess.run([perf, "script", "-i", str(data), "-F", fields],
                            capture_output=True, text=True, timeout=300)
    return script.stdout, recorded.stdout[recorded.stdout.find("{"):]


def breakdown(server: Server, app: App, primary: Tool, workdir: Path,
              seconds: float = 2.0) -> list[str]:
    """Start ``server`` on ``app`` pinned to CPU 1; record CPU 1's tracepoints, then its CPU
    samples, each under ``seconds`` of one connection of Connection: close load; stop it. The
    breakdown's and the profile's markdown lines."""
    perf = shutil.which("perf")
    if perf is None:
        raise BreakdownFailed("perf is not installed (apt-get install linux-perf)")
    stem = workdir / f"breakdown-{app.name}"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "BLOG_DB": f"{stem}.sqlite3"}
    port = free_port()
    try:
        running = start(server, app, port, Path(f"{stem}.log"), env, workdir)
    except StartFailed as error:
        raise BreakdownFailed(f"the server did not start: {error}") from error
    load = Load(f"http://127.0.0.1:{port}{app.url_path}", 1, seconds, keepalive=False)
    master = running.process.pid
    fork_server = next((pid for pid in children(master) if title(pid).startswith("tines: fork server")), None)
    try:
        traced, client = record(perf, EVENTS, Path(f"{stem}.perf.data"), primary, load)
        sampled, sampled_client = record(perf, PROFILE_EVENTS,
                                         Path(f"{stem}-profile.perf.data"), primary, load)
    finally:
        stop(running)
    return [*summary(lifecycles(parse(traced), master, fork_server), *client_figures(client)), "",
            *profile(sampled, master, client_figures(sampled_client)[1], fork_server=fork_server)]


def title(pid: int) -> str:
    """A process's title (its command line), or "" when it is gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def client_figures(document: str) -> tuple[float | None, float | None]:
    """p50 (ms) and req/s from ``tines bench --json``'s output, or None where it has none."""
    try:
        parsed = json.loads(document)
        return parsed["latency_us"]["p50"] / 1000, float(parsed["requests_per_sec"])
    except (ValueError, KeyError, TypeError):
        return None, None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--flags", default="--max-requests 1 --preload",
                        help="tines serve flags (default '--max-requests 1 --preload'); "
                             "write --flags='...'")
    parser.add_argument("--seconds", type=float, default=2.0, help="recording (default 2)")
    parser.add_argument("--app", choices=("hello", "blog"), default="hello",
                        help="the app (default hello)")
    args = parser.parse_args(argv)
    workdir = TMP / "breakdown"
    workdir.mkdir(parents=True, exist_ok=True)
    server = Server("tines-prefork-per-request", tines_command(
        "prefork", None, extra=tuple(shlex.split(args.flags))), uses_ready_fd=True)
    try:
        print("\n".join(breakdown(server, APPS[args.app], choose_tools("tines-bench")[0],
                                  workdir, args.seconds)))
    except BreakdownFailed as error:
        sys.stderr.write(f"fork_breakdown: {error}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
