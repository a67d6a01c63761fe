"""The master's footprint: what a WSGI server's master imports before it forks stays out of
asyncio, ssl and importlib.metadata (every module and extension it holds is copied by every
fork: page tables and mappings, docs/mpm.md), and ``tines.__version__`` still works.

Each check runs in a fresh interpreter: this one has imported everything the other tests use.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import tines

FORBIDDEN = ("asyncio", "ssl", "_ssl", "importlib.metadata", "email", "zipfile", "concurrent.futures",
             "tines.asgi", "difflib", "tempfile", "shutil", "random", "subprocess", "ctypes.util")
"""Modules the master of a WSGI app has no use for: asyncio (and ssl, concurrent.futures
through it) is for ASGI apps (``tines.asgi``); importlib.metadata (and email, zipfile through
it) for ``--version``; difflib for a misspelt setting's message; tempfile (shutil, random, and
with them zlib, bz2, lzma) for one rare fallback (``tines.config.validators.temp_dir`` finds
the directory without it); ctypes.util (subprocess) finds libc by running ldconfig, some
milliseconds per worker start, where ``ctypes.CDLL(None)`` has it already."""

WSGI_APP = """
def app(environ, start_response):
    start_response("200 OK", [("Content-Length", "2")])
    return [b"ok"]
"""

SERVE_PATH = """
import json, sys
from tines import cli
from tines.config import environment_warnings, ignored_settings, load

# What `tines serve APP --preload` runs in the master before its first fork, short of binding
# sockets: the command line, the settings, the checks, the preloaded app and its interface,
# and the modules of the arbiter and of the worker (the code the forks run).
arguments, unknown = cli.build_parser().parse_known_args(["serve", sys.argv[1], "--preload"])
assert not unknown
environment_warnings()
cfg = load(arguments)
ignored_settings(cfg)
import tines.arbiter, tines.worker
from tines import preflight, tls
from tines.app_loader import interface_of, load_app

preflight.check(cfg, tls.new_ticket_secret())
app = load_app(cfg.app, cfg.factory, cfg.interface)
assert interface_of(app, cfg.interface, repr(str(cfg.app))) == "wsgi"
print(json.dumps(sorted(sys.modules)))
"""


def run_python(code: str, *args: str, cwd: Path) -> str:
    """``code``'s output, run by this Python in ``cwd``, out of reach of the TINES_* settings."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("TINES_")}
    result = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                            cwd=cwd, timeout=60, env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_serve_path_of_a_wsgi_app_imports_neither_asyncio_nor_importlib_metadata(tmp_path: Path) -> None:
    (tmp_path / "hello_lean.py").write_text(WSGI_APP)
    modules = json.loads(run_python(SERVE_PATH, "hello_lean:app", cwd=tmp_path))
    assert "tines.arbiter" in modules and "tines.worker" in modules and "hello_lean" in modules
    assert [name for name in FORBIDDEN if name in modules] == []


def test_importing_the_package_reads_no_version(tmp_path: Path) -> None:
    modules = json.loads(run_python("import json, sys, tines; print(json.dumps(sorted(sys.modules)))",
                                    cwd=tmp_path))
    assert "tines" in modules and "importlib.metadata" not in modules


def test_the_version_is_read_on_first_use(tmp_path: Path) -> None:
    try:
        expected = metadata.version("tines")
    except metadata.PackageNotFoundError:
        expected = "0.1.0"
    assert tines.__version__ == expected
    code = "import sys, tines; v = tines.__version__; print(v, 'importlib.metadata' in sys.modules)"
    assert run_python(code, cwd=tmp_path) == f"{expected} True\n"
    assert run_python("from tines import __version__; print(__version__)", cwd=tmp_path) == f"{expected}\n"
    failure = subprocess.run([sys.executable, "-c", "import tines; tines.no_such_name"], capture_output=True,
                             text=True, cwd=tmp_path, timeout=60)
    assert failure.returncode == 1
    assert "AttributeError: module 'tines' has no attribute 'no_such_name'" in failure.stderr


def test_tines_version_prints_it(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "tines", "--version"], capture_output=True, text=True,
                            cwd=tmp_path, timeout=60)
    assert (result.returncode, result.stdout, result.stderr) == (0, f"tines {tines.__version__}\n", "")
