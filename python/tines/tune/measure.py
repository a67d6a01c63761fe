"""One configuration measured: a Tines server started on 127.0.0.1, and loads driven at it.

Owns: starting ``tines serve`` for a :class:`Shape` (MPM, workers, threads, preload) on
127.0.0.1 with a port the kernel picks, a status listener on a Unix socket and ``--ready-fd``
(the server's own readiness signal: no polling, no sleep), pinned to the CPUs the tuner gives
it; telling whether it speaks TLS (a certificate in its flags or its config file: one
handshake on its port); reading its processes' CPU time (``/proc/PID/stat``) and memory (``/proc/PID/smaps_rollup``
through ``tines.memory``) and its scoreboard totals (``/status.json``); running ``tines bench
--json`` at it on the other CPUs; and telling how much of the machine something else used
meanwhile (``/proc/stat`` less our processes: the *noise* of a measurement).

Must not: decide what to run (``tines.tune.plan``) or what it means (``tines.tune.recommend``);
send a byte anywhere but 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import resource
import select
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tines import memory, status_cli

BOOT_DEADLINE = 120.0
"""Seconds a server may take to report ready (an app that imports a lot, a slow disk)."""

STOP_DEADLINE = 20.0
"""Seconds a server may take to stop after TERM before it is killed."""

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

NOISY = 0.10
"""A measurement is *disturbed* when something other than the server, the load generator and
the tuner used more than this share of the machine's CPU time during it."""


class TuneError(Exception):
    """The tuner cannot go on; the message says why in one line (``detail``: a log tail)."""

    def __init__(self, message: str, detail: str = "", status: int = 1) -> None:
        super().__init__(message)
        self.detail = detail
        self.status = status
        """The exit status: 2 for a bad command line or app (as ``serve``), 1 otherwise."""


@dataclass(frozen=True)
class Shape:
    """The settings one measured server runs with."""

    mpm: str
    workers: int
    threads: int = 0
    preload: bool = False
    memory_merge: bool = False

    @property
    def name(self) -> str:
        """``prefork x2``, ``event x1, 16 threads``, with ``, preload`` and ``, memory_merge``."""
        text = f"{self.mpm} x{self.workers}"
        if self.mpm != "prefork":
            text += f", {self.threads} thread{'s' if self.threads != 1 else ''}"
        if self.preload:
            text += ", preload"
        if self.memory_merge:
            text += ", memory_merge"
        return text

    @property
    def capacity(self) -> int:
        """Requests the shape runs at once in the app: workers x app threads (one for a
        prefork worker or an event worker that runs the app on its loop thread)."""
        return self.workers * max(1, self.threads if self.mpm != "prefork" else 1)

    def args(self) -> list[str]:
        """Its ``tines serve`` flags."""
        words = ["--mpm", self.mpm, "--workers", str(self.workers)]
        if self.mpm != "prefork":
            words += ["--threads", str(self.threads)]
        words.append("--preload" if self.preload else "--no-preload")
        words.append("--memory-merge" if self.memory_merge else "--no-memory-merge")
        return words

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "mpm": self.mpm, "workers": self.workers,
                "threads": self.threads, "preload": self.preload, "memory_merge": self.memory_merge}


def cpu_split(count: int | None = None) -> tuple[list[int], list[int]]:
    """The CPUs for the server and for the load generator: with two or more, the load
    generator gets the last one and the server the rest (they never compete for a core);
    with one, both share it."""
    cpus = sorted(os.sched_getaffinity(0))
    if count is not None:
        cpus = cpus[:count]
    if len(cpus) < 2:
        return cpus, cpus
    return cpus[:-1], cpus[-1:]


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` (its threads included); 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as file:
            fields = file.read().rpartition(")")[2].split()
    except OSError:
        return 0.0
    # After the command: state is field 3, utime 14 and stime 15 (proc(5)), so 11 and 12 here.
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def machine_busy_seconds() -> tuple[float, int]:
    """CPU seconds all CPUs spent busy since boot (``/proc/stat``: everything but idle and
    iowait), and the number of CPUs."""
    with open("/proc/stat") as file:
        lines = file.read().splitlines()
    values = [int(v) for v in lines[0].split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    cpus = sum(1 for line in lines if line.startswith("cpu") and line[3:4].isdigit())
    return (sum(values[:8]) - idle) / CLOCK_TICKS, cpus


def usage_dict(usage: memory.MemoryUsage | None) -> dict[str, int] | None:
    if usage is None:
        return None
    return {"rss": usage.rss, "pss": usage.pss, "uss": usage.uss, "shared": usage.shared,
            "swap": usage.swap, "ksm_merging": usage.ksm_merging or 0}


class Server:
    """A ``tines serve`` process the tuner started, and what can be read of it."""

    def __init__(self, app: str, shape: Shape, extra: Sequence[str], cpus: Sequence[int],
                 workdir: Path, log_path: Path, overrides: Sequence[str] = (),
                 register: Callable[[Server], None] = lambda server: None) -> None:
        """Starts the server and waits until it is ready; ``register`` is called with it as
        soon as its process exists (so that its owner can stop it whatever happens next)."""
        self.app = app
        self.shape = shape
        self.log_path = log_path
        self.status_dir = tempfile.mkdtemp(prefix="tines-tune-", dir="/tmp")
        self.status_address = f"unix:{self.status_dir}/status.sock"
        read_fd, write_fd = os.pipe()
        command = [sys.executable, "-m", "tines", "serve", app, *extra, *overrides, "--bind", "127.0.0.1:0",
                   "--status-bind", self.status_address, "--ready-fd", str(write_fd),
                   *shape.args()]
        cpu_set = set(cpus)

        def pin() -> None:
            os.sched_setaffinity(0, cpu_set)

        started = time.monotonic()
        # Ctrl-C is held off from the fork until the owner holds this server (``register``):
        # a KeyboardInterrupt inside Popen, or between Popen and the owner's reference, would
        # leave a server no one stops (it runs in a session of its own and never sees the
        # terminal's SIGINT). A Ctrl-C that came meanwhile is raised at the unblocking, inside
        # the block below that stops the server.
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            with open(log_path, "ab") as log:
                log.write(f"\n# tines tune: {' '.join(command)}\n".encode())
                log.flush()
                self.proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                             pass_fds=(write_fd,), start_new_session=True,
                                             cwd=workdir, preexec_fn=pin)
            register(self)
        except BaseException:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            os.close(read_fd)
            os.close(write_fd)
            os.rmdir(self.status_dir)
            raise
        os.close(write_fd)
        try:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            ready = json.loads(self._ready_line(read_fd))
            self.boot_s = time.monotonic() - started
            self.port = int(str(ready["binds"][0]).rpartition(":")[2])
            self.tls = speaks_tls(self.port)
            # Over TLS the name is localhost (127.0.0.1 all the same: tines bench prefers IPv4),
            # the name a development certificate is likeliest to carry.
            self.base = (f"https://localhost:{self.port}" if self.tls
                         else f"http://127.0.0.1:{self.port}")
            self.master_pid = int(ready["pid"])
        except BaseException:  # Ctrl-C included: no server outlives the tuner
            self.stop()
            raise
        finally:
            os.close(read_fd)

    def _ready_line(self, fd: int) -> bytes:
        """The server's ``--ready-fd`` line; TuneError with its log when it exits first."""
        data = b""
        end = time.monotonic() + BOOT_DEADLINE
        while not data.endswith(b"\n"):
            remaining = end - time.monotonic()
            if remaining <= 0:
                raise TuneError(f"the server ({self.shape.name}) was not ready after "
                                f"{BOOT_DEADLINE:.0f} s", self.log_tail())
            readable, _, _ = select.select([fd], [], [], remaining)
            if not readable:
                continue
            chunk = os.read(fd, 4096)
            if not chunk:
                status = self.proc.wait(STOP_DEADLINE)
                raise TuneError(f"the server ({self.shape.name}) exited with status {status} "
                                f"before it was ready: {self.last_error_line()}", self.log_tail())
            data += chunk
        return data

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def last_error_line(self) -> str:
        """The server's own one-line error (``tines: error: ...``), else its last log line."""
        tail = self.log_tail(200).splitlines()
        for line in reversed(tail):
            if "error" in line.lower():
                return line.strip()
        return tail[-1].strip() if tail else "(no output)"

    def status(self) -> dict[str, Any]:
        """The scoreboard, from ``/status.json``."""
        try:
            return dict(json.loads(status_cli.fetch(self.status_address)))
        except status_cli.StatusUnreachable as error:
            raise TuneError(f"the server's status listener did not answer: {error}",
                            self.log_tail()) from None

    def worker_pids(self, report: dict[str, Any] | None = None) -> list[int]:
        report = report if report is not None else self.status()
        return [int(w["pid"]) for w in report["workers"] if w.get("pid")]

    def cpu_seconds(self, pids: Sequence[int]) -> float:
        """CPU seconds used so far by the master and ``pids`` (its workers)."""
        return process_cpu_seconds(self.master_pid) + sum(process_cpu_seconds(pid) for pid in pids)

    def memory(self, ksm: bool = False) -> dict[str, Any]:
        """Memory of the master and of each worker, now."""
        pids = self.worker_pids()
        try:
            return {"master": usage_dict(memory.read_usage(self.master_pid, ksm)),
                    "workers": [u for u in (usage_dict(memory.read_usage(pid, ksm)) for pid in pids)
                                if u is not None]}
        except memory.MemoryUnreadable as error:
            raise TuneError(f"the workers' memory cannot be read: {error}") from None

    def stop(self) -> None:
        """A graceful stop (TERM), then KILL of the whole group past the deadline."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(STOP_DEADLINE)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(STOP_DEADLINE)
        try:
            os.unlink(f"{self.status_dir}/status.sock")
        except OSError:
            pass
        try:
            os.rmdir(self.status_dir)
        except OSError:
            pass

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def speaks_tls(port: int) -> bool:
    """Whether the server on 127.0.0.1:``port`` completes a TLS handshake (its certificate is
    not checked: this asks what it speaks, not whom to trust)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10.0) as raw:
            with context.wrap_socket(raw, server_hostname="localhost"):
                return True
    except (ssl.SSLError, OSError):
        return False


class Interrupted(Exception):
    """Ctrl-C during a measurement: the load was stopped, the server is stopped by its owner."""


def run_bench(args: Sequence[str], cpus: Sequence[int], timeout: float) -> dict[str, Any]:
    """``tines bench --json ARGS`` on ``cpus``; its JSON document plus ``loadgen_cpu_s`` (its
    CPU seconds). TuneError when it fails to run (not when requests fail: those are counted)."""
    cpu_set = set(cpus)
    threads = max(1, len(cpu_set))

    def pin() -> None:
        os.sched_setaffinity(0, cpu_set)

    command = [sys.executable, "-m", "tines", "bench", "--json", "-t", str(threads), *args]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True, preexec_fn=pin)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
        raise Interrupted() from None
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise TuneError(f"tines bench did not finish in {timeout:.0f} s") from None
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1) or not stdout.strip():
        message = stderr.decode(errors="replace").strip().splitlines()
        raise TuneError(f"tines bench failed (status {proc.returncode}): "
                        f"{message[-1] if message else 'no output'}")
    document = dict(json.loads(stdout))
    document["loadgen_cpu_s"] = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return document


def measure(server: Server, bench_args: Sequence[str], cpus: Sequence[int], seconds: float) -> dict[str, Any]:
    """Drive one load at ``server`` and read what it cost: the bench figures, server CPU and
    app time per request (scoreboard), and the noise."""
    before = server.status()
    pids = server.worker_pids(before)
    cpu_before = server.cpu_seconds(pids)
    busy_before, ncpu = machine_busy_seconds()
    self_before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.monotonic()
    document = run_bench(bench_args, cpus, timeout=seconds + 60.0)
    elapsed = time.monotonic() - started
    busy_after, _ = machine_busy_seconds()
    self_after = resource.getrusage(resource.RUSAGE_SELF)
    after = server.status()
    cpu_after = server.cpu_seconds(pids)
    server_cpu = cpu_after - cpu_before
    ours = server_cpu + document["loadgen_cpu_s"] + (
        (self_after.ru_utime + self_after.ru_stime) - (self_before.ru_utime + self_before.ru_stime))
    foreign = max(0.0, (busy_after - busy_before) - ours)
    noise = foreign / (elapsed * ncpu) if elapsed > 0 else 0.0
    served = int(after["requests"]) - int(before["requests"])
    app_s = float(after["totals"]["duration_sum_s"]) - float(before["totals"]["duration_sum_s"])
    latency = document["latency_us"]
    return {
        "rps": float(document["requests_per_sec"]),
        "requests": int(document["requests"]),
        "ok": int(document["ok"]),
        "errors": int(document["errors"]["total"]),
        "status_errors": int(document["errors"]["status"]),
        "error_examples": document.get("error_examples", {}),
        "status_counts": document.get("status_counts", {}),
        "latency_us": {key: float(latency[key]) for key in ("p50", "p90", "p99", "p99_9", "max", "mean")},
        "elapsed_s": float(document["elapsed_s"]),
        "served": served,
        "server_cpu_s": server_cpu,
        # /proc counts CPU time in clock ticks: a step that used less than one may read 0
        # (recommend.workload then bounds W/C with it).
        "cpu_tick_s": 1 / CLOCK_TICKS,
        "cpu_us_per_request": server_cpu / served * 1e6 if served else None,
        "app_us_per_request": app_s / served * 1e6 if served else None,
        "loadgen_cpu_s": document["loadgen_cpu_s"],
        "noise": round(noise, 4),
        "disturbed": noise > NOISY,
    }
