"""The paired-round benches' shared rules and tools (tls.py, http2.py, edge.py and their
models): how a round is ordered, how two rows of one round pair up and how a mark is judged,
the report's noise line, instructions per request counted by callgrind, a run of exactly N
requests, the flags every one of them takes and the report files they write.

A *round* measures every row once, the rows' order turned by one each round (interleaved
runs); two rows measured in the same round form a *pair*, and a mark is judged by the median
of the per-pair ratios. Where that median is within 15% of the mark the clock cannot tell on
this noisy 2-core machine, and the ratio of callgrind's instruction counts (when measured)
judges; without one the verdict is "inconclusive".

Standard library only, so that the pure models import it without the measuring machinery;
what a bench owns (its rows, servers, cells, marks and markdown) stays in the bench.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

JUDGE_BAND = 0.15
"""Within this share of the mark, instructions judge (the issues' "within 15%")."""

CALLGRIND_READY_S = 300.0
"""How long a server under callgrind may take to be ready (Python's start-up and the app's
import are slow under valgrind)."""

Markdown = Callable[[list[dict[str, Any]], Any, dict[str, str], dict[str, Any]], str]
"""A bench's report: ``markdown(results, instruction counts, skipped rows, meta)``."""


# --------------------------------------------------------------------------- judging (pure)


@dataclass(frozen=True)
class Mark:
    """A target judged by the clock: the row's figure in ``cell`` at most ``ratio`` times
    ``peer``'s."""

    cell: str
    peer: str
    ratio: float


def figure(result: dict[str, Any]) -> float | None:
    """The figure a measurement is judged by, or None when it failed."""
    if result.get("failed"):
        return None
    if "pss_per_connection" in result:
        return float(result["pss_per_connection"])
    value = result.get("cpu_us_per_request")
    return float(value) if value else None


def order(rows: list[str], round_index: int) -> list[str]:
    """The rows in round ``round_index``'s order: turned by one each round."""
    if not rows:
        return []
    shift = round_index % len(rows)
    return rows[shift:] + rows[:shift]


def pair_ratios(results: list[dict[str, Any]], cell: str, row: str, peer: str) -> list[float]:
    """Per-round ratios row/peer in ``cell`` (rounds where both have a figure)."""
    by_round: dict[int, dict[str, float]] = {}
    for result in results:
        if result["cell"] != cell:
            continue
        value = figure(result)
        if value is not None and value > 0:
            by_round.setdefault(int(result["round"]), {})[result["server"]] = value
    return [r[row] / r[peer] for _, r in sorted(by_round.items()) if row in r and peer in r]


def medians(results: list[dict[str, Any]], cell: str, row: str) -> tuple[float | None, float | None]:
    """Median of the row's figures in ``cell`` and their spread (max-min over median)."""
    values = [v for r in results if r["cell"] == cell and r["server"] == row
              if (v := figure(r)) is not None]
    if not values:
        return None, None
    middle = statistics.median(values)
    return middle, (max(values) - min(values)) / middle if middle else None


def verdict(mark: Mark, ratios: list[float], instructions: float | None) -> tuple[str, str]:
    """(verdict, why) for one mark: pass, fail, inconclusive, or not measured."""
    if not ratios:
        return "not measured", "no pair of runs"
    ratio = statistics.median(ratios)
    if abs(ratio - mark.ratio) > JUDGE_BAND * mark.ratio:
        ok = ratio <= mark.ratio
        return ("pass" if ok else "fail"), f"median ratio {ratio:.3f} vs {mark.ratio} (clock)"
    if instructions is None:
        return "inconclusive", (f"median ratio {ratio:.3f} within 15% of {mark.ratio}; "
                                "no instruction count")
    ok = instructions <= mark.ratio
    return ("pass" if ok else "fail"), (f"median ratio {ratio:.3f} within 15% of {mark.ratio}; "
                                        f"instructions ratio {instructions:.3f} judges")


def instruction_ratio(counts: dict[str, dict[str, float]], cell: str, row: str,
                      peer: str) -> float | None:
    """``counts[server][cell]`` instructions per request (or connection): row over peer."""
    mine, theirs = counts.get(row, {}).get(cell), counts.get(peer, {}).get(cell)
    return mine / theirs if mine and theirs else None


def noise_lines(results: list[dict[str, Any]]) -> list[str]:
    """The report's line on the other processes' CPU during the timed runs (none when no run
    measured it)."""
    noise = [float(r["other_cpu"]) for r in results if r.get("other_cpu") is not None]
    if not noise:
        return []
    return [f"- other processes used a median of {statistics.median(noise):.2f} CPUs "
            f"(max {max(noise):.2f}) of the 2 during the timed runs: where that is well "
            "above 0, the clock figures are noisy and the instruction counts judge"]


def fmt(value: float | None) -> str:
    return "" if value is None else (f"{value:,.0f}" if value >= 100 else f"{value:.2f}")


def fmt_share(value: float | None) -> str:
    return "" if value is None else f"{value:.0%}"


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


def render_report(path: Path, markdown: Markdown) -> None:
    """``path`` (a report's JSON) rendered again to the markdown beside it."""
    document = json.loads(path.read_text())
    path.with_suffix(".md").write_text(markdown(
        document["results"], document["instructions"], document["skipped"], document["meta"]))


def write_report(results_dir: Path, stem: str, schema: str, meta: dict[str, Any],
                 skipped: dict[str, str], results: list[dict[str, Any]], counts: Any,
                 markdown: Markdown) -> Path:
    """``results_dir/stem.json`` (the whole record) and ``stem.md`` (its report); the path
    without its suffix."""
    results_dir.mkdir(parents=True, exist_ok=True)
    (results_dir / f"{stem}.json").write_text(json.dumps(
        {"schema": schema, "meta": meta, "skipped": skipped, "results": results,
         "instructions": counts}, indent=1) + "\n")
    (results_dir / f"{stem}.md").write_text(markdown(results, counts, skipped, meta))
    return results_dir / stem


__all__ = ["CALLGRIND_READY_S", "JUDGE_BAND", "Mark", "Markdown", "add_common_arguments",
           "callgrind_count", "callgrind_wrapper", "control", "environment", "exactly",
           "figure", "fmt", "fmt_share", "instruction_ratio", "medians", "noise_lines", "order",
           "pair_ratios", "render_report", "verdict", "write_report"]
