"""The procedure of ``tines tune``: what to measure next, from what was measured so far.

Owns: the phases, their order and their share of ``--budget``; the measurements document
(schema ``tines-tune/1``: docs/tuning.md); the progress line; stopping cleanly on Ctrl-C with
what was measured.

The phases, most important first (each is skipped, and the skip noted, when the budget left
cannot hold it):

1. **Probe**: prefork, two workers, one request at a time: the app's CPU time and wall time
   per request (is it computing or waiting?), and the memory of two workers without preload,
   at start and after a load. Also the check that the URLs answer 2xx/3xx at all.
2. **Calibration**: the same under a no-op app: the server's own CPU per request, taken out of
   the app's figures.
3. **Memory with preload**: the same two workers with ``preload`` (and, where ksmd runs, with
   ``memory_merge`` as well).
4. **Sweeps**: the configurations the probe suggests (prefork for an app that computes, event
   with threads sized from the wait for one that waits, and the other as the comparison), each
   under a closed-loop sweep of concurrency, doubling until throughput stops growing: the
   knee. A configuration whose knee shows its threads idle gets a smaller sibling measured.
5. **Open loop** on the best configuration at fractions of its peak rate: latency without
   coordinated omission.
6. **Leak**: one worker of the best configuration under steady load, its USS sampled as its
   requests grow (the fit is the recommender's).
7. **Calibration of the sweeps**: the server's own cost under each swept configuration (the
   time split of the report).

Each measurement reads the machine's other CPU use (noise); a disturbed one is repeated once
when the budget allows, and flagged when it stays disturbed.

Must not: decide settings (``tines.tune.recommend``) or format output (``tines.tune.report``).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from tines import memory
from tines.tune import recommend
from tines.tune.measure import Interrupted, Server, Shape, TuneError, cpu_split, measure, run_bench

MAX_CONCURRENCY = 1024
"""Highest concurrency a sweep tries."""

GAIN = 1.05
"""A sweep step that does not beat the best so far by this factor counts as flat; two flat
steps in a row end the sweep."""

SWEEP_ERRORS = 0.01
"""A sweep step with more than this share of errors ends the sweep (the server is past what
it can take: refused, timed out, 503)."""

OPEN_LOOP = (0.5, 0.75, 0.9)
BURSTY_OPEN_LOOP = (0.25, 0.5, 0.75, 0.9)
"""Fractions of the peak rate measured open-loop (``--bursty`` adds a low one)."""

WARM_S = 0.5
"""Seconds of unmeasured load a server gets before its first measurement."""

DIRECTIVE = "# tines-tune:"
"""A requests file's line declaring the client mix: ``# tines-tune: visit=12 think=1.5s``."""


@dataclass
class Options:
    app: str
    urls: list[str]
    requests_file: Path | None = None
    memory_budget: int | None = None
    cpus: int | None = None
    budget_s: float = 300.0
    out: Path = Path("tines-tune")
    bursty: bool = False
    serve_args: list[str] = field(default_factory=list)
    workdir: Path = field(default_factory=Path.cwd)
    tls_trust: list[str] = field(default_factory=list)
    """``tines bench``'s trust flags for a server that speaks TLS: ``--insecure`` or ``--cacert
    FILE`` (``tines tune --insecure`` / ``--cacert``); none: such a server is a usage error."""
    http2_streams: int | None = None
    """Load the server over HTTP/2 with this many streams per connection (``tines tune --http2``,
    ``--streams``): h2 by ALPN when it speaks TLS, else h2c with prior knowledge (its bind an
    ``h2c:`` or ``http1+h2c:`` one); None: HTTP/1.1."""


def http2_flags(streams: int | None) -> list[str]:
    """``tines bench``'s HTTP/2 flags: ``--http2`` (ALPN on https://, prior knowledge on
    http://) and the streams per connection; none for HTTP/1.1."""
    return [] if streams is None else ["--http2", "--streams", str(streams)]


class Progress:
    """The line on stderr that says what runs and how much of the budget is left (a terminal
    only; elsewhere nothing is drawn)."""

    def __init__(self, stream: TextIO, budget_s: float, started: float) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.budget_s = budget_s
        self.started = started
        self.width = 0

    def show(self, text: str) -> None:
        if not self.tty:
            return
        elapsed = time.monotonic() - self.started
        left = max(0.0, self.budget_s - elapsed)
        line = f"tines tune [{elapsed:4.0f} s of {self.budget_s:.0f} s, {left:.0f} s left] {text}"[:200]
        self.stream.write("\r" + line.ljust(self.width) + "\r")
        self.stream.flush()
        self.width = len(line)

    def clear(self) -> None:
        if self.tty and self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
            self.width = 0


def read_requests_file(path: Path) -> tuple[list[str], dict[str, Any] | None]:
    """The requests of a requests file (``PATH``, ``METHOD PATH`` or a URL, whose host is
    ignored: the tuner only loads its own server) and its ``# tines-tune:`` client mix."""
    requests: list[str] = []
    clients: dict[str, Any] | None = None
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if line.lower().startswith(DIRECTIVE):
            clients = clients or {}
            for word in line[len(DIRECTIVE):].split():
                key, _, value = word.partition("=")
                try:
                    if key == "visit":
                        clients["visit"] = int(value)
                    elif key == "think":
                        clients["think_s"] = parse_seconds(value)
                    else:
                        raise ValueError
                except ValueError:
                    raise TuneError(f"{path}:{number}: {word!r} is not visit=N or think=SECONDS",
                                    status=2) from None
            continue
        if not line or line.startswith("#"):
            continue
        words = line.split()
        if len(words) > 2:
            raise TuneError(f"{path}:{number}: expected PATH or METHOD PATH, got {line!r}", status=2)
        target = words[-1]
        if "://" in target:
            rest = target.split("://", 1)[1]
            target = "/" + rest.split("/", 1)[1] if "/" in rest else "/"
        if not target.startswith("/"):
            raise TuneError(f"{path}:{number}: {target!r} is not a path (/...) or a URL", status=2)
        requests.append(f"{words[0].upper()} {target}" if len(words) == 2 else target)
    if not requests:
        raise TuneError(f"{path}: no requests in it", status=2)
    return requests, clients


def parse_seconds(text: str) -> float:
    """``1.5s``, ``200ms``, ``2m`` or a bare number of seconds."""
    for suffix, scale in (("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0)):
        if text.endswith(suffix) and text[:-len(suffix)].replace(".", "", 1).isdigit():
            return float(text[:-len(suffix)]) * scale
    return float(text)


def mem_available() -> int:
    with open("/proc/meminfo") as file:
        for line in file:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def ksm_state() -> str:
    running = memory.ksm_running()
    return "absent" if running is None else ("running" if running else "off")


class Tuner:
    """Runs the phases within the budget and fills the measurements document."""

    def __init__(self, options: Options, progress: Progress | None = None) -> None:
        self.options = options
        self.started = time.monotonic()
        self.deadline = self.started + options.budget_s
        self.progress = progress or Progress(sys.stderr, options.budget_s, self.started)
        self.server_cpus, self.load_cpus = cpu_split()
        self.step_s = min(5.0, max(1.0, options.budget_s / 45))
        self.boot_estimate = 2.0
        self.targets = list(options.urls)
        self.clients: dict[str, Any] | None = None
        if options.requests_file is not None:
            listed, self.clients = read_requests_file(options.requests_file)
            self.targets += listed
        if not self.targets:
            self.targets = ["/"]
        options.out.mkdir(parents=True, exist_ok=True)
        self.log_path = options.out / "servers.log"
        self.log_path.write_text("")
        self.server: Server | None = None
        target_cpus = options.cpus or len(os.sched_getaffinity(0))
        self.doc: dict[str, Any] = {
            "schema": recommend.SCHEMA,
            "app": options.app,
            "interface": "wsgi",
            "urls": self.targets,
            "serve_args": options.serve_args,
            "machine": {
                "cpus": len(os.sched_getaffinity(0)), "server_cpus": self.server_cpus,
                "load_cpus": self.load_cpus, "target_cpus": target_cpus,
                "mem_available": mem_available(),
                "memory_budget": options.memory_budget or mem_available(),
                "ksm": ksm_state(), "memory_merge_supported": memory.merge_enabled() is not None,
            },
            "options": {"budget_s": options.budget_s, "bursty": options.bursty, "step_s": self.step_s},
            "clients": self.clients,
            "probe": None, "calibration": {}, "memory": [], "configs": [], "leak": None,
            "skipped": [], "interrupted": False, "elapsed_s": 0.0,
        }

    # --- budget and servers --------------------------------------------------------------------

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def fits(self, steps: float, boots: int = 0) -> bool:
        return self.left() >= steps * (self.step_s + 0.5) + boots * self.boot_estimate

    def skip(self, what: str) -> None:
        self.doc["skipped"].append(f"{what} (budget)")

    def start(self, shape: Shape, app: str | None = None, calibration: bool = False) -> Server:
        self.stop()
        self.progress.show(f"starting {shape.name}{' (no-op app)' if calibration else ''}")
        def register(server: Server) -> None:
            self.server = server

        if calibration:
            noop = "tines.tune.noop:asgi_app" if self.doc["interface"] != "wsgi" else "tines.tune.noop:app"
            server = Server(noop, shape, ["-c", os.devnull, "--log-level", "warning",
                                          *tls_flags_of(self.options.serve_args)],
                            self.server_cpus, self.options.workdir, self.log_path, register=register)
        else:
            server = Server(app or self.options.app, shape, self.options.serve_args,
                            self.server_cpus, self.options.workdir, self.log_path, OVERRIDES, register)
        self.boot_estimate = max(self.boot_estimate * 0.5, server.boot_s * 1.5 + 0.5)
        return server

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    def bench_args(self, server: Server, concurrency: int, seconds: float,
                   rate: float | None = None) -> list[str]:
        words = ["-c", str(concurrency), "-d", f"{seconds:g}s", "--timeout", "30s"]
        if server.tls:
            if not self.options.tls_trust:
                raise TuneError("the server speaks TLS (certfile is set): give --insecure to "
                                "accept its certificate, or --cacert FILE to check it against "
                                "that CA (for the name localhost)", status=2)
            words += self.options.tls_trust
        words += http2_flags(self.options.http2_streams)
        if rate is not None:
            words += ["-R", f"{rate:.1f}"]
        requests_path = self.options.out / "requests.txt"
        lines = []
        for target in self.targets:
            method, _, path = target.rpartition(" ")
            lines.append(f"{method} {server.base}{path}".strip())
        requests_path.write_text("\n".join(lines) + "\n")
        return [*words, "--requests-file", str(requests_path)]

    def warm(self, server: Server, concurrency: int) -> None:
        """Half a second of load that is not measured: a fresh worker's first requests (imports
        done on first use, template compilation, connection set-up) would count otherwise."""
        self.progress.show(f"warming up {server.shape.name}")
        run_bench(self.bench_args(server, concurrency, WARM_S), self.load_cpus, timeout=WARM_S + 60.0)

    def step(self, server: Server, concurrency: int, rate: float | None = None,
             seconds: float | None = None, what: str = "") -> dict[str, Any]:
        """One measurement; repeated once when disturbed and the budget allows."""
        seconds = seconds or self.step_s
        label = f"{what}: " if what else ""
        self.progress.show(f"{label}{server.shape.name}, "
                           + (f"{rate:,.0f} requests/s open loop" if rate else f"{concurrency} connections"))
        result = measure(server, self.bench_args(server, concurrency, seconds, rate), self.load_cpus, seconds)
        if result["disturbed"] and self.fits(1):
            again = measure(server, self.bench_args(server, concurrency, seconds, rate), self.load_cpus, seconds)
            again["repeated"] = True
            if again["noise"] < result["noise"]:
                result = again
        result["concurrency"] = concurrency
        return result

    # --- the whole -----------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        """Every phase in turn. Ctrl-C ends the run with what was measured; so does a failure
        after the probe (a server that does not start, a load that cannot run), recorded in
        ``failed``; a failure before the probe ended (a bad APP, URLs that do not answer) is
        the run's error."""
        phases = [("loading the app", self.detect), ("the probe", self.probe),
                  ("the calibration", self.calibrate_probe), ("the memory runs", self.memory_variants),
                  ("the sweeps", self.sweeps), ("the open-loop runs", self.open_loop),
                  ("the leak run", self.leak), ("the calibration of the sweeps", self.calibrate_configs)]
        try:
            for name, phase in phases:
                try:
                    phase()
                except TuneError as error:
                    if self.doc["probe"] is None:
                        raise
                    self.doc["failed"] = {"phase": name, "error": str(error), "detail": error.detail[-4000:]}
                    break
                except Exception as error:  # a defect of the tuner's: keep what was measured
                    if self.doc["probe"] is None:
                        raise
                    self.doc["failed"] = {"phase": name, "error": f"{type(error).__name__}: {error}",
                                          "detail": traceback.format_exc()[-4000:]}
                    break
        except (KeyboardInterrupt, Interrupted):
            self.doc["interrupted"] = True
        finally:
            # A second Ctrl-C must not leave the server running: it is in a session of its own
            # and never sees the terminal's SIGINT.
            previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
            try:
                self.stop()
            finally:
                signal.signal(signal.SIGINT, previous)
            self.progress.clear()
            self.doc["elapsed_s"] = round(time.monotonic() - self.started, 3)
        return self.doc

    def detect(self) -> None:
        """The app's interface, checked in a process of its own (a bad APP or flag: exit 2)."""
        self.progress.show("loading the app")
        proc = subprocess.run([sys.executable, "-m", "tines.tune.detect", self.options.app,
                               *self.options.serve_args], capture_output=True, text=True,
                              cwd=self.options.workdir, timeout=300)
        if proc.returncode != 0:
            lines = proc.stderr.strip().splitlines()
            raise TuneError(lines[-1].removeprefix("tines: error: ") if lines else
                            f"the app could not be loaded (status {proc.returncode})",
                            "\n".join(lines[:-1]), status=2)
        self.doc["interface"] = "wsgi" if json.loads(proc.stdout)["interface"] == "wsgi" else "asgi"

    def base_mpm(self) -> str:
        return "prefork" if self.doc["interface"] == "wsgi" else "event"

    def probe_shape(self) -> Shape:
        """Two workers of the base MPM (one app thread for event), no preload: the probe and
        its calibration run the same."""
        return Shape(self.base_mpm(), 2, 1 if self.base_mpm() == "event" else 0)

    def probe(self) -> None:
        shape = self.probe_shape()
        server = self.start(shape)
        start = server.memory()
        self.warm(server, 1)
        step = self.step(server, 1, what="probe")
        if step["requests"] + step["errors"] == 0:
            raise TuneError(f"no response arrived in {self.step_s:g} s at one connection (the app hangs, or "
                            "one request takes longer than a measurement: give a longer --budget)",
                            server.log_tail())
        if step["ok"] == 0 or step["errors"]:
            statuses = {code: n for code, n in step["status_counts"].items() if code[:1] not in "23"}
            what = (f"answers {', '.join(f'{n} x {code}' for code, n in sorted(statuses.items()))}"
                    if statuses else f"fails ({json.dumps(step['error_examples'])})")
            raise TuneError(f"every request must be answered with 2xx or 3xx, but the app {what} of "
                            f"{step['requests'] + step['errors'] - step['status_errors']}: check --url or "
                            "--requests-file", server.log_tail(), status=2)
        self.doc["probe"] = {"shape": shape.as_dict(), "step": step, "boot_s": server.boot_s}
        after_step = self.step(server, 2, what="memory") if self.fits(1) else None
        self.doc["memory"].append({"shape": shape.as_dict(), "boot_s": server.boot_s, "start": start,
                                   "after": server.memory(),
                                   "requests": after_step["served"] + step["served"] if after_step else step["served"]})
        self.stop()

    def calibrate_probe(self) -> None:
        if not self.fits(1, boots=1):
            self.skip("the server's own cost (calibration)")
            return
        shape = self.probe_shape()
        server = self.start(shape, calibration=True)
        self.warm(server, 1)
        step = self.step(server, 1, what="calibration")
        self.doc["calibration"][shape.mpm] = {"cpu_us_per_request": step["cpu_us_per_request"],
                                              "concurrency": 1, "step": step}
        self.stop()

    def memory_variants(self) -> None:
        base = self.doc["probe"]["shape"]
        variants = [Shape(base["mpm"], 2, base["threads"], preload=True)]
        machine = self.doc["machine"]
        if machine["ksm"] == "running" and machine["memory_merge_supported"]:
            variants.append(Shape(base["mpm"], 2, base["threads"], preload=True, memory_merge=True))
        for shape in variants:
            if not self.fits(1, boots=1):
                self.skip(f"memory of {shape.name}")
                continue
            try:
                server = self.start(shape)
            except TuneError as error:
                self.doc["memory"].append({"shape": shape.as_dict(), "error": str(error)})
                continue
            start = server.memory(ksm=shape.memory_merge)
            step = self.step(server, 2, what="memory")
            if shape.memory_merge:
                self.wait_for_ksm()
            self.doc["memory"].append({"shape": shape.as_dict(), "boot_s": server.boot_s, "start": start,
                                       "after": server.memory(ksm=shape.memory_merge),
                                       "requests": step["served"]})
            self.stop()

    def wait_for_ksm(self, scans: int = 2) -> None:
        """Until ksmd has scanned everything ``scans`` more times (a quarter of the budget left
        at most)."""
        path = "/sys/kernel/mm/ksm/full_scans"
        try:
            first = int(Path(path).read_text())
        except OSError:
            return
        end = time.monotonic() + min(60.0, self.left() / 4)
        while time.monotonic() < end and int(Path(path).read_text()) < first + scans:
            self.progress.show("waiting for ksmd to scan the workers")
            time.sleep(0.5)

    def preload(self) -> bool:
        """Whether the sweeps run with preload: when the memory phase says it saves."""
        if not self.doc["memory"]:
            return False
        rec = recommend.recommend(self.doc)
        item = rec.item("preload")
        return bool(item and item.value)

    def candidates(self) -> list[Shape]:
        work = recommend.workload(self.doc)
        n = max(1, len(self.server_cpus))
        preload = self.preload()
        if self.doc["interface"] != "wsgi":
            return [Shape("event", n, 1, preload)]
        if work["bound"] == "cpu":
            return [Shape("prefork", n, 0, preload), Shape("event", n, 2, preload)]
        threads = min(recommend.MAX_THREADS, max(2, math.ceil(1 + work["wait_ratio"])))
        processes = min(8 * n, max(2 * n, math.ceil(n * (1 + work["wait_ratio"]))))
        return [Shape("event", n, threads, preload), Shape("prefork", processes, 0, preload)]

    def sweeps(self) -> None:
        queue = self.candidates()
        done: list[Shape] = []
        while queue:
            shape = queue.pop(0)
            if not self.fits(3, boots=1) or self.left() < self.reserve() + self.boot_estimate + 2 * self.step_s:
                self.skip(f"the sweep of {shape.name}")
                continue
            config = self.sweep(shape)
            done.append(shape)
            smaller = self.smaller_sibling(shape, config)
            if smaller is not None and smaller not in done and smaller not in queue:
                queue.append(smaller)

    def smaller_sibling(self, shape: Shape, config: dict[str, Any]) -> Shape | None:
        """Event workers whose throughput peaked with most of their threads idle: the same with
        the threads the knee used (fewer threads, less memory, same throughput?)."""
        bend = recommend.knee(config)
        if shape.mpm != "event" or bend is None or shape.threads <= 4:
            return None
        used = max(2, math.ceil(bend["concurrency"] / shape.workers))
        if used * 2 > shape.threads:
            return None
        return Shape(shape.mpm, shape.workers, used, shape.preload)

    def sweep(self, shape: Shape) -> dict[str, Any]:
        config: dict[str, Any] = {"shape": shape.as_dict(), "sweep": [], "open_loop": []}
        # In the document before it is measured: an interrupted sweep keeps its steps.
        self.doc["configs"].append(config)
        try:
            server = self.start(shape)
        except TuneError as error:
            config["error"] = str(error)
            return config
        config["boot_s"] = server.boot_s
        config["memory_start"] = server.memory()
        self.warm(server, shape.capacity)
        if self.doc["interface"] == "wsgi":
            limit = min(MAX_CONCURRENCY, max(32, 8 * shape.capacity))
            concurrency = max(1, shape.capacity // 8)
        else:
            # An ASGI app holds as many requests as its event loops take: no thread bounds it.
            limit = MAX_CONCURRENCY
            concurrency = 4
        best = 0.0
        flat = 0
        while concurrency <= limit and self.fits(1) and self.left() > self.reserve():
            step = self.step(server, concurrency, what="sweep")
            config["sweep"].append(step)
            # Responses that are not 2xx/3xx count among "requests" too; failures (refused,
            # reset, timed out) do not.
            attempts = step["requests"] + step["errors"] - step["status_errors"]
            if step["errors"] > SWEEP_ERRORS * max(1, attempts):
                break
            if step["rps"] > best * GAIN:
                flat = 0
            else:
                flat += 1
                if flat >= 2:
                    break
            best = max(best, step["rps"])
            concurrency *= 2
        config["memory_after"] = server.memory()
        self.stop()
        return config

    def reserve(self) -> float:
        """Budget kept for the phases after the sweeps (open loop, leak)."""
        return 3 * (self.step_s + 0.5) + self.leak_seconds() + self.boot_estimate * 2

    def leak_seconds(self) -> float:
        return min(60.0, max(3.0, self.options.budget_s * 0.15))

    def chosen(self) -> dict[str, Any] | None:
        chosen, _ = recommend.choose_mpm(self.doc, recommend.workload(self.doc))
        return chosen

    def open_loop(self) -> None:
        config = self.chosen()
        if config is None:
            return
        top = recommend.peak(config)
        assert top is not None
        fractions = BURSTY_OPEN_LOOP if self.options.bursty else OPEN_LOOP
        if not self.fits(len(fractions), boots=1):
            self.skip("the open-loop runs")
            return
        shape = Shape(**{k: v for k, v in config["shape"].items() if k != "name"})
        server = self.start(shape)
        self.warm(server, top["concurrency"])
        p99_s = top["latency_us"]["p99"] / 1e6
        for fraction in fractions:
            if not self.fits(1) or self.left() < self.leak_seconds():
                self.skip(f"the open-loop run at {fraction:.0%} of the peak")
                continue
            rate = max(1.0, top["rps"] * fraction)
            connections = min(2000, max(8, 2 * top["concurrency"], math.ceil(rate * p99_s * 2)))
            step = self.step(server, connections, rate=rate, what="open loop")
            step.update({"fraction": fraction, "rate": rate})
            config["open_loop"].append(step)
        self.stop()

    def leak(self) -> None:
        config = self.chosen()
        seconds = self.leak_seconds()
        if config is None or self.left() < seconds * 0.5 + self.boot_estimate:
            self.skip("the leak run")
            return
        seconds = min(seconds, self.left() - self.boot_estimate)
        bend = recommend.knee(config) or {"concurrency": 1}
        base = config["shape"]
        shape = Shape(base["mpm"], 1, base["threads"], base["preload"])
        server = self.start(shape)
        concurrency = max(1, math.ceil(bend["concurrency"] / base["workers"]))
        chunks = 10
        pids = server.worker_pids()
        if not pids:
            raise TuneError(f"the leak run's server ({shape.name}) reports no worker", server.log_tail())
        pid = pids[0]
        samples: list[dict[str, Any]] = []
        # In the document from the first sample: an interrupted run keeps what it sampled.
        leak = {"shape": shape.as_dict(), "concurrency": concurrency, "samples": samples, "warmup_requests": 0}
        self.doc["leak"] = leak
        first = self.leak_sample(server, pid)
        if first["uss"] is not None:
            samples.append(first)
        for _ in range(chunks):
            self.progress.show(f"leak: one worker's memory as it serves ({samples[-1]['requests'] if samples else 0:,} requests)")
            measure(server, self.bench_args(server, concurrency, seconds / chunks), self.load_cpus, seconds / chunks)
            sample = self.leak_sample(server, pid)
            if sample["uss"] is None:
                break
            samples.append(sample)
            # The warm-up: the first three samples (caches filling, the first requests' imports).
            leak["warmup_requests"] = samples[min(len(samples) - 1, 3)]["requests"]
        self.stop()

    @staticmethod
    def leak_sample(server: Server, pid: int) -> dict[str, Any]:
        report = server.status()
        worker = next((w for w in report["workers"] if int(w["pid"]) == pid), None)
        try:
            usage = memory.read_usage(pid)
        except memory.MemoryUnreadable as error:
            raise TuneError(f"the worker's memory cannot be read: {error}") from None
        return {"requests": int(worker["requests"]) if worker else 0,
                "uss": usage.uss if usage else None, "pss": usage.pss if usage else None,
                "rss": usage.rss if usage else None}

    def calibrate_configs(self) -> None:
        for config in self.doc["configs"]:
            bend = recommend.knee(config)
            if bend is None:
                continue
            if not self.fits(1, boots=1):
                self.skip(f"the server's own cost under {config['shape']['name']}")
                continue
            base = config["shape"]
            shape = Shape(base["mpm"], base["workers"], base["threads"], False)
            server = self.start(shape, calibration=True)
            self.warm(server, bend["concurrency"])
            step = self.step(server, bend["concurrency"], what="calibration")
            config["server_us"] = step["cpu_us_per_request"]
            self.stop()


def serve_flags_of(words: Sequence[str]) -> list[str]:
    """The serve flags after ``--``, checked against the ones the tuner sets itself."""
    for word in words:
        flag = word.split("=", 1)[0]
        if flag in OWNED_FLAGS:
            raise TuneError(f"{flag} is set by tines tune itself; pass the others after --", status=2)
        if flag in SPOILING_FLAGS:
            raise TuneError(f"{flag} would spoil the measurements ({SPOILING_FLAGS[flag]}); leave it out "
                            "while tuning", status=2)
    return list(words)


TLS_SERVE_FLAGS = ("--certfile", "--ssl-certfile", "--keyfile", "--ssl-keyfile",
                   "--keyfile-password-file")
"""The serve flags that make a server speak TLS: the calibration's no-op server gets them too,
so that its figure (the server's own cost) includes the encryption the app's server pays."""


def tls_flags_of(words: Sequence[str]) -> list[str]:
    """The TLS_SERVE_FLAGS among ``words``, with their values (``--flag VALUE`` or
    ``--flag=VALUE``)."""
    found: list[str] = []
    for index, word in enumerate(words):
        flag = word.split("=", 1)[0]
        if flag not in TLS_SERVE_FLAGS:
            continue
        if "=" in word:
            found.append(word)
        elif index + 1 < len(words):
            found += [word, words[index + 1]]
    return found


OWNED_FLAGS = {"--bind", "-b", "--mpm", "--workers", "-w", "--threads", "--preload", "--no-preload",
               "--status-bind", "--ready-fd", "--memory-merge", "--no-memory-merge",
               "-k", "--worker-class", "--host", "--port", "--uds", "--fd"}
"""Flags the tuner sets on every server it starts (gunicorn's ``-k`` and uvicorn's ``--host``... set
``mpm`` and ``bind``)."""

OVERRIDES = ["--max-requests", "0", "--max-requests-jitter", "0", "--max-worker-memory", "0", "--no-reload"]
"""Given to every server after the app's own flags: recycling and reloading off whatever a
config file says (a tines.toml that tines tune proposed sets recycling, and tuning again must
work), so no worker is replaced while it is measured."""

SPOILING_FLAGS = {
    "--max-requests": "a recycled worker's CPU time and memory are lost to the counts",
    "--max-requests-jitter": "it goes with --max-requests",
    "--max-worker-memory": "a recycled worker's CPU time and memory are lost to the counts",
    "--max-workers": "the dynamic pool changes the worker count under load; tines tune measures fixed counts",
    "--start-workers": "it belongs to the dynamic pool",
    "--min-spare-workers": "it belongs to the dynamic pool",
    "--max-spare-workers": "it belongs to the dynamic pool",
    "--min-spare-threads": "it belongs to the dynamic pool",
    "--max-spare-threads": "it belongs to the dynamic pool",
    "--user": "workers that change their uid cannot have their memory read",
    "--group": "it goes with --user",
    "--reload": "a restart on a file change would lose the counts",
}
"""Flags that would make the measurements wrong, and why (the same settings from a config file
or the environment are refused by ``tines.tune.detect``)."""

