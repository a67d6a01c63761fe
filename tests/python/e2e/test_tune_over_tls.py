"""`tines tune` on an app served over TLS (issue 37): the certificate is among the serve flags,
the tuner finds that its server speaks TLS and loads it over https:// with the trust flag the
user gave; without one it stops with one line and exit status 2. Certificates: the loadgen
tests' (crates/loadgen/tests/tls/: a CA and a leaf for localhost and 127.0.0.1)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

pytestmark = pytest.mark.timeout(600)

TINES = [sys.executable, "-m", "tines"]
CERTS = ROOT / "crates" / "loadgen" / "tests" / "tls"
TLS_FLAGS = ["--certfile", str(CERTS / "server.pem"), "--keyfile", str(CERTS / "server.key")]


@pytest.fixture(scope="module", autouse=True)
def serves_tls() -> None:
    help_text = subprocess.run([*TINES, "serve", "--help"], capture_output=True, text=True,
                               timeout=60).stdout
    if "--certfile" not in help_text:
        pytest.skip("this build of Tines serves no TLS (tines serve --help has no --certfile)")


def test_a_tls_server_is_tuned_over_https(tmp_path: Path) -> None:
    out = tmp_path / "result"
    proc = subprocess.run([*TINES, "tune", "examples/hello.py:app", "--budget", "30s", "--json",
                           "--out", str(out), "--cacert", str(CERTS / "ca.pem"), "--", *TLS_FLAGS],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    measurements = json.loads(proc.stdout)["measurements"]
    step = measurements["probe"]["step"]
    assert step["ok"] > 0 and step["errors"] == 0, step
    assert step["served"] >= step["ok"]
    for config in measurements["configs"]:
        for sweep_step in config["sweep"]:
            assert sweep_step["errors"] == 0 and sweep_step["ok"] == sweep_step["requests"] > 0
    # The calibration's no-op server spoke TLS too (its figure is the server's own cost).
    log = (out / "servers.log").read_text()
    calibration = [line for line in log.splitlines() if "tines.tune.noop" in line]
    assert calibration and all("--certfile" in line for line in calibration)
    assert "https://localhost:" in (out / "requests.txt").read_text()


def test_a_tls_server_without_insecure_or_cacert_is_one_line_and_status_2(tmp_path: Path) -> None:
    proc = subprocess.run([*TINES, "tune", "examples/hello.py:app", "--budget", "30s",
                           "--out", str(tmp_path / "out"), "--", *TLS_FLAGS],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert lines[-1].startswith("tines tune: error: the server speaks TLS") and "--insecure" in lines[-1]
