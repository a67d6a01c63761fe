"""Memory per process of an app under Tines, in the variants docs/tuning.md compares.

Starts ``tines serve APP`` on 127.0.0.1 (two prefork workers by default) in each variant: no
preload, preload (the master imports the app, then ``gc.freeze()``), preload with the workers
undoing the freeze (a ``post_fork`` hook calls ``gc.unfreeze()``, so the collector walks the
preloaded objects again, as without the freeze), and preload with ``memory_merge``; warms each
with ``tines bench``; then prints RSS, PSS, USS and shared of the master and of each worker
(from smaps_rollup), the USS of a bare Python that only imports the app, and the mod_perl
guide's MaxClients formula with this machine's MemAvailable.

    .venv/bin/python tools/memory_report.py                      # the blog example
    .venv/bin/python tools/memory_report.py --app examples/hello.py:app --variants no-preload
    .venv/bin/python tools/memory_report.py --ksm                # ksmd on during the memory_merge
                                                                 # variant, then restored (root)

``--ksm`` writes 1 to /sys/kernel/mm/ksm/run (a system-wide switch) for the memory_merge variant
only and writes the previous value back afterwards, whatever happens.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tines import memory

REPO = Path(__file__).resolve().parent.parent
BLOG = REPO / "examples" / "blog"
MIB = 1 << 20
READY_DEADLINE = 60.0
KSM_SCANS = 3
"""Full ksmd scans to wait for after the warm-up: a page is merged on its second scan at the
earliest (the first puts it in the unstable tree)."""

UNFREEZE_HOOKS = '''\
"""post_fork: undo the master's gc.freeze() in the worker, then the app's own post_fork."""
import gc
import os
import runpy
import sys

if {hooks!r}:
    sys.path.insert(0, os.path.dirname({hooks!r}))  # as Tines does for a hooks file
_app_hooks = runpy.run_path({hooks!r}) if {hooks!r} else {{}}


def post_fork(server, worker):
    gc.unfreeze()
    if "post_fork" in _app_hooks:
        _app_hooks["post_fork"](server, worker)
'''

BARE = '''\
import importlib, json, os, sys
sys.path.insert(0, sys.argv[1])
importlib.import_module(sys.argv[2])
fields = {}
for line in open("/proc/self/smaps_rollup"):
    name, _, rest = line.partition(":")
    if rest.strip().endswith("kB"):
        fields[name] = int(rest.split()[0]) * 1024
print(json.dumps({"rss": fields["Rss"], "pss": fields["Pss"],
                  "uss": fields["Private_Clean"] + fields["Private_Dirty"],
                  "shared": fields["Shared_Clean"] + fields["Shared_Dirty"]}))
'''


@dataclass(frozen=True)
class Variant:
    name: str
    args: tuple[str, ...]
    unfreeze: bool = False


VARIANTS = {
    "no-preload": Variant("no preload", ()),
    "preload": Variant("preload (gc.freeze)", ("--preload",)),
    "preload-no-freeze": Variant("preload, gc.freeze undone", ("--preload",), unfreeze=True),
    "preload-merge": Variant("preload + memory_merge", ("--preload", "--memory-merge")),
}


@dataclass(frozen=True)
class Row:
    variant: str
    process: str
    usage: memory.MemoryUsage


def children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return sorted(found)


def start(app: str, args: list[str], env: dict[str, str], log_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``tines serve`` on a free port; returns once its ready line came (its bind address)."""
    read_fd, write_fd = os.pipe()
    command = [sys.executable, "-m", "tines", "serve", app, "-b", "127.0.0.1:0",
               "--ready-fd", str(write_fd), *args]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                pass_fds=(write_fd,), env=env, cwd=REPO, start_new_session=True)
    os.close(write_fd)
    data = b""
    end = time.monotonic() + READY_DEADLINE
    try:
        while not data.endswith(b"\n"):
            ready, _, _ = select.select([read_fd], [], [], max(0.0, end - time.monotonic()))
            chunk = os.read(read_fd, 4096) if ready else b""
            if not chunk:
                proc.kill()
                sys.exit(f"memory_report: {' '.join(command)} did not get ready:\n{log_path.read_text()}")
            data += chunk
    finally:
        os.close(read_fd)
    return proc, str(json.loads(data)["binds"][0])


def ksm_full_scans() -> int:
    return int(Path("/sys/kernel/mm/ksm/full_scans").read_text())


def measure(app: str, variant: Variant, workers: int, url_path: str, requests: int,
            hooks: str | None, workdir: Path, ksm: bool) -> list[Row]:
    env = {**os.environ, "BLOG_DB": str(workdir / "blog.sqlite3"), "PYTHONUNBUFFERED": "1"}
    args = ["-w", str(workers), *variant.args]
    if variant.unfreeze:
        hooks_file = workdir / "unfreeze_hooks.py"
        hooks_file.write_text(UNFREEZE_HOOKS.format(hooks=hooks or ""))
        args += ["--hooks", str(hooks_file)]
    elif hooks:
        args += ["--hooks", hooks]
    proc, bind = start(app, args, env, workdir / f"{variant.name.replace(' ', '_')}.log")
    try:
        subprocess.run([sys.executable, "-m", "tines", "bench", "-c", str(workers * 2), "-n", str(requests),
                        f"http://{bind}{url_path}"], check=True, stdout=subprocess.DEVNULL, cwd=REPO)
        if ksm and "--memory-merge" in variant.args:
            scans = ksm_full_scans()
            end = time.monotonic() + 120
            while ksm_full_scans() < scans + KSM_SCANS and time.monotonic() < end:
                time.sleep(0.5)  # ksmd's pace, not synchronisation with the server
        rows = []
        for label, pid in [("master", proc.pid)] + [(f"worker {n + 1}", pid)
                                                    for n, pid in enumerate(children(proc.pid))]:
            usage = memory.read_usage(pid, ksm="--memory-merge" in variant.args)
            if usage is not None:
                rows.append(Row(variant.name, label, usage))
        return rows
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(60)


def bare(app: str) -> memory.MemoryUsage:
    """A bare Python that imports the app's module and nothing of Tines."""
    target, _, _ = app.partition(":")
    path = Path(target)
    directory, module = (str(path.parent), path.stem) if target.endswith(".py") else (".", target)
    out = subprocess.run([sys.executable, "-c", BARE, str(REPO / directory), module], check=True,
                         capture_output=True, text=True, cwd=REPO).stdout
    figures = json.loads(out)
    return memory.MemoryUsage(figures["rss"], figures["pss"], figures["uss"], figures["shared"], 0)


def mib(size: int) -> str:
    return f"{size / MIB:.1f}"


def mem_available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


def report(rows: list[Row], baseline: memory.MemoryUsage, app: str) -> str:
    lines = ["| variant | process | RSS MiB | PSS MiB | USS MiB | shared MiB | KSM merged MiB |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for row in rows:
        usage = row.usage
        merged = mib(usage.ksm_merging) if usage.ksm_merging is not None else ""
        lines.append(f"| {row.variant} | {row.process} | {mib(usage.rss)} | {mib(usage.pss)} | "
                     f"{mib(usage.uss)} | {mib(usage.shared)} | {merged} |")
    lines.append(f"| bare `python` importing {app} | - | {mib(baseline.rss)} | {mib(baseline.pss)} | "
                 f"{mib(baseline.uss)} | {mib(baseline.shared)} | |")
    available = mem_available()
    lines += ["", f"MemAvailable: {mib(available)} MiB. MaxClients = (RAM available - shared) / USS "
              "per worker (the largest worker's figures):", "",
              "| variant | shared MiB | USS MiB | workers that fit | worker USS / bare USS | "
              "PSS of master + workers MiB |",
              "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for variant in dict.fromkeys(row.variant for row in rows):
        workers = [row.usage for row in rows if row.variant == variant and row.process != "master"]
        if not workers:
            continue
        shared = max(w.shared for w in workers)
        uss = max(w.uss for w in workers)
        lines.append(f"| {variant} | {mib(shared)} | {mib(uss)} | "
                     f"({mib(available)} - {mib(shared)}) / {mib(uss)} = {(available - shared) // uss:,} | "
                     f"{uss / baseline.uss:.2f} | "
                     f"{mib(sum(row.usage.pss for row in rows if row.variant == variant))} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--app", default="examples/blog/app.py:app")
    parser.add_argument("--path", default=None, help="URL path to warm up (blog: /blog/, else /)")
    parser.add_argument("--hooks", default=None,
                        help="hooks file (blog: examples/blog/tines_hooks.py)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--requests", type=int, default=30000,
                        help="warm-up requests (enough for the collector's full collections to run)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=", ".join(VARIANTS))
    parser.add_argument("--ksm", action="store_true",
                        help="run ksmd (/sys/kernel/mm/ksm/run = 1) during the memory_merge variant, "
                             "then restore the previous value")
    arguments = parser.parse_args()
    is_blog = arguments.app.startswith("examples/blog/")
    url_path = arguments.path or ("/blog/" if is_blog else "/")
    hooks = arguments.hooks or (str(BLOG / "tines_hooks.py") if is_blog else None)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="tines-memory-") as workdir:
        for key in arguments.variants.split(","):
            variant = VARIANTS[key]
            use_ksm = arguments.ksm and "--memory-merge" in variant.args
            previous = Path(memory.KSM_RUN).read_text().strip() if use_ksm else None
            try:
                if use_ksm:
                    Path(memory.KSM_RUN).write_text("1")
                rows += measure(arguments.app, variant, arguments.workers, url_path, arguments.requests,
                                hooks, Path(workdir), use_ksm)
            finally:
                if previous is not None:
                    Path(memory.KSM_RUN).write_text(previous)
    print(report(rows, bare(arguments.app), arguments.app))
    return 0


if __name__ == "__main__":
    sys.exit(main())
