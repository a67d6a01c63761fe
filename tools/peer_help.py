"""Make the checked-in ``--help`` lists of the servers Tines takes flags from
(tests/data/peers/gunicorn-27.0.1.txt, uvicorn-0.54.0.txt), which
tests/python/unit/test_peer_flags.py walks: every flag in them must be accepted by ``tines``,
or refused with a hint (``tines.config.peers``).

Usage: ``.venv/bin/python tools/peer_help.py`` (needs the network for ``pip download``; the
venv's click, h11 and packaging are their only imports for ``--help``). The wheels are
downloaded without dependencies into a temporary directory, unpacked, and each server's own
``--help`` is run from there at a fixed width, so the lists are what a user of that version
reads. Owns nothing else; must not install anything into the venv.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import tempfile
import zipfile

PEERS = (("gunicorn", "27.0.1"), ("uvicorn", "0.54.0"))
"""(package, version) of each server whose flags ``tines`` answers."""

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "peers"


def main() -> int:
    """Download, unpack, run each ``--help`` and write its text; the exit status."""
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tines-peer-help-") as tmp:
        for package, version in PEERS:
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp,
                            f"{package}=={version}"], check=True)
        for wheel in pathlib.Path(tmp).glob("*.whl"):
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(tmp)
        env = dict(os.environ, PYTHONPATH=tmp, COLUMNS="100", NO_COLOR="1", TERM="dumb")
        for package, version in PEERS:
            text = subprocess.run([sys.executable, "-m", package, "--help"], check=True, env=env,
                                  capture_output=True, text=True).stdout
            text = text.replace("python -m " + package, package).replace("__main__.py", package)
            (OUT / f"{package}-{version}.txt").write_text(text)
            print(f"wrote {OUT / f'{package}-{version}.txt'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
