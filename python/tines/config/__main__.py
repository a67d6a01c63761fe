"""``python -m tines.config --markdown`` prints docs/settings.md."""

from __future__ import annotations

import argparse
import sys

from tines.config.reference import render_markdown


def main(argv: list[str] | None = None) -> int:
    """``python -m tines.config --markdown`` prints docs/settings.md."""
    parser = argparse.ArgumentParser(prog="python -m tines.config")
    parser.add_argument("--markdown", action="store_true", help="print the settings reference")
    arguments = parser.parse_args(argv)
    if not arguments.markdown:
        parser.print_help()
        return 2
    sys.stdout.write(render_markdown())
    return 0


if __name__ == "__main__":
    sys.exit(main())
