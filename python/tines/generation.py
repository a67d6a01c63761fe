"""What the master holds: the generation in force, and its record of each worker.

A generation is what a reload (HUP, ``tines.reload``) swaps: the settings, the worker settings
derived from them, the hooks module, the dynamic pool and whether memory merging is on. They
change together or not at all, so the master (``tines.arbiter``) holds them as one value, and a
reload, or the rollback of one that could not boot, puts another in force in one assignment
(``Arbiter.put_in_force``). Its ``number`` tags the workers started with it (``Worker``), which
is how a reload tells the new generation's workers from the old one's.

The worker count is not part of it: TTIN, TTOU and the dynamic pool change it while one
generation serves. A reload sets it beside the swap (its target) and an abandoned one sets back
the count it found.

Must not: import ``tines.arbiter`` (``tines.reload`` and ``tines.upgrade`` read these records and
decide without it), fork, signal or log.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from tines.config import Config
from tines.hooks import Hooks
from tines.memory import MemoryUsage
from tines.pool import Pool


@dataclass(frozen=True)
class Generation:
    """The settings the master spawns and supervises workers with, swapped whole by a reload."""

    number: int
    """1 at start, one more for each reload begun (an abandoned one's number is not reused)."""
    cfg: Config
    """The resolved settings (the app target among them)."""
    worker_settings: dict[str, object]
    """``cfg`` converted for ``tines._core.run_worker`` (``tines.preflight``)."""
    hooks: Hooks
    """The loaded server hooks (``Hooks()`` when none is set)."""
    pool: Pool | None
    """The dynamic pool's policy (``max_workers`` set); None for a fixed worker count. Its
    state goes with it: an abandoned reload puts the serving generation's pool back as it was."""
    memory_merge: bool
    """memory_merge is on and the kernel has it (``memory.check_merge``)."""


@dataclass
class Worker:
    """The master's record of one worker process."""

    pid: int
    slot: int
    generation: int
    """The ``Generation.number`` it was started with."""
    born: float = field(default_factory=time.monotonic)
    ready: bool = False
    stopping: bool = False
    memory: MemoryUsage | None = None
    """The latest memory sample (``Fleet.record_memory``)."""
    reason: str | None = None
    """Why it is stopping while the others go on (``retire_worker``'s reason, or the one the
    worker gave in its ``draining`` message); None for the final stop and while serving."""
    own_decision: bool = False
    """It started draining by itself (max_requests, cpu_limit): the master did not signal it."""
    standby: bool = False
    """A standby not promoted yet (``tines.standby``): it does not accept, and is no worker of
    the count until its promotion."""
