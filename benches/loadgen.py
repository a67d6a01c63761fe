"""The load generators behind one small interface: ``run_load(tool, load, log)`` runs one
measurement and returns a dict with the fields of ``tines bench --json`` (schema 1, see
docs/bench.md): ``requests``, ``ok``, ``errors`` {connect, reset, timeout, status, parse,
total}, ``requests_per_sec``, ``elapsed_s``, ``bytes_read``, ``latency_us`` {min, mean, stdev,
max, p50, p75, p90, p99, p99_9, p99_99}, plus ``command`` and ``load_cpu_seconds`` (the
generator's own user+system CPU time).

Two tools: ``tines bench`` (the primary, once it is in the build) and ``wrk`` (the cross-check,
and the primary until then). wrk's figures come from ``wrk_report.lua`` as JSON and are mapped
onto the same fields by ``from_wrk`` (read and write errors are resets; wrk has no parse class).
"""

from __future__ import annotations

import json
import resource
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCHES = Path(__file__).resolve().parent
WRK_REPORT = BENCHES / "wrk_report.lua"
# The load generator's CPU (CPU 0 on the 2-core machine; the server gets CPU 1).
LOAD_CPU = "0"
LATENCY_FIELDS = ("min", "mean", "stdev", "max", "p50", "p75", "p90", "p99", "p99_9", "p99_99")
ERROR_FIELDS = ("connect", "reset", "timeout", "status", "parse")


@dataclass(frozen=True)
class Load:
    """What to send: closed loop, ``connections`` on one thread for ``duration_s``."""

    url: str
    connections: int
    duration_s: float
    keepalive: bool = True
    pipeline: int = 1
    # What every request sends besides its URL (tines bench only; the upload workloads of
    # benches/uploads.py): the method, extra headers (`Name: value`) and a body file.
    method: str = "GET"
    headers: tuple[str, ...] = ()
    body_file: Path | None = None


@dataclass(frozen=True)
class Tool:
    """A load generator: ``tines-bench`` or ``wrk``, and the command that runs it
    (``tines bench`` through the CLI, the standalone ``tines-bench`` binary, or ``wrk``)."""

    name: str
    argv: tuple[str, ...]


class LoadFailed(Exception):
    """The load generator did not produce a report; the message says why."""


def seconds(value: float) -> str:
    """A duration flag both tools accept: ``5s`` (whole seconds) or ``500ms``."""
    return f"{value:g}s" if float(value).is_integer() else f"{round(value * 1000)}ms"


def tines_bench_command(tool: Tool, load: Load) -> list[str]:
    command = [*tool.argv, "-c", str(load.connections), "-t", "1",
               "-d", seconds(load.duration_s), "--json"]
    if not load.keepalive:
        command.append("--no-keepalive")
    if load.pipeline > 1:
        command += ["--pipeline", str(load.pipeline)]
    if load.method != "GET":
        command += ["-m", load.method]
    for header in load.headers:
        command += ["-H", header]
    if load.body_file is not None:
        command += ["--body-file", str(load.body_file)]
    return [*command, load.url]


def wrk_script(load: Load, workdir: Path) -> Path:
    """The wrk script for ``load``: the reporter alone, or with a pipelining ``request()``
    (as TechEmpower's plaintext test does: ``pipeline`` copies of the request per write)."""
    if load.pipeline <= 1:
        return WRK_REPORT
    path = workdir / f"wrk_pipeline_{load.pipeline}.lua"
    if not path.exists():
        path.write_text(WRK_REPORT.read_text() + (
            "\n-- Pipelining: every write carries DEPTH requests.\n"
            f"local depth = {load.pipeline}\n"
            "init = function(args)\n"
            "  local r = {}\n"
            "  for i = 1, depth do r[i] = wrk.format() end\n"
            "  req = table.concat(r)\n"
            "end\n"
            "request = function() return req end\n"))
    return path


def wrk_command(tool: Tool, load: Load, workdir: Path) -> list[str]:
    if load.method != "GET" or load.headers or load.body_file is not None:
        raise LoadFailed("the wrk command line here sends GETs only (no method, headers or body)")
    command = [*tool.argv, "-t1", f"-c{load.connections}", f"-d{seconds(load.duration_s)}",
               "--latency", "-s", str(wrk_script(load, workdir))]
    if not load.keepalive:
        command += ["-H", "Connection: close"]
    return [*command, load.url]


def from_wrk(report: dict[str, Any]) -> dict[str, Any]:
    """wrk_report.lua's JSON as schema-1 fields."""
    wrk_errors = report["errors"]
    errors = {"connect": int(wrk_errors["connect"]),
              "reset": int(wrk_errors["read"]) + int(wrk_errors["write"]),
              "timeout": int(wrk_errors["timeout"]),
              "status": int(wrk_errors["status"]),
              "parse": 0}
    errors["total"] = sum(errors.values())
    elapsed = report["duration_us"] / 1e6
    requests = int(report["requests"])
    return {"requests": requests, "ok": requests - errors["status"], "errors": errors,
            "requests_per_sec": requests / elapsed if elapsed else 0.0, "elapsed_s": elapsed,
            "bytes_read": int(report["bytes"]),
            "latency_us": {k: float(report["latency_us"][k]) for k in LATENCY_FIELDS}}


def from_tines_bench(document: dict[str, Any]) -> dict[str, Any]:
    """The fields the suite uses from a ``tines bench --json`` document (schema 1)."""
    if document.get("schema") != 1:
        raise LoadFailed(f"tines bench --json: unknown schema {document.get('schema')!r}")
    if document.get("interrupted"):
        raise LoadFailed("tines bench was interrupted: its figures cover part of the run")
    errors = {k: int(document["errors"][k]) for k in ERROR_FIELDS}
    errors["total"] = int(document["errors"].get("total", sum(errors.values())))
    return {"requests": int(document["requests"]), "ok": int(document["ok"]), "errors": errors,
            "requests_per_sec": float(document["requests_per_sec"]),
            "elapsed_s": float(document["elapsed_s"]), "bytes_read": int(document["bytes_read"]),
            "latency_us": {k: float(document["latency_us"][k]) for k in LATENCY_FIELDS},
            "in_flight_at_end": int(document.get("in_flight_at_end", 0)),
            # https:// runs (issue 37): the handshakes completed, full and resumed; TLS
            # failures stay in errors' total.
            "tls_handshakes": document.get("tls_handshakes"),
            "tls_errors": int(document["errors"].get("tls", 0)),
            # HTTP/2 runs (issue 38): streams reset by the server, refused by a GOAWAY with an
            # error; both stay in errors' total.
            "stream_errors": int(document["errors"].get("stream", 0)),
            "goaway_errors": int(document["errors"].get("goaway", 0))}


def parse_output(tool: Tool, stdout: str) -> dict[str, Any]:
    """The schema-1 fields from a tool's standard output."""
    if tool.name == "wrk":
        for line in stdout.splitlines():
            if line.startswith("BENCH-JSON "):
                return from_wrk(json.loads(line.removeprefix("BENCH-JSON ")))
        raise LoadFailed("wrk printed no BENCH-JSON line")
    start = stdout.find("{")
    if start < 0:
        raise LoadFailed("tines bench printed no JSON")
    return from_tines_bench(json.loads(stdout[start:]))


def children_cpu_seconds() -> float:
    """User + system CPU of this process's waited-for children, in seconds."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_load(tool: Tool, load: Load, log: Path, workdir: Path) -> dict[str, Any]:
    """One run of ``tool`` pinned to LOAD_CPU; its output is appended to ``log``."""
    inner = (wrk_command(tool, load, workdir) if tool.name == "wrk"
             else tines_bench_command(tool, load))
    command = ["taskset", "-c", LOAD_CPU, *inner]
    before = children_cpu_seconds()
    try:
        result = subprocess.run(command, capture_output=True, text=True,
                                timeout=load.duration_s + 60)
    except subprocess.TimeoutExpired as error:
        raise LoadFailed(f"{tool.name} did not finish within {load.duration_s + 60:.0f} s") from error
    cpu = children_cpu_seconds() - before
    with log.open("a") as out:
        out.write(f"\n$ {' '.join(command)}\n(exit {result.returncode})\n"
                  f"{result.stdout}{result.stderr}")
    try:
        fields = parse_output(tool, result.stdout)
    except (LoadFailed, ValueError, KeyError) as error:
        tail = (result.stderr.strip() or result.stdout.strip())[-300:]
        raise LoadFailed(f"{tool.name} (exit {result.returncode}): {error}: {tail}") from error
    fields["command"] = inner
    fields["load_cpu_seconds"] = cpu
    return fields


def answers_help(argv: list[str]) -> bool:
    """True when ``argv --help`` exits 0 and documents ``--json``."""
    try:
        result = subprocess.run([*argv, "--help"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0 and "--json" in result.stdout


def find_tines_bench(tines: Path, standalone: Path) -> tuple[tuple[str, ...] | None, str]:
    """How to run tines bench: ``tines bench`` through the CLI when this build has it, else the
    standalone ``tines-bench`` binary when it is built (the same engine), else None; and a note
    saying which, or why neither."""
    if answers_help([str(tines), "bench"]):
        return (str(tines), "bench"), "tines bench"
    if standalone.exists() and answers_help([str(standalone)]):
        return (str(standalone),), (f"the standalone {standalone.name} binary (this build's CLI "
                                    "has no `tines bench` yet)")
    return None, ("this build of Tines has no `tines bench` (`tines bench --help` fails) and "
                  f"no {standalone.name} binary is built")
