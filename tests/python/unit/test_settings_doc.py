"""docs/settings.md is generated from the registry; the committed file must match it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tines.config import SETTINGS, render_markdown

ROOT = Path(__file__).resolve().parents[3]


def test_committed_settings_doc_matches_the_registry() -> None:
    committed = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    assert committed == render_markdown(), "docs/settings.md is stale: run python tools/gen_settings_doc.py"


def test_settings_doc_names_every_setting_and_its_env_var() -> None:
    text = render_markdown()
    for setting in SETTINGS.values():
        assert f"| `{setting.name}` |" in text
        assert f"`{setting.env}`" in text


def test_generator_check_mode_agrees() -> None:
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_settings_doc.py"), "--check"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_the_access_log_atoms_documented_are_the_formatters() -> None:
    from tines import _core
    from tines.config import ACCESS_LOG_ATOMS

    assert tuple(name for name, _ in ACCESS_LOG_ATOMS) == _core.ACCESS_LOG_ATOMS
