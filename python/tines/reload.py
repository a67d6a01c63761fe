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

It decides and the master acts: each look (``begin``, ``step``, a new worker's failure)
returns a ``Decision`` that ``Arbiter.carry_out_reload`` carries out (put a generation in force,
retire, spawn, tell systemd); it reads nothing of the master but what it is given (the serving
``Generation``, the worker records). Those decisions, ``plan`` and ``restart_only_changes`` are
unit-tested without a process (tests/python/unit/test_reload_policy.py).

Must not: import ``tines.arbiter``, fork or signal (the arbiter's ``spawn_worker`` and
``retire_worker`` do), start threads, or block.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from tines import config, logs, memory, preflight, profiler, watchdog
from tines import pool as spare_pool
from tines.config import Config
from tines.errors import ConfigError
from tines.generation import Generation, Worker

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
    "rate_limit_table_size": "the shared rate-limit table is sized once, when the master makes it",
}
"""Settings fixed at start, and why. A changed value is logged and the old one kept."""

USR2_POINTER = "use USR2 (binary upgrade) to apply it"


@dataclass(frozen=True)
class Capacity:
    """What the scoreboard, sized at start (``Master.start``), can hold."""

    slots: int
    """Its slots for workers (``watchdog.scoreboard_slots``: at least twice the start's worker
    count; the exit room of ``max_requests`` 1 left out)."""
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


@dataclass(frozen=True)
class Decision:
    """What a look at the reload asks of the master (``Arbiter.carry_out_reload``), carried out
    in the order of the fields."""

    retire: tuple[int, ...] = ()
    """Workers (pids) to retire, reason ``reload``."""
    why: str = ""
    """Words for the retire lines (the reason when empty)."""
    put_in_force: Generation | None = None
    """Spawn and supervise with this generation from now on: the new one, or the serving one
    back when the new one could not boot."""
    workers: int = 0
    """The worker count that goes with ``put_in_force``."""
    finished: bool | None = None
    """The reload ended: the new generation serves (True), or the old one still does (False);
    None while it goes on (or when none ran)."""
    spawn: int = 0
    """New-generation workers to start now (fewer if the crash backoff holds them back)."""
    begin: bool = False
    """A HUP that waited can run now: resolve the settings again and call ``Reloader.begin``."""


@dataclass
class Attempt:
    """A reload in progress."""

    generation: int
    """The new generation's number."""
    serving: Generation
    """The generation it replaces, put back if the new one cannot boot."""
    serving_workers: int
    """The worker count when it began, put back with ``serving``."""
    old_at_start: int
    batch: int


@dataclass
class Reloader:
    """The master's reload state: the CLI overrides and the directory the settings were first
    resolved in (so a relative config path or ``chdir`` means the same thing again), the reload
    in progress, and whether another HUP waits for it to end."""

    overrides: Mapping[str, object]
    start_directory: str = field(default_factory=os.getcwd)
    ticket_secret: bytes = b""
    """The master's TLS ticket secret: a new generation's material derives the same ticket keys
    (a ticket issued by the old generation resumes on the new one)."""
    capacity: Capacity | None = None
    """Set by ``Arbiter.run`` once the scoreboard exists."""
    attempt: Attempt | None = None
    queued: bool = False
    latest_generation: int = 1
    """The highest generation number given so far (an abandoned one is not reused)."""
    last_failed: bool = False
    """The last reload was abandoned (its code could not boot) and no reload succeeded since:
    replacements of the serving generation import that code too (the crash-loop guard then
    keeps backing off instead of giving up while workers still serve, ``exits.CrashGuard``)."""

    @property
    def active(self) -> bool:
        """A reload is in progress."""
        return self.attempt is not None

    # ----- HUP ---------------------------------------------------------------------------------

    def request(self, announced: bool) -> bool:
        """HUP: True to reload now (``begin``); False when it waits for the reload in progress,
        or for the first generation to be ``announced`` ready."""
        if self.attempt is not None:
            self.queued = True
            log.info("HUP: generation %d is still starting; the reload runs again when it ends",
                     self.attempt.generation)
            return False
        if not announced:
            self.queued = True
            log.info("HUP: the first generation is not ready yet; the reload runs once it is")
            return False
        return True

    def begin(self, serving: Generation, serving_workers: int, workers: Collection[Worker],
              pid: int) -> Decision:
        """Re-resolve and check the settings (``resolve``, as the master ``pid``); start the new
        generation (``start``), or log why not and keep ``serving``."""
        self.queued = False
        serving_directory = os.getcwd()
        try:
            new = self.resolve(serving, pid)
        except ConfigError as error:
            os.chdir(serving_directory)
            log.error("reload failed: %s; generation %d keeps serving", error, serving.number)
            return Decision(finished=False)
        return self.start(serving, serving_workers, new, workers)

    def start(self, serving: Generation, serving_workers: int, new: Generation,
              workers: Collection[Worker]) -> Decision:
        """Put ``new`` (numbered ``latest_generation + 1``) in force in place of ``serving``
        (with ``serving_workers`` wanted), and take the first step of the rolling replacement."""
        assert new.number == self.latest_generation + 1
        old_at_start = sum(not w.stopping and w.generation == serving.number for w in workers)
        if new.pool is None:
            target = new.cfg.workers
        else:
            most = new.pool.settings.max_workers
            target = max(new.pool.settings.start_workers, min(max(old_at_start, 1), most))
        self.latest_generation = new.number
        # Within the scoreboard: a start needs a free slot.
        batch = max(1, min(batch_size(new.cfg.reload_batch, target),
                           self.capacity_slots() - max(old_at_start, target)))
        self.attempt = Attempt(generation=new.number, serving=serving, serving_workers=serving_workers,
                               old_at_start=old_at_start, batch=batch)
        log.info("HUP: starting worker generation %d: %d workers, %d at a time (reload_batch); "
                 "generation %d serves until they are ready", new.number, target, batch, serving.number)
        first = self.step(workers, target, announced=True, wants_workers=True)
        return Decision(put_in_force=new, workers=target, retire=first.retire, spawn=first.spawn)

    def resolve(self, serving: Generation, pid: int) -> Generation:
        """The new generation, its settings checked as at start (ConfigError on the first problem).

        Resolved from the directory the master started in; restart-only changes are logged and
        the old values kept; then ``preflight.check`` (which changes to ``chdir`` again), the
        access log as the workers' user, and memory merging (checked again only if it changed).
        """
        assert self.capacity is not None
        old = serving.cfg
        os.chdir(self.start_directory)
        importlib.invalidate_caches()
        new = config.load(self.overrides)
        changes = restart_only_changes(old, new, self.capacity)
        for name, reason in changes.items():
            log.warning("setting %s changed but needs a restart: %s; %s", name, reason, USR2_POINTER)
        if changes:
            kept = {name: old.value(name) for name in changes}
            forced = config.load({**self.overrides, **kept})
            sources = {name: old.source(name) if name in kept else forced.source(name)
                       for name in config.SETTINGS}
            new = Config({name: forced.value(name) for name in config.SETTINGS}, sources,
                         forced.config_file, forced.file_notes)
        for message in config.ignored_settings(new):
            log.warning("%s", message)
        forget_hooks_module(new.hooks)
        checked = preflight.check(new, self.ticket_secret)
        for warning in checked.warnings:
            log.warning("%s", warning)
        logs.check_access_log(new.access_log)
        profiler.prepare(new, pid)
        merge = serving.memory_merge if new.memory_merge == old.memory_merge else memory.check_merge(new)
        return Generation(number=self.latest_generation + 1, cfg=new, worker_settings=checked.worker_settings,
                          hooks=checked.hooks, memory_merge=merge,
                          pool=spare_pool.Pool(checked.pool) if checked.pool is not None else None)

    def capacity_slots(self) -> int:
        """The scoreboard's slots."""
        assert self.capacity is not None
        return self.capacity.slots

    # ----- the rolling replacement ---------------------------------------------------------------

    def step(self, workers: Collection[Worker], wanted: int, announced: bool, wants_workers: bool) -> Decision:
        """The master's turn for reloads (from ``manage_workers`` and each ready worker), over
        every worker process and the worker count ``wanted``: move the reload in progress on,
        or ask to begin a queued one once the master is ``announced`` ready. Nothing while an
        upgrade does not want workers (it hands over, or WINCH stopped them)."""
        if not wants_workers:
            return Decision()
        attempt = self.attempt
        if attempt is None:
            return Decision(begin=self.queued and announced)
        new = [w for w in workers if not w.stopping and w.generation == attempt.generation]
        new_ready = sum(w.ready for w in new)
        old = [w for w in workers if w.generation != attempt.generation and not w.stopping]
        decided = plan(attempt.old_at_start, wanted, attempt.batch, len(old), new_ready,
                       len(new) - new_ready, len(workers))
        # Booting old workers (replacements started before the HUP) serve nothing yet: first.
        retire = tuple(w.pid for w in sorted(old, key=lambda w: (w.ready, w.born))[:decided.retire])
        if decided.done:
            self.attempt = None
            self.last_failed = False
            return Decision(retire=retire, finished=True, begin=self.queued)
        return Decision(retire=retire, spawn=decided.spawn)

    # ----- a bad deploy --------------------------------------------------------------------------

    def owns(self, worker: Worker, serving: int) -> bool:
        """The worker belongs to a new generation that is not (yet) the ``serving`` one: the
        reload in progress, or an abandoned one."""
        if self.attempt is not None:
            return worker.generation == self.attempt.generation
        return worker.generation > serving

    def on_boot_error(self, worker: Worker, message: str, serving: int,
                      workers: Collection[Worker]) -> Decision | None:
        """A worker could not load the app: None when it was not the reload's business (the
        ``serving`` generation's), else what it asks (abandoning the reload in progress)."""
        if not self.owns(worker, serving):
            return None
        if self.attempt is not None:
            return self.abandon(message, workers)
        log.info("worker %d (slot %d) of the abandoned generation %d failed to boot too",
                 worker.pid, worker.slot, worker.generation)
        return Decision()

    def on_death_before_ready(self, worker: Worker, status: int, serving: int,
                              workers: Collection[Worker]) -> Decision | None:
        """A worker died before ready: None when it was not the reload's business, else what
        it asks (then it is not a death for the crash-loop guard: the old generation serves)."""
        if not self.owns(worker, serving):
            return None
        if self.attempt is not None:
            return self.abandon(f"worker {worker.pid} died before it was ready ({describe_status(status)})",
                                workers)
        return Decision()

    def abandon(self, why: str, workers: Collection[Worker]) -> Decision:
        """Retire the new generation's workers and put the serving generation back."""
        attempt = self.attempt
        assert attempt is not None
        self.attempt = None
        self.last_failed = True
        log.error("reload failed: generation %d could not boot: %s; generation %d keeps serving",
                  attempt.generation, why, attempt.serving.number)
        retire = tuple(w.pid for w in workers if w.generation == attempt.generation and not w.stopping)
        return Decision(put_in_force=attempt.serving, workers=attempt.serving_workers, retire=retire,
                        why="reload abandoned", finished=False)


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
