"""Serve a WSGI app with bjoern (the C reference for WSGI), as the suite's other servers do.

``bjoern_serve.py FILE:ATTR HOST PORT``: puts FILE's directory first on ``sys.path``, changes
into it (as ``gunicorn --chdir`` does), imports the app and runs ``bjoern.run`` in this one
process. bjoern has no command line of its own.
"""

from __future__ import annotations

import importlib
import os
import sys


def main(argv: list[str]) -> None:
    if len(argv) != 3:
        sys.exit("usage: bjoern_serve.py FILE:ATTR HOST PORT")
    target, host, port = argv
    path, _, attr = target.rpartition(":")
    directory, module = os.path.split(os.path.abspath(path))
    os.chdir(directory)
    sys.path.insert(0, directory)
    app = getattr(importlib.import_module(module.removesuffix(".py")), attr)
    # The peers' venv has bjoern (benches/provision.py), the project's venv (mypy's) does not:
    # imported by name, so the type check needs no stub for it.
    bjoern = importlib.import_module("bjoern")
    bjoern.run(app, host, int(port))


if __name__ == "__main__":
    main(sys.argv[1:])
