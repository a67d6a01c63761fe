"""HUP: reload the config and the code as a new generation of workers; a bad deploy keeps serving.

Owns: re-resolving the settings on HUP (the CLI overrides the master kept, the config file read
again, the master's own environment), which settings cannot change without a restart
(``RESTART_ONLY`` and the scoreboard's size: logged as ignored, the old value kept), checking
the new config in the master before any fork (``tines.preflight``), the rolling replacement
(``plan``: ``reload_batch`` new workers at a time, one old worker retired as each new one is
ready, live + draining processes within the larger worker count + the batch), abandoning a
reload whose new workers cannot boot (the old generation and its config stay in force, the
crash-loop guard does not count those deaths), and a HUP during a reload (queued: it runs when
the current reload ends). The rules, for operators, are in docs/signals.md ("Reload").

Must not: fork or signal by itself (the arbiter's ``spawn_worker`` and ``retire_worker`` do),
start threads, or block. ``plan`` and ``restart_only_changes`` are pure and unit-tested.
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tines import config, logs, memory, preflight, profiler, watchdog
from tines import pool as spare_pool
from tines.config import Config
from tines.errors import ConfigError
from tines.hooks import Hooks

if TYPE_CHECKING:
    from tines.arbiter import Arbiter, Worker

log = logs.get("reload")

RESTART_ONLY: Mapping[str, str] = {
    "bind": "the listening sockets are bound once, at start, and stay open across reloads",
    "backlog": "the listening sockets' queues were sized when they were bound, at start",
    "defer_accept": "it was set on the listening sockets when they were bound, at start",
    "preload": "whether the master holds the app is decided at start",
    "user": "the master dropped its privileges at start",
    "group": "the master dropped its privileges at start",
    "umask": "the master applied it at start (to the unix sockets it bound too)",
    "chdir": "the master changed to it at start, and relative paths (the app, the hooks, the "
             "config file) are found from there",
    "error_log": "the master pointed its error log at it at start (USR1 reopens that file)",
    "ready_fd": "it is written once, when the first generation is ready",
    "pid_file": "the master wrote it at start, and an upgrade moves that file",
    "reload": "the source watcher is set up (or not) at start",
    "reload_include": "the source watcher's globs are set at start",
    "reload_exclude": "the source watcher's globs are set at start",
}
"""Settings fixed at start, and why. A changed value is logged and the old one kept."""

USR2_POINTER = "use USR2 (binary upgrade) to apply it"


@dataclass(frozen=True)
class Capacity:
    """What the scoreboard, sized at start (``Arbiter.start``), can hold."""

    slots: int
    """Its slots (``watchdog.scoreboard_slots``: at least twice the start's worker count)."""
    threads: int
    """App-thread sub-slots per slot (``watchdog.scoreboard_threads``)."""

    @property
    def workers(self) -> int:
        """The most workers a reload may ask for: half the slots, so that every one of them
        can be replaced while the one it replaces still drains (as at start)."""
        return self.slots // 2


def restart_only_changes(old: Config, new: Config, capacity: Capacity) -> dict[str, str]:
    """The settings whose new value cannot take effect without a restart: name -> reason.

    The fixed ones (``RESTART_ONLY``) when their value changed; ``workers`` or ``max_workers``
    when the new worker count is above what the scoreboard holds (both are then kept, so the
    worker mode stays consistent); ``threads`` when the new MPM would need more app-thread
    sub-slots than each slot has (``mpm`` when only the MPM changed, from prefork).
    """
    changes = {name: reason for name, reason in RESTART_ONLY.items() if old.value(name) != new.value(name)}
    counted = "max_workers" if new.max_workers is not None else "workers"
    most: int = new.value(counted)  # type: ignore[assignment]
    if most > capacity.workers:
        reason = (f"{counted} {most} is more than the {capacity.workers} workers the scoreboard "
                  f"sized at start has room for ({capacity.slots} slots, half of them for replacements)")
        for name in ("workers", "max_workers"):
            if old.value(name) != new.value(name):
                changes[name] = reason
    needed = watchdog.scoreboard_threads(new)
    if needed > capacity.threads:
        # The old threads value fits the scoreboard; if threads did not change, the MPM did.
        name = "threads" if old.threads != new.threads else "mpm"
        changes[name] = (f"mpm {new.mpm} with threads {new.threads} needs {needed} app-thread "
                         f"sub-slots per worker, and the scoreboard sized at start has {capacity.threads}")
    return changes


def batch_size(setting: int | None, workers: int) -> int:
    """New workers booting at once during a reload: ``reload_batch``, else a quarter of the
    workers, at least 1."""
    return setting if setting is not None else max(1, workers // 4)


@dataclass(frozen=True)
class Step:
    """What one look at a reload in progress asks of the master."""

    spawn: int
    """New-generation workers to start now."""
    retire: int
    """Old-generation workers to retire now (one per new worker that became ready)."""
    done: bool
    """The new generation is complete and no old worker serves any more."""


def plan(old_at_start: int, target: int, batch: int, old_live: int, new_ready: int,
         new_booting: int, processes: int) -> Step:
    """The rolling replacement, one look at a time.

    ``old_at_start``: old workers serving when the reload began (the capacity to keep);
    ``target``: workers of the new generation; ``old_live``: old workers not yet retired;
    ``new_ready`` / ``new_booting``: the new generation's workers; ``processes``: every worker
    process, draining ones included.

    An old worker is retired only as a new one is ready (so ready new + old serving never falls
    below ``old_at_start`` until the new generation is complete); at most ``batch`` new workers
    boot at once; a start is made only while ``processes`` is below the larger of the two counts
    plus ``batch`` (a retired worker still counts until it exits).
    """
    wanted_old = 0 if new_ready >= target else max(0, old_at_start - new_ready)
    retire = max(0, old_live - wanted_old)
    ceiling = max(old_at_start, target) + batch
    spawn = max(0, min(batch - new_booting, target - new_ready - new_booting, ceiling - processes))
    return Step(spawn=spawn, retire=retire, done=new_ready >= target and old_live - retire == 0)


@dataclass
class Saved:
    """The serving generation's state, put back when a reload is abandoned."""

    cfg: Config
    worker_settings: dict[str, object]
    hooks: Hooks
    pool: spare_pool.Pool | None
    num_workers: int
    generation: int
    memory_merge: bool


@dataclass
class Attempt:
    """A reload in progress."""

    generation: int
    saved: Saved
    old_at_start: int
    batch: int


@dataclass
class Reloader:
    """The master's reload state: the CLI overrides and the directory the settings were first
    resolved in (so a relative config path or ``chdir`` means the same thing again), the reload
    in progress, and whether another HUP waits for it to end."""

    arbiter: Arbiter
    overrides: Mapping[str, object]
    start_directory: str = field(default_factory=os.getcwd)
    capacity: Capacity | None = None
    """Set by ``Arbiter.start`` once the scoreboard exists."""
    attempt: Attempt | None = None
    queued: bool = False
    latest_generation: int = 1
    """The highest generation number given so far (an abandoned one is not reused)."""
    last_failed: bool = False
    """The last reload was abandoned (its code could not boot) and no reload succeeded since:
    replacements of the serving generation import that code too (``Arbiter.on_death_before_ready``
    then keeps backing off instead of giving up while workers still serve)."""

    @property
    def active(self) -> bool:
        """A reload is in progress."""
        return self.attempt is not None

    # ----- HUP ---------------------------------------------------------------------------------

    def request(self) -> None:
        """HUP: reload now, or once the reload in progress (or the first start) ends."""
        if self.attempt is not None:
            self.queued = True
            log.info("HUP: generation %d is still starting; the reload runs again when it ends",
                     self.attempt.generation)
            return
        if not self.arbiter.announced:
            self.queued = True
            log.info("HUP: the first generation is not ready yet; the reload runs once it is")
            return
        self.begin()

    def begin(self) -> None:
        """Re-resolve and check the settings; start the new generation, or log why not."""
        arbiter = self.arbiter
        self.queued = False
        arbiter.reload_started()
        serving_directory = os.getcwd()
        try:
            cfg, checked = self.resolve()
        except ConfigError as error:
            os.chdir(serving_directory)
            log.error("reload failed: %s; generation %d keeps serving", error, arbiter.generation)
            arbiter.reload_finished(False)
            return
        saved = Saved(cfg=arbiter.cfg, worker_settings=arbiter.worker_settings, hooks=arbiter.hooks,
                      pool=arbiter.pool, num_workers=arbiter.num_workers,
                      generation=arbiter.generation, memory_merge=arbiter.memory_merge)
        old_at_start = len(arbiter.live_workers())  # still the serving generation's
        if checked.pool is None:
            target = cfg.workers
        else:
            target = max(checked.pool.start_workers, min(max(old_at_start, 1), checked.pool.max_workers))
        self.latest_generation += 1
        # Within the scoreboard: a start needs a free slot.
        batch = max(1, min(batch_size(cfg.reload_batch, target),
                           self.capacity_slots() - max(old_at_start, target)))
        self.attempt = Attempt(generation=self.latest_generation, saved=saved,
                               old_at_start=old_at_start, batch=batch)
        self.put_in_force(cfg, checked.worker_settings, checked.hooks,
                          spare_pool.Pool(checked.pool) if checked.pool is not None else None,
                          target, self.latest_generation, memory_merge(cfg, saved))
        log.info("HUP: starting worker generation %d: %d workers, %d at a time (reload_batch); "
                 "generation %d serves until they are ready", self.latest_generation, target, batch,
                 saved.generation)
        self.step()

    def resolve(self) -> tuple[Config, preflight.Checked]:
        """The new settings and their checks, as at start (ConfigError on the first problem).

        Resolved from the directory the master started in; restart-only changes are logged and
        the old values kept; then ``preflight.check`` (which changes to ``chdir`` again) and the
        access log as the workers' user.
        """
        arbiter = self.arbiter
        assert self.capacity is not None
        os.chdir(self.start_directory)
        importlib.invalidate_caches()
        new = config.load(self.overrides)
        changes = restart_only_changes(arbiter.cfg, new, self.capacity)
        for name, reason in changes.items():
            log.warning("setting %s changed but needs a restart: %s; %s", name, reason, USR2_POINTER)
        if changes:
            kept = {name: arbiter.cfg.value(name) for name in changes}
            forced = config.load({**self.overrides, **kept})
            sources = {name: arbiter.cfg.source(name) if name in kept else forced.source(name)
                       for name in config.SETTINGS}
            new = Config({name: forced.value(name) for name in config.SETTINGS}, sources,
                         forced.config_file)
        for message in config.ignored_settings(new):
            log.warning("%s", message)
        forget_hooks_module(new.hooks)
        checked = preflight.check(new)
        logs.check_access_log(new.access_log)
        profiler.prepare(new, self.arbiter.pid)
        return new, checked

    def put_in_force(self, cfg: Config, worker_settings: dict[str, object], hooks: Hooks,
                     pool: spare_pool.Pool | None, num_workers: int, generation: int,
                     merge: bool) -> None:
        """Make the arbiter spawn and supervise with these settings."""
        arbiter = self.arbiter
        arbiter.cfg = cfg
        arbiter.worker_settings = worker_settings
        arbiter.hooks = hooks
        arbiter.pool = pool
        arbiter.num_workers = num_workers
        arbiter.generation = generation
        arbiter.scoreboard.set_generation(generation)  # type: ignore[attr-defined]
        arbiter.memory_merge = merge
        if arbiter.watchdog is not None:
            arbiter.watchdog.request_timeout = cfg.request_timeout
            arbiter.watchdog.boot_timeout = cfg.boot_timeout
        arbiter.memory_sampler.interval = 1.0 / memory.sample_rate(cfg)
        logging.getLogger(logs.LOGGER_NAME).setLevel(cfg.log_level.upper())

    def capacity_slots(self) -> int:
        """The scoreboard's slots."""
        assert self.capacity is not None
        return self.capacity.slots

    # ----- the rolling replacement ---------------------------------------------------------------

    def old_live(self) -> list[Worker]:
        """Workers of older generations that serve (or boot) and are not retired."""
        generation = self.arbiter.generation
        return [w for w in self.arbiter.workers.values() if w.generation != generation and not w.stopping]

    def step(self) -> bool:
        """The master's turn for reloads (from ``manage_workers``): start a queued reload when
        it can run, move the one in progress on. True while a reload is in progress (then the
        arbiter's usual worker management waits)."""
        arbiter = self.arbiter
        if not arbiter.upgrade.wants_workers:
            # An upgrade hands over (or WINCH stopped the workers): start nothing.
            return self.attempt is not None
        if self.attempt is None:
            if self.queued and arbiter.announced:
                self.begin()
            if self.attempt is None:
                return False
        attempt = self.attempt
        new = arbiter.live_workers()
        new_ready = sum(w.ready for w in new)
        old = self.old_live()
        decided = plan(attempt.old_at_start, arbiter.num_workers, attempt.batch, len(old), new_ready,
                       len(new) - new_ready, len(arbiter.workers))
        # Booting old workers (replacements started before the HUP) serve nothing yet: first.
        for worker in sorted(old, key=lambda w: (w.ready, w.born))[:decided.retire]:
            arbiter.retire_worker(worker, "reload")
        if decided.done:
            self.attempt = None
            self.last_failed = False
            arbiter.reload_finished(True)
            if self.queued:
                self.begin()
            return self.attempt is not None
        for _ in range(decided.spawn):
            if time.monotonic() < arbiter.next_spawn or not arbiter.spawn_worker():
                break
        return True

    # ----- a bad deploy --------------------------------------------------------------------------

    def owns(self, worker: Worker) -> bool:
        """The worker belongs to a new generation that is not (yet) the serving one: the reload
        in progress, or an abandoned one."""
        if self.attempt is not None:
            return worker.generation == self.attempt.generation
        return worker.generation > self.arbiter.generation

    def on_boot_error(self, worker: Worker, message: str) -> bool:
        """A worker could not load the app; True when it was the reload's business."""
        if not self.owns(worker):
            return False
        if self.attempt is not None:
            self.abandon(message)
        else:
            log.info("worker %d (slot %d) of the abandoned generation %d failed to boot too",
                     worker.pid, worker.slot, worker.generation)
        return True

    def on_death_before_ready(self, worker: Worker, status: int) -> bool:
        """A worker died before ready; True when it was the reload's business (then it is not
        a death for the crash-loop guard: the old generation still serves)."""
        if not self.owns(worker):
            return False
        if self.attempt is not None:
            self.abandon(f"worker {worker.pid} died before it was ready ({describe_status(status)})")
        return True

    def abandon(self, why: str) -> None:
        """Stop the new generation's workers and put the serving generation's config back."""
        attempt = self.attempt
        assert attempt is not None
        self.attempt = None
        self.last_failed = True
        saved = attempt.saved
        log.error("reload failed: generation %d could not boot: %s; generation %d keeps serving",
                  attempt.generation, why, saved.generation)
        for worker in list(self.arbiter.workers.values()):
            if worker.generation == attempt.generation and not worker.stopping:
                self.arbiter.retire_worker(worker, "reload", "reload abandoned")
        self.put_in_force(saved.cfg, saved.worker_settings, saved.hooks, saved.pool,
                          saved.num_workers, saved.generation, saved.memory_merge)
        self.arbiter.reload_finished(False)


def memory_merge(cfg: Config, saved: Saved) -> bool:
    """``memory_merge`` for the new generation (checked again only when it changed)."""
    from tines import memory

    return saved.memory_merge if cfg.memory_merge == saved.cfg.memory_merge else memory.check_merge(cfg)


def forget_hooks_module(spec: str | None) -> None:
    """Let the hooks module be imported again (a ``.py`` file path always is; a module path
    would come from ``sys.modules``). Modules it imports stay as the master first imported them."""
    if spec is None:
        return
    name = spec.strip()
    if name.endswith(".py") or "/" in name or os.sep in name:
        return
    sys.modules.pop(name, None)


def describe_status(status: int) -> str:
    """``exit status 1`` or ``killed by SIGKILL``."""
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit status {os.WEXITSTATUS(status)}"
