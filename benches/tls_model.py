"""Pure: the TLS rows' plan, issue 37's marks, the per-round ratios and their verdicts, and
the markdown (benches/tls.py measures; this decides what the figures say).

A *round* measures every server once in every cell; the servers' order turns by one each
round (interleaved runs). A Tines row and a peer measured in the same round form a *pair*; the
verdict takes the median of the per-pair ratios of CPU per request (per connection in the
handshake cells; PSS growth per connection in the idle cell), by the rules of
benches/paired_model.py (which the HTTP/2 and edge rows share).
"""

from __future__ import annotations

import statistics
from typing import Any

from paired_model import (JUDGE_BAND, Mark, closing, count_text, failures_text, figure, fmt,
                          fmt_share, instruction_ratio, judged_text, medians, noise_lines, order,
                          pair_ratios, verdict)

TINES_ROWS = ("tines-prefork-tls", "tines-event-tls")
PEER_ROWS = ("nginx-tls", "granian-tls", "uvicorn-tls")
CELLS = ("keep-alive", "handshake-full", "handshake-resumed")
IDLE_CELL = "idle-10k"
IDLE_ROWS = ("nginx-tls", "tines-event-tls")

MARKS = (
    Mark("keep-alive", "nginx-tls", 1.15),
    Mark("keep-alive", "granian-tls", 0.6),
    Mark("handshake-full", "nginx-tls", 1.1),
    Mark("handshake-resumed", "nginx-tls", 1.1),
    Mark(IDLE_CELL, "nginx-tls", 1.0),
)

UNITS = {"keep-alive": "CPU µs/request", "handshake-full": "CPU µs/connection",
         "handshake-resumed": "CPU µs/connection", IDLE_CELL: "PSS bytes/connection"}


def markdown(results: list[dict[str, Any]], counts: dict[str, dict[str, float]],
             skipped: dict[str, str], meta: dict[str, Any]) -> str:
    """The report: figures per cell and row, the marks' verdicts, what was skipped."""
    out = [f"# TLS rows (issue 37), {meta.get('started', '')}", ""]
    out += [f"- {line}" for line in meta.get("notes", [])]
    out += noise_lines(results)
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
            failed = [r for r in runs if r.get("failed")]
            notes = failures_text(runs)
            resumed = [float(r["resumed_share"]) for r in runs if r.get("resumed_share") is not None]
            if resumed:
                notes = (notes + "; " if notes else "") + (
                    f"resumed {statistics.median(resumed):.0%} of handshakes")
            count = counts.get(row, {}).get(cell)
            out.append(f"| {row} | {fmt(middle)} | {fmt_share(spread)} | {len(runs) - len(failed)}"
                       f" | {count_text(count)} | {notes} |")
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
            judged = verdict(mark, ratios, instruction_ratio(counts, mark.cell, row, mark.peer))
            out.append(f"| {mark.cell} | {row} | {mark.peer} | {mark.ratio} | "
                       + judged_text(ratios, judged))
    return closing(out, skipped, TINES_ROWS)


__all__ = ["CELLS", "IDLE_CELL", "IDLE_ROWS", "JUDGE_BAND", "MARKS", "Mark", "PEER_ROWS",
           "TINES_ROWS", "UNITS", "figure", "fmt", "fmt_share", "instruction_ratio", "markdown",
           "medians", "order", "pair_ratios", "verdict"]
