"""``python -m tines`` is the ``tines`` command."""

from __future__ import annotations

import sys

from tines.cli import main

if __name__ == "__main__":
    sys.exit(main())
