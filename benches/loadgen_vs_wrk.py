"""tines-bench against wrk, both loading nginx's static "OK" on 127.0.0.1 (``make bench-tool``).

Method (docs/bench.md, "Efficiency against wrk"): nginx with one worker pinned to CPU 1, the load
generator pinned to CPU 0, one thread and the same connections (-c 50) for both, runs of 10 s
interleaved wrk / tines-bench, three of each, medians kept. Per run: requests/s, CPU time of the
load generator per request (user + system, from wait4's rusage) and its peak RSS (VmHWM).

Pass criteria (the issue's): tines-bench's median rate within 5% of wrk's (or above), CPU per
request no more than wrk's, peak RSS within 2x of wrk's. Exit status 0
when all three hold, 1 otherwise; the table is printed either way and written as JSON to
benches/results/tmp/loadgen_vs_wrk.json. Installs nginx and wrk with apt-get when missing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BINARY = ROOT / "target" / "release" / "tines-bench"
NGINX_CONF = """daemon off;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    server {{
        listen 127.0.0.1:{port};
        location / {{ return 200 "OK"; }}
    }}
}}
"""


def ensure_tools() -> None:
    missing = [pkg for pkg in ("nginx", "wrk") if not (shutil.which(pkg) or Path(f"/usr/sbin/{pkg}").exists())]
    if missing:
        prefix = [] if os.geteuid() == 0 else ["sudo", "-n"]
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run([*prefix, "apt-get", "update", "-qq"], check=True, env=env)
        subprocess.run([*prefix, "apt-get", "install", "-y", "-qq", *missing], check=True, env=env)
    subprocess.run(["cargo", "build", "--release", "--quiet", "-p", "tines-loadgen"], check=True, cwd=ROOT)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_nginx(directory: Path, cpu: int) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    conf = directory / "nginx.conf"
    conf.write_text(NGINX_CONF.format(dir=directory, port=port))
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    proc = subprocess.Popen(["taskset", "-c", str(cpu), nginx, "-c", str(conf), "-p", str(directory)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while True:  # nginx has no readiness signal: wait until it accepts
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, port
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"nginx did not start; see {directory}/error.log")
            time.sleep(0.05)


def peak_rss_kib(pid: int) -> int | None:
    """VmHWM of ``pid`` (the high-water RSS of its current program; reset by exec)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def measured(cmd: list[str]) -> tuple[str, float, int]:
    """Runs ``cmd``; its stdout, CPU seconds (user + system, from wait4) and peak RSS (KiB).

    The peak RSS is VmHWM read from /proc while the program runs: wait4's ru_maxrss would
    count the forked copy of this Python process from before the exec.
    """
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    chunks: list[bytes] = []
    os.set_blocking(proc.stdout.fileno(), False)
    rss = 0
    while True:
        wpid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if wpid:
            break
        exe = os.readlink(f"/proc/{proc.pid}/exe") if Path(f"/proc/{proc.pid}/exe").exists() else ""
        if not exe.endswith("taskset"):
            rss = max(rss, peak_rss_kib(proc.pid) or 0)
        try:
            data = proc.stdout.read()
            if data:
                chunks.append(data)
        except BlockingIOError:
            pass
        time.sleep(0.05)
    rest = proc.stdout.read()
    if rest:
        chunks.append(rest)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"{cmd} failed ({code}): {proc.stderr.read().decode()}")
    return b"".join(chunks).decode(), usage.ru_utime + usage.ru_stime, rss


def run_wrk(url: str, connections: int, seconds: int, cpu: int) -> dict[str, Any]:
    cmd = ["taskset", "-c", str(cpu), "wrk", "-t1", f"-c{connections}", f"-d{seconds}s", url]
    out, cpu_s, rss = measured(cmd)
    total = re.search(r"(\d+) requests in ([\d.]+)(m?s)", out)
    rate = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if not total or not rate:
        raise SystemExit(f"cannot read wrk's output:\n{out}")
    requests = int(total.group(1))
    return {"tool": "wrk", "requests": requests, "rps": float(rate.group(1)), "cpu_s": cpu_s,
            "cpu_us_per_request": cpu_s * 1e6 / max(requests, 1), "rss_kib": rss, "command": " ".join(cmd)}


def run_tines(url: str, connections: int, seconds: int, cpu: int) -> dict[str, Any]:
    cmd = ["taskset", "-c", str(cpu), str(BINARY), "-t1", f"-c{connections}", f"-d{seconds}s", "--json", url]
    out, cpu_s, rss = measured(cmd)
    report = json.loads(out)
    requests = int(report["requests"]) + int(report["in_flight_at_end"])
    return {"tool": "tines-bench", "requests": int(report["requests"]), "rps": float(report["requests_per_sec"]),
            "cpu_s": cpu_s, "cpu_us_per_request": cpu_s * 1e6 / max(requests, 1), "rss_kib": rss,
            "errors": report["errors"]["total"], "command": " ".join(cmd)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=50)
    options = parser.parse_args()
    if (os.cpu_count() or 1) < 2:
        print("needs at least 2 CPUs (nginx on CPU 1, the load on CPU 0)", file=sys.stderr)
        return 2
    ensure_tools()
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="loadgen-vs-wrk-") as tmp:
        nginx, port = start_nginx(Path(tmp), cpu=1)
        url = f"http://127.0.0.1:{port}/"
        try:
            for number in range(1, options.runs + 1):
                for run in (run_wrk, run_tines):
                    result = run(url, options.connections, options.seconds, 0)
                    result["run"] = number
                    runs.append(result)
                    print(f"run {number} {result['tool']:<12} {result['rps']:>10.0f} req/s "
                          f"{result['cpu_us_per_request']:6.2f} CPU us/req  {result['rss_kib']} KiB", flush=True)
        finally:
            nginx.terminate()
            nginx.wait(10)

    def median(tool: str, key: str) -> float:
        return float(statistics.median(r[key] for r in runs if r["tool"] == tool))

    table = {tool: {key: median(tool, key) for key in ("rps", "cpu_us_per_request", "rss_kib")}
             for tool in ("wrk", "tines-bench")}
    wrk, tines = table["wrk"], table["tines-bench"]
    checks = {
        "rate within 5% of wrk's": tines["rps"] >= 0.95 * wrk["rps"],
        "CPU per request no more than wrk's": tines["cpu_us_per_request"] <= wrk["cpu_us_per_request"],
        "peak RSS within 2x of wrk's": tines["rss_kib"] <= 2 * wrk["rss_kib"],
    }
    print(f"\nnginx static \"OK\", -c {options.connections}, 1 thread, {options.seconds} s x {options.runs} "
          "interleaved runs, medians (nginx on CPU 1, load on CPU 0)\n")
    print("| tool | requests/s | CPU us/request | peak RSS KiB |")
    print("| --- | ---: | ---: | ---: |")
    for tool, row in table.items():
        print(f"| {tool} | {row['rps']:.0f} | {row['cpu_us_per_request']:.2f} | {row['rss_kib']:.0f} |")
    print(f"| ratio tines/wrk | {tines['rps'] / wrk['rps']:.3f} | "
          f"{tines['cpu_us_per_request'] / wrk['cpu_us_per_request']:.3f} | {tines['rss_kib'] / wrk['rss_kib']:.2f} |")
    print()
    for name, ok in checks.items():
        print(f"{'PASS' if ok else 'FAIL'}  {name}")
    out_dir = ROOT / "benches" / "results" / "tmp"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "loadgen_vs_wrk.json").write_text(json.dumps(
        {"runs": runs, "medians": table, "checks": checks, "connections": options.connections,
         "seconds": options.seconds}, indent=2) + "\n")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
