"""Instructions per request of one Tines worker, counted by callgrind: a measure that does not
drift with this VM's noisy rounds (docs/mpm.md's rounds used it by hand; this is the script).

It serves APP with one worker under `valgrind --tool=callgrind --trace-children=yes`, waits
for the ready line, warms the worker up, zeroes the worker's counters (`callgrind_control
-z`), sends exactly N keep-alive requests with tines-bench, dumps the counters
(`callgrind_control -d`) and divides the worker's instruction total by N. The master's and
the load generator's instructions are not counted; neither is the kernel's.

    python benches/instructions.py --tines .venv/bin/tines --mpm prefork examples/hello.py:app
    python benches/instructions.py --tines /tmp/base/.venv/bin/tines --mpm event ...

Compare two trees by running it with each `--tines`. Prefork's count repeats to within a few
tens of instructions; the event MPM's moves by about 2% with how requests fall into the
loop's batches, so compare its medians of `--repeat 5`.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
READY_DEADLINE = 300.0  # Python's start-up and the app's import run under valgrind: slow


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("app", help="the app, as `tines serve` takes it (examples/hello.py:app)")
    parser.add_argument("--tines", default=str(ROOT / ".venv/bin/tines"), help="the tines command to measure")
    parser.add_argument("--bench", default=str(ROOT / "target/release/tines-bench"), help="tines-bench")
    parser.add_argument("--mpm", choices=["prefork", "thread", "event"],
                        help="the MPM (default: the server's: prefork for WSGI, event for ASGI)")
    parser.add_argument("--threads", type=int, help="app threads (thread/event; default: the server's)")
    parser.add_argument("--requests", type=int, default=20_000, help="requests counted")
    parser.add_argument("--warmup", type=int, default=2_000, help="requests before the count")
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=1, help="measure this many times")
    parser.add_argument("--keep", type=Path, help="copy the worker's counted dump here (read it with "
                        "callgrind_annotate: where the instructions went)")
    parser.add_argument("serve_args", nargs="*", help="more `tines serve` flags (after --)")
    arguments = parser.parse_args()
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            print(f"instructions: {tool} is not installed (apt-get install valgrind)", file=sys.stderr)
            return 2
    counts = []
    for _ in range(arguments.repeat):
        counts.append(measure(arguments))
        print(f"{arguments.mpm or 'default mpm'} {arguments.app}: {counts[-1]:,.0f} instructions per request "
              f"({arguments.requests} requests, {arguments.tines})", flush=True)
    if len(counts) > 1:
        print(f"median of {len(counts)}: {statistics.median(counts):,.0f} "
              f"(min {min(counts):,.0f}, max {max(counts):,.0f})")
    return 0


def measure(arguments: argparse.Namespace) -> float:
    """One measurement: the worker's instructions over `arguments.requests`, per request."""
    out_dir = Path(tempfile.mkdtemp(prefix="tines-callgrind-"))
    read_fd, write_fd = os.pipe()
    command = [
        "valgrind", "--tool=callgrind", "--trace-children=yes",
        f"--callgrind-out-file={out_dir}/callgrind.out.%p",
        arguments.tines, "serve", arguments.app, "-b", "127.0.0.1:0", "--ready-fd", str(write_fd),
        "--workers", "1", "--boot-timeout", "300",
        *(["--mpm", arguments.mpm] if arguments.mpm else []),
        *(["--threads", str(arguments.threads)] if arguments.threads is not None else []),
        *arguments.serve_args,
    ]
    log = open(out_dir / "server.log", "wb")
    server = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                              pass_fds=(write_fd,), start_new_session=True, cwd=ROOT)
    os.close(write_fd)
    try:
        port = read_ready_port(read_fd, server)
        url = f"http://127.0.0.1:{port}/"
        bench(arguments, url, arguments.warmup)
        worker = only_child(server.pid)
        control(["-z", str(worker)])
        bench(arguments, url, arguments.requests)
        control(["-d", str(worker)])
        if arguments.keep is not None:
            for dump in glob.glob(str(out_dir / f"callgrind.out.{worker}.*")):
                shutil.copy(dump, arguments.keep)
        return worker_total(out_dir, worker) / int(arguments.requests)
    except BaseException:
        log.flush()
        sys.stderr.write((out_dir / "server.log").read_text(errors="replace")[-4000:])
        raise
    finally:
        os.close(read_fd)
        stop(server)
        log.close()
        shutil.rmtree(out_dir, ignore_errors=True)


def stop(server: subprocess.Popen[bytes]) -> None:
    """TERM the server's process group, then KILL what is left of it."""
    for signum, patience in ((signal.SIGTERM, 120.0), (signal.SIGKILL, None)):
        try:
            os.killpg(server.pid, signum)
        except ProcessLookupError:
            pass
        try:
            server.wait(patience)
            return
        except subprocess.TimeoutExpired:
            continue


def read_ready_port(read_fd: int, server: subprocess.Popen[bytes]) -> int:
    """The port of the ready line's first bind."""
    data = b""
    end = time.monotonic() + READY_DEADLINE
    while not data.endswith(b"\n"):
        readable, _, _ = select.select([read_fd], [], [], max(0.0, end - time.monotonic()))
        if not readable:
            raise SystemExit("instructions: no ready line in time")
        chunk = os.read(read_fd, 4096)
        if not chunk:
            raise SystemExit(f"instructions: the server exited before ready ({server.wait(10)})")
        data += chunk
    bind = str(json.loads(data)["binds"][0])
    return int(bind.rpartition(":")[2])


def only_child(pid: int) -> int:
    """The master's one worker (the status process is off unless configured; the master
    starts no thread, so its children are its main thread's)."""
    with open(f"/proc/{pid}/task/{pid}/children") as handle:
        found = [int(word) for word in handle.read().split()]
    if len(found) != 1:
        raise SystemExit(f"instructions: expected one worker under {pid}, found {found}")
    return found[0]


def bench(arguments: argparse.Namespace, url: str, requests: int) -> None:
    """Exactly `requests` keep-alive requests; raise unless every one was a 200."""
    result = subprocess.run(
        [arguments.bench, "-c", str(arguments.connections), "-t", "1", "-n", str(requests), "--json", url],
        capture_output=True, text=True, timeout=1800, check=True)
    report = json.loads(result.stdout)
    if report["ok"] != requests or report["errors"]["total"]:
        raise SystemExit(f"instructions: {report['ok']} of {requests} requests were answered 2xx "
                         f"({report['errors']})")


def control(words: list[str]) -> None:
    subprocess.run(["callgrind_control", *words], check=True, capture_output=True, timeout=300)


def worker_total(out_dir: Path, worker: int) -> int:
    """The instructions of the worker's dump since the zeroing: callgrind.out.PID.N, written
    by `callgrind_control -d` (callgrind.out.PID is the dump at exit, not written yet; the
    threads of a worker are counted together, callgrind's default)."""
    total = 0
    files = glob.glob(str(out_dir / f"callgrind.out.{worker}.*"))
    for path in files:
        with open(path) as handle:
            for line in handle:
                if line.startswith("summary:"):
                    total += int(line.split()[1])
                    break
    if total == 0:
        raise SystemExit(f"instructions: no dump of worker {worker} in {out_dir}")
    return total


if __name__ == "__main__":
    sys.exit(main())
