"""The paired-round benches' measuring side (tls.py, http2.py, edge.py; their judging is
paired_model's): the start every one of them makes (flags, provisioning, the load generator,
an empty work directory), instructions per request counted by callgrind, a run of exactly N
requests, and the report files they write. What a bench owns (its rows, servers, cells, marks
and markdown) stays in the bench.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, NamedTuple, Sequence

from provision import ensure_peers, ensure_tools
from run import RESULTS, STANDALONE_BENCH, raise_nofile
from servers import tines_binary, tines_serve_help

CALLGRIND_READY_S = 300.0
"""How long a server under callgrind may take to be ready (Python's start-up and the app's
import are slow under valgrind)."""

NGINX_HTTP = """\
    access_log off;
    keepalive_requests 1000000;
    keepalive_timeout 300s;
    client_body_temp_path {workdir}/{stem}-{port}-body;
    proxy_temp_path {workdir}/{stem}-{port}-proxy;
    fastcgi_temp_path {workdir}/{stem}-{port}-fastcgi;
    uwsgi_temp_path {workdir}/{stem}-{port}-uwsgi;
    scgi_temp_path {workdir}/{stem}-{port}-scgi;
"""
"""The first lines of every bench's nginx ``http`` block (a ``str.format`` template: its
``workdir``, ``stem`` and ``port``): nothing logged, keep-alive without a practical limit,
every temporary file under the work directory, named by the configuration's stem and port."""

Markdown = Callable[[list[dict[str, Any]], Any, dict[str, str], dict[str, Any]], str]
"""A bench's report: ``markdown(results, instruction counts, skipped rows, meta)``."""


# --------------------------------------------------------------------------- measuring


def environment(**extra: str) -> dict[str, str]:
    """The servers' environment: this one, unbuffered, outside this script's venv."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **extra}
    env.pop("VIRTUAL_ENV", None)
    return env


def callgrind_wrapper(out_dir: Path) -> tuple[str, ...]:
    """The command a server runs under to be counted: every process of its tree writes
    ``out_dir/callgrind.out.PID``."""
    return ("valgrind", "--tool=callgrind", "--trace-children=yes",
            f"--callgrind-out-file={out_dir}/callgrind.out.%p")


@contextmanager
def callgrind_dir(bench: str) -> Iterator[Path]:
    """A temporary directory for callgrind's output files (``bench`` names it), removed
    afterwards."""
    out_dir = Path(tempfile.mkdtemp(prefix=f"tines-{bench}-callgrind-"))
    try:
        yield out_dir
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


def under_callgrind(out_dir: Path) -> dict[str, Any]:
    """``servers.start``'s arguments for a server counted by callgrind into ``out_dir``: its
    wrapper, and the time its start may take under valgrind."""
    return {"wrapper": callgrind_wrapper(out_dir), "ready_deadline_s": CALLGRIND_READY_S}


def control(words: list[str]) -> None:
    subprocess.run(["callgrind_control", *words], check=True, capture_output=True, timeout=120)


def callgrind_count(pids: list[int], run: Callable[[int], None], requests: int,
                    out_dir: Path) -> float | None:
    """Instructions per request of ``pids`` (running under :func:`callgrind_wrapper` into
    ``out_dir``, warmed up): their counts zeroed, ``run(requests)``, dumped and summed. None
    when nothing was counted. Raises what ``run`` and callgrind_control raise."""
    for pid in pids:
        control(["-z", str(pid)])
    run(requests)
    for pid in pids:
        control(["-d", str(pid)])
    total = 0
    for path in glob.glob(str(out_dir / "callgrind.out.*.*")):
        with open(path) as handle:
            for line in handle:
                if line.startswith("summary:"):
                    total += int(line.split()[1])
                    break
    return total / requests if total else None


def exactly(bench: Path, url: str, connections: int, count: int,
            flags: Sequence[str] = ()) -> None:
    """Exactly ``count`` requests to ``url`` by ``tines bench`` on CPU 0 (one thread,
    ``connections`` connections, ``flags``), every one answered 2xx, or RuntimeError."""
    command = ["taskset", "-c", "0", str(bench), *flags, "-t", "1", "-c", str(connections),
               "-n", str(count), "--json", "--timeout", "120s", url]
    result = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    report = json.loads(result.stdout)
    if report["ok"] != count or report["errors"]["total"]:
        raise RuntimeError(f"{report['ok']} of {count} answered 2xx ({report['errors']})")


# --------------------------------------------------------------------------- flags and files


def add_common_arguments(parser: argparse.ArgumentParser, per: str, stem: str) -> None:
    """The flags every paired bench takes: rounds, durations, provisioning, the report's
    name; ``per``: what a round measures once ("cell", "row"), ``stem``: the report's
    default name (``NAME-STAMP``)."""
    parser.add_argument("--runs", type=int, default=5, help=f"rounds (pairs) per {per}")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per measured run")
    parser.add_argument("--warmup", type=float, default=1.0, help=f"seconds of warm-up per {per}")
    parser.add_argument("--no-provision", action="store_true",
                        help="install nothing (rows whose server is missing are skipped)")
    parser.add_argument("--out", help=f"write results/NAME.{{md,json}} (default: {stem}-STAMP)")
    parser.add_argument("--report-only", type=Path, metavar="JSON",
                        help="render JSON (a report of this script) to markdown beside it, "
                             "run nothing")


def add_instruction_arguments(parser: argparse.ArgumentParser, which: str,
                              requests: int) -> None:
    """``--instructions`` (callgrind counts of ``which``) and ``--instruction-requests``
    (``requests`` by default)."""
    parser.add_argument("--instructions", action="store_true",
                        help=f"also count instructions per request with callgrind{which}")
    parser.add_argument("--instruction-requests", type=int, default=requests,
                        help="requests counted under callgrind per row (default: %(default)s)")


class Begun(NamedTuple):
    """A paired bench under way: its load generator, and when it started (UTC, as the report
    says it)."""

    bench: Path
    started: str


def begin(arguments: argparse.Namespace, markdown: Markdown, workdir: Path,
          peers: tuple[str, ...], log: Callable[[str], None]) -> Begun | int:
    """The start every paired bench makes (after :func:`add_common_arguments`'s flags are
    parsed): nginx and ``peers`` installed unless ``--no-provision``, the open-file limit
    raised, ``workdir`` made empty. What it measures with, or the script's exit status when
    there is nothing to measure: 0 once ``--report-only`` is rendered, 2 when the load
    generator is missing (logged)."""
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    if arguments.report_only is not None:
        render_report(arguments.report_only, markdown)
        return 0
    raise_nofile()
    if not arguments.no_provision:
        ensure_tools(["nginx"])
        if peers:
            ensure_peers(peers)
    if not STANDALONE_BENCH.exists():
        log(f"{STANDALONE_BENCH} is missing: cargo build --release -p tines-loadgen "
            "--bin tines-bench")
        return 2
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    return Begun(STANDALONE_BENCH, started)


def serve_help(log: Callable[[str], None]) -> str | None:
    """``tines serve --help`` of the Tines measured (its flags say which rows it can run), or
    None when there is no Tines (or its help failed: logged)."""
    try:
        return tines_serve_help() if tines_binary().exists() else None
    except OSError as error:
        log(f"tines serve --help: {error}")
        return None


def render_report(path: Path, markdown: Markdown) -> None:
    """``path`` (a report's JSON) rendered again to the markdown beside it."""
    document = json.loads(path.read_text())
    path.with_suffix(".md").write_text(markdown(
        document["results"], document["instructions"], document["skipped"], document["meta"]))


def write_report(arguments: argparse.Namespace, name: str, meta: dict[str, Any],
                 skipped: dict[str, str], results: list[dict[str, Any]], counts: Any,
                 markdown: Markdown, log: Callable[[str], None]) -> int:
    """``results/STEM.json`` (the whole record, schema ``tines-bench-NAME/1``) and
    ``STEM.md`` (its report), STEM being ``--out`` or ``NAME-STAMP``; logged. The script's
    exit status."""
    stem = arguments.out or f"{name}-{time.strftime('%Y-%m-%d-%H%M', time.gmtime())}"
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{stem}.json").write_text(json.dumps(
        {"schema": f"tines-bench-{name}/1", "meta": meta, "skipped": skipped,
         "results": results, "instructions": counts}, indent=1) + "\n")
    (RESULTS / f"{stem}.md").write_text(markdown(results, counts, skipped, meta))
    log(f"wrote {RESULTS / stem}.md and .json")
    return 0


__all__ = ["CALLGRIND_READY_S", "Markdown", "NGINX_HTTP", "add_common_arguments",
           "add_instruction_arguments", "Begun", "begin",
           "callgrind_count", "callgrind_dir", "callgrind_wrapper", "control", "environment",
           "exactly", "render_report", "serve_help", "under_callgrind", "write_report"]
