"""``tines status``: the status listener's table in the terminal, refreshing like ``top``.

Owns: reaching the status listener (``HOST:PORT`` or ``unix:/path``) for ``/status.json``,
and the text view of that document (80 columns, colour only on a TTY). Must not: read the
scoreboard itself (the status process does) or know how the figures are made.

On a TTY it redraws every ``--interval`` seconds until ``q`` or Ctrl-C; otherwise (a pipe, a
file) it prints the table once. ``--json`` prints the document once as received.
"""

from __future__ import annotations

import http.client
import json
import os
import select
import shutil
import socket
import sys
import time
from typing import Any, TextIO

from tines.errors import ConfigError

TIMEOUT = 5.0
"""Seconds to wait for the status listener."""


class StatusUnreachable(Exception):
    """The status listener did not answer (the message says why)."""


class _UnixConnection(http.client.HTTPConnection):
    """HTTP over a Unix-domain socket."""

    def __init__(self, path: str) -> None:
        super().__init__("status", timeout=TIMEOUT)
        self.unix_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(TIMEOUT)
        sock.connect(self.unix_path)
        self.sock = sock


def connection_for(address: str) -> http.client.HTTPConnection:
    """A connection to the status listener at ``address`` (ConfigError for one a client
    cannot reach: an inherited ``fd://``)."""
    if address.startswith("unix:"):
        return _UnixConnection(address[len("unix:"):])
    if address.startswith("fd://"):
        raise ConfigError(f"status address {address!r} is an inherited socket: pass "
                          "--status-bind HOST:PORT or unix:/path to reach it")
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(f"status address {address!r} is not HOST:PORT or unix:/path")
    return http.client.HTTPConnection(host.strip("[]") or "127.0.0.1", int(port), timeout=TIMEOUT)


def fetch(address: str, path: str = "/status.json") -> bytes:
    """The body of ``path`` from the status listener."""
    connection = connection_for(address)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        body = response.read()
    except OSError as error:
        raise StatusUnreachable(f"cannot reach the status listener at {address}: {error}") from error
    finally:
        connection.close()
    if response.status != 200:
        # The status process's own answers are one plain line: it says why (403: this peer is
        # not in status_allow).
        why = body.decode("utf-8", "replace").strip().splitlines()[:1]
        raise StatusUnreachable(f"the status listener at {address} answered {response.status}"
                                + "".join(f": {line[:200]}" for line in why))
    return body


# ---- the text view -------------------------------------------------------------------------

RESET, BOLD, DIM, RED, YELLOW, GREEN, CYAN = (
    "\x1b[0m", "\x1b[1m", "\x1b[2m", "\x1b[31m", "\x1b[33m", "\x1b[32m", "\x1b[36m")
STATE_COLOURS = {"busy": YELLOW, "stopping": RED, "booting": CYAN, "standby": CYAN, "idle": GREEN}


def human_bytes(count: int | None) -> str:
    """Bytes in at most 6 characters: ``512B``, ``8.0M``, ``1.2G``; ``n/a`` for a figure the
    master could not read (``null``: PSS and USS under ``user``)."""
    if count is None:
        return "n/a"
    value = float(count)
    for unit in ("B", "K", "M", "G", "T"):
        if value < 1024 or unit == "T":
            return f"{int(value)}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024
    raise AssertionError("unreachable")


def human_seconds(seconds: float) -> str:
    """``12.3s``, ``4m10s``, ``2h05m``, ``3d04h``."""
    whole = int(seconds)
    if whole >= 86400:
        return f"{whole // 86400}d{whole % 86400 // 3600:02d}h"
    if whole >= 3600:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    if whole >= 60:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{seconds:.1f}s"


def human_ms(ms: float) -> str:
    """``0.4ms``, ``298ms``, then as :func:`human_seconds` from a second up."""
    if ms < 10:
        return f"{ms:.1f}ms"
    if ms < 1000:
        return f"{ms:.0f}ms"
    return human_seconds(ms / 1000)


def render(report: dict[str, Any], width: int = 80, colour: bool = False) -> str:
    """The table for ``report`` (a ``/status.json`` document), each line at most ``width``
    characters (not counting colour codes)."""

    def paint(text: str, code: str) -> str:
        return f"{code}{text}{RESET}" if colour and code else text

    lines: list[tuple[str, str]] = []  # (plain text, colour code)

    def line(text: str, code: str = "") -> None:
        lines.append((text, code))

    totals = report.get("totals", {})
    state = "STOPPING" if report.get("stopping") else "serving"
    line(f"tines  master {report['master_pid']}  gen {report['generation']}  {report['mpm']}  "
         f"up {human_seconds(report['uptime_s'])}  {state}", RED if report.get("stopping") else BOLD)
    by_status = totals.get("by_status", {})
    classes = " ".join(f"{name} {count}" for name, count in by_status.items() if count)
    mean = totals.get("mean_response_ms")
    line(f"requests {report['requests']}" + (f" ({classes})" if classes else "")
         + (f"  mean {human_ms(mean)}" if mean and report["requests"] else ""),
         RED if by_status.get("5xx") else "")
    rates = report.get("rates", {})
    line("req/s " + "  ".join(f"{window} {rate:.1f}" for window, rate in rates.items())
         + f"   in flight {totals.get('in_flight', 0)}"
         + (f"  waiting {totals['queued']} (longest {human_ms(totals.get('queued_wait_ms', 0.0))})"
            if totals.get("queued") else ""), YELLOW if totals.get("queued") else "")
    line(f"conns {totals.get('connections', 0)} open, {totals.get('connections_idle', 0)} idle  "
         f"accepted {totals.get('accepted', 0)}  in {human_bytes(totals.get('bytes_in', 0))}  "
         f"out {human_bytes(totals.get('bytes_out', 0))}")
    if totals.get("rate_limit_table_size") or totals.get("refused_connections_per_client"):
        line(f"rate limits {totals.get('rate_limited', 0)} requests limited, "
             f"{totals.get('refused_connections_per_client', 0)} connections refused, table "
             f"{totals.get('rate_limit_table_entries', 0)}/{totals.get('rate_limit_table_size', 0)} "
             f"({totals.get('rate_limit_evictions', 0)} evicted)")
    compression = totals.get("compression", {})
    compressed = compression.get("responses", {})
    if sum(compressed.values()) or compression.get("skipped") or compression.get("not_accepted"):
        codings = ", ".join(f"{coding} {count}" for coding, count in compressed.items() if count)
        before, after = compression.get("bytes_in", 0), compression.get("bytes_out", 0)
        line(f"compressed {sum(compressed.values())}" + (f" ({codings})" if codings else "")
             + f"  {human_bytes(before)} -> {human_bytes(after)}"
             + (f" ({after * 100 // before}%)" if before else "")
             + f"  left alone {compression.get('skipped', 0)}, "
             f"unaccepted {compression.get('not_accepted', 0)}")
    if totals.get("h2_connections") or totals.get("h2_streams"):
        line(f"http/2 {totals.get('h2_connections', 0)} conns, "
             f"{totals.get('h2_streams', 0)} streams open")
    restarts = ", ".join(f"{reason} {count}" for reason, count in report.get("restarts", {}).items()
                         if count)
    line(f"restarts: {restarts or 'none'}", YELLOW if restarts else "")
    line(f"slots: {report.get('scoreboard', '')}")
    line("")
    line(f"{'SLOT':>4} {'PID':>7} {'GEN':>3} {'STATE':<9} {'REQS':>7} {'CONN':>4} "
         f"{'PSS':>6} {'USS':>6}  REQUEST", BOLD)
    for worker in report["workers"]:
        memory = worker["memory"]
        busy = [thread for thread in worker["threads"] if thread["state"] != "idle"]
        head = (f"{worker['slot']:>4} {worker['pid']:>7} {worker['generation']:>3} "
                f"{worker['state']:<9} {worker['requests']:>7} {worker['connections']:>4} "
                f"{human_bytes(memory['pss']):>6} {human_bytes(memory['uss']):>6}  ")
        first = busy[0] if busy else None
        line(head + (_request(first) if first else ""), STATE_COLOURS.get(worker["state"], ""))
        for thread in busy[1:]:
            line(" " * len(head) + _request(thread), YELLOW)
    exits = report.get("recent_exits", [])
    if exits:
        line("")
        line("recent exits:", BOLD)
        now = report["time_ms"]
        for record in exits[:5]:
            how = (f"signal {record['signal']}" if "signal" in record
                   else f"code {record['exit_code']}")
            line(f"  {record['pid']:>7} slot {record['slot']:<3} {record['reason']:<15} {how:<10} "
                 f"{record['requests']} requests, {human_seconds((now - record['time_ms']) / 1000)} ago")
    return "".join(paint(_cut(text, width), code) + "\n" for text, code in lines)


def _request(thread: dict[str, Any]) -> str:
    waiting = " (client)" if thread["state"] == "client" else ""
    elapsed = human_seconds(thread["elapsed_ms"] / 1000)
    return f"{thread['method']} {thread['target']} {elapsed}{waiting}"


def _cut(text: str, width: int) -> str:
    text = text.rstrip()
    return text if len(text) <= width else text[:width - 1] + "~"


# ---- the command ---------------------------------------------------------------------------

def profile(directory: str | None, address: str | None, out_dir: str | None, top: int,
            out: TextIO = sys.stdout) -> int:
    """``tines status --profile``: merges the workers' profiles in ``directory`` (else the
    server's default one, named after its master pid, asked of the status listener at
    ``address``); prints the top table and writes the files into ``out_dir``. Exit 1 when
    there is no profile to read."""
    from tines import profiler

    try:
        if directory is None:
            if not address:
                raise ConfigError("no profile directory: pass --profile-dir DIR (the server's "
                                  "profile_dir), or --status-bind ADDRESS to ask the server")
            directory = profiler.default_dir(int(json.loads(fetch(address))["master_pid"]))
    except StatusUnreachable as error:
        print(f"tines: error: {error}", file=sys.stderr)
        return 1
    try:
        merged, files = profiler.merge(directory)
    except (OSError, ValueError, KeyError, TypeError) as error:
        print(f"tines: error: cannot read the profiles in {directory}: {error}", file=sys.stderr)
        return 1
    if not files:
        print(f"tines: error: no profile in {directory} (is the server running with --profile?)",
              file=sys.stderr)
        return 1
    out.write(profiler.top_table(merged, files, top))
    if out_dir is not None:
        for path in profiler.write_outputs(merged, out_dir):
            out.write(f"wrote {path}\n")
    return 0


def run(address: str, as_json: bool, once: bool, interval: float,
        out: TextIO = sys.stdout) -> int:
    """``tines status``; its exit status (0, or 1 when the listener cannot be reached)."""
    try:
        if as_json:
            out.write(json.dumps(json.loads(fetch(address)), indent=2) + "\n")
            return 0
        if once or not (out.isatty() and sys.stdin.isatty()):
            out.write(render(json.loads(fetch(address)), width=_width(out), colour=out.isatty()))
            return 0
        return _watch(address, interval, out)
    except StatusUnreachable as error:
        print(f"tines: error: {error}", file=sys.stderr)
        return 1


def _width(out: TextIO) -> int:
    """The terminal's width on a TTY (at least 80); 80 otherwise."""
    if out.isatty():
        return max(80, shutil.get_terminal_size((80, 24)).columns)
    return 80


def _watch(address: str, interval: float, out: TextIO) -> int:
    """Redraws every ``interval`` seconds until ``q`` or Ctrl-C (the terminal in cbreak mode
    meanwhile, restored on the way out)."""
    import termios
    import tty

    stdin = sys.stdin.fileno()
    saved = termios.tcgetattr(stdin)
    try:
        tty.setcbreak(stdin)
        out.write("\x1b[?25l")  # hide the cursor
        while True:
            try:
                body = render(json.loads(fetch(address)), width=_width(out), colour=True)
            except StatusUnreachable as error:
                body = f"{RED}{error}{RESET}\n"
            stamp = time.strftime("%H:%M:%S")
            out.write("\x1b[H\x1b[2J" + body + f"{DIM}{stamp}  q quits, every {interval:g} s{RESET}")
            out.flush()
            ready, _, _ = select.select([stdin], [], [], interval)
            if ready and os.read(stdin, 1) in (b"q", b"Q"):
                return 0
    except KeyboardInterrupt:
        return 0
    finally:
        termios.tcsetattr(stdin, termios.TCSADRAIN, saved)
        out.write("\x1b[?25h\n")
        out.flush()
