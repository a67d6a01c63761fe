"""``--profile``: a sampling profiler over the app's Python threads in every worker, accumulating
across requests (and across the workers' lives), and the merge of the workers' profiles that
``tines status --profile`` prints and writes (a top-N table, a pstats file, a collapsed-stack
file for flame graphs). ADR 0016 says why sampling and what it costs.

Owns: the sampler thread a worker starts (``Sampler``), the profile file format (one JSON file
per worker pid in ``profile_dir``, rewritten whole every few seconds and at the worker's end),
and the merge and its outputs. Must not: run in the master (it starts a thread) or touch the
request path (it reads the interpreter's frames from its own thread; off, nothing runs).

What a sample is: every ``profile_interval`` seconds the sampler reads ``sys._current_frames()``
and records the stack of each Python thread but its own, from the app's frames up (the
worker's own frames below the app are left out); a prefork or event worker's main thread while
no request runs (in Rust, below the app) is not counted. It is wall-clock time: a thread waiting
in the app (a query, a sleep) is sampled where it waits, which is where the request's time goes.
"""

from __future__ import annotations

import json
import marshal
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType, FrameType

from tines.config import Config
from tines.config.validators import temp_dir
from tines.errors import ConfigError

FORMAT = "tines-profile/1"
FLUSH_EVERY = 5.0
"""Seconds between two writes of a worker's profile file (and one more when it stops)."""

Function = tuple[str, int, str]
"""(file, first line, name): a function as pstats names it."""


def default_dir(master_pid: int) -> str:
    """Where the workers write when ``profile_dir`` is unset: one directory per master."""
    return os.path.join(temp_dir(), f"tines-profile-{master_pid}")


def profile_path(cfg: Config, master_pid: int) -> str | None:
    """The directory the workers of master ``master_pid`` write their profiles to (None when
    ``profile`` is off)."""
    if not cfg.profile:
        return None
    return os.path.abspath(cfg.profile_dir or default_dir(master_pid))


def prepare(cfg: Config, master_pid: int) -> None:
    """The master, before any worker: makes the profile directory, or ConfigError (one line)
    when it cannot be made or written to."""
    directory = profile_path(cfg, master_pid)
    if directory is None:
        return
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as error:
        raise ConfigError(f"profile_dir {directory!r}: {error.strerror}") from None
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ConfigError(f"profile_dir {directory!r} is not writable")


@dataclass
class Profile:
    """Stacks (root first) and how many samples saw each; the functions they name."""

    interval: float
    samples: int = 0
    stacks: Counter[tuple[Function, ...]] = field(default_factory=Counter)

    def add(self, other: Profile) -> None:
        self.samples += other.samples
        self.stacks.update(other.stacks)

    def to_json(self, pid: int) -> str:
        functions: dict[Function, int] = {}
        stacks = []
        for stack, count in self.stacks.items():
            stacks.append([[functions.setdefault(fn, len(functions)) for fn in stack], count])
        return json.dumps({"format": FORMAT, "pid": pid, "interval": self.interval,
                           "samples": self.samples, "functions": [list(fn) for fn in functions],
                           "stacks": stacks})

    @classmethod
    def from_json(cls, text: str) -> Profile:
        data = json.loads(text)
        if data.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} file")
        functions = [(str(file), int(line), str(name)) for file, line, name in data["functions"]]
        profile = cls(interval=float(data["interval"]), samples=int(data["samples"]))
        for indices, count in data["stacks"]:
            profile.stacks[tuple(functions[index] for index in indices)] += int(count)
        return profile


class Sampler:
    """The worker's sampler thread: samples every ``interval`` seconds, writes
    ``directory/<pid>.json`` every ``FLUSH_EVERY`` seconds and at ``stop``."""

    def __init__(self, directory: str, interval: float, below_app: CodeType | None) -> None:
        self.path = Path(directory) / f"{os.getpid()}.json"
        self.profile = Profile(interval=interval)
        self.below_app = below_app
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="tines-profiler", daemon=True)
        self.codes: dict[CodeType, Function] = {}

    def start(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.thread.start()

    def stop(self) -> None:
        """Stops sampling and writes the profile a last time."""
        self.done.set()
        self.thread.join()
        self.write()

    def _run(self) -> None:
        me = threading.get_ident()
        next_flush = time.monotonic() + FLUSH_EVERY
        while not self.done.wait(self.profile.interval):
            self.sample(sys._current_frames(), me)
            if time.monotonic() >= next_flush:
                self.write()
                next_flush = time.monotonic() + FLUSH_EVERY

    def _function(self, code: CodeType) -> Function:
        function = self.codes.get(code)
        if function is None:
            function = (code.co_filename, code.co_firstlineno, code.co_qualname
                        if hasattr(code, "co_qualname") else code.co_name)
            self.codes[code] = function
        return function

    def sample(self, frames: dict[int, FrameType], me: int) -> None:
        """Records one sample of every thread in ``frames`` but ``me``."""
        for ident, frame in frames.items():
            if ident == me:
                continue
            stack: list[Function] = []
            current: FrameType | None = frame
            while current is not None:
                if current.f_code is self.below_app:
                    break  # the worker's own frames, below the app
                if current.f_code.co_filename == __file__:
                    stack = []  # the worker stopping the profiler: not the app's time
                    break
                stack.append(self._function(current.f_code))
                current = current.f_back
            if not stack:
                continue  # the main thread in Rust between requests
            self.profile.stacks[tuple(reversed(stack))] += 1
        self.profile.samples += 1

    def write(self) -> None:
        """Replaces the profile file (a reader never sees half of one)."""
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(self.profile.to_json(os.getpid()))
        os.replace(temporary, self.path)


# ---- the merge and its outputs -------------------------------------------------------------

def merge(directory: str) -> tuple[Profile, int]:
    """Every worker's profile in ``directory`` added up, and how many files there were."""
    files = sorted(Path(directory).glob("*.json"))
    merged: Profile | None = None
    for path in files:
        profile = Profile.from_json(path.read_text())
        if merged is None:
            merged = profile
        else:
            merged.add(profile)
    return merged or Profile(interval=0.0), len(files)


def totals(profile: Profile) -> tuple[Counter[Function], Counter[Function]]:
    """Samples per function: as the innermost frame (self), and anywhere in the stack, once
    per stack (cumulative)."""
    own: Counter[Function] = Counter()
    cumulative: Counter[Function] = Counter()
    for stack, count in profile.stacks.items():
        own[stack[-1]] += count
        for function in set(stack):
            cumulative[function] += count
    return own, cumulative


def describe(function: Function) -> str:
    file, line, name = function
    return f"{name} ({file}:{line})"


def top_table(profile: Profile, files: int, limit: int = 20) -> str:
    """The functions with the most samples of their own, with their cumulative share."""
    own, cumulative = totals(profile)
    in_app = sum(profile.stacks.values())
    lines = [f"{in_app} samples in the app from {files} worker profile(s), one every "
             f"{profile.interval * 1000:g} ms per thread ({in_app * profile.interval:.2f} s)"]
    if not in_app:
        return lines[0] + "\n"
    lines.append(f"{'self%':>6} {'cum%':>6} {'self':>7}  function")
    for function, count in own.most_common(limit):
        lines.append(f"{100 * count / in_app:6.1f} {100 * cumulative[function] / in_app:6.1f} "
                     f"{count:7d}  {describe(function)}")
    return "\n".join(lines) + "\n"


def collapsed(profile: Profile) -> Iterable[str]:
    """Brendan Gregg's collapsed-stack lines (``root;...;leaf count``), for flamegraph.pl,
    speedscope or inferno."""
    for stack, count in sorted(profile.stacks.items()):
        names = ";".join(describe(function).replace(";", ":") for function in stack)
        yield f"{names} {count}\n"


def pstats_dict(profile: Profile) -> dict[Function, tuple[int, int, float, float, dict[Function, tuple[int, int, float, float]]]]:
    """The profile as the dict ``pstats.Stats`` loads: per function, calls (samples), its own
    time and its cumulative time in seconds (samples x interval), and its callers."""
    own, cumulative = totals(profile)
    callers: dict[Function, Counter[Function]] = {}
    for stack, count in profile.stacks.items():
        for caller, callee in zip(stack, stack[1:]):
            callers.setdefault(callee, Counter())[caller] += count
    interval = profile.interval
    stats = {}
    for function, total in cumulative.items():
        by_caller = {caller: (n, n, 0.0, n * interval)
                     for caller, n in callers.get(function, Counter()).items()}
        stats[function] = (total, total, own[function] * interval, total * interval, by_caller)
    return stats


def write_outputs(profile: Profile, directory: str) -> list[Path]:
    """Writes ``profile.pstats`` (``python -m pstats``, snakeviz) and ``profile.collapsed``
    into ``directory``; returns their paths."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    pstats_path = out / "profile.pstats"
    with open(pstats_path, "wb") as handle:
        marshal.dump(pstats_dict(profile), handle)
    collapsed_path = out / "profile.collapsed"
    with open(collapsed_path, "w") as handle:
        handle.writelines(collapsed(profile))
    return [pstats_path, collapsed_path]
