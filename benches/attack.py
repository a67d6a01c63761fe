"""The slow-client attack row (issue 14): the attack running around a measured run.

Issue 14's attack: 50 slow uploaders (a POST head with ``Content-Length: 1000000`` to
``/upload``, then one byte per second) and 50 clients that send ``GET /big`` (a 10 MiB list
body) and never read, from ``tests/python/slow_clients.py``, the harness the e2e test uses
(one thread and one selector for all of them; imported from there, not copied). The app is
``tests/python/e2e/apps/slow_clients_app.py``; the load measures its ``/`` (hello's ``OK``).

``under_attack(port, measure)`` connects every attacker, waits until each has sent its head
(a readiness condition), runs ``measure`` while they hold their connections, and records how
the attackers stood when it ended. Every server's default timeouts (30 s and more) outlast
the run, so the attackers are still there for the whole of it, unless a server drops them.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
# The harness lives with the tests (they and this suite share it); mypy finds it through the
# Makefile's MYPYPATH.
sys.path.insert(0, str(REPO / "tests" / "python"))

from slow_clients import AttackNotReady, NonReaders, SlowUploaders  # noqa: E402

UPLOADERS = 50
NON_READERS = 50
UPLOAD_SIZE = 1_000_000
UPLOAD_RATE = 1.0  # bytes per second
BIG_PATH = "/big"
UPLOAD_PATH = "/upload"
READY_DEADLINE_S = 30.0
ATTACK_APP_FILE = REPO / "tests" / "python" / "e2e" / "apps" / "slow_clients_app.py"


class AttackFailed(Exception):
    """The attackers could not all connect and send their heads; the message says how many did."""


def under_attack(port: int, measure: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``measure()``'s result while the attack holds its connections to 127.0.0.1:``port``, with
    ``attack``: the attackers per run, and per kind the outcomes when the run ended
    (``connected``, a status such as ``408``, ``closed``, ``reset``) and the number still
    connected when it began. Raises AttackFailed when the attack could not be set up."""
    with SlowUploaders(port, UPLOADERS, UPLOAD_SIZE, UPLOAD_RATE, path=UPLOAD_PATH) as uploaders, \
            NonReaders(port, NON_READERS, BIG_PATH) as non_readers:
        try:
            uploaders.wait_ready(READY_DEADLINE_S)
            non_readers.wait_ready(READY_DEADLINE_S)
        except AttackNotReady as error:
            raise AttackFailed(str(error)) from error
        before = {"uploaders": uploaders.connected(), "non_readers": non_readers.connected()}
        result = measure()
        result["attack"] = {"attackers": UPLOADERS + NON_READERS, "connected_before": before,
                            "uploaders": dict(uploaders.outcomes()),
                            "non_readers": dict(non_readers.outcomes())}
    return result


def description() -> str:
    """The attack in one line, for the report's command lines."""
    return (f"attack: {UPLOADERS} slow uploaders (POST {UPLOAD_PATH}, Content-Length "
            f"{UPLOAD_SIZE}, {UPLOAD_RATE:g} byte/s) and {NON_READERS} non-readers (GET "
            f"{BIG_PATH}, 10 MiB list body, never read), tests/python/slow_clients.py, app "
            f"{ATTACK_APP_FILE.relative_to(REPO)}")
