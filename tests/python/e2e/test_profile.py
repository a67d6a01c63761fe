"""``--profile``: each worker samples the app's threads and writes its profile; the profiles
accumulate across the workers' lives (recycled workers leave theirs); ``tines status --profile``
merges them into a top table, a pstats file and a collapsed-stack file whose stacks are the
app's (root first), without the worker's own frames."""

from __future__ import annotations

import http.client
import pstats
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import APPS, ROOT, wait_until
from tines import profiler
from test_status import status, status_port
from test_status_cli import ENV, tines_status

def get(port: int) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request("GET", "/page")
        response = connection.getresponse()
        assert response.status == 200 and response.read().startswith(b"checksum ")
    finally:
        connection.close()


@pytest.mark.parametrize("mpm", ["prefork", "thread"])
def test_profiles_accumulate_across_workers_and_merge(tines_server: Any, tmp_path: Path, mpm: str) -> None:
    profiles = tmp_path / "profiles"
    out = tmp_path / "out"
    server = tines_server("profiled:app", "--mpm", mpm, "-w", "1", "--max-requests", "10",
                          "--profile", "--profile-interval", "0.001", "--profile-dir", str(profiles),
                          "--status-bind", "127.0.0.1:0")
    port = status_port(server)
    for _ in range(30):
        get(server.port)
    # Three workers served ten requests each; each wrote its profile when it stopped.
    wait_until(lambda: status(port)["restarts"]["max_requests"] == 3, what="three recycled workers")
    server.signal(signal.SIGTERM)
    assert server.wait() == 0
    assert len(list(profiles.glob("*.json"))) >= 3

    result = tines_status("--profile", "--profile-dir", str(profiles), "--profile-out", str(out), "--top", "5")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert re.match(r"\d+ samples in the app from \d+ worker profile\(s\), one every 1 ms per thread",
                    lines[0]), lines[0]
    assert lines[1].split() == ["self%", "cum%", "self", "function"]
    assert lines[2].endswith(f"checksum ({APPS / 'profiled.py'}:6)"), lines[2]
    assert lines[-2:] == [f"wrote {out / 'profile.pstats'}", f"wrote {out / 'profile.collapsed'}"]

    stats = pstats.Stats(str(out / "profile.pstats"))
    checksum = next(key for key in stats.stats if key[2] == "checksum")  # type: ignore[attr-defined]
    render = next(key for key in stats.stats if key[2] == "render_page")  # type: ignore[attr-defined]
    calls, _, own_time, cumulative, callers = stats.stats[checksum]  # type: ignore[attr-defined]
    assert calls > 0 and own_time > 0 and cumulative >= own_time
    assert render in callers  # checksum is called by render_page
    assert stats.stats[render][3] >= cumulative  # type: ignore[attr-defined]

    collapsed = (out / "profile.collapsed").read_text().splitlines()
    assert collapsed
    stacks = [line.rsplit(" ", 1) for line in collapsed]
    assert all(int(count) > 0 for _, count in stacks)
    hot = [frames.split(";") for frames, _ in stacks if frames.endswith(f"({APPS / 'profiled.py'}:6)")]
    assert hot
    for frames in hot:
        # Root first, the app's frames only: nothing of the worker's bootstrap below the app.
        assert frames[-2].startswith("render_page (") and frames[-3].startswith("app (")
        assert not any("tines/worker.py" in frame for frame in frames), frames
    total = int(lines[0].split()[0])
    assert sum(int(count) for _, count in stacks) == total


def test_the_profile_directory_is_found_through_the_status_listener(tines_server: Any) -> None:
    server = tines_server("profiled:app", "-w", "1", "--profile", "--status-bind", "127.0.0.1:0")
    port = status_port(server)
    directory = Path(profiler.default_dir(server.pid))
    try:
        get(server.port)
        # The worker writes its profile every few seconds while it runs.
        result = wait_until(lambda: (r := tines_status("--profile", "--status-bind", f"127.0.0.1:{port}"))
                            .returncode == 0 and r, what="the profile written")
        assert "worker profile(s)" in result.stdout  # type: ignore[union-attr]
        assert [path.name for path in directory.iterdir()] == [f"{status(port)['workers'][0]['pid']}.json"]
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def test_errors_are_one_line(tmp_path: Path) -> None:
    empty = tines_status("--profile", "--profile-dir", str(tmp_path))
    assert empty.returncode == 1
    assert empty.stderr.splitlines() == [
        f"tines: error: no profile in {tmp_path} (is the server running with --profile?)"]
    nowhere = tines_status("--profile")
    assert nowhere.returncode == 2 and len(nowhere.stderr.splitlines()) == 1
    assert "no profile directory" in nowhere.stderr
    refused = subprocess.run(
        [sys.executable, "-m", "tines", "serve", "--profile", "--profile-dir", "/proc/no/such/dir",
         "examples/hello.py:app"], capture_output=True, text=True, timeout=60, cwd=ROOT, env=ENV,
        stdin=subprocess.DEVNULL)
    assert refused.returncode == 2
    assert refused.stderr.rstrip().splitlines()[-1].startswith("tines: error: profile_dir '/proc/no/such/dir'")
