"""systemd's readiness protocol (sd_notify(3)) from the master, without libsystemd.

Owns: the one notification socket of the master. When ``NOTIFY_SOCKET`` is set at start (a
filesystem path, or ``@name`` for the abstract namespace), the master opens one close-on-exec
``AF_UNIX`` datagram socket and sends newline-separated ``KEY=VALUE`` assignments to it:

- ``READY=1`` plus ``STATUS=`` when every worker is ready (``ready``);
- ``RELOADING=1`` plus ``MONOTONIC_USEC=`` (CLOCK_MONOTONIC in µs) when a reload starts, and
  ``READY=1`` plus ``STATUS=`` when it ends, succeeded or failed (``reload_started``,
  ``reload_finished``);
- ``STOPPING=1`` at the start of every stop (``stopping``);
- ``MAINPID=`` when another process takes over as the main one (``main_pid``, the binary
  upgrade).

``NOTIFY_SOCKET`` is removed from the environment once read, so workers and whatever the app
runs never see it (the address stays in ``Notifier.address`` for a master that hands it on to
its successor). Without ``NOTIFY_SOCKET`` every method does nothing. A failed send is logged
once (a warning; later ones at debug) and never ends the master. No thread, no libsystemd.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import MutableMapping

from tines import logs

ENVIRONMENT_VARIABLE = "NOTIFY_SOCKET"

SEND_TIMEOUT = 1.0
"""The longest one send may block (seconds). A datagram send blocks only while the receiver's
queue is full; systemd reads its queue at once, and a stuck receiver must not stall the master."""

log = logs.get("sdnotify")


def socket_address(value: str) -> str | None:
    """The ``AF_UNIX`` address for a ``NOTIFY_SOCKET`` value: a path, or ``@name`` for the
    abstract namespace (a leading NUL byte); None for anything else (``vsock:`` addresses,
    relative paths), which Tines does not speak."""
    if value.startswith("@") and len(value) > 1:
        return "\0" + value[1:]
    if value.startswith("/"):
        return value
    return None


def monotonic_usec() -> int:
    """CLOCK_MONOTONIC in microseconds (what ``MONOTONIC_USEC=`` carries)."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000


class Notifier:
    """The master's side of sd_notify. ``Notifier.from_environment()`` at start; every method
    is a no-op when the service manager did not ask for notifications."""

    def __init__(self, address: str | None) -> None:
        self.address = address
        """The ``NOTIFY_SOCKET`` value as given (``@name`` or a path), None when unset."""
        self.socket: socket.socket | None = None
        self.target: str | None = None
        self.warned = False
        self.reloading = False
        """A reload was announced (``RELOADING=1``) and has not finished yet."""
        self.handed_over = False
        """Another process is the main one now (``main_pid``): this one says nothing more."""
        self.stop_sent = False
        if address is None:
            return
        self.target = socket_address(address)
        if self.target is None:
            log.warning("NOTIFY_SOCKET=%r is neither an absolute path nor @name: "
                        "not sending readiness notifications", address)
            return
        # Python's sockets are close-on-exec (PEP 446): nothing the master execs inherits it.
        self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.socket.settimeout(SEND_TIMEOUT)

    @classmethod
    def from_environment(cls, environ: MutableMapping[str, str] | None = None) -> Notifier:
        """Read (and remove) ``NOTIFY_SOCKET`` from the environment and open the socket."""
        env = os.environ if environ is None else environ
        return cls(env.pop(ENVIRONMENT_VARIABLE, None) or None)

    @property
    def enabled(self) -> bool:
        """True when notifications are sent."""
        return self.socket is not None

    def fileno(self) -> int | None:
        """The socket's fd (for a forked worker to close), None when there is none."""
        return self.socket.fileno() if self.socket is not None else None

    def send(self, *assignments: str) -> bool:
        """Send one datagram of ``KEY=VALUE`` lines; False (logged) when it could not be sent."""
        if self.socket is None or self.target is None or self.handed_over:
            return False
        message = "\n".join(assignments).encode()
        try:
            self.socket.sendto(message, self.target)
        except OSError as error:
            level = log.debug if self.warned else log.warning
            level("cannot notify the service manager at NOTIFY_SOCKET=%s (%s): %s",
                  self.address, ", ".join(assignments), error)
            self.warned = True
            return False
        log.debug("notified the service manager: %s", ", ".join(assignments))
        return True

    def ready(self, status: str) -> None:
        """Every worker is ready: ``READY=1`` with ``STATUS=``."""
        self.send("READY=1", f"STATUS={status}")

    def reload_started(self) -> None:
        """A reload begins: ``RELOADING=1`` with ``MONOTONIC_USEC=`` (systemd waits for the
        ``READY=1`` that ends it)."""
        self.reloading = True
        self.send("RELOADING=1", f"MONOTONIC_USEC={monotonic_usec()}", "STATUS=reloading")

    def reload_finished(self, succeeded: bool, status: str) -> None:
        """The reload ended (the new generation is ready, or it failed and the old one serves
        on): ``READY=1`` with ``STATUS=``. Nothing when no reload was announced."""
        if not self.reloading:
            return
        self.reloading = False
        self.send("READY=1", f"STATUS={status}" if succeeded else f"STATUS=reload failed; {status}")

    def stopping(self) -> None:
        """A stop begins: ``STOPPING=1`` (readiness off), once (an INT during a TERM's
        ``shutdown_delay`` says nothing new)."""
        if self.stop_sent:
            return
        self.stop_sent = True
        self.send("STOPPING=1", "STATUS=stopping")

    def main_pid(self, pid: int) -> None:
        """``MAINPID=pid``: another process (a new master after a binary upgrade) is the main
        one; from then on this process sends nothing more, until it is named again (a
        rollback)."""
        self.handed_over = False
        self.send(f"MAINPID={pid}")
        self.handed_over = pid != os.getpid()

    def close(self) -> None:
        """Close the socket (at the master's exit)."""
        if self.socket is not None:
            self.socket.close()
            self.socket = None
