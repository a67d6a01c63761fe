"""``tines serve --help`` (the settings that matter first, grouped, one line each), ``--help-all``
(every flag with its whole text) and ``tines help SETTING`` (one setting's documentation)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tines.config import SETTINGS
from tines.serve_cli import ESSENTIALS, brief_default, brief_help, find_setting, setting_help

ESSENTIAL_NAMES = [name for _, rows in ESSENTIALS for name, _ in rows]


def run_tines(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tines", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin", "COLUMNS": "100"})


def test_every_listed_name_is_a_setting_with_a_flag_and_none_is_listed_twice() -> None:
    for name in ESSENTIAL_NAMES:
        assert name in SETTINGS, name
        assert SETTINGS[name].flags, f"{name} has no flag to show"
    assert len(ESSENTIAL_NAMES) == len(set(ESSENTIAL_NAMES))
    titles = [title for title, _ in ESSENTIALS]
    assert {"Binding", "Workers", "Timeouts", "Logging"} <= set(titles) and len(titles) == len(set(titles))


def test_the_brief_help_is_short_one_line_per_setting_and_points_at_the_rest() -> None:
    text = brief_help("tines serve")
    lines = text.splitlines()
    assert 16 <= len(ESSENTIAL_NAMES) <= 26
    assert len(lines) <= 60, len(lines)
    assert max(len(line) for line in lines) <= 100, max(lines, key=len)
    groups = lines[lines.index("Binding:"):]
    # One line each: every indented line in the groups is a setting's (no text spills over).
    indented = [line for line in groups if line.startswith(" ")]
    assert all(line.startswith("  -") for line in indented), indented
    assert len(indented) == len(ESSENTIAL_NAMES)
    for name, line in zip(ESSENTIAL_NAMES, indented):
        long_flag = next(flag for flag in SETTINGS[name].flags if flag.startswith("--"))
        assert long_flag in line.split()[:2] or long_flag + "," in line.split()[:2], (name, line)
    for title, _ in ESSENTIALS:
        assert f"\n{title}:\n" in text
    assert "--help-all" in text and "tines help SETTING" in text and "docs/settings.md" in text
    assert f"{len(ESSENTIAL_NAMES)} of the {len(SETTINGS)} settings" in text
    # Not one of the others.
    assert "--h2-max-frame-size" not in text and "--compression-gzip-level" not in text


def test_serve_help_and_help_all_from_the_command_line(tmp_path: Path) -> None:
    brief = run_tines("serve", "--help", cwd=tmp_path)
    assert (brief.returncode, brief.stderr) == (0, "")
    assert brief.stdout == brief_help("tines serve")
    assert run_tines("serve", "-h", cwd=tmp_path).stdout == brief.stdout
    full = run_tines("serve", "--help-all", cwd=tmp_path)
    assert (full.returncode, full.stderr) == (0, "")
    for setting in SETTINGS.values():
        for flag in setting.flags:
            assert flag in full.stdout, flag
    assert len(full.stdout.splitlines()) > 5 * len(brief.stdout.splitlines())


@pytest.mark.parametrize("word", ["workers", "--workers", "-w", "TINES_WORKERS"])
def test_a_setting_is_found_by_its_name_flag_or_env_var(word: str) -> None:
    assert find_setting(word) is SETTINGS["workers"]


def test_tines_help_setting_prints_its_whole_doc_env_var_config_key_and_default(tmp_path: Path) -> None:
    result = run_tines("help", "-w", cwd=tmp_path)
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == setting_help(SETTINGS["workers"])
    text = " ".join(result.stdout.split())
    assert text.startswith("workers (Workers) ")
    assert " ".join(SETTINGS["workers"].description.replace("`", "").split()) in text
    for part in ("flag: -w N, --workers N", "env: TINES_WORKERS", "config key: workers",
                 "default: 2 x CPU cores"):
        assert part in text, part
    boolean = " ".join(run_tines("help", "preload", cwd=tmp_path).stdout.split())
    assert "flag: --preload, --no-preload" in boolean and "default: false" in boolean
    secret = " ".join(setting_help(SETTINGS["keyfile_password"]).split())
    assert "flag: (none)" in secret and "env: TINES_KEYFILE_PASSWORD" in secret
    assert "flag: APP (the positional argument)" in " ".join(setting_help(SETTINGS["app"]).split())
    listed = " ".join(run_tines("help", "bind", cwd=tmp_path).stdout.split())
    assert "repeatable" in listed and "env: TINES_BIND" in listed


def test_tines_help_of_no_such_setting_is_one_line_exit_2_with_the_closest_name(tmp_path: Path) -> None:
    result = run_tines("help", "wrkers", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == ("tines: error: no setting 'wrkers' (did you mean 'workers'?); "
                             "tines serve --help-all lists them all\n")


def test_tines_help_alone_lists_every_setting_by_section(tmp_path: Path) -> None:
    result = run_tines("help", cwd=tmp_path)
    assert result.returncode == 0
    words = set(result.stdout.replace(",", " ").split())
    assert set(SETTINGS) <= words


def test_each_brief_line_shows_the_registrys_default_and_the_access_log_is_on_stdout() -> None:
    """The bracketed defaults come from the registry (``brief_default``), never typed in the list."""
    lines = brief_help("tines serve").splitlines()
    indented = [line for line in lines[lines.index("Binding:"):] if line.startswith("  -")]
    for name, line in zip(ESSENTIAL_NAMES, indented):
        default = brief_default(SETTINGS[name])
        if default is None:
            assert SETTINGS[name].is_flag and not line.endswith(")"), (name, line)
        else:
            assert line.endswith(f" ({default})"), (name, line, default)
    for _, rows in ESSENTIALS:
        for name, text in rows:
            assert not text.endswith(")"), f"{name}: a default typed into ESSENTIALS: {text!r}"
    shown = dict(zip(ESSENTIAL_NAMES, indented))
    assert shown["bind"].endswith("(127.0.0.1:8000)") and shown["workers"].endswith("(2 x CPU cores)")
    assert shown["forwarded_allow_ips"].endswith("(127.0.0.1, ::1)")
    assert shown["max_body_size"].endswith("(100 MiB)") and shown["request_timeout"].endswith("(60)")
    assert "- for stdout" in shown["access_log"] and "stdout" in SETTINGS["access_log"].doc
    assert "- for stderr" in shown["error_log"]
