"""docs/deploy/: the systemd unit pair parses, and says what docs/deploy.md says it does.

``systemd-analyze verify`` needs ExecStart's binary to exist: the test verifies copies whose
ExecStart runs this virtualenv's ``tines`` (everything else as shipped).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DEPLOY = Path(__file__).resolve().parents[3] / "docs" / "deploy"
SHIPPED_BINARY = "/srv/app/.venv/bin/tines"


def unit_settings(path: Path) -> dict[str, str]:
    """Every ``Key=value`` line of a unit file (the last one wins)."""
    settings = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.lstrip().startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            settings[key.strip()] = value.strip()
    return settings


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_analyze_verify_accepts_the_service_and_socket_units(tmp_path: Path) -> None:
    tines = Path(sys.executable).with_name("tines")
    assert tines.exists(), f"{tines}: run make build"
    service = (DEPLOY / "tines.service").read_text()
    assert SHIPPED_BINARY in service
    (tmp_path / "tines.service").write_text(service.replace(SHIPPED_BINARY, str(tines)))
    shutil.copy(DEPLOY / "tines.socket", tmp_path / "tines.socket")
    result = subprocess.run(["systemd-analyze", "verify", "--man=no", "tines.socket", "tines.service"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stderr == "", result.stderr


def test_the_service_unit_stops_with_term_to_the_master_within_its_timeout() -> None:
    service = unit_settings(DEPLOY / "tines.service")
    assert service["Type"] == "notify" and service["NotifyAccess"] == "all"
    assert service["ExecReload"] == "/bin/kill -HUP $MAINPID"
    assert service["KillSignal"] == "SIGTERM" and service["KillMode"] == "mixed"
    # graceful_timeout's default (30 s) and no shutdown_delay fit well within it.
    assert int(service["TimeoutStopSec"]) > 30
    socket_unit = unit_settings(DEPLOY / "tines.socket")
    assert socket_unit["ListenStream"] and socket_unit["FileDescriptorName"] == "web"
