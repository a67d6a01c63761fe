"""From measurements to settings: the recommender of ``tines tune``.

Owns: turning a measurements document (schema ``tines-tune/1``, written by
``tines.tune.plan``; docs/tuning.md describes it) into recommended settings, each with the
measured numbers that justify it. Pure: no process, no clock, no file; the tests feed it
recorded measurements (tests/python/unit/tune_fixtures/*.json).

The rules, each the classic one with our measured values put in:

- **Does the app compute or wait?** W/C, the time a request waits (app wall time, from the
  scoreboard, less the app's CPU time: the request's CPU less the server's own cost,
  calibrated on a no-op app under the same MPM) over the CPU time the request takes in all
  (server and app: both run on the cores). Below 0.5 the app
  is CPU-bound: ``prefork`` with one worker per CPU (isolation; more processes only queue for
  the CPUs). From 0.5 it waits: the ``event`` MPM (``thread`` is its other name) with threads
  per worker = 1 + W/C (Goetz's sizing: threads = CPUs x (1 + W/C), one worker per CPU). The
  measured configurations can overrule the class: another MPM wins when its peak throughput is
  more than 10% above the preferred one's; among the preferred MPM's configurations within 5%
  of its fastest, the one with the fewest threads.
- **max_workers**: the mod_perl guide's MaxClients, (memory budget - shared) / USS per worker,
  with room kept for ``reload_batch`` new workers during a reload (live + draining <= workers
  + reload_batch), capped by what the CPUs can use (prefork: CPUs, or CPUs x (1 + W/C) for an
  app that waits; event: CPUs).
- **preload** when it saves at least 1 MiB and 10% of a worker's USS; **memory_merge** only
  where ksmd runs and a measured run shows it saving 10%.
- **max_requests / max_worker_memory** from the leak rate: a least-squares line through a
  worker's USS against its requests after a warm-up; a growth that is both linear (r^2 >=
  0.5) and real (at least 1 MiB or 2% of USS over the fit) gives max_requests = the headroom
  of a worker's share of the budget over its slope; otherwise "not needed".
- **Spare pool** (``--bursty``): Little's law on the open-loop runs (requests in the app =
  rate x app time) gives the workers (or app threads) busy at the low and the high rate; the
  spares cover the difference, so a burst is served before new workers boot.
- **Keep-alive** from the client mix a requests file declares (``# tines-tune: visit=N
  think=S``): a timeout just above the think time, but short under prefork, where an idle
  keep-alive connection holds a whole worker.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from tines.memory import format_size
from tines.tune.measure import CLOCK_TICKS

SCHEMA = "tines-tune/1"

CPU_BOUND_BELOW = 0.5
"""W/C under which an app counts as computing rather than waiting."""

OVERRULE = 1.10
"""Another MPM replaces the preferred one when its peak throughput is this much higher."""

SAME = 1.05
"""Peaks within this factor count as the same throughput (a sweep step's noise)."""

MAX_THREADS = 256
"""Most app threads per worker recommended (each holds a stack and a request's objects)."""

MiB = 1024 * 1024


@dataclass
class Item:
    """One recommended setting: ``value`` None means "not needed" (left at its default)."""

    setting: str
    value: Any
    why: str
    evidence: dict[str, Any] = field(default_factory=dict)
    in_toml: bool = True
    """False: shown in the summary and as a comment in tines.toml, not set (a pool ceiling
    beside a fixed worker count, say)."""

    def as_dict(self) -> dict[str, Any]:
        return {"setting": self.setting, "value": self.value, "why": self.why,
                "evidence": self.evidence, "in_toml": self.in_toml}


@dataclass
class Recommendation:
    items: list[Item]
    summary: dict[str, Any]
    notes: list[str]

    def settings(self) -> dict[str, Any]:
        """The settings to write: every item with a value that goes into tines.toml."""
        return {item.setting: item.value for item in self.items if item.value is not None and item.in_toml}

    def item(self, setting: str) -> Item | None:
        return next((item for item in self.items if item.setting == setting), None)

    def as_dict(self) -> dict[str, Any]:
        return {"settings": self.settings(), "items": [item.as_dict() for item in self.items],
                "summary": self.summary, "notes": self.notes}


def mib(size: float) -> str:
    return format_size(int(size))


def us(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.0f} µs" if value >= 100 else f"{value:.1f} µs"


# --- the workload -------------------------------------------------------------------------------


def split_time(cpu: float, server: float | None, wall: float) -> tuple[float | None, float, float]:
    """A request's time split as every figure of the report shows it: ``(server, app CPU, app
    waiting)`` in µs from its CPU time ``cpu`` (server and app, /proc), the server's own cost
    ``server`` (the same configuration under a no-op app; None when not calibrated: the app
    CPU is then all of ``cpu`` up to the wall time) and the app's wall time ``wall``
    (scoreboard). One function, so the text, the tables and the chart cannot disagree."""
    own = min(server, cpu) if server is not None else None
    app_cpu = min(wall, max(0.0, cpu - own) if own is not None else cpu)
    return own, app_cpu, max(0.0, wall - app_cpu)


@dataclass(frozen=True)
class RequestCost:
    """What one request cost in one measurement, split by :func:`split_time`: the probe's
    (one connection at a time: what the recommendation's W/C rests on) or a configuration's at
    its peak. The two differ for the same app (at the peak the server's per-request costs,
    the wake-ups and the syscalls, are shared by a batch of requests; one at a time each
    request pays them all): each is shown with the connections it was measured at, and with
    the same figure wherever it appears."""

    label: str
    """``probe, <shape>`` or the configuration's name."""
    connections: int
    cpu_us: float
    server_us: float | None
    app_cpu_us: float
    wait_us: float


def request_costs(doc: dict[str, Any]) -> list[RequestCost]:
    """The probe's cost per request (the figures of :func:`workload`), then each measured
    configuration's at its peak (:func:`peak`); empty without a probe."""
    if not doc.get("probe"):
        return []
    work = workload(doc)
    costs = [RequestCost(f"probe, {doc['probe']['shape']['name']}", 1, work["cpu_us"], work["server_us"],
                         work["app_cpu_us"], work["wait_us"])]
    for config in doc.get("configs", []):
        top = peak(config)
        if not top or not top.get("cpu_us_per_request"):
            continue
        cpu = float(top["cpu_us_per_request"])
        server, app_cpu, wait = split_time(cpu, config.get("server_us"), float(top.get("app_us_per_request") or 0.0))
        costs.append(RequestCost(config["shape"]["name"], int(top["concurrency"]), cpu, server, app_cpu, wait))
    return costs


def cost_text(cost: RequestCost) -> str:
    """One request cost in words, as the text report and the HTML report's table give it."""
    at = "one connection at a time" if cost.connections == 1 else f"at the peak, {cost.connections} connections"
    server = f"the server {us(cost.server_us)}" if cost.server_us is not None else "the server not calibrated"
    return (f"{us(cost.cpu_us)} of CPU per request {at} (the app {us(cost.app_cpu_us)}, {server}), "
            f"{us(cost.wait_us)} waiting in the app")


def workload(doc: dict[str, Any]) -> dict[str, Any]:
    """CPU and wait time per request from the probe (one request at a time): ``{"cpu_us",
    "server_us", "app_cpu_us", "app_wall_us", "wait_us", "wait_ratio", "bound": "cpu"|"wait"}``.

    C is all the CPU a request needs (the server's share runs on the same cores); W is the
    app's wall time (scoreboard) beyond its own CPU time, which is the request's CPU less the
    server's own cost (calibrated on a no-op app); without a calibration, the app's wall time
    up to the request's CPU counts as computing.

    /proc counts CPU time in clock ticks (10 ms here): a probe of an app that mostly waits
    serves a few dozen requests, whose CPU may come to less than one tick and read as 0. C is
    then taken as at most one tick over the requests served (``cpu_bounded``), which gives a
    lower bound of W/C (what a reading of one tick would give), never a W/C of 0 that would
    call a sleeping app CPU-bound."""
    step = doc["probe"]["step"]
    cpu = float(step["cpu_us_per_request"] or 0.0)
    served = int(step.get("served") or 0)
    # Recordings made before the tick was kept were made with this machine's.
    tick_us = float(step.get("cpu_tick_s", 1 / CLOCK_TICKS)) * 1e6
    # Zero ticks (half a tick absorbs the float sum of the processes' readings).
    bounded = served > 0 and cpu * served < tick_us / 2
    if bounded:
        cpu = tick_us / served
    wall = float(step["app_us_per_request"] or 0.0)
    mpm = doc["probe"]["shape"]["mpm"]
    calibration = doc.get("calibration", {}).get(mpm)
    server, app_cpu, wait = split_time(cpu, float(calibration["cpu_us_per_request"]) if calibration else None, wall)
    ratio = wait / cpu if cpu > 0 else 0.0
    return {"cpu_us": cpu, "cpu_bounded": bounded, "server_us": server, "app_cpu_us": app_cpu,
            "app_wall_us": wall, "wait_us": wait, "wait_ratio": ratio,
            "bound": "cpu" if ratio < CPU_BOUND_BELOW else "wait"}


def peak(config: dict[str, Any]) -> dict[str, Any] | None:
    """The sweep step with the most successful responses per second (errors excluded)."""
    steps: list[dict[str, Any]] = [s for s in config.get("sweep", []) if s.get("ok")]
    if not steps:
        return None
    return max(steps, key=lambda s: float(s["rps"]) * s["ok"] / max(1, s["requests"]))


def knee(config: dict[str, Any]) -> dict[str, Any] | None:
    """The first sweep step within 90% of the peak: past it, more concurrency buys latency,
    not throughput."""
    top = peak(config)
    if top is None:
        return None
    for step in sorted(config["sweep"], key=lambda s: s["concurrency"]):
        if step.get("ok") and step["rps"] >= 0.9 * top["rps"]:
            return dict(step)
    return dict(top)


# --- the pieces ---------------------------------------------------------------------------------


def choose_mpm(doc: dict[str, Any], work: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """The measured configuration to base the recommendation on, and why it was chosen."""
    configs = [c for c in doc.get("configs", []) if peak(c) is not None]
    if not configs:
        return None, "no configuration was measured under load"
    preferred_mpm = "prefork" if work["bound"] == "cpu" and doc.get("interface", "wsgi") == "wsgi" else "event"
    best = max(configs, key=lambda c: peak(c)["rps"])  # type: ignore[index]
    preferred = [c for c in configs if c["shape"]["mpm"] == preferred_mpm]
    best_rps = peak(best)["rps"]  # type: ignore[index]
    if preferred:
        fastest = max(float(peak(c)["rps"]) for c in preferred)  # type: ignore[index]
        # Of the preferred MPM's configurations as fast as its fastest (within the noise of a
        # sweep step), the one with the fewest threads: less memory for the same throughput.
        close = [c for c in preferred if peak(c)["rps"] * SAME >= fastest]  # type: ignore[index]
        chosen = min(close, key=lambda c: (c["shape"]["threads"], -peak(c)["rps"]))  # type: ignore[index]
        chosen_rps = peak(chosen)["rps"]  # type: ignore[index]
        if best_rps <= OVERRULE * chosen_rps:
            if chosen is best:
                return chosen, f"it had the highest peak throughput ({chosen_rps:,.0f} requests/s)"
            if chosen_rps * SAME >= best_rps:
                return chosen, (f"its peak throughput ({chosen_rps:,.0f} requests/s) is within "
                                f"{(SAME - 1) * 100:.0f}% of the best ({best['shape']['name']}: "
                                f"{best_rps:,.0f}) with fewer threads")
            return chosen, (f"its peak throughput ({chosen_rps:,.0f} requests/s) is within "
                            f"{(OVERRULE - 1) * 100:.0f}% of the best ({best['shape']['name']}: "
                            f"{best_rps:,.0f}), and {preferred_mpm} suits a "
                            f"{'CPU-bound' if work['bound'] == 'cpu' else 'waiting'} app")
        return best, (f"its peak throughput ({best_rps:,.0f} requests/s) beat {chosen['shape']['name']} "
                      f"({chosen_rps:,.0f}) by more than {(OVERRULE - 1) * 100:.0f}%")
    return best, f"it had the highest peak throughput ({best_rps:,.0f} requests/s)"


def memory_variant(doc: dict[str, Any], preload: bool, merge: bool = False) -> dict[str, Any] | None:
    for variant in doc.get("memory", []):
        shape = variant["shape"]
        if shape["preload"] == preload and shape.get("memory_merge", False) == merge and variant.get("after"):
            return dict(variant)
    return None


def worker_figures(variant: dict[str, Any], when: str = "after") -> dict[str, float]:
    """The largest worker's USS and shared after the load (or at ``start``), and the PSS of
    master + workers."""
    after = variant[when]
    workers = after["workers"]
    master = after.get("master") or {"pss": 0, "uss": 0, "shared": 0}
    return {"uss": float(max(w["uss"] for w in workers)),
            "shared": float(max(w["shared"] for w in workers)),
            "pss_total": float(master["pss"] + sum(w["pss"] for w in workers)),
            "workers": float(len(workers))}


def reload_batch(workers: int) -> int:
    """The default ``reload_batch``: a quarter of the workers, at least 1."""
    return max(1, workers // 4)


def fit_under(slots: int) -> int:
    """The most workers W with W + reload_batch(W) <= slots (room for a reload's new ones)."""
    best = 0
    for count in range(1, max(1, slots) + 1):
        if count + reload_batch(count) <= slots:
            best = count
    return best


def linear_fit(points: list[tuple[float, float]]) -> tuple[float, float, float]:
    """Least squares y = a + b x: (slope b, intercept a, r^2)."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    syy = sum((y - mean_y) ** 2 for _, y in points)
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in points)
    if sxx == 0:
        return 0.0, mean_y, 0.0
    slope = sxy / sxx
    r2 = (sxy * sxy) / (sxx * syy) if syy > 0 else 0.0
    return slope, mean_y - slope * mean_x, r2


def leak_rate(doc: dict[str, Any]) -> dict[str, Any] | None:
    """Bytes of USS per request after the warm-up, with r^2 and whether the growth is real."""
    leak = doc.get("leak")
    if not leak or len(leak.get("samples", [])) < 4:
        return None
    warm = leak.get("warmup_requests", 0)
    points = [(float(s["requests"]), float(s["uss"])) for s in leak["samples"] if s["requests"] >= warm]
    if len(points) < 3:
        return None
    slope, intercept, r2 = linear_fit(points)
    span = points[-1][0] - points[0][0]
    growth = slope * span
    uss = points[-1][1]
    real = r2 >= 0.5 and growth >= max(MiB, 0.02 * uss) and slope > 0
    # A fresh worker's size, as the line puts it (what the warm-up's caches add included),
    # never below what the worker measured before its first request.
    fresh = max(intercept, float(leak["samples"][0]["uss"]))
    return {"bytes_per_request": slope, "r2": r2, "growth": growth, "span_requests": span,
            "uss_fresh": fresh, "uss_last": uss, "leaks": real,
            "samples": len(points), "warmup_requests": warm}


# --- the whole ----------------------------------------------------------------------------------


def recommend(doc: dict[str, Any]) -> Recommendation:
    """The recommended settings for the app measured in ``doc``."""
    if doc.get("schema") != SCHEMA:
        raise ValueError(f"not a {SCHEMA} document (schema {doc.get('schema')!r})")
    machine = doc["machine"]
    cpus = int(machine["target_cpus"])
    budget = float(machine["memory_budget"])
    interface = doc.get("interface", "wsgi")
    # --bursty asks for a dynamic pool; its spare bounds count app threads, which an ASGI app
    # does not use, so an ASGI app keeps a fixed count.
    bursty = bool(doc.get("options", {}).get("bursty"))
    pool_mode = bursty and interface == "wsgi"
    items: list[Item] = []
    notes: list[str] = []
    if doc.get("failed"):
        failed = doc["failed"]
        notes.append(f"The run stopped early, in {failed['phase']}: {failed['error']}. The recommendation "
                     "rests on what was measured before.")
    if doc.get("interrupted"):
        notes.append("The run was interrupted: the recommendation rests on what was measured before.")
    if not doc.get("probe"):
        notes.append("Nothing was measured (the run ended before the first measurement did): no "
                     "recommendation.")
        return Recommendation([], {}, notes)
    work = workload(doc)

    # MPM, workers, threads.
    chosen, chosen_why = choose_mpm(doc, work)
    if chosen is None:
        mpm = "prefork" if work["bound"] == "cpu" and interface == "wsgi" else "event"
        notes.append("No configuration was measured under load (budget or errors): the MPM comes "
                     "from the probe alone.")
    else:
        mpm = chosen["shape"]["mpm"]
    ratio = work["wait_ratio"]
    at_most = "at most " if work.get("cpu_bounded") else ""
    class_text = (f"one connection at a time (the probe), a request takes {at_most}{us(work['cpu_us'])} of CPU "
                  f"(the app {us(work['app_cpu_us'])}, the "
                  f"server {us(work['server_us'])}) and waits {us(work['wait_us'])} in the app: "
                  f"W/C = {'at least ' if at_most else ''}{ratio:.2f}"
                  + (" (the probe's CPU time was under the clock's resolution)" if at_most else ""))
    threads = 0
    thread_why = ""
    if mpm == "prefork":
        cpu_cap = cpus if work["bound"] == "cpu" else max(cpus, math.ceil(cpus * (1 + ratio)))
        workers = cpu_cap
        if work["bound"] == "cpu":
            workers_why = (f"CPU-bound ({class_text}): one process per CPU keeps every CPU busy; "
                           f"more would only queue for them. workers = CPUs = {cpus}")
        else:
            workers_why = (f"{class_text}: CPUs x (1 + W/C) = {cpus} x {1 + ratio:.2f} = {workers} "
                           "processes keep the CPUs busy while requests wait")
    else:
        workers = cpus
        cpu_cap = cpus
        if interface != "wsgi":
            workers_why = (f"an ASGI app runs on each worker's event loop (app threads do not apply): "
                           f"one worker per CPU ({cpus})")
        else:
            workers_why = f"one worker per CPU ({cpus}), each with its pool of app threads"
            formula = min(MAX_THREADS, max(2, math.ceil(1 + ratio)))
            measured = int(chosen["shape"]["threads"]) if chosen else formula
            if work["bound"] == "wait" and measured == formula:
                threads = formula
                thread_why = (f"1 + W/C = 1 + {ratio:.2f} = {threads} per worker (threads = CPUs x "
                              f"(1 + W/C), one worker per CPU)")
            elif work["bound"] == "wait":
                threads = measured
                thread_why = (f"1 + W/C = {formula} per worker, but {chosen['shape']['name']} "  # type: ignore[index]
                              f"reached the best throughput with {measured}: fewer threads, as fast")
            else:
                threads = max(1, measured)
                thread_why = f"as measured ({chosen['shape']['name'] if chosen else 'the probe'})"
    mpm_why = (f"{class_text}. Measured: {chosen['shape']['name']} was chosen because {chosen_why}."
               if chosen is not None else class_text)
    items.append(Item("mpm", mpm, mpm_why, {"workload": work, "configuration": chosen["shape"] if chosen else None}))

    # Memory: preload, then the size of a worker.
    off, on = memory_variant(doc, False), memory_variant(doc, True)
    preload_item, preload = preload_choice(doc, off, on)
    variant = on if preload and on else (off or on)
    rate = leak_rate(doc)
    shared = worker_figures(variant)["shared"] if variant else 0.0
    uss = 0.0
    uss_text = ""
    if variant:
        uss = worker_figures(variant)["uss"]
        uss_text = f"USS per worker ({variant['shape']['name']}, after a load)"
        chosen_uss = max((w["uss"] for w in ((chosen or {}).get("memory_after") or {}).get("workers", [])),
                         default=0.0)
        if chosen_uss > uss:
            # The chosen configuration's workers grow bigger (threads' stacks and objects).
            uss = float(chosen_uss)
            uss_text = f"USS per worker ({chosen['shape']['name']}, after its sweep)"  # type: ignore[index]
        if rate is not None and rate["leaks"]:
            # A leaking worker's size after a load is only where the leak had got to; the
            # recycling below sizes the leak to each worker's share.
            uss = rate["uss_fresh"]
            uss_text = "USS of a fresh worker (the recycling below bounds the leak)"
    ceiling: int | None = None
    cap_text = ("CPUs x (1 + W/C)" if mpm == "prefork" and work["bound"] == "wait" else
                "one process per CPU" if mpm == "prefork" else "one worker per CPU")
    if variant:
        slots = max(0, int((budget - shared) // max(uss, 1)))
        fits = fit_under(slots)
        formula_text = (f"(memory budget {mib(budget)} - shared {mib(shared)}) / {uss_text} {mib(uss)} "
                        f"= {slots} workers; less room for reload_batch new workers during a reload: {fits}")
        ceiling = max(1, min(fits, max(cpu_cap, workers)))
        if budget <= shared:
            notes.append(f"The memory budget ({mib(budget)}) is below the memory the workers share "
                         f"({mib(shared)}) alone: give more memory (--memory-budget) or expect swapping.")
            formula_text = (f"(memory budget {mib(budget)} - shared {mib(shared)}): the shared memory alone "
                            "exceeds the budget")
            capped = "not even one fits: 1 all the same"
        elif fits < 1:
            notes.append(f"The memory budget ({mib(budget)}) does not hold one worker ({mib(uss)} of its own "
                         f"beside {mib(shared)} shared) with room for a reload: give more memory "
                         "(--memory-budget) or expect swapping.")
            capped = "not even one fits: 1 all the same"
        elif ceiling < fits:
            capped = "capped by what the CPUs can use"
        else:
            capped = "memory is the limit"
        if fits < workers:
            workers_why += (f". Memory lowers it: {fits} fit the budget with room for a reload"
                            if fits >= 1 else ". Memory lowers it to 1 (see the notes)")
            notes.append(f"Memory limits the workers to {max(1, fits)}, below the {workers} the CPUs "
                         "could use.")
            workers = max(1, fits)
        items.append(Item("max_workers", ceiling,
                          f"{formula_text}; {capped} ({cap_text} = {cpu_cap}): {ceiling}",
                          {"budget": budget, "shared": shared, "uss": uss, "slots": slots,
                           "fits_with_reload": fits, "cpu_cap": cpu_cap},
                          in_toml=pool_mode))
    else:
        notes.append("Memory was not measured: max_workers has no figure.")
    items.insert(1, Item("workers", workers, workers_why, {"cpus": cpus, "wait_ratio": ratio},
                         in_toml=not pool_mode))
    if mpm != "prefork" and interface == "wsgi":
        items.insert(2, Item("threads", threads, thread_why, {"wait_ratio": ratio}))
    items.append(preload_item)
    items.append(merge_choice(doc, on))

    # Leaks: max_requests and max_worker_memory.
    share = max(0.0, budget - shared) / max(1, workers + reload_batch(workers))
    share_text = (f"(budget {mib(budget)} - shared {mib(shared)}) / (workers {workers} + reload_batch "
                  f"{reload_batch(workers)}) = {mib(share)}")
    items += recycling(rate, share, share_text, uss)

    # The spare pool.
    if bursty:
        items += spare_pool(doc, chosen, mpm, interface, workers, threads, cpus, ceiling or workers)

    # Keep-alive from the client mix.
    clients = doc.get("clients")
    if clients:
        items += keepalive(clients, mpm)

    summary = capacity(doc, chosen, cpus, work)
    steps = [doc["probe"]["step"], *(s for c in doc.get("configs", []) for s in c.get("sweep", [])),
             *(s for c in doc.get("configs", []) for s in c.get("open_loop", []))]
    if any(s.get("disturbed") for s in steps):
        notes.append("Some measurements were disturbed by other work on this machine (marked in the "
                     "evidence): their figures are less certain.")
    for config in doc.get("configs", []):
        if config.get("error"):
            notes.append(f"{config['shape']['name']} failed and was left out: {config['error']}")
    for variant in doc.get("memory", []):
        if variant.get("error"):
            notes.append(f"The memory run {variant['shape']['name']} failed: {variant['error']}")
    for reason in doc.get("skipped", []):
        notes.append(f"Skipped: {reason}")
    return Recommendation(items, summary, notes)


def preload_choice(doc: dict[str, Any], off: dict[str, Any] | None,
                   on: dict[str, Any] | None) -> tuple[Item, bool]:
    """Preload when it saves at least 1 MiB and 10% of a worker's USS."""
    if off and on:
        fo, fn = worker_figures(off), worker_figures(on)
        so, sn = worker_figures(off, "start"), worker_figures(on, "start")
        # What preload shares is what the import built: the saving at start, as long as the
        # load does not undo it (copy-on-write); what the load itself adds (caches, a leak)
        # differs between the two runs and is not preload's doing.
        saving = min(so["uss"] - sn["uss"], fo["uss"] - fn["uss"])
        preload = saving >= max(MiB, 0.10 * so["uss"])
        pss_text = f"master + workers PSS {mib(so['pss_total'])} -> {mib(sn['pss_total'])} at start"
        figures = (f"USS at start {mib(so['uss'])} -> {mib(sn['uss'])}, after the load {mib(fo['uss'])} -> "
                   f"{mib(fn['uss'])}; {pss_text}")
        why = (f"saves {mib(saving)} of each worker's own memory ({figures})" if preload else
               f"saves only {mib(max(saving, 0))} per worker ({figures}): not needed")
        return Item("preload", True if preload else None, why,
                    {"without": fo, "with": fn, "without_at_start": so, "with_at_start": sn,
                     "saving_per_worker": saving}), preload
    failed = [v for v in doc.get("memory", []) if v.get("error")]
    why = (f"the app failed with preload: {failed[0]['error']}" if failed else
           "preload was not measured (budget)")
    return Item("preload", None, why + ": left at its default (off)"), False


def merge_choice(doc: dict[str, Any], on: dict[str, Any] | None) -> Item:
    """memory_merge only where ksmd runs and a measured run shows it saving 10%."""
    machine = doc["machine"]
    merged = memory_variant(doc, True, True)
    if not machine.get("memory_merge_supported", False):
        return Item("memory_merge", None, "this kernel has no PR_SET_MEMORY_MERGE (Linux 6.4+): not available")
    if machine.get("ksm", "absent") != "running":
        return Item("memory_merge", None,
                    "ksmd is not running (/sys/kernel/mm/ksm/run = 0): workers could opt in, but "
                    "nothing would be merged; switch ksmd on and tune again to measure it")
    if merged and on:
        base, with_merge = worker_figures(on), worker_figures(merged)
        saving = base["uss"] - with_merge["uss"]
        pays = saving >= 0.10 * base["uss"]
        return Item("memory_merge", True if pays else None,
                    f"KSM took each worker's USS from {mib(base['uss'])} to {mib(with_merge['uss'])}"
                    + ("" if pays else ": under 10%, not worth ksmd's CPU time"),
                    {"without": base, "with": with_merge})
    return Item("memory_merge", None, "not measured (budget): left off")


def recycling(rate: dict[str, Any] | None, share: float, share_text: str, uss: float) -> list[Item]:
    """max_requests, its jitter and max_worker_memory from the leak rate and a worker's share
    of the budget (``share_text``: its formula with the values; ``uss``: a worker's size)."""
    if rate is None:
        return [Item("max_requests", None, "the leak run was not measured (budget, or the run ended "
                                           "before it): not known")]
    if not rate["leaks"]:
        return [Item("max_requests", None,
                     f"no growth: USS moved {rate['growth'] / 1024:,.0f} KiB over "
                     f"{rate['span_requests']:,.0f} requests after the warm-up "
                     f"({rate['bytes_per_request']:.1f} B per request, r^2 = {rate['r2']:.2f}): not needed",
                     {"leak": rate}),
                Item("max_worker_memory", None,
                     (f"not needed (no growth); as a safety net, a worker's share of the budget is {share_text}"
                      if share > uss else
                      "not needed (no growth); the budget leaves a worker no more than its own size (see the notes)"),
                     {"share": share})]
    fit_text = (f"a worker's USS grows {rate['bytes_per_request'] / 1024:,.1f} KiB per request "
                f"(linear fit over {rate['samples']} samples after a {rate['warmup_requests']:,}-request "
                f"warm-up, r^2 = {rate['r2']:.2f})")
    headroom = share - rate["uss_fresh"]
    if headroom < max(MiB, 0.5 * rate["uss_fresh"]):
        return [Item("max_requests", None,
                     f"{fit_text}, but a worker's share of the budget, {share_text}, leaves a fresh worker "
                     f"({mib(rate['uss_fresh'])}) no room to grow: give more memory (--memory-budget) or "
                     "fewer workers, and tune again", {"leak": rate, "share": share})]
    max_requests = max(1, int(headroom / rate["bytes_per_request"]))
    return [
        Item("max_requests", max_requests,
             f"{fit_text}; a worker's share of the budget is {share_text}; a fresh worker has "
             f"{mib(rate['uss_fresh'])} (the line at 0 requests), so "
             f"{mib(headroom)} to grow: {mib(headroom)} / {rate['bytes_per_request'] / 1024:,.1f} KiB "
             f"= {max_requests:,} requests", {"leak": rate, "share": share}),
        Item("max_requests_jitter", max(1, max_requests // 10),
             "a tenth of max_requests, so the workers do not recycle together"),
        Item("max_worker_memory", f"{max(1, int(share // MiB))}MiB",
             f"the safety net under max_requests: a worker's share of the budget ({mib(share)}); "
             "the master recycles a worker whose USS passes it", {"share": share}),
    ]


def capacity(doc: dict[str, Any], chosen: dict[str, Any] | None, cpus: int,
             work: dict[str, Any]) -> dict[str, Any]:
    """Headline figures of the chosen configuration, scaled from the CPUs it ran on to ``cpus``."""
    summary: dict[str, Any] = {"workload": work}
    if chosen is None:
        return summary
    top, bend = peak(chosen), knee(chosen)
    measured_cpus = max(1, len(doc["machine"].get("server_cpus", [1])))
    summary.update({
        "configuration": chosen["shape"]["name"],
        "peak_rps": top["rps"] if top else None,
        "peak_concurrency": top["concurrency"] if top else None,
        "knee_concurrency": bend["concurrency"] if bend else None,
        "knee_p99_us": bend["latency_us"]["p99"] if bend else None,
        "measured_cpus": measured_cpus,
        "expected_rps": (top["rps"] * cpus / measured_cpus) if top else None,
        "cpu_us_per_request": top["cpu_us_per_request"] if top else None,
    })
    if chosen.get("open_loop"):
        summary["open_loop"] = [{"fraction": r["fraction"], "rate": r["rate"],
                                 "p50_us": r["latency_us"]["p50"], "p99_us": r["latency_us"]["p99"],
                                 "errors": r["errors"]} for r in chosen["open_loop"]]
    return summary


def spare_pool(doc: dict[str, Any], chosen: dict[str, Any] | None, mpm: str, interface: str,
               workers: int, threads: int, cpus: int, ceiling: int) -> list[Item]:
    """Spare bounds from Little's law on the open-loop runs at the lowest and highest rates,
    within what ``ceiling`` (max_workers) can hold (the pool's own checks, tines.pool)."""
    if interface != "wsgi":
        return [Item("min_spare_threads", None,
                     "--bursty: the spare bounds count idle app threads, and an ASGI app runs on each "
                     "worker's event loop, not on app threads: keep a fixed count of workers")]
    runs = (chosen or {}).get("open_loop") or []
    runs = [r for r in runs if r.get("app_us_per_request") and r.get("ok")]
    if len(runs) < 2:
        return [Item("min_spare_workers" if mpm == "prefork" else "min_spare_threads", None,
                     "--bursty: the open-loop runs were not measured (budget): the pool's defaults apply")]
    low, high = min(runs, key=lambda r: r["rate"]), max(runs, key=lambda r: r["rate"])
    measured_cpus = max(1, len(doc["machine"].get("server_cpus", [1])))
    scale = cpus / measured_cpus

    def busy(run: dict[str, Any]) -> float:
        return float(run["rps"]) * scale * float(run["app_us_per_request"]) / 1e6

    busy_low, busy_high = busy(low), busy(high)
    spread = max(1, math.ceil(busy_high - busy_low))
    evidence = {"low": {"rate": low["rps"] * scale, "busy": busy_low},
                "high": {"rate": high["rps"] * scale, "busy": busy_high}, "max_workers": ceiling}
    little = (f"Little's law, busy = rate x app time: {busy_low:.1f} busy at {low['rps'] * scale:,.0f} "
              f"requests/s and {busy_high:.1f} at {high['rps'] * scale:,.0f} (scaled to {cpus} CPUs)")
    if mpm == "prefork":
        spare = min(spread, ceiling)
        start = min(ceiling, max(1, math.ceil(busy_low) + spare))
        return [
            Item("start_workers", start, f"{little}: the low load's busy workers plus the spares, at most "
                 f"max_workers ({ceiling})", evidence),
            Item("min_spare_workers", spare, f"{little}: a burst from the low to the high rate needs "
                 f"{spread} more workers at once, before new ones boot (at most max_workers, {ceiling})",
                 evidence),
            Item("max_spare_workers", spare + cpus, f"min_spare_workers + CPUs ({cpus}), so an ebb does "
                 "not retire workers the next burst needs", evidence),
        ]
    per_worker = max(1, threads)
    spare = min(spread, ceiling * per_worker)
    return [
        Item("start_workers", min(ceiling, max(1, math.ceil((busy_low + spare) / per_worker))),
             f"{little}: enough workers of {per_worker} threads for the low load plus the spares, at most "
             f"max_workers ({ceiling})", evidence),
        Item("min_spare_threads", spare, f"{little}: a burst needs {spread} more app threads at once "
             f"(at most max_workers x threads = {ceiling * per_worker})", evidence),
        Item("max_spare_threads", spare + per_worker, "min_spare_threads + one worker's threads", evidence),
    ]


def keepalive(clients: dict[str, Any], mpm: str) -> list[Item]:
    """keepalive_timeout and max_keepalive_requests from a visit's requests and think time."""
    think = float(clients.get("think_s", 0.0))
    visit = int(clients.get("visit", 0))
    items: list[Item] = []
    if think > 0:
        timeout = max(1, math.ceil(think * 1.5))
        if mpm == "prefork" and timeout > 2:
            items.append(Item("keepalive_timeout", 2,
                              f"clients think {think:g} s between requests, but under prefork an idle "
                              "keep-alive connection holds a whole worker: 2 s (the event MPM holds an idle "
                              "connection for under a KiB and could keep it "
                              f"{timeout} s)", clients))
        else:
            items.append(Item("keepalive_timeout", min(timeout, 75),
                              f"clients think {think:g} s between requests: 1.5 x that keeps a visit on "
                              "one connection", clients))
    if visit > 0:
        value = max(10, math.ceil(visit * 2 / 10) * 10)
        items.append(Item("max_keepalive_requests", value,
                          f"a visit makes {visit} requests: twice that, rounded up to tens, lets a visit run "
                          "on one connection and still spreads clients over the workers after a reload",
                          clients))
    return items
