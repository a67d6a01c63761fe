"""The "Static files" settings (ADR 0036): their names and defaults as the brief fixed them,
every source spelling them, the refusals of a bad mount or index name (one line naming the
setting), and the worker's conversion, which opens each mount's directory (the master runs it
before it forks)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tines.config import SETTINGS, load
from tines.errors import ConfigError
from tines.worker import worker_settings

DEFAULTS = {"static": (), "static_index": None, "static_miss": "404", "static_cache_control": "public, max-age=3600",
            "static_hashed_cache_control": "public, max-age=31536000, immutable", "static_follow_symlinks": False,
            "static_hidden": False}


def error_of(overrides: dict[str, object], environ: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as caught:
        load(overrides, environ or {})
    return str(caught.value)


def test_the_section_holds_the_names_and_defaults_of_the_contract() -> None:
    cfg = load({}, {})
    assert {name: cfg.value(name) for name in DEFAULTS} == DEFAULTS
    assert [setting.name for setting in SETTINGS.values() if setting.section == "Static files"] == list(DEFAULTS)
    assert all(SETTINGS[name].worker for name in DEFAULTS)
    assert SETTINGS["static"].flags == ("--static",) and SETTINGS["static"].multiple


def test_every_source_spells_a_mount_and_makes_its_directory_absolute(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "public").mkdir()
    (tmp_path / "media").mkdir()
    monkeypatch.chdir(tmp_path)
    assert load({"static": ["/static/=public", "/media=media"]}, {}).static == (
        f"/static={tmp_path / 'public'}", f"/media={tmp_path / 'media'}")
    assert load({}, {"TINES_STATIC": "/s=public,/=media"}).static == (
        f"/s={tmp_path / 'public'}", f"/={tmp_path / 'media'}")
    assert load({}, {"TINES_STATIC_MISS": "APP"}).static_miss == "app"
    assert load({"static_index": "index.html"}, {}).static_index == "index.html"


@pytest.mark.parametrize("mount, fragment", [
    ("/static=/nonexistent/tines", "must be an existing directory"),
    ("static=/tmp", "must start with /"),
    ("/a/../b=/tmp", "must start with /"),
    ("/a//b=/tmp", "must start with /"),
    ("/a%2fb=/tmp", "must start with /"),
    ("/a b=/tmp", "must start with /"),
    ("/static", "must be PREFIX=DIR"),
    ("/static=", "must name a directory"),
])
def test_a_bad_mount_is_one_line_naming_the_setting(mount: str, fragment: str) -> None:
    message = error_of({"static": [mount]})
    assert "static" in message and fragment in message and "\n" not in message


@pytest.mark.parametrize("name", ["a/index.html", "..", ".", "a\\b"])
def test_an_index_must_be_a_file_name(name: str) -> None:
    assert "static_index" in error_of({"static_index": name})


def test_static_miss_is_404_or_app() -> None:
    assert "static_miss" in error_of({"static_miss": "500"})


def test_the_workers_conversion_opens_each_mount(tmp_path: Path) -> None:
    (tmp_path / "public").mkdir()
    cfg = load({"static": [f"/static={tmp_path / 'public'}"], "workers": 1}, {})
    mounts = worker_settings(cfg)["static"]
    assert isinstance(mounts, (list, tuple)) and list(mounts) == [f"/static={tmp_path / 'public'}"]
    # Gone between the load and the fork: the conversion, which opens it, says so in one line.
    (tmp_path / "public").rmdir()
    with pytest.raises(ConfigError) as caught:
        worker_settings(cfg)
    assert str(caught.value).startswith("static: ") and "No such file" in str(caught.value)
