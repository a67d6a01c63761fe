"""The status page (``/`` on the status listener) as a browser shows it: Debian's Chromium,
headless, renders it from a real server (2 workers, a few requests served) and its DOM says the
title, each worker's pid and the tables, each table in a ``div.wrap`` (the CSS makes that
scroll sideways, so a phone sees every column); screenshots at a phone's size and a desktop's are
kept in target/test-artifacts/ and must be PNGs of that size with something drawn on them."""

from __future__ import annotations

import http.client
import os
import re
import signal
import struct
import subprocess
import tempfile
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, debian_tool, wait_until
from test_status import status, status_port

# The first run installs chromium with apt-get in the first test's set-up: allow for a slow mirror.
pytestmark = pytest.mark.timeout(900)

ARTIFACTS = ROOT / "target" / "test-artifacts"
REQUESTS = 5
SIZES = {"phone": (412, 915), "desktop": (1280, 900)}
CHROMIUM_TIMEOUT = 120.0
"""Bound on one chromium run (it renders a page from 127.0.0.1 and exits)."""


@pytest.fixture(scope="module")
def chromium() -> str:
    """The chromium binary, installed with apt-get when missing (or the tests skip, saying why)."""
    return debian_tool("chromium")


def run_chromium(binary: str, profiles: Path, *args: str) -> str:
    """Runs headless chromium with ``args`` (a fresh profile, nothing fetched but what the
    command line asks for); its stdout. Fails with its stderr if it fails or hangs."""
    profile = tempfile.mkdtemp(prefix="profile-", dir=profiles)
    command = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               f"--user-data-dir={profile}", *args]
    # Its own process group: on a hang, its zygote and renderers go with it.
    proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=CHROMIUM_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, stderr = proc.communicate(timeout=30)
        raise AssertionError(f"chromium {args} did not exit in {CHROMIUM_TIMEOUT:.0f} s:\n{quiet(stderr)}") from None
    assert proc.returncode == 0, f"chromium {args} exited {proc.returncode}:\n{quiet(stderr)}"
    return stdout


def quiet(stderr: str) -> str:
    """The end of chromium's stderr less its D-Bus complaints (there is no bus here)."""
    return "\n".join(line for line in stderr.splitlines() if "dbus" not in line)[-3000:]


def read_png(path: Path) -> tuple[int, int, list[list[bytes]]]:
    """Width, height and the pixels (rows of per-pixel bytes) of an 8-bit RGB or RGBA,
    non-interlaced PNG."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    chunks: dict[bytes, list[bytes]] = {}
    offset = 8
    while offset < len(data):
        length, kind = struct.unpack(">I4s", data[offset:offset + 8])
        chunks.setdefault(kind, []).append(data[offset + 8:offset + 8 + length])
        offset += 12 + length  # length, type, data, CRC
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", chunks[b"IHDR"][0])
    assert depth == 8 and colour in (2, 6) and interlace == 0, (
        f"{path}: bit depth {depth}, colour type {colour}, interlace {interlace}: "
        "this reader knows 8-bit RGB (2) and RGBA (6), not interlaced")
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(b"".join(chunks[b"IDAT"]))
    stride = width * bpp
    assert len(raw) == height * (stride + 1), f"{path}: {len(raw)} bytes of image data for {width}x{height}"
    rows: list[list[bytes]] = []
    previous = bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0  # left
            b = previous[i]  # up
            c = previous[i - bpp] if i >= bpp else 0  # up-left
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
            else:
                assert kind == 0, f"{path}: unknown filter {kind} on row {y}"
        rows.append([bytes(line[x:x + bpp]) for x in range(0, stride, bpp)])
        previous = line
    return width, height, rows


def busy_server(tines_server: Any) -> tuple[int, list[int]]:
    """A server with 2 workers and a status listener that served ``REQUESTS`` requests: its
    status port and its workers' pids (from /status.json)."""
    server = tines_server("hello_pid:app", "-w", "2", "--status-bind", "127.0.0.1:0")
    port = status_port(server)
    for _ in range(REQUESTS):
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=20)
        connection.request("GET", "/")
        assert connection.getresponse().read().isdigit()
        connection.close()
    report = wait_until(lambda: (r := status(port))["requests"] == REQUESTS and r, what="the requests counted")
    pids = [worker["pid"] for worker in report["workers"]]  # type: ignore[index]
    assert len(pids) == 2
    return port, pids


def test_the_rendered_page_shows_the_counts_the_workers_and_the_tables(
        tines_server: Any, chromium: str, tmp_path: Path) -> None:
    port, pids = busy_server(tines_server)
    dom = run_chromium(chromium, tmp_path, "--dump-dom", f"http://127.0.0.1:{port}/?refresh=0")
    assert "<title>Tines status</title>" in dom and "<h1>Tines status</h1>" in dom, dom[:2000]
    assert 'http-equiv="refresh"' not in dom
    assert f"<b>{REQUESTS}</b><span>requests</span>" in dom
    assert "<span>req/s, last 1 min</span>" in dom
    scoreboard = re.search(r'<div class="map"[^>]*>([^<]*)</div>', dom)
    assert scoreboard and scoreboard.group(1), "no scoreboard map"
    headings = re.findall(r"<h2>([^<]*)</h2>", dom)
    assert headings == ["Responses by status", "Scoreboard", "Workers", "Worker restarts", "Recent worker exits"]
    # One row per worker (after the heading row), each with its pid.
    workers = dom.split("<h2>Workers</h2>", 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr>(.*?)</tr>", workers)
    assert len(rows) == 1 + len(pids), workers
    assert sorted(int(re.findall(r"<td[^>]*>([^<]*)</td>", row)[1]) for row in rows[1:]) == sorted(pids)
    assert "none yet" in dom.split("<h2>Recent worker exits</h2>", 1)[1]
    # Every table sits in a div.wrap, which scrolls sideways on a narrow screen.
    assert dom.count("<table") == 4
    assert dom.count('<div class="wrap"><table>') == 4


@pytest.mark.parametrize("name", SIZES)
def test_a_screenshot_is_the_size_asked_with_text_drawn(
        tines_server: Any, chromium: str, tmp_path: Path, name: str) -> None:
    port, _ = busy_server(tines_server)
    width, height = SIZES[name]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    png = ARTIFACTS / f"status-page-{name}.png"
    png.unlink(missing_ok=True)  # never judge a screenshot of an earlier run
    run_chromium(chromium, tmp_path, f"--screenshot={png}", f"--window-size={width},{height}",
                 f"http://127.0.0.1:{port}/?refresh=0")
    assert png.exists(), f"chromium wrote no {png}"
    shot_width, shot_height, pixels = read_png(png)
    assert (shot_width, shot_height) == (width, height)
    background = Counter(pixels[0]).most_common(1)[0][0]
    drawn = sum(any(pixel != background for pixel in row) for row in pixels)
    assert drawn >= 0.05 * height, f"{png}: only {drawn} of {height} rows differ from the background"
    colours = {pixel for row in pixels for pixel in row}
    assert len(colours) >= 3, f"{png}: {len(colours)} colours"
