"""Which interface runs and which MPM really serves it, in the words every message uses: the
master's start-up and ready lines, sd_notify's status, ``--ready-fd``'s line, check-config,
the workers' process titles, and what the master says and waits on Ctrl-C (INT).

An ASGI app always runs on the event MPM's reactor (ADR 0014), whatever ``mpm`` says (a set
``mpm`` other than event is refused: ``app_loader.check_mpm``), so a message naming ``cfg.mpm``
for it would be wrong. Until an app is imported its interface is known only when the
``interface`` setting names it; otherwise the master learns it from its first worker (the
``interface`` message of ``tines.worker``).

Owns: those words, as pure functions of the interface, the ``mpm`` setting and the worker count
(and Ctrl-C's wait, of the interface and ``interrupt_timeout``).
Must not: import the app or read anything: callers pass what they know.
"""

from __future__ import annotations

INTERFACES = {"wsgi": "WSGI", "asgi3": "ASGI 3", "asgi2": "ASGI 2"}
"""The interfaces ``app_loader.interface_of`` finds, as messages name them."""

REACTOR = "the event MPM's reactor and an asyncio loop per worker"
"""What serves an ASGI app."""


def plural(count: int, noun: str) -> str:
    """``1 worker``, ``2 workers``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def known_interface(setting: str) -> str | None:
    """The interface the ``interface`` setting fixes before the app is imported; None for
    ``auto`` (known once the app is)."""
    return {"wsgi": "wsgi", "asgi": "asgi3", "asgi2": "asgi2"}.get(setting)


def serving_mpm(interface: str | None, mpm: str) -> str:
    """The MPM that really serves: ``mpm`` for a WSGI app, ``event`` for an ASGI one; ``mpm``
    while the interface is not known."""
    return "event" if interface in ("asgi3", "asgi2") else mpm


def what_serves(interface: str, mpm: str) -> str:
    """``WSGI app on mpm prefork``; ``ASGI 3 app on the event MPM's reactor and ...``."""
    if interface == "wsgi":
        return f"WSGI app on mpm {mpm}"
    return f"{INTERFACES[interface]} app on {REACTOR}"


def start_line(interface: str | None, mpm: str, mpm_given: bool, workers: str) -> str:
    """The master's line before its first fork; ``workers`` says how many (``plural``) or
    which dynamic pool, ``mpm_given`` whether ``mpm`` was set (not its default). Before the app
    is loaded, a default ``mpm`` is not named: an ASGI app would not run on it (a set one other
    than event refuses an ASGI app, so naming it is right either way)."""
    if interface is None:
        if mpm_given:
            return f"Using mpm {mpm} with {workers}"
        return f"Starting {workers}; the ready line says which interface and MPM serve the app"
    if interface == "wsgi":
        return f"Using mpm {mpm} with {workers} for a WSGI app"
    return f"Using {REACTOR} with {workers} for an {INTERFACES[interface]} app"


def workers_line(interface: str | None, mpm: str, workers: int) -> str:
    """How many workers, the interface and what serves it: ``2 workers, WSGI app on mpm
    prefork`` (the ready line, sd_notify's ``STATUS=``)."""
    if interface is None:  # no worker said (a worker of an older build): the setting's MPM
        return f"{plural(workers, 'worker')}, mpm {mpm}"
    return f"{plural(workers, 'worker')}, {what_serves(interface, mpm)}"


def app_is(interface: str, mpm: str) -> str:
    """What check-config says an app is and what serves it: ``a WSGI app, on mpm prefork``; for
    an ASGI app, that the ``mpm`` its table shows is not what serves it."""
    if interface == "wsgi":
        return f"a WSGI app, on mpm {mpm}"
    aside = f" (mpm {mpm} is for WSGI apps)" if mpm != "event" else ""
    return f"an {INTERFACES[interface]} app, on {REACTOR}{aside}"


def interface_line(setting: str, mpm: str) -> str:
    """check-config's line for the ``interface`` setting, before the app is imported."""
    interface = known_interface(setting)
    if interface is None:
        return (f"interface: {setting}: not known until the app is imported (--check-app imports it); "
                f"WSGI apps run on mpm {mpm}, ASGI apps on the event MPM's reactor")
    return f"interface: {setting}: {app_is(interface, mpm)}"


def title_tag(interface: str | None, mpm: str) -> str:
    """What a worker's process title shows between brackets: the MPM serving a WSGI app
    (``prefork``), ``asgi event`` for an ASGI app, ``loading`` while the app's interface is not
    known."""
    if interface is None:
        return "loading"
    return mpm if interface == "wsgi" else "asgi event"


def interrupt_wait(interface: str | None, interrupt_timeout: float) -> float:
    """What Ctrl-C's stop adds to the quick stop's wait for the workers: ``interrupt_timeout``
    for an ASGI app, whose workers run its lifespan shutdown; nothing for a WSGI app, which has
    none to run. While no worker has said which (interface ``auto``, no worker loaded the app
    yet), as for ASGI: an ASGI app's shutdown must not be cut for want of a message."""
    return 0.0 if interface == "wsgi" else interrupt_timeout


def interrupt_line(interface: str | None, interrupt_timeout: float) -> str:
    """The master's line on INT (Ctrl-C): the ASGI lifespan shutdown and its deadline named
    only for an app that has one (``interrupt_wait``)."""
    if interface == "wsgi":
        return "INT: quick stop (Ctrl-C again: at once)"
    app = "an ASGI app's" if interface is None else "the ASGI"
    return f"INT: quick stop, {app} lifespan shutdown given up to {interrupt_timeout:g} s (Ctrl-C again: at once)"
