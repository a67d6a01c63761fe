"""Before/after (A/B) runs of Tines against itself: a baseline revision (A) against the current
tree (B), interleaved, with a verdict per table by the house rule.

``make bench-ab BASE=REV`` (or ``.venv/bin/python benches/ab.py --base REV``). Without a base,
A is the merge-base of HEAD and ``--base-branch`` (default ``main``): the commit the change
started from, however many commits it has. Method and reading: docs/benchmarks.md, "Before/after
runs".

A is built once per commit, in a temporary git worktree, into its own virtualenv under
``benches/results/tmp/ab/<commit>/`` (a second run reuses it). B is this tree's ``.venv``
(``make build`` first; ``make bench-ab`` does). Both sides load the same app files (this tree's)
under the same load generator (this tree's ``tines bench``), so only the server differs. The
measurement itself is the suite's (``run.measure``: start pinned on CPU 1 and ready, warm-up,
settle, measured run with the load on CPU 0, server CPU from /proc, stop).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# benches/ is sys.path[0] when this file runs as a script.
import ab_model
from ab_model import MIN_RUNS, NO_CHANGE_THRESHOLD, SPREAD_LIMIT, Comparison, Step
from apps import fortunes_db
from loadgen import LOAD_CPU, Load, Tool, find_tines_bench, tines_bench_command
from model import Plan
from provision import BLOG_PACKAGES, first_line, machine_info, pins_of
from run import RESULTS, STANDALONE_BENCH, TMP, measure, raise_nofile, script, shown
from servers import (APPS, SERVER_CPU, TINES_THREADS, Server, display_command, tines_binary,
                     tines_mpms, tines_serve_help, tines_server)
from uploads import UPLOAD_APPS, UPLOAD_SIZE

REPO = Path(__file__).resolve().parent.parent
# One directory per baseline commit: its virtualenv, wheel, build log and stamp.
CACHE = TMP / "ab"
# Shared by every baseline build: the dependencies compile once, only Tines' crates again.
CARGO_TARGET = CACHE / "target"
# The Makefile's build dependency (its $(STAMP) rule).
MATURIN = "maturin>=1.7,<2"
# The ASGI worker's event loop, used when installed (python/tines/asgi.py).
LOOP_PACKAGES = ("uvloop",)
MODES = ("keep-alive", "close")


def log(message: str) -> None:
    print(f"bench-ab: {message}", file=sys.stderr, flush=True)


class BadInput(Exception):
    """A revision, branch or flag that cannot be used; the message says which (exit 2)."""


class BuildFailed(Exception):
    """The baseline did not build; the message names the step and the log."""


# --------------------------------------------------------------------------- revisions


def git(repo: Path, *args: str) -> str:
    """``git -C repo ARGS``' standard output, stripped; raises BadInput when git fails."""
    result = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise BadInput(f"git {' '.join(args)}: {result.stderr.strip() or 'failed'}")
    return result.stdout.strip()


@dataclass(frozen=True)
class Base:
    """The baseline: what was asked for (a revision, or the merge-base with a branch) and the
    full commit hash it names."""

    rev: str
    commit: str


def resolve_base(repo: Path, rev: str | None, branch: str) -> Base:
    """``rev``'s commit, or without one the merge-base of HEAD and ``branch``."""
    if rev:
        try:
            return Base(rev, git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"))
        except BadInput:
            raise BadInput(f"--base {rev!r} names no commit of this repository") from None
    try:
        return Base(f"merge-base of HEAD and {branch}", git(repo, "merge-base", "HEAD", branch))
    except BadInput:
        raise BadInput(f"no merge-base of HEAD and {branch!r}: pass --base REV (make bench-ab "
                       "BASE=REV) or --base-branch BRANCH") from None


def candidate_commit(repo: Path) -> tuple[str, bool]:
    """HEAD's full hash, and whether tracked files differ from it (B is the working tree)."""
    dirty = git(repo, "status", "--porcelain", "--untracked-files=no")
    return git(repo, "rev-parse", "HEAD"), bool(dirty)


# --------------------------------------------------------------------------- the baseline build


def build_steps(source: Path, home: Path) -> list[tuple[str, list[str], Path]]:
    """The baseline's build, as the Makefile's: a virtualenv with pip upgraded and maturin,
    then the extension in release mode (``maturin build --release`` and a pip install of the
    wheel, where the Makefile runs ``maturin develop --release``: the same cargo profile and
    features, but an installed copy, so the worktree can go). The apps' packages are pinned to
    this venv's versions (``app_pins``), so both sides run the same Flask and the same ASGI
    event loop. (description, argv, cwd) each."""
    venv = home / "venv"
    python = str(venv / "bin" / "python")
    return [
        ("virtualenv", [sys.executable, "-m", "venv", str(venv)], REPO),
        ("pip", [python, "-m", "pip", "install", "--quiet", "--upgrade", "pip"], REPO),
        ("maturin and the apps' packages",
         [python, "-m", "pip", "install", "--quiet", MATURIN, *app_pins()], REPO),
        ("the extension (release)", [str(venv / "bin" / "maturin"), "build", "--release",
                                     "--interpreter", python, "--out", str(home / "dist")],
         source),
    ]


def run_step(description: str, argv: list[str], cwd: Path, env: dict[str, str],
             build_log: Path) -> None:
    log(f"baseline: {description}")
    with build_log.open("a") as out:
        out.write(f"\n$ (cd {cwd}) {shlex.join(argv)}\n")
        out.flush()
        result = subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT)
    if result.returncode != 0:
        raise BuildFailed(f"baseline build step {description!r} exited {result.returncode}; "
                          f"see {shown(build_log)}")


def remove_worktree(source: Path) -> None:
    """Remove the temporary worktree (its directory and git's record of it)."""
    subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(source)],
                   capture_output=True)
    shutil.rmtree(source, ignore_errors=True)


def app_pins() -> list[str]:
    """``name==version`` of what the benchmarked apps need beside Tines, as in this venv: the
    blog's packages, and uvloop, which an ASGI worker runs on when it is installed (without it,
    the baseline's ASGI cells would measure asyncio's own loop against this tree's uvloop)."""
    return pins_of(BLOG_PACKAGES + LOOP_PACKAGES)


def build_baseline(commit: str, rebuild: bool) -> tuple[Path, dict[str, Any]]:
    """The ``tines`` of ``commit``'s build, building it unless the cache has it; and the build's
    record (commands, when). A lock per commit makes a concurrent run wait for the build."""
    home = CACHE / commit
    home.mkdir(parents=True, exist_ok=True)
    tines = home / "venv" / "bin" / "tines"
    stamp = home / "build.json"
    with (home / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        pins = app_pins()
        if stamp.exists() and tines.exists() and not rebuild:
            cached = json.loads(stamp.read_text())
            if cached.get("pins") == pins:
                log(f"baseline {commit[:12]}: reusing the build in {shown(home)}")
                return tines, {**cached, "reused": True}
            log(f"baseline {commit[:12]}: the cached build has other packages; building again")
        stamp.unlink(missing_ok=True)
        for old in ("venv", "dist"):
            shutil.rmtree(home / old, ignore_errors=True)
        build_log = home / "build.log"
        build_log.write_text("")
        source = home / "src"
        if source.exists():
            remove_worktree(source)
        env = {**os.environ, "VIRTUAL_ENV": str(home / "venv"), "CARGO_TARGET_DIR": str(CARGO_TARGET),
               "PATH": f"{home / 'venv' / 'bin'}:{os.environ.get('PATH', '')}"}
        add = ["git", "-C", str(REPO), "worktree", "add", "--force", "--detach", str(source),
               commit]
        steps = [("the worktree", add, REPO), *build_steps(source, home)]
        log(f"baseline {commit[:12]}: building in {shown(home)} (log: {shown(build_log)})")
        try:
            for description, argv, cwd in steps:
                run_step(description, argv, cwd, env, build_log)
            wheels = sorted((home / "dist").glob("*.whl"))
            if len(wheels) != 1:
                raise BuildFailed(f"expected one wheel in {shown(home / 'dist')}, "
                                  f"found {len(wheels)}")
            install = [str(home / "venv" / "bin" / "python"), "-m", "pip", "install", "--quiet",
                       str(wheels[0])]
            run_step("installing the wheel", install, REPO, env, build_log)
            steps.append(("installing the wheel", install, REPO))
        finally:
            remove_worktree(source)
        if not tines.exists():
            raise BuildFailed(f"the baseline build has no {shown(tines)}; see {shown(build_log)}")
        record = {"commit": commit, "built": time.strftime("%Y-%m-%d %H:%M:%S"), "pins": pins,
                  "commands": [displayed(argv, cwd) for _, argv, cwd in steps],
                  "environment": f"VIRTUAL_ENV={shown(home / 'venv')} "
                                 f"CARGO_TARGET_DIR={shown(CARGO_TARGET)}"}
        stamp.write_text(json.dumps(record, indent=1) + "\n")
        return tines, {**record, "reused": False}


def displayed(argv: list[str], cwd: Path) -> str:
    """A build command as the report shows it: repository-relative, with its directory."""
    command = shlex.join(argv).replace(str(REPO) + "/", "").replace(str(REPO), ".")
    return command if cwd == REPO else f"(in {shown(cwd)}) {command}"


# --------------------------------------------------------------------------- the run


def names(value: str, allowed: tuple[str, ...] | list[str], flag: str) -> list[str]:
    """A comma-separated flag's items, each checked against ``allowed``."""
    items = [item for item in value.split(",") if item]
    unknown = [item for item in items if item not in allowed]
    if unknown or not items:
        raise BadInput(f"{flag}: {','.join(unknown) or 'empty'} is not one of "
                       f"{', '.join(allowed)}")
    return items


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="benches/ab.py", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--base", metavar="REV",
                        help="the baseline revision A (make bench-ab BASE=REV); default: the "
                             "merge-base of HEAD and --base-branch")
    parser.add_argument("--base-branch", default="main", metavar="BRANCH",
                        help="without --base, A is the merge-base of HEAD and BRANCH "
                             "(default: main)")
    parser.add_argument("--runs", type=int, default=MIN_RUNS,
                        help=f"interleaved runs per side and table (default {MIN_RUNS}, the "
                             "rule's minimum)")
    parser.add_argument("--duration", type=float, default=5.0, metavar="SECONDS",
                        help="each measured run's length (default 5)")
    parser.add_argument("--warmup", type=float, default=1.0, metavar="SECONDS",
                        help="the warm-up after each start, thrown away (default 1)")
    parser.add_argument("--connections", type=int, default=50,
                        help="concurrent connections (default 50)")
    parser.add_argument("--mpms", default="prefork",
                        help="comma-separated MPMs: prefork, thread, event (default prefork)")
    parser.add_argument("--apps", default="hello,blog",
                        help="comma-separated apps (default hello,blog): " + ", ".join(APPS)
                             + " (upload: a 20 MB Flask file upload; blog-post: the blog's "
                               "form post; attacked: hello under the slow-client attack)")
    parser.add_argument("--modes", default="keep-alive,close",
                        help="comma-separated: keep-alive, close (default both)")
    parser.add_argument("--threshold", type=float, default=NO_CHANGE_THRESHOLD,
                        help="\"no change\" when the median B/A is within this of 1 "
                             f"(default {NO_CHANGE_THRESHOLD})")
    parser.add_argument("--spread-limit", type=float, default=SPREAD_LIMIT,
                        help=f"a side's max/min above this is inconclusive (default "
                             f"{SPREAD_LIMIT:.2f})")
    parser.add_argument("--rebuild", action="store_true",
                        help="build the baseline again even if the cache has it")
    return parser.parse_args(argv)


def checked(args: argparse.Namespace) -> tuple[list[Comparison], Plan]:
    """The tables and the plan the flags ask for; raises BadInput."""
    if args.runs < 1:
        raise BadInput(f"--runs {args.runs}: at least 1")
    if args.duration <= 0 or args.warmup < 0:
        raise BadInput("--duration must be above 0 and --warmup at least 0")
    if args.connections < 1:
        raise BadInput(f"--connections {args.connections}: at least 1")
    if not 0 <= args.threshold < 1 or args.spread_limit < 1:
        raise BadInput("--threshold must be in [0, 1) and --spread-limit at least 1")
    tables = ab_model.comparisons(names(args.mpms, list(TINES_THREADS), "--mpms"),
                                  names(args.apps, list(APPS), "--apps"),
                                  names(args.modes, MODES, "--modes"), args.connections)
    return tables, Plan("ab", args.runs, args.warmup, args.duration, 0.0)


def load_tool() -> Tool:
    """This tree's ``tines bench`` (or its standalone build): the same generator for A and B."""
    argv, how = find_tines_bench(tines_binary(), STANDALONE_BENCH)
    if argv is None:
        raise BadInput(f"{how}; run `make build` (make bench-ab builds it)")
    return Tool("tines-bench", argv)


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    args = parse_args(arguments)
    try:
        tables, plan = checked(args)
        base = resolve_base(REPO, args.base, args.base_branch)
        candidate, dirty = candidate_commit(REPO)
        primary = load_tool()
    except BadInput as error:
        sys.stderr.write(f"bench-ab: {error}\n")
        return 2
    if base.commit == candidate and not dirty:
        log("A and B are the same commit and the tree is clean: an A/A run (the noise)")
    try:
        base_tines, build = build_baseline(base.commit, args.rebuild)
    except BuildFailed as error:
        sys.stderr.write(f"bench-ab: {error}\n")
        return 1
    tines = {"A": base_tines, "B": tines_binary()}

    skipped: dict[str, str] = {}
    for side, binary in tines.items():
        offered = tines_mpms(tines_serve_help(binary))
        for table in tables:
            if table.mpm not in offered:
                skipped[table.name] = (f"{side}'s tines serve offers --mpm "
                                       f"{{{','.join(sorted(offered))}}}, no {table.mpm}")
    tables = [table for table in tables if table.name not in skipped]
    for name, reason in skipped.items():
        log(f"skipping {name}: {reason}")
    servers = {(table.mpm, side): tines_server(table.mpm, tines[side], table.server(side))
               for table in tables for side in ab_model.SIDES}

    stamp = time.strftime("%Y-%m-%d-%H%M")
    workdir = TMP / f"ab-{stamp}"
    workdir.mkdir(parents=True, exist_ok=True)
    raise_nofile()
    fortunes = fortunes_db.create(workdir / "fortunes.sqlite3")
    steps = ab_model.plan(tables, plan.runs)
    log(f"A {base.commit[:12]} ({base.rev}) against B {candidate[:12]}"
        f"{' + uncommitted changes' if dirty else ''}: {len(steps)} measurements, about "
        f"{ab_model.estimate_seconds(len(steps), plan.warmup_s, plan.duration_s) / 60:.0f} min; "
        f"logs in {shown(workdir)}")
    results: list[dict[str, Any]] = []
    for index, step in enumerate(steps, 1):
        result = measured_step(step, servers[(step.comparison.mpm, step.side)], plan, primary,
                               workdir, fortunes)
        results.append(result)
        status = result["failed"] or (f"{result['ok_per_sec']:,.0f} req/s, "
                                      f"{result['cpu_us_per_request']:.1f} CPU µs/req, "
                                      f"{result['errors']['total']} errors")
        log(f"[{index}/{len(steps)}] run {step.run} {step.comparison.name} {step.side}: {status}")

    def runs_of(table: Comparison, side: str) -> list[dict[str, Any]]:
        return [r for r in results if r["table"] == table.name and r["side"] == side]

    summed = [ab_model.compare(table, runs_of(table, "A"), runs_of(table, "B"), plan.runs,
                               threshold=args.threshold, spread_limit=args.spread_limit)
              for table in tables]
    sample = Load("URL", args.connections, plan.duration_s, True)
    meta = {
        "started": stamp,
        "base": {"rev": base.rev, "commit": base.commit,
                 "tines": first_line([str(base_tines), "--version"]), "build": build},
        "candidate": {"commit": candidate, "dirty": dirty,
                      "tines": first_line([str(tines["B"]), "--version"])},
        "plan": {"runs": plan.runs, "warmup_s": plan.warmup_s, "duration_s": plan.duration_s,
                 "connections": args.connections, "threshold": args.threshold,
                 "spread_limit": args.spread_limit, "min_runs": MIN_RUNS},
        "load": " ".join(primary.argv).replace(str(REPO) + "/", ""),
        "machine": machine_info(),
        "skipped": skipped,
        "commands": command_lines(arguments, servers, tables, primary, sample, build),
    }
    out_dir = RESULTS if plan.runs >= MIN_RUNS else TMP
    out = out_dir / f"ab-{stamp}"
    text = ab_model.markdown(meta, summed, runs_of)
    out.with_suffix(".md").write_text(text)
    out.with_suffix(".json").write_text(json.dumps(
        {"schema": "tines-bench-ab/1", "meta": meta,
         "comparisons": [r.as_dict() for r in summed], "runs": results}, indent=1) + "\n")
    print(text)
    log(f"wrote {shown(out)}.{{md,json}}")
    return 0


def measured_step(step: Step, server: Server, plan: Plan, primary: Tool, workdir: Path,
                  fortunes: Path) -> dict[str, Any]:
    """One start, warm-up, settle and measured run of ``step`` (run.measure), labelled."""
    result = measure(server, step.comparison.scenario, step.run, plan, primary, None, workdir,
                     fortunes)
    return {**result, "side": step.side, "mpm": step.comparison.mpm,
            "table": step.comparison.name}


def command_lines(arguments: list[str], servers: dict[tuple[str, str], Server],
                  tables: list[Comparison], primary: Tool, sample: Load,
                  build: dict[str, Any]) -> list[str]:
    """The exact commands of the run, as the report shows them (repository-relative)."""
    out = [f"this run: `{shlex.join([shown(Path(sys.executable)), 'benches/ab.py', *arguments])}`"]
    when = "reused from the cache, " if build.get("reused") else ""
    out.append(f"A's build ({when}built {build.get('built')}, with "
               f"{build.get('environment')}):")
    out += [f"  - `{command}`" for command in build.get("commands", [])]
    for (mpm, side), server in servers.items():
        for app in dict.fromkeys(t.scenario.app for t in tables if t.mpm == mpm):
            out.append(f"{side}, tines-{mpm}, {app}: `taskset -c {SERVER_CPU} "
                       f"{display_command(server, APPS[app])}`")
    load = shlex.join(["taskset", "-c", LOAD_CPU, *tines_bench_command(primary, sample)])
    out.append(f"load: `{load.replace(str(REPO) + '/', '')}` (+ `--no-keepalive` for close)")
    if any(t.scenario.app in UPLOAD_APPS for t in tables):
        out.append("upload workloads (benches/uploads.py): `upload` adds `-m POST -H "
                   "'Content-Type: multipart/form-data; boundary=...' --body-file "
                   f"WORKDIR/upload-{UPLOAD_SIZE}.multipart` (a {UPLOAD_SIZE:,}-byte file part); "
                   "`blog-post` adds `-m POST -H 'Cookie: blog_csrf=...' -H 'Content-Type: "
                   "application/x-www-form-urlencoded' --body-file WORKDIR/blog-post-PORT.form` "
                   "(the start's CSRF pair from `GET /blog/create`, a title, a 2 KB body)")
    return out


if __name__ == "__main__":
    script(main, "bench-ab: interrupted; nothing written")
