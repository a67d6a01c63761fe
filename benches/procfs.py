"""CPU time and memory of a process tree, from /proc (Linux only).

Owns reading ``/proc/<pid>/stat`` and ``/proc/<pid>/status`` and finding a server's process tree
(the master and every descendant, by ``ppid`` links), and the memory of each of its processes
(PSS and USS from smaps_rollup, read by ``tines.memory``). Knows nothing about servers or wrk.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tines.memory import read_usage

@dataclass(frozen=True)
class ProcStat:
    """The fields of one ``/proc/<pid>/stat`` the harness uses."""

    pid: int
    ppid: int
    cpu_ticks: int  # utime + stime + cutime + cstime
    state: str = "R"  # field 3: R, S, D, Z (zombie: exited, not reaped yet) ...


def read_stat(pid: int) -> ProcStat | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = raw[raw.rindex(")") + 2:].split()
    # fields[0] is field 3 (state); ppid is field 4, utime..cstime are fields 14..17.
    return ProcStat(pid, int(fields[1]), sum(int(f) for f in fields[11:15]), fields[0])


def children(pid: int) -> set[int]:
    """The live (not zombie) direct children of ``pid``."""
    stats = (read_stat(int(p)) for p in os.listdir("/proc") if p.isdigit())
    return {s.pid for s in stats if s is not None and s.ppid == pid and s.state != "Z"}


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


def tree_memory(root: int) -> dict[str, Any]:
    """Memory per process of the tree now, from each one's smaps_rollup: ``processes`` (pid,
    ``master`` for the root and ``worker`` for the others, ``pss_kib``, ``uss_kib``) and the
    figures the report shows: ``pss_total_kib`` (PSS summed over the tree: what the server
    uses in all, each shared page counted once), ``master_pss_kib`` (the root's) and
    ``worker_uss_kib`` (the largest USS of the other processes, or the root's when it is the
    only one: what one more worker costs). RSS summed over a tree would count every shared page
    once per process."""
    processes = []
    for stat in tree(root):
        usage = read_usage(stat.pid)
        if usage is not None:
            processes.append({"pid": stat.pid, "role": "master" if stat.pid == root else "worker",
                              "pss_kib": usage.pss // 1024, "uss_kib": usage.uss // 1024})
    workers = [p for p in processes if p["role"] == "worker"] or processes
    return {"processes": processes,
            "pss_total_kib": sum(p["pss_kib"] for p in processes),
            "master_pss_kib": next((p["pss_kib"] for p in processes if p["role"] == "master"), 0),
            "worker_uss_kib": max((p["uss_kib"] for p in workers), default=0)}


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
