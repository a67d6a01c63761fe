"""The response compression settings (issue 39, ADR 0037), declared once in the registry: the
names and defaults of the brief, every source spelling them, the master's one-line refusals
(an unknown coding, a level out of range, a coding twice, a bad type or path), and the worker's
``CompressionConfig`` holding what the registry holds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tines.config import SETTINGS, load
from tines.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]

DEFAULTS = {"compression": (), "compression_min_size": 1024,
            "compression_types": ("text/*", "application/json", "application/javascript", "application/xml",
                                  "application/wasm", "image/svg+xml", "+json", "+xml"),
            "compression_gzip_level": 5, "compression_brotli_level": 4, "compression_zstd_level": 3,
            "compression_exclude_paths": ()}


def error_of(overrides: dict[str, object]) -> str:
    with pytest.raises(ConfigError) as caught:
        load(overrides, {})
    return str(caught.value)


def test_the_section_holds_the_names_and_defaults_of_the_brief() -> None:
    cfg = load({}, {})
    assert {name: cfg.value(name) for name in DEFAULTS} == DEFAULTS
    assert [s.name for s in SETTINGS.values() if s.section == "Compression"] == list(DEFAULTS)
    assert all(SETTINGS[name].worker for name in DEFAULTS)
    assert SETTINGS["compression"].flags == ("--compression",)


def test_every_source_spells_them() -> None:
    assert load({"compression": "GZIP, br,zstd"}, {}).value("compression") == ("gzip", "br", "zstd")
    cfg = load({}, {"TINES_COMPRESSION": "br", "TINES_COMPRESSION_EXCLUDE_PATHS": "/account/,/api/tokens"})
    assert cfg.value("compression") == ("br",)
    assert cfg.value("compression_exclude_paths") == ("/account/", "/api/tokens")
    assert load({"compression_min_size": "2KiB"}, {}).value("compression_min_size") == 2048


def test_bad_values_are_one_line() -> None:
    assert error_of({"compression": "gzip,lzma"}) == "compression must be one of gzip, br, zstd, got 'lzma'"
    assert error_of({"compression": "gzip,br,gzip"}) == "compression names a coding twice (cli), got gzip,br,gzip"
    assert error_of({"compression_gzip_level": 10}) == "compression_gzip_level must be an integer in 1..9, got 10"
    assert error_of({"compression_brotli_level": -1}).startswith("compression_brotli_level must be an integer")
    assert error_of({"compression_zstd_level": 20}) == "compression_zstd_level must be an integer in 1..19, got 20"
    assert error_of({"compression_types": "text/html,html"}).startswith("compression_types must be a media type")
    assert error_of({"compression_exclude_paths": "account"}).startswith(
        "compression_exclude_paths must be a path prefix starting with /")


def test_a_bad_coding_on_the_command_line_exits_2(tmp_path: Path) -> None:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("TINES_")}
    environment["PYTHONPATH"] = str(ROOT / "python") + os.pathsep + environment.get("PYTHONPATH", "")
    result = subprocess.run([sys.executable, "-m", "tines", "check-config", "--compression", "deflate"], cwd=tmp_path,
                            env=environment, capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == "tines: error: compression must be one of gzip, br, zstd, got 'deflate'\n"


def test_the_worker_reads_what_the_registry_holds() -> None:
    import tines._core as _core

    cfg = load({"compression": "zstd,gzip", "compression_exclude_paths": "/private/",
                "compression_types": "TEXT/HTML,+json"}, {})
    settings = cfg.worker_settings()
    settings["workers"] = 1
    settings["tls"] = None
    fields = dict(_core.worker_config_fields(settings))
    def debug(items: list[str]) -> str:
        return "[" + ", ".join(str(list(item.encode())) for item in items) + "]"

    assert fields["compression"] == (
        f"CompressionConfig {{ codings: [Zstd, Gzip], min_size: 1024, types: {debug(['text/html', '+json'])}, "
        f"gzip_level: 5, brotli_level: 4, zstd_level: 3, exclude_paths: {debug(['/private/'])} }}")
