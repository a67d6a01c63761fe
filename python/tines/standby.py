"""Standby workers: processes forked ahead so that a recycle never waits for a fork.

Owns: the resolved ``standby_workers`` count (``count``: its default follows ``max_requests``,
and it is checked against the dynamic pool before the first fork), and the policy (``plan``):
which standbys to promote when serving workers are missing, how many standbys to start, which
to retire. The arbiter (``tines.arbiter``) carries out the ``Plan``; ``tines.fleet`` promotes
(a signal) and forks; the child waits for the promotion in ``tines.worker``. Why a standby does
not accept before its promotion, and what a promotion costs, is ADR 0021.

A standby has done everything a worker does before it serves (fork, the child's set-up, the
app loaded when not preloaded, post_fork and post_worker_init) and waits, holding its scoreboard
slot. Promoted, it enters the Rust worker and accepts; ``workers`` counts it from then on.

Must not: fork, signal, read the clock or log: it decides, the arbiter acts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tines.config import Config
from tines.errors import ConfigError


def count(cfg: Config) -> int:
    """The standbys the master keeps: ``standby_workers``, else 1 with ``max_requests`` 1 (a
    process per request: every request is a recycle) and 0 otherwise. Always 0 with the dynamic
    pool, whose idle workers are its spares.

    Raises ConfigError (one line, naming both settings) for ``standby_workers`` above 0 with
    ``max_workers``.
    """
    given: int | None = cfg.standby_workers
    if cfg.max_workers is not None:
        if given:
            raise ConfigError(f"standby_workers {given} ({cfg.source('standby_workers')}) is for a fixed "
                              f"workers count; max_workers {cfg.max_workers} ({cfg.source('max_workers')}) "
                              "turns on the dynamic pool, whose idle workers are its spares "
                              "(min_spare_workers): give one of them")
        return 0
    if given is not None:
        return given
    return 1 if cfg.max_requests == 1 else 0


@dataclass(frozen=True)
class Standby:
    """A standby as the policy sees it (the master's record)."""

    pid: int
    ready: bool
    """It has booted and waits for its promotion (else it is still booting)."""
    born: float
    current: bool
    """Of the generation in force (a reload's old one is retired, never promoted)."""


@dataclass(frozen=True)
class Plan:
    """What the arbiter does, in this order."""

    promote: tuple[int, ...] = ()
    """Standbys to promote now (they serve, and count as workers, from now on)."""
    retire: tuple[int, ...] = ()
    """Standbys to stop: of an older generation, or beyond the count."""
    start: int = 0
    """Standbys to fork once the missing workers are started."""


def plan(missing: int, standbys: Sequence[Standby], wanted: int) -> Plan:
    """``missing`` serving workers short of the count, the ``standbys`` there are (not
    stopping), ``wanted`` of them to keep.

    The booted standbys of the generation in force are promoted first, oldest first, then the
    booting ones (each is further on than a fork made now); the workers still missing are forked
    by the arbiter as usual. Standbys of an older generation are retired, and the newest beyond
    ``wanted``; what is left short of ``wanted`` is started.
    """
    current = sorted((s for s in standbys if s.current), key=lambda s: (not s.ready, s.born))
    promote = current[:max(missing, 0)]
    kept = current[len(promote):]
    extra = kept[wanted:] if len(kept) > wanted else []
    retire = [s.pid for s in standbys if not s.current] + [s.pid for s in extra]
    start = max(0, wanted - len(kept))
    return Plan(promote=tuple(s.pid for s in promote), retire=tuple(retire), start=start)
