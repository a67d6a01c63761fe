#!/usr/bin/env python3
"""Write docs/settings.md from the settings registry (python/tines/config/).

Usage: ``python tools/gen_settings_doc.py`` rewrites the file; ``--check`` only compares and
exits 1 when the committed file is stale. The same text is printed by
``python -m tines.config --markdown``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "docs" / "settings.md"

sys.path.insert(0, str(ROOT / "python"))

from tines.config import render_markdown  # noqa: E402  (needs the sys.path line above)


def main(argv: list[str] | None = None) -> int:
    """Write (or with ``--check`` compare) docs/settings.md; the exit status says whether it matched."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/settings.md is stale")
    arguments = parser.parse_args(argv)
    text = render_markdown()
    current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else None
    if arguments.check:
        if current != text:
            print(f"{OUTPUT.relative_to(ROOT)} is stale: run tools/gen_settings_doc.py", file=sys.stderr)
            return 1
        return 0
    if current != text:
        OUTPUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
