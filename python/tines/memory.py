"""Memory of the workers: sampling, the ``max_worker_memory`` limit, kernel same-page merging.

Owns: reading one process's memory from ``/proc/PID/smaps_rollup`` (``read_usage``: RSS, PSS,
USS, shared, swap) and its KSM counters from ``/proc/PID/ksm_stat``, or only its RSS and swap
from ``/proc/PID/status`` (``read_rss``) where smaps_rollup is not the master's to read; the
master's sampling schedule (``Sampler``); the limit decision (``over_limit``), the check that
the limit's kind can be read at all (``check_limit``) and the lines the master logs about
memory; the ``memory_merge`` opt-in (``check_merge`` in the master before the first fork,
``opt_in_merge`` in each worker after fork); sizes as people read them (``format_size``).
docs/tuning.md says how to use the figures.

The rate, and what it costs: the kernel builds smaps_rollup by walking every page table entry
of the process under its mmap read lock, so one read costs O(RSS) (tens of microseconds for a
small worker, about a millisecond per GiB resident) and, while it runs, the worker cannot map
or unmap memory (page faults still proceed). So the master reads one worker at a time, in turn
by slot, at most ``memory_sample_rate`` reads per second in total (at most 10), whatever the
number of workers: each worker is read every (workers / rate) seconds. The default
(``sample_rate``) is 4 reads per second with ``max_worker_memory`` set (1 s for 4 workers) and
0.5 without, when the figures are only shown: next to a busy worker a read costs the master
about a millisecond (its page tables are cold), about 0.5% of a CPU at 4 a second. A worker is
also read once when it reports ready (for the ready line). A sample is at most
workers / rate seconds old (plus one turn of the master's loop) when the limit is decided on it.

Under ``user`` (or ``group``), the master samples all the same, from outside: a worker stuck in
a leaking request could not sample itself. But a process that changed its uid or gid is not
dumpable (unless ``fs.suid_dumpable`` is 1), the workers inherit that from the master at fork,
and smaps_rollup needs ptrace read rights over a dumpable process: the master (now the user)
cannot open it. ``/proc/PID/status`` needs none: the master then reads RSS and swap from it
(counters the kernel keeps: no page-table walk, no lock), so a limit on RSS works, while one on
USS or PSS cannot be checked and is refused at start (``check_limit``; ADR 0028). The workers
are not made dumpable again for it: that would open their memory (and the environment the
master got as root) to every process of that user, and let them dump core.

Must not: import ``tines._core``, fork, or start threads; the master calls it from its loop.
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from tines import logs
from tines.config import Config
from tines.errors import ConfigError


class HasSlot(Protocol):
    """What the sampler needs of the master's worker record: its scoreboard slot."""

    @property
    def slot(self) -> int: ...


Sampled = TypeVar("Sampled", bound=HasSlot)

log = logs.get("memory")

PR_SET_MEMORY_MERGE = 67
PR_GET_MEMORY_MERGE = 68
"""prctl options of Linux 6.4+ (include/uapi/linux/prctl.h): opt a process's whole address
space in to KSM (the kernel's same-page merging), and read that opt-in back."""

KSM_RUN = "/sys/kernel/mm/ksm/run"
"""1 while ksmd, the kernel thread that merges pages, runs; system-wide, off on many hosts."""

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")

KIB = 1024
UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


@dataclass(frozen=True)
class MemoryUsage:
    """One process's memory, in bytes, from its smaps_rollup (and ksm_stat).

    ``uss`` (unique set size) is what only this process maps (Private_Clean + Private_Dirty):
    what its exit would free. ``pss`` (proportional set size) charges each shared page to the
    processes mapping it in equal parts, so PSS sums over processes to what they use together.
    ``shared`` (Shared_Clean + Shared_Dirty) is resident and mapped by others too: after fork,
    the pages still shared copy-on-write with the master and the other workers. ``rss`` =
    ``uss`` + ``shared``. ``ksm_profit`` (bytes) is what KSM merging saves for this process
    (ksm_process_profit), None when not read.
    """

    rss: int
    pss: int
    uss: int
    shared: int
    swap: int
    ksm_profit: int | None = None
    ksm_merging: int | None = None
    """Bytes of this process's pages merged by KSM (ksm_merging_pages x page size)."""
    rss_only: bool = False
    """Read from /proc/PID/status (``read_rss``): ``rss`` and ``swap`` are known, ``pss``,
    ``uss`` and ``shared`` are not (0)."""

    def figure(self, kind: str) -> int | None:
        """The figure ``max_worker_memory_kind`` names: ``rss``, ``pss`` or ``uss``; None for
        ``pss`` and ``uss`` of an RSS-only sample."""
        if self.rss_only and kind != "rss":
            return None
        return {"rss": self.rss, "pss": self.pss, "uss": self.uss}[kind]

    def describe(self) -> str:
        """``RSS 20.1 MiB, PSS 9.0 MiB, USS 3.6 MiB, shared 16.5 MiB`` (+ swap and what KSM
        merged, when not zero); ``RSS 20.1 MiB (PSS and USS unreadable)`` for an RSS-only one."""
        if self.rss_only:
            swap = f", swap {format_size(self.swap)}" if self.swap else ""
            return f"RSS {format_size(self.rss)}{swap} (PSS and USS unreadable)"
        text = (f"RSS {format_size(self.rss)}, PSS {format_size(self.pss)}, "
                f"USS {format_size(self.uss)}, shared {format_size(self.shared)}")
        if self.swap:
            text += f", swap {format_size(self.swap)}"
        if self.ksm_merging:
            text += f", KSM merged {format_size(self.ksm_merging)}"
            if self.ksm_profit is not None:
                text += f" (profit {format_size(self.ksm_profit)})"
        return text


UNKNOWN = 2**64 - 1
"""What the scoreboard holds for a figure not read (PSS and USS when only RSS can be: under
``user``); the status page shows it as n/a (Rust ``scoreboard::MEMORY_UNKNOWN``)."""


def format_size(size: int, decimals: int = 1) -> str:
    """``512 MiB``, ``530.2 MiB``, ``3.6 MiB``, ``900 B``: one decimal (or ``decimals``), none
    when whole."""
    value = float(size)
    unit = UNITS[0]
    for unit in UNITS:
        if abs(value) < KIB or unit == UNITS[-1]:
            break
        value /= KIB
    shown = f"{value:.{decimals}f}"
    if "." in shown:
        shown = shown.rstrip("0").removesuffix(".")
    return f"{shown} {unit}"


def format_above(size: int, limit: int) -> str:
    """``size`` as ``format_size`` shows it, with as many more decimals as it takes to read as
    more than ``limit`` (128.0004 MiB is ``128.0004 MiB``, never ``128 MiB > ... 128 MiB``)."""
    for decimals in range(1, 7):
        shown = format_size(size, decimals)
        if shown != format_size(limit, decimals) or size <= limit:
            return shown
    return f"{size} B"


def parse_smaps_rollup(text: str) -> MemoryUsage | None:
    """The figures of a smaps_rollup text (fields in kB), or None when it has none (the
    process exited: a zombie's smaps_rollup is empty)."""
    fields: dict[str, int] = {}
    for line in text.splitlines():
        name, colon, rest = line.partition(":")
        parts = rest.split()
        if colon and len(parts) == 2 and parts[1] == "kB" and parts[0].isdigit():
            fields[name] = int(parts[0]) * KIB
    if "Rss" not in fields:
        return None
    private = fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)
    shared = fields.get("Shared_Clean", 0) + fields.get("Shared_Dirty", 0)
    return MemoryUsage(rss=fields["Rss"], pss=fields.get("Pss", 0), uss=private, shared=shared,
                       swap=fields.get("Swap", 0))


def parse_status(text: str) -> MemoryUsage | None:
    """RSS and swap (``VmRSS``, ``VmSwap``, in kB) of a /proc/PID/status text, as an RSS-only
    sample; None without ``VmRSS`` (a zombie, or a kernel thread, has none)."""
    fields: dict[str, int] = {}
    for line in text.splitlines():
        name, colon, rest = line.partition(":")
        parts = rest.split()
        if colon and name in ("VmRSS", "VmSwap") and len(parts) == 2 and parts[1] == "kB" and parts[0].isdigit():
            fields[name] = int(parts[0]) * KIB
    if "VmRSS" not in fields:
        return None
    return MemoryUsage(rss=fields["VmRSS"], pss=0, uss=0, shared=0, swap=fields.get("VmSwap", 0), rss_only=True)


def parse_ksm_stat(text: str) -> tuple[int, int] | None:
    """(bytes merged, profit in bytes) from a ksm_stat text, or None without those fields."""
    fields = dict(line.split(None, 1) for line in text.splitlines() if " " in line)
    try:
        return int(fields["ksm_merging_pages"]) * PAGE_SIZE, int(fields["ksm_process_profit"])
    except (KeyError, ValueError):
        return None


class MemoryUnreadable(Exception):
    """The master cannot read a worker's smaps_rollup: the kernel has none (Linux < 4.14), or
    the workers' /proc files are not the master's to read (after ``user``, a process that
    changed its uid is not dumpable, and its /proc/PID files stay root's). ``read_rss`` still
    can."""


def read_usage(pid: int, ksm: bool = False) -> MemoryUsage | None:
    """``pid``'s memory now; None when the process is gone (or exited, not yet reaped).

    With ``ksm``, also its KSM counters (where the kernel has /proc/PID/ksm_stat). Raises
    MemoryUnreadable when the process exists but its smaps_rollup cannot be read.
    """
    try:
        with open(f"/proc/{pid}/smaps_rollup") as file:
            usage = parse_smaps_rollup(file.read())
    except FileNotFoundError:
        if os.path.isdir(f"/proc/{pid}"):
            raise MemoryUnreadable(f"/proc/{pid}/smaps_rollup does not exist (Linux 4.14+ has it)") from None
        return None
    except PermissionError:
        raise MemoryUnreadable(f"/proc/{pid}/smaps_rollup cannot be read by uid {os.geteuid()} (after "
                               "user, the workers are not dumpable: their /proc files stay root's)") from None
    except ProcessLookupError:
        return None
    if usage is None or not ksm:
        return usage
    try:
        with open(f"/proc/{pid}/ksm_stat") as file:
            counters = parse_ksm_stat(file.read())
    except OSError:
        counters = None
    if counters is None:
        return usage
    merging, profit = counters
    return MemoryUsage(usage.rss, usage.pss, usage.uss, usage.shared, usage.swap,
                       ksm_profit=profit, ksm_merging=merging)


def read_rss(pid: int) -> MemoryUsage | None:
    """``pid``'s RSS and swap now, from /proc/PID/status, which anyone may read (no ptrace
    rights: it works on a process that is not dumpable); None when the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as file:
            return parse_status(file.read())
    except (FileNotFoundError, ProcessLookupError):
        return None


PR_GET_DUMPABLE = 3
SUID_DUMPABLE = "/proc/sys/fs/suid_dumpable"
"""What a process's dumpable flag becomes when it changes its uid or gid: 0 (the default) or 2
leave its /proc/PID files root's, 1 leaves them its own."""


def smaps_readable(cfg: Config) -> bool:
    """Whether the master will be able to read its workers' smaps_rollup: root that stays root
    can; a switch to ``user`` or ``group`` still to come leaves the master and the workers it
    forks dumpable only when ``fs.suid_dumpable`` is 1; else the master can when it is
    dumpable itself now (the workers inherit the flag; a master started by an upgrade was
    exec'd, which made it dumpable again)."""
    switches = ((cfg.user is not None and cfg.user != os.geteuid())
                or (cfg.group is not None and cfg.group != os.getegid()))
    if switches:
        try:
            with open(SUID_DUMPABLE) as file:
                return file.read().strip() == "1"
        except OSError:
            return False
    return os.geteuid() == 0 or _prctl(PR_GET_DUMPABLE)[0] == 1


def check_limit(cfg: Config) -> None:
    """Raise ConfigError (one line) when ``max_worker_memory`` limits a figure the master will
    not be able to read: USS or PSS after the switch to ``user`` (``smaps_readable``), where
    only RSS can be read. Runs in the master before any fork (and for check-config)."""
    kind: str = cfg.max_worker_memory_kind
    if not cfg.max_worker_memory or kind == "rss" or smaps_readable(cfg):
        return
    raise ConfigError(
        f"max_worker_memory_kind {kind} ({cfg.source('max_worker_memory_kind')}) cannot be checked "
        f"under user/group: the master cannot read the workers' /proc/PID/smaps_rollup after the switch "
        f"(a process that changed its uid or gid is not dumpable and its /proc files stay root's), only "
        f"their RSS: set max_worker_memory_kind rss")


# --- the master's schedule and decision --------------------------------------------------------


LIMITED_RATE = 4.0
"""Reads per second by default while ``max_worker_memory`` is set."""
SHOWN_RATE = 0.5
"""Reads per second by default without a limit: the figures are only shown."""


def sample_rate(cfg: Config) -> float:
    """The master's reads per second: ``memory_sample_rate`` when set, else the default for
    whether ``max_worker_memory`` is set."""
    if cfg.memory_sample_rate is not None:
        return float(cfg.memory_sample_rate)
    return LIMITED_RATE if cfg.max_worker_memory else SHOWN_RATE


class Sampler:
    """When to read whose memory: one read every 1/``rate`` seconds, the workers in turn by
    slot (so each worker is read every len(workers)/rate seconds), none while there is no
    worker to read. Also warns once when smaps_rollup cannot be read, then reads RSS only."""

    def __init__(self, rate: float) -> None:
        self.interval = 1.0 / rate
        self.next_read = 0.0
        self.last_slot = -1
        self.rss_only = False

    def wait(self, now: float) -> float:
        """Seconds until the next read is due (0 when due now); the loop sleeps at most this."""
        return max(0.0, self.next_read - now)

    def pick(self, workers: Sequence[Sampled], now: float) -> Sampled | None:
        """The worker to read now, or None (not due yet, or none to read). Picking one
        schedules the next read."""
        if now < self.next_read or not workers:
            return None
        self.next_read = now + self.interval
        ordered = sorted(workers, key=lambda worker: worker.slot)
        chosen = next((w for w in ordered if w.slot > self.last_slot), ordered[0])
        self.last_slot = chosen.slot
        return chosen

    def read(self, pid: int, ksm: bool = False) -> MemoryUsage | None:
        """``read_usage``; once smaps_rollup cannot be read, one warning and ``read_rss`` for
        this and every later read."""
        if not self.rss_only:
            try:
                return read_usage(pid, ksm)
            except MemoryUnreadable as error:
                self.rss_only = True
                log.warning("memory figures are RSS only from now on: %s; the master reads RSS from "
                            "/proc/PID/status instead (a max_worker_memory on USS or PSS is not checked)",
                            error)
        return read_rss(pid)


def over_limit(cfg: Config, usage: MemoryUsage) -> str | None:
    """The recycling line's end (``USS 530.2 MiB > max_worker_memory 512 MiB``) when the
    sampled figure is above ``max_worker_memory``; None when under it or when it is off."""
    limit: int = cfg.max_worker_memory
    kind: str = cfg.max_worker_memory_kind
    figure = usage.figure(kind)
    if not limit or figure is None or figure <= limit:
        return None
    return f"{kind.upper()} {format_above(figure, limit)} > max_worker_memory {format_size(limit)}"


# --- kernel same-page merging ------------------------------------------------------------------


def _prctl(option: int, argument: int = 0) -> tuple[int, int]:
    """(result, errno) of prctl(option, argument, 0, 0, 0). ctypes is already loaded in every
    Tines process (the worker sets its parent-death signal with it), so this costs no import."""
    libc = ctypes.CDLL(None, use_errno=True)
    ctypes.set_errno(0)
    result = libc.prctl(option, ctypes.c_ulong(argument), ctypes.c_ulong(0), ctypes.c_ulong(0),
                        ctypes.c_ulong(0))
    return int(result), ctypes.get_errno()


def merge_enabled() -> bool | None:
    """Whether this process is opted in to KSM (PR_GET_MEMORY_MERGE); None when the kernel has
    no such prctl (before Linux 6.4, or built without CONFIG_KSM)."""
    result, error = _prctl(PR_GET_MEMORY_MERGE)
    return None if result < 0 else bool(result)


def ksm_running(path: str = KSM_RUN) -> bool | None:
    """Whether ksmd runs (the system-wide switch reads 1); None when there is no such file."""
    try:
        with open(path) as file:
            return file.read().strip() == "1"
    except OSError:
        return None


def check_merge(cfg: Config) -> bool:
    """The master's check of ``memory_merge`` before its first fork: True when workers should
    opt in. A kernel without PR_SET_MEMORY_MERGE is a warning (the workers run without it), not
    a failure; so is ksmd not running (workers opt in; nothing is merged until it runs)."""
    if not cfg.memory_merge:
        return False
    result, error = _prctl(PR_GET_MEMORY_MERGE)
    if result < 0:
        log.warning("memory_merge: this kernel has no PR_SET_MEMORY_MERGE (%s; it needs Linux 6.4+ "
                    "with KSM): workers run without kernel same-page merging",
                    errno.errorcode.get(error, str(error)))
        return False
    if not ksm_running():
        log.warning("memory_merge: ksmd is not running (%s is not 1): workers opt in, but no page is "
                    "merged until it runs (echo 1 > %s)", KSM_RUN, KSM_RUN)
    return True


def opt_in_merge() -> bool:
    """In a worker after fork: opt its whole address space in to KSM (current and future
    mappings). False when the kernel refuses: silently for EINVAL (no such prctl: the master's
    ``check_merge`` warned once already), else with one warning from this worker."""
    result, error = _prctl(PR_SET_MEMORY_MERGE, 1)
    if result < 0 and error == errno.EINVAL:
        return False
    if result < 0:
        log.warning("memory_merge: prctl(PR_SET_MEMORY_MERGE) failed: %s; this worker runs without it",
                    os.strerror(error))
        return False
    return True
