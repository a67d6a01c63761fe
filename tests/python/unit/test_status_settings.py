"""The status listener's settings (status_allow, status_redact_paths, status_timeout) and the
warning for a status listener on every interface (tines.status.exposure_warning)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tines.config import load
from tines.errors import ConfigError
from tines.status import exposure_warning

PYTHON_DIR = str(Path(__file__).resolve().parents[3] / "python")
LOOPBACK = ("127.0.0.0/8", "::1")


@pytest.fixture(autouse=True)
def in_empty_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def error_of(flags: dict[str, object], environ: dict[str, str]) -> str:
    with pytest.raises(ConfigError) as caught:
        load(flags, environ)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_the_defaults_allow_loopback_only_and_redact_the_query_only() -> None:
    cfg = load({}, {})
    assert (cfg.status_allow, cfg.status_redact_paths, cfg.status_timeout) == (LOOPBACK, False, 2.0)


def test_status_allow_takes_addresses_networks_and_star_from_every_source(tmp_path: Path) -> None:
    assert load({"status_allow": "10.0.0.0/8, 2001:db8::/32,192.0.2.7"}, {}).status_allow == (
        "10.0.0.0/8", "2001:db8::/32", "192.0.2.7")
    assert load({}, {"TINES_STATUS_ALLOW": "*"}).status_allow == ("*",)
    (tmp_path / "tines.toml").write_text('status_allow = ["10.1.0.0/16"]\n', encoding="utf-8")
    assert load({}, {}).status_allow == ("10.1.0.0/16",)
    assert load({"status_allow": ""}, {}).status_allow == ()  # no TCP peer sees the status


@pytest.mark.parametrize("bad", ["10.0.0.0/33", "10.0.0.300", "::1/129", "localhost", "10.0.0.0/x",
                                 "10.0.0.0/255.0.0.0", "fe80::1%eth0"])
def test_a_bad_status_allow_entry_is_named(bad: str) -> None:
    assert error_of({"status_allow": f"127.0.0.1,{bad}"}, {}) == (
        f"status_allow must be IP addresses or networks (CIDR), or *, got {bad!r}")


def test_status_timeout_must_be_positive() -> None:
    assert load({"status_timeout": "0.5"}, {}).status_timeout == 0.5
    assert error_of({"status_timeout": "0"}, {}) == "status_timeout must be a number of seconds > 0, got '0'"


def test_a_bad_cidr_on_the_command_line_stops_the_start_with_one_line_and_exit_2(
        in_empty_directory: Path) -> None:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("TINES_")}
    environment["PYTHONPATH"] = PYTHON_DIR + os.pathsep + environment.get("PYTHONPATH", "")
    result = subprocess.run(
        [sys.executable, "-m", "tines", "serve", "app:app", "--status-bind", "127.0.0.1:0",
         "--status-allow", "10.0.0.0/33"],
        cwd=in_empty_directory, env=environment, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr == (
        "tines: error: status_allow must be IP addresses or networks (CIDR), or *, got '10.0.0.0/33'\n")


@pytest.mark.parametrize("address", ["0.0.0.0:9191", "[::]:9191"])
def test_a_listener_on_every_interface_warns_what_it_exposes_and_to_whom(address: str) -> None:
    warning = exposure_warning(address, LOOPBACK, redact_paths=False)
    assert warning == (
        f"status_bind {address} listens on every interface: /healthz and /readyz answer any peer; "
        "/, /status.json and /metrics (every in-flight request's method and path, the workers' pids and "
        "memory) answer only status_allow (127.0.0.0/8, ::1); set status_redact_paths to show methods only")
    assert exposure_warning(address, ("*",), redact_paths=True) == (
        f"status_bind {address} listens on every interface: /healthz and /readyz answer any peer; "
        "/, /status.json and /metrics (every in-flight request's method and path, the workers' pids and "
        "memory) answer any peer")
    assert "answer only status_allow (no TCP peer)" in str(exposure_warning(address, (), redact_paths=True))


@pytest.mark.parametrize("address", ["127.0.0.1:9191", "10.0.0.5:9191", "[::1]:9191", "unix:/run/tines.sock",
                                     "fd://3"])
def test_a_listener_on_one_address_needs_no_warning(address: str) -> None:
    assert exposure_warning(address, LOOPBACK, redact_paths=False) is None
