"""Pure: the TLS rows' plan, issue 37's marks, the per-round ratios and their verdicts, and
the markdown (benches/tls.py measures; this decides what the figures say).

A *round* measures every server once in every cell; the servers' order turns by one each
round (interleaved runs). A Tines row and a peer measured in the same round form a *pair*; the
verdict takes the median of the per-pair ratios of CPU per request (per connection in the
handshake cells; PSS growth per connection in the idle cell). Where that median is within 15%
of the mark, the clock cannot tell on this noisy machine, and the ratio of instruction counts
(callgrind, when measured) is the judge; without it the verdict is "inconclusive".
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

TINES_ROWS = ("tines-prefork-tls", "tines-event-tls")
PEER_ROWS = ("nginx-tls", "granian-tls", "uvicorn-tls")
CELLS = ("keep-alive", "handshake-full", "handshake-resumed")
IDLE_CELL = "idle-10k"
IDLE_ROWS = ("nginx-tls", "tines-event-tls")
JUDGE_BAND = 0.15
"""Within this share of the mark, instructions judge (the issue's "within 15%")."""


@dataclass(frozen=True)
class Mark:
    """Issue 37's target: the Tines row's figure at most ``ratio`` times the peer's."""

    cell: str
    peer: str
    ratio: float


MARKS = (
    Mark("keep-alive", "nginx-tls", 1.15),
    Mark("keep-alive", "granian-tls", 0.6),
    Mark("handshake-full", "nginx-tls", 1.1),
    Mark("handshake-resumed", "nginx-tls", 1.1),
    Mark(IDLE_CELL, "nginx-tls", 1.0),
)

UNITS = {"keep-alive": "CPU µs/request", "handshake-full": "CPU µs/connection",
         "handshake-resumed": "CPU µs/connection", IDLE_CELL: "PSS bytes/connection"}


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


def markdown(results: list[dict[str, Any]], counts: dict[str, dict[str, float]],
             skipped: dict[str, str], meta: dict[str, Any]) -> str:
    """The report: figures per cell and row, the marks' verdicts, what was skipped."""
    out = [f"# TLS rows (issue 37), {meta.get('started', '')}", ""]
    out += [f"- {line}" for line in meta.get("notes", [])]
    noise = [float(r["other_cpu"]) for r in results if r.get("other_cpu") is not None]
    if noise:
        out.append(f"- other processes used a median of {statistics.median(noise):.2f} CPUs "
                   f"(max {max(noise):.2f}) of the 2 during the timed runs: where that is "
                   "well above 0, the clock figures are noisy and the instruction counts judge")
    out.append("")
    rows = [*TINES_ROWS, *PEER_ROWS]
    for cell in (*CELLS, IDLE_CELL):
        present = [row for row in rows if any(r["cell"] == cell and r["server"] == row
                                              for r in results) or row in skipped]
        if not present:
            continue
        out += [f"## {cell} ({UNITS[cell]})", "",
                "| server | median | spread | runs | instructions | notes |",
                "| --- | ---: | ---: | ---: | ---: | --- |"]
        for row in present:
            if row in skipped and not any(r["server"] == row for r in results):
                out.append(f"| {row} | not run yet | | | | {skipped[row]} |")
                continue
            middle, spread = medians(results, cell, row)
            runs = [r for r in results if r["cell"] == cell and r["server"] == row]
            failed = [r["failed"] for r in runs if r.get("failed")]
            notes = "; ".join(sorted(set(failed)))[:200]
            resumed = [float(r["resumed_share"]) for r in runs if r.get("resumed_share") is not None]
            if resumed:
                notes = (notes + "; " if notes else "") + (
                    f"resumed {statistics.median(resumed):.0%} of handshakes")
            count = counts.get(row, {}).get(cell)
            out.append(f"| {row} | {fmt(middle)} | {fmt_share(spread)} | {len(runs) - len(failed)}"
                       f" | {f'{count:,.0f}' if count else ''} | {notes} |")
        out.append("")
    out += ["## Issue 37's marks", "", "| cell | row | against | mark | ratios per round | verdict | why |",
            "| --- | --- | --- | ---: | --- | --- | --- |"]
    for mark in MARKS:
        for row in (TINES_ROWS if mark.cell != IDLE_CELL else ("tines-event-tls",)):
            if row in skipped:
                out.append(f"| {mark.cell} | {row} | {mark.peer} | {mark.ratio} | | not run yet | "
                           f"{skipped[row]} |")
                continue
            ratios = pair_ratios(results, mark.cell, row, mark.peer)
            result, why = verdict(mark, ratios, instruction_ratio(counts, mark.cell, row, mark.peer))
            out.append(f"| {mark.cell} | {row} | {mark.peer} | {mark.ratio} | "
                       f"{', '.join(f'{r:.3f}' for r in ratios)} | {result} | {why} |")
    out.append("")
    others = {k: v for k, v in skipped.items() if k not in TINES_ROWS}
    if others:
        out += ["## Skipped", ""] + [f"- {k}: {v}" for k, v in sorted(others.items())] + [""]
    return "\n".join(out)


def fmt(value: float | None) -> str:
    return "" if value is None else (f"{value:,.0f}" if value >= 100 else f"{value:.2f}")


def fmt_share(value: float | None) -> str:
    return "" if value is None else f"{value:.0%}"
