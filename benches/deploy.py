"""`make bench-deploy`: what a client under load sees across each deploy operation.

For each operation (HUP reload, HUP with code that fails to import, USR2 binary upgrade,
USR2 with a broken app, TERM), each MPM and each connection mode (keep-alive, close), it
starts `tines serve` (4 workers, an app that answers with its version and pid), runs
`tines bench --json` against it for a fixed time, performs the operation once the load runs,
waits until the operation has finished (by what the processes show: the old workers gone, the
old master gone, the failure logged) and reports the load generator's counts:

- sent: every request the generator finished (ok + errors), refused connects not counted;
- failed: requests lost to the operation: resets, a connection closed before the response
  (parse), timeouts and non-200 statuses;
- refused: connects refused (TERM only: the listener is closed at the end of the stop, so new
  connections after it are refused by the kernel, which is the stop's contract, not a loss).

An operation that did not finish inside the load's duration is reported as such (no verdict).
This measures, it asserts nothing (the e2e tests assert zero failures); the issue note quotes
its table. Results go to benches/results/deploy-YYYY-MM-DD-HHMM.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from procfs import children

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benches" / "results"
OPERATIONS = ("hup", "hup-broken", "usr2", "usr2-broken", "term")
MPMS = ("prefork", "thread", "event")
MODES = ("keep-alive", "close")

APP = '''"""The deploy check's app: its version and the serving pid."""
import os

VERSION = {version!r}


def app(environ, start_response):
    body = f"{{VERSION}} {{os.getpid()}}".encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
'''

BROKEN_APP = 'raise ImportError("deploy check: this deploy is broken on purpose")\n'


@dataclass
class Outcome:
    """One operation under load: the load generator's counts and whether it finished."""

    operation: str
    mpm: str
    mode: str
    sent: int
    ok: int
    failed: int
    refused: int
    errors: dict[str, int]
    finished: bool
    note: str


def wait_for(predicate: Callable[[], bool], deadline: float) -> bool:
    """Poll ``predicate`` until it is true or ``deadline`` (monotonic) passes."""
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return bool(predicate())


def start_server(directory: Path, mpm: str, workers: int) -> tuple[subprocess.Popen[bytes], int]:
    """Start ``tines serve`` on the app in ``directory``; return it and its port once ready."""
    read_fd, write_fd = os.pipe()
    command = [sys.executable, "-m", "tines", "serve", "deploy_app:app", "-b", "127.0.0.1:0",
               "--chdir", str(directory), "--ready-fd", str(write_fd), "-w", str(workers),
               "--mpm", mpm, "--threads", "4", "--pid-file", str(directory / "tines.pid"),
               "--error-log", str(directory / "server.log")]
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, pass_fds=(write_fd,), start_new_session=True)
    os.close(write_fd)
    data = b""
    end = time.monotonic() + 60
    while not data.endswith(b"\n") and time.monotonic() < end:
        readable, _, _ = select.select([read_fd], [], [], max(0.0, end - time.monotonic()))
        if not readable:
            continue
        chunk = os.read(read_fd, 4096)
        if not chunk:
            break
        data += chunk
    os.close(read_fd)
    if not data.endswith(b"\n"):
        os.killpg(process.pid, signal.SIGKILL)
        raise RuntimeError(f"the server did not get ready: {(directory / 'server.log').read_text()}")
    bind = json.loads(data)["binds"][0]
    return process, int(bind.rpartition(":")[2])


def stop_everything(process: subprocess.Popen[bytes], directory: Path) -> None:
    """Kill the server's process group (an upgraded master stays in it) and reap the master."""
    for pid in (process.pid,):
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        pass
    pid_file = directory / "tines.pid"
    if pid_file.exists():
        try:
            os.killpg(int(pid_file.read_text().split()[0]), signal.SIGKILL)
        except (ValueError, ProcessLookupError, PermissionError):
            pass


def log_has(directory: Path, pattern: str) -> bool:
    """True once the server's error log matches ``pattern``."""
    try:
        return re.search(pattern, (directory / "server.log").read_text(errors="replace")) is not None
    except OSError:
        return False


def measure(operation: str, mpm: str, mode: str, workers: int, connections: int,
            duration: float) -> Outcome:
    """One operation under one load; see the module doc."""
    with tempfile.TemporaryDirectory(prefix="tines-deploy-") as name:
        directory = Path(name)
        (directory / "deploy_app.py").write_text(APP.format(version="v1"))
        process, port = start_server(directory, mpm, workers)
        try:
            bench = [sys.executable, "-m", "tines", "bench", "--json", "-c", str(connections),
                     "-t", "1", "-d", f"{duration}s", "--timeout", "10s"]
            if mode == "close":
                bench.append("--no-keepalive")
            load = subprocess.Popen([*bench, f"http://127.0.0.1:{port}/"], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE)
            # Let the load run a quarter of its time before the operation.
            time.sleep(duration / 4)
            old_workers = children(process.pid)
            if operation.endswith("broken"):
                (directory / "deploy_app.py").write_text(BROKEN_APP)
            else:
                (directory / "deploy_app.py").write_text(APP.format(version="v2"))
            deadline = time.monotonic() + duration * 0.7
            if operation.startswith("hup"):
                process.send_signal(signal.SIGHUP)
            elif operation.startswith("usr2"):
                process.send_signal(signal.SIGUSR2)
            else:
                process.send_signal(signal.SIGTERM)
            if operation == "hup":
                finished = wait_for(lambda: not (children(process.pid) & old_workers)
                                    and len(children(process.pid)) >= workers, deadline)
            elif operation == "hup-broken":
                finished = wait_for(lambda: log_has(directory, r"reload failed"), deadline)
            elif operation == "usr2":
                finished = wait_for(lambda: process.poll() is not None, deadline)
            elif operation == "usr2-broken":
                finished = wait_for(lambda: log_has(directory, r"upgrade failed"), deadline)
            else:
                finished = wait_for(lambda: process.poll() is not None, deadline)
            out, err = load.communicate(timeout=duration * 3 + 30)
            if load.returncode != 0:
                raise RuntimeError(f"tines bench failed: {err.decode(errors='replace')}")
            report = json.loads(out)
        finally:
            stop_everything(process, directory)
    errors = {kind: int(count) for kind, count in report["errors"].items() if kind != "total"}
    failed = errors["reset"] + errors["parse"] + errors["timeout"] + errors["status"]
    refused = errors["connect"]
    note = "" if finished else "the operation did not finish inside the run"
    if operation != "term" and refused:
        failed += refused
        refused = 0
    # sent: requests the server could have answered (a refused connect sent none).
    return Outcome(operation, mpm, mode, int(report["ok"]) + int(report["errors"]["total"]) - refused,
                   int(report["ok"]), failed, refused, errors, finished, note)


def markdown(outcomes: list[Outcome], workers: int, connections: int, duration: float) -> str:
    """The results table."""
    lines = [
        f"# Deploy operations under load ({time.strftime('%Y-%m-%d %H:%M')})",
        "",
        f"`benches/deploy.py`: {workers} workers (`--threads 4`), `tines bench -c {connections} "
        f"-t 1 -d {duration}s`, the operation a quarter into the run. sent = ok + failed; failed = "
        "reset + closed before the response + timeout + non-200; refused = connects refused "
        "after a TERM closed the listener (the stop's contract; the generator retries at once, "
        "so the count only says how long it ran on).",
        "",
        "| operation | mpm | mode | sent | ok | failed | refused | errors | note |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for o in outcomes:
        kinds = ", ".join(f"{k} {v}" for k, v in o.errors.items() if v) or "none"
        lines.append(f"| {o.operation} | {o.mpm} | {o.mode} | {o.sent} | {o.ok} | {o.failed} "
                     f"| {o.refused} | {kinds} | {o.note} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--operations", default=",".join(OPERATIONS),
                        help=f"comma-separated, of {', '.join(OPERATIONS)}")
    parser.add_argument("--mpms", default=",".join(MPMS))
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--duration", type=float, default=8.0, help="seconds of load per cell")
    parser.add_argument("--out", type=Path, default=None,
                        help="markdown file (default benches/results/deploy-YYYY-MM-DD-HHMM.md)")
    args = parser.parse_args()
    outcomes = []
    for operation in args.operations.split(","):
        if operation not in OPERATIONS:
            parser.error(f"unknown operation {operation!r}")
        for mpm in args.mpms.split(","):
            for mode in args.modes.split(","):
                outcome = measure(operation, mpm, mode, args.workers, args.connections, args.duration)
                print(f"{operation:12} {mpm:8} {mode:10} sent {outcome.sent:7} failed "
                      f"{outcome.failed:4} refused {outcome.refused:5} {outcome.note}", flush=True)
                outcomes.append(outcome)
    text = markdown(outcomes, args.workers, args.connections, args.duration)
    out = args.out or RESULTS / f"deploy-{time.strftime('%Y-%m-%d-%H%M')}.md"
    out.write_text(text)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
