"""Serve a WSGI app with bjoern (the C reference for WSGI), as the suite's other servers do.

``bjoern_serve.py FILE:ATTR HOST PORT``: puts FILE's directory first on ``sys.path``, changes
into it (as ``gunicorn --chdir`` does), imports the app and runs ``bjoern.run`` in this one
process. bjoern has no command line of its own.
"""

from __future__ import annotations

import importlib
import sys

from fork_per_connection import load_app


def main(argv: list[str]) -> None:
    if len(argv) != 3:
        sys.exit("usage: bjoern_serve.py FILE:ATTR HOST PORT")
    target, host, port = argv
    app = load_app(target)
    # The peers' venv has it (benches/provision.py), the dev venv does not: imported by name.
    bjoern = importlib.import_module("bjoern")
    bjoern.run(app, host, int(port))


if __name__ == "__main__":
    main(sys.argv[1:])
