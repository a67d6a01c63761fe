"""Writes the case table of docs/websocket-conformance.md from the conformance test's cases."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests" / "python"), str(ROOT / "tests" / "python" / "e2e")]

import test_websocket_conformance as cases  # noqa: E402

cases.write_table(ROOT / "docs" / "websocket-conformance.md")
