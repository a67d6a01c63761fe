"""The dynamic spare pool: how many workers the master keeps, decided once a second.

Owns: the pool settings resolved and checked (``settings``: defaults relative to the CPU
count, every combination checked before the first fork), and the policy (``Pool.check``):
Apache prefork's idle-server maintenance over plain data, the workers' states as the master
reads them from the scoreboard. The master (``tines.arbiter``) reads the slots into
``WorkerSample`` records, calls ``Pool.check`` once per ``CHECK_INTERVAL`` and carries out the
``Decision``: forks ``spawn`` workers, retires worker ``retire``. TTIN/TTOU call ``Pool.grow`` /
``Pool.shrink``. The rules, for operators, are in docs/pool.md.

Must not: fork, signal, read the scoreboard or the clock, or log: it decides, the arbiter acts,
so every rule here is unit-tested without a process.

The rules (Apache's ``perform_idle_server_maintenance``, with the differences named):

- Spares are idle workers (prefork: ready, not stopping, no request in progress) or, with the
  thread and event MPMs, idle app threads (the sum of ``threads - active`` over the ready
  workers: Apache's MinSpareThreads/MaxSpareThreads). Booting workers, and starts the master
  still owes (held back by the crash backoff), count as future spares, so a slow boot is not
  answered with more forks.
- Short of ``min_spare``: spawn 1, then 2, 4, ... workers per check while the shortage lasts, at
  most ``SPAWN_RATE_MAX`` per check (as Apache: more than the shortage when it lasts, because
  the shortage the master sees is not the load; connections queued in the listen backlog take
  each new worker as it comes up, and the surplus is retired again when the burst is over).
- Above ``max_spare``: retire one worker per check, the one holding the fewest connections.
- ``max_workers`` counts every worker of the current generation (booting, ready, draining) and
  every draining worker of an older one; at it, the shortage is logged once per episode (an
  episode ends at the first check that finds the pool not short).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

from tines import standby
from tines.config import Config
from tines.errors import ConfigError

CHECK_INTERVAL = 1.0
"""Seconds between two pool checks: Apache's maintenance interval. The doubling is per check,
so it is also the unit of the spawn rate."""

SPAWN_RATE_MAX = 32
"""Most workers started by one check (so per second): Apache prefork's MAX_SPAWN_RATE. The rate
reaches it only after five checks in a row found the pool short with everything started
before already counted, i.e. a burst that keeps taking every new worker; a lower cap would
leave such a burst queueing in the listen backlog for longer."""

POOL_SETTINGS = ("start_workers", "min_spare_workers", "max_spare_workers", "min_spare_threads",
                 "max_spare_threads")
"""The settings that only mean something with ``max_workers`` (the dynamic pool)."""


@dataclass(frozen=True)
class PoolSettings:
    """The resolved pool bounds. ``min_spare`` and ``max_spare`` are in ``unit``s: workers
    with prefork, app threads with thread and event (``threads`` per worker)."""

    max_workers: int
    start_workers: int
    min_spare: int
    max_spare: int
    threads: int
    """App threads per worker (1 with prefork; the event MPM's ``threads 0`` counts as 1,
    the loop thread running the app)."""
    in_threads: bool
    """Spares are counted in app threads (the thread and event MPMs), not workers."""

    @property
    def unit(self) -> str:
        """``workers`` or ``threads``: what the spare counts count."""
        return "threads" if self.in_threads else "workers"

    def describe(self) -> str:
        """One line for the start log and ``check-config``."""
        return (f"dynamic pool: start {self.start_workers}, idle {self.unit} kept between "
                f"{self.min_spare} and {self.max_spare}, at most {self.max_workers} workers")


def settings(cfg: Config, cpu_count: int | None = None) -> PoolSettings | None:
    """The pool settings, or None for a fixed ``workers`` count (no ``max_workers``).

    Defaults (C = CPU cores, T = app threads per worker): ``min_spare`` one idle worker per
    core (C workers, or C x T threads), ``max_spare`` C more than that (so an idle server
    keeps at most 2 x C workers, the fixed mode's default count), ``start_workers`` enough for
    ``min_spare``; each clamped to what ``max_workers`` and the given bounds allow.

    Raises ConfigError (one line, naming each value and where it came from) for a setting that
    needs ``max_workers`` without it, ``workers`` given beside ``max_workers``, or bounds that
    contradict each other.
    """
    standby.count(cfg)  # standby_workers is for a fixed count: raises beside max_workers
    if cfg.max_workers is None:
        given = [name for name in POOL_SETTINGS if cfg.source(name) != "default"]
        if given:
            raise ConfigError(f"{given[0]} ({cfg.source(given[0])}) needs max_workers: the pool "
                              "bounds apply to the dynamic pool, which max_workers turns on (docs/pool.md)")
        return None
    if cfg.source("workers") != "default":
        raise ConfigError(f"workers {cfg.workers} ({cfg.source('workers')}) fixes the worker count, "
                          f"max_workers {cfg.max_workers} ({cfg.source('max_workers')}) turns on the "
                          "dynamic pool: give one of them")
    cores = cpu_count if cpu_count is not None else (os.cpu_count() or 1)
    threads = 1 if cfg.mpm == "prefork" else max(1, cfg.threads)
    in_threads = cfg.mpm != "prefork"
    kind = "threads" if in_threads else "workers"
    min_name, max_name = f"min_spare_{kind}", f"max_spare_{kind}"
    max_workers: int = cfg.max_workers
    capacity = max_workers * threads

    def shown(name: str, value: int) -> str:
        return f"{name} {value} ({cfg.source(name)})"

    given_min: int | None = cfg.value(min_name)  # type: ignore[assignment]
    given_max: int | None = cfg.value(max_name)  # type: ignore[assignment]
    min_spare = given_min if given_min is not None else min(cores, max_workers) * threads
    if given_min is None and given_max is not None:
        # Leave the given max_spare room above the default min_spare.
        min_spare = max(1, min(min_spare, given_max - threads))
    max_spare = given_max if given_max is not None else min_spare + cores * threads
    if min_spare > capacity:
        raise ConfigError(f"{shown(min_name, min_spare)} is more than max_workers {max_workers} "
                          f"({cfg.source('max_workers')})"
                          + (f" x {threads} threads = {capacity}" if in_threads else "")
                          + " can ever hold idle")
    if max_spare < min_spare + threads:
        step = f"{threads} threads (one worker)" if in_threads else "1"
        raise ConfigError(f"{shown(max_name, max_spare)} must be at least {min_name} + {step} = "
                          f"{min_spare + threads} ({min_name} {min_spare}, {cfg.source(min_name)}): "
                          "else retiring one worker would take the pool below min_spare and it would "
                          "start it again")
    start: int | None = cfg.start_workers
    if start is None:
        start = min(max(1, math.ceil(min_spare / threads)), max_workers)
    elif start > max_workers:
        raise ConfigError(f"start_workers {start} ({cfg.source('start_workers')}) is more than "
                          f"max_workers {max_workers} ({cfg.source('max_workers')})")
    return PoolSettings(max_workers=max_workers, start_workers=start, min_spare=min_spare,
                        max_spare=max_spare, threads=threads, in_threads=in_threads)


def describe_mode(cfg: Config, pool: PoolSettings | None) -> str:
    """Which worker mode is in force, in one line (``check-config`` prints it)."""
    if pool is None:
        return f"fixed: {cfg.workers} worker{'' if cfg.workers == 1 else 's'} (max_workers unset; TTIN/TTOU add or remove one)"
    return pool.describe()


@dataclass(frozen=True)
class WorkerSample:
    """One worker as the pool sees it: the master's record and the worker's scoreboard slot."""

    pid: int
    slot: int
    ready: bool
    """The master heard its ready message."""
    stopping: bool
    """Draining: the master told it to stop, or it is recycling on its own."""
    current: bool
    """Of the current generation (False: an older one, being replaced after a HUP)."""
    active: int
    """Requests in progress (prefork: 0 or 1; thread/event: busy app threads)."""
    connections: int
    """Client connections it holds open (idle keep-alive ones included)."""


@dataclass(frozen=True)
class Decision:
    """What one check asks of the master; ``message`` says why, for the log."""

    spawn: int = 0
    """Workers to start now."""
    retire: int | None = None
    """Pid of the worker to retire gracefully."""
    message: str = ""
    """The reason for ``spawn`` or ``retire`` (empty when neither)."""
    limit_reached: str | None = None
    """The max_workers line, the first time an episode meets it (a warning)."""
    summary: str = ""
    """What the check counted, for a debug line."""


@dataclass(frozen=True)
class Census:
    """What one look at the workers counted (spares in the pool's unit)."""

    counted: int
    """Workers against max_workers: the current generation's and draining ones, plus owed starts."""
    serving: int
    """Workers of the current generation not stopping (booting or ready)."""
    ready: tuple[WorkerSample, ...]
    """Of those, the ready ones."""
    booting: int
    """Booting workers plus owed starts: future spares."""
    idle: int
    """Idle workers (prefork) or idle app threads (thread, event) of the ready workers."""
    spare: int
    """``idle`` plus what the booting workers will bring."""

    @property
    def seen(self) -> str:
        """``idle 3`` or ``idle 3 + booting 4``, for the log."""
        return f"idle {self.idle}" + (f" + booting {self.spare - self.idle}" if self.booting else "")


class Pool:
    """The pool's state across checks: the bounds (TTIN/TTOU move them), the spawn rate (it
    doubles while the pool stays short) and whether the max_workers line was logged."""

    def __init__(self, settings: PoolSettings) -> None:
        self.settings = settings
        self.min_spare = settings.min_spare
        self.max_spare = settings.max_spare
        self.spawn_rate = 1
        self.at_limit = False

    def census(self, workers: Sequence[WorkerSample], pending: int = 0) -> Census:
        """Count ``workers`` (every worker the master holds) and ``pending`` starts the master
        owes but has not made yet (held back by the crash backoff)."""
        threads = self.settings.threads
        counted = [w for w in workers if w.current or w.stopping]
        serving = [w for w in workers if w.current and not w.stopping]
        ready = tuple(w for w in serving if w.ready)
        booting = len(serving) - len(ready) + pending
        idle = sum(max(0, threads - w.active) for w in ready)
        return Census(counted=len(counted) + pending, serving=len(serving) + pending, ready=ready,
                      booting=booting, idle=idle, spare=idle + booting * threads)

    def check(self, workers: Sequence[WorkerSample], pending: int = 0) -> Decision:
        """One maintenance check over ``workers`` (every worker the master holds) and
        ``pending`` starts it owes but has not made yet."""
        census = self.census(workers, pending)
        name = self.settings.unit
        summary = (f"{census.seen} {name} (kept between {self.min_spare} and {self.max_spare}), "
                   f"{census.counted} of at most {self.settings.max_workers} workers")
        if census.spare < self.min_spare:
            room = self.settings.max_workers - census.counted
            if room <= 0:
                self.spawn_rate = 1
                if self.at_limit:
                    return Decision(summary=summary)
                self.at_limit = True
                draining = census.counted - census.serving
                return Decision(limit_reached=self.limit_line(census.ready, draining), summary=summary)
            count = min(self.spawn_rate, room)
            self.spawn_rate = min(self.spawn_rate * 2, SPAWN_RATE_MAX)
            noun = "worker" if count == 1 else "workers"
            return Decision(spawn=count, summary=summary,
                            message=f"spawning {count} {noun} ({census.seen} < min_spare_{name} {self.min_spare})")
        self.spawn_rate = 1
        self.at_limit = False
        if census.spare > self.max_spare:
            chosen = self.retiree(census)
            if chosen is None:
                return Decision(summary=summary)
            return Decision(retire=chosen.pid, summary=summary,
                            message=f"{census.seen} > max_spare_{name} {self.max_spare}, "
                                    f"fewest connections {chosen.connections}")
        return Decision(summary=summary)

    def retiree(self, census: Census) -> WorkerSample | None:
        """The ready worker with an idle thread (prefork: an idle worker) holding the fewest
        connections; a worker with no idle thread holds no spare, so retiring it would not
        lower the count. Ties: the highest slot (the low ones stay busy, as in Apache)."""
        candidates = [w for w in census.ready if w.active < self.settings.threads]
        if not candidates:
            return None
        return min(candidates, key=lambda w: (w.connections, w.active, -w.slot))

    def limit_line(self, ready: Sequence[WorkerSample], draining: int) -> str:
        """``max_workers reached: N busy; ...`` with what the busy count counts."""
        busy = sum(w.active for w in ready) if self.settings.in_threads else sum(w.active > 0 for w in ready)
        what = " app threads" if self.settings.in_threads else ""
        also = f", {draining} draining" if draining else ""
        return (f"max_workers reached: {busy} busy{what}{also}; raise it (max_workers "
                f"{self.settings.max_workers}) or see docs/pool.md")

    def grow(self, workers: Sequence[WorkerSample], pending: int = 0) -> Decision:
        """TTIN: one worker more. Both bounds go up by one worker's spares (so the next checks
        keep it) and one worker starts now when max_workers leaves room. Refused when
        ``max_spare`` would pass what ``max_workers`` can hold idle."""
        step = self.settings.threads
        unit = self.settings.unit
        if self.max_spare + step > self.settings.max_workers * step:
            return Decision(message=f"TTIN: not raised: max_spare {self.max_spare} {unit} is already "
                                    f"all that max_workers {self.settings.max_workers} can hold idle")
        self.min_spare += step
        self.max_spare += step
        bounds = f"TTIN: idle {unit} now kept between {self.min_spare} and {self.max_spare}"
        if self.census(workers, pending).counted >= self.settings.max_workers:
            return Decision(message=f"{bounds}; no worker started: max_workers {self.settings.max_workers} reached")
        return Decision(spawn=1, message=f"{bounds}; spawning 1 worker")

    def shrink(self, workers: Sequence[WorkerSample], pending: int = 0) -> Decision:
        """TTOU: one worker fewer. Both bounds go down by one worker's spares and the worker
        ``retiree`` names is retired now, unless that would take the pool below the new
        ``min_spare`` (all busy: only the bounds move). Refused when ``min_spare`` would drop
        below 1."""
        step = self.settings.threads
        unit = self.settings.unit
        if self.min_spare - step < 1:
            return Decision(message=f"TTOU: not lowered: min_spare {self.min_spare} {unit} is the least")
        self.min_spare -= step
        self.max_spare -= step
        bounds = f"TTOU: idle {unit} now kept between {self.min_spare} and {self.max_spare}"
        census = self.census(workers, pending)
        chosen = self.retiree(census)
        if chosen is None or census.spare - (step - chosen.active) < self.min_spare:
            return Decision(message=f"{bounds}; no idle worker to retire")
        return Decision(retire=chosen.pid, message=f"{bounds}, fewest connections {chosen.connections}")
