"""CPU time and memory of a process tree, from /proc (Linux only).

Owns reading ``/proc/<pid>/stat`` and ``/proc/<pid>/status`` and finding a server's process tree
(the master and every descendant, by ``ppid`` links). Knows nothing about servers or wrk.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

@dataclass(frozen=True)
class ProcStat:
    """The fields of one ``/proc/<pid>/stat`` the harness uses."""

    pid: int
    ppid: int
    cpu_ticks: int  # utime + stime + cutime + cstime


def read_stat(pid: int) -> ProcStat | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = raw[raw.rindex(")") + 2:].split()
    # fields[0] is field 3 (state); ppid is field 4, utime..cstime are fields 14..17.
    return ProcStat(pid, int(fields[1]), sum(int(f) for f in fields[11:15]))


def tree(root: int) -> list[ProcStat]:
    """The live process ``root`` and all its descendants, by ``ppid`` links."""
    stats = [s for s in (read_stat(int(p)) for p in os.listdir("/proc") if p.isdigit()) if s]
    children: dict[int, list[ProcStat]] = {}
    for s in stats:
        children.setdefault(s.ppid, []).append(s)
    found = [s for s in stats if s.pid == root]
    for s in found:  # grows while iterating: a breadth-first walk
        found.extend(children.get(s.pid, []))
    return found


def tree_cpu_ticks(root: int) -> int:
    """Clock ticks of CPU (user + system, own and reaped children's) used by the tree."""
    return sum(s.cpu_ticks for s in tree(root))


def tree_status_kib(root: int, field: str) -> int:
    """Sum of one ``/proc/<pid>/status`` field in KiB (``VmRSS``, ``VmHWM``) over the tree:
    shared pages count once per process."""
    total = 0
    for s in tree(root):
        try:
            for line in Path(f"/proc/{s.pid}/status").read_text().splitlines():
                if line.startswith(field + ":"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


def tree_rss_kib(root: int) -> int:
    """Sum of VmRSS (KiB, resident now) over the tree."""
    return tree_status_kib(root, "VmRSS")


def tree_peak_rss_kib(root: int) -> int:
    """Sum of VmHWM (KiB, each process's peak resident set) over the tree."""
    return tree_status_kib(root, "VmHWM")


@dataclass(frozen=True)
class CpuTimes:
    """Ticks the given CPUs spent busy (user, nice, system, irq, softirq) and stolen (by the
    hypervisor), from ``/proc/stat``, since boot."""

    busy: int
    steal: int


def cpu_times(cpus: list[int]) -> CpuTimes:
    """Busy and steal ticks summed over ``cpus``."""
    busy = steal = 0
    wanted = {f"cpu{n}" for n in cpus}
    for line in Path("/proc/stat").read_text().splitlines():
        fields = line.split()
        if fields and fields[0] in wanted:
            # user nice system idle iowait irq softirq steal ...
            user, nice, system, _idle, _iowait, irq, softirq, stolen = map(int, fields[1:9])
            busy += user + nice + system + irq + softirq
            steal += stolen
    return CpuTimes(busy, steal)
