"""Listening sockets: bound once by the master and shared by every worker.

Owns: parsing a bind address (``HOST:PORT``, ``[IPv6]:PORT``, ``unix:/path``, ``fd://N``, after
an optional prefix: ``plain:``, ``h2c:``, ``http1+h2c:``), binding with ``SO_REUSEADDR``, the
configured backlog and ``TCP_DEFER_ACCEPT`` (TCP only), systemd socket activation
(``LISTEN_PID``/``LISTEN_FDS``/``LISTEN_FDNAMES``: fds 3.. are used instead of binding, and
the variables are removed from the environment so that nothing the app starts adopts them too), the address actually
bound (port 0 works), which listener speaks plain HTTP when ``certfile`` turns TLS on
(``Listener.plain``, ``tls_flags``) and which speaks HTTP/2 in cleartext (``Listener.h2c``,
``h2c_modes``), and removing Unix socket files at exit.

Which sockets are plain (docs/tls.md): a bind written ``plain:HOST:PORT`` or ``plain:fd://N``,
one written ``h2c:`` or ``http1+h2c:`` (cleartext HTTP/2, docs/http2.md), and every Unix socket.
An inherited socket (systemd's, or an old master's on USR2) takes its mode from its name in
``LISTEN_FDNAMES`` (``FDNAMES``: ``plain``, ``h2c`` or ``http1+h2c``, systemd's
``FileDescriptorName=``; an old master names its listeners so, ``tines`` the others), or from the
bind list's prefixed entry for its address as Tines writes it (``127.0.0.1:8080``, ``[::1]:8080``,
``unix:/run/x.sock``) or for its fd number (``h2c:fd://N``): the bind list is not bound under
socket activation, but it still marks the sockets it names.

Errors are ``ConfigError`` with one line, e.g.
``cannot bind 127.0.0.1:8000: [Errno 98] Address already in use``.
"""

from __future__ import annotations

import os
import socket
import stat
from dataclasses import dataclass

from tines import logs
from tines.config.validators import CLEARTEXT_PREFIXES, split_bind
from tines.errors import ConfigError

SD_LISTEN_FDS_START = 3
"""The first fd systemd passes (sd_listen_fds(3))."""

PLAIN_FDNAME = "plain"
"""The ``LISTEN_FDNAMES`` name of an inherited socket that speaks plain HTTP beside TLS ones."""

FDNAMES = {prefix[:-1]: mode for prefix, mode in CLEARTEXT_PREFIXES.items()}
"""The ``LISTEN_FDNAMES`` names of inherited cleartext sockets (the bind prefixes without their
colon: ``plain``, ``h2c``, ``http1+h2c``), and the h2c mode of each."""

MODE_FDNAMES = {mode: name for name, mode in FDNAMES.items()}
"""The name an old master gives a cleartext listener it passes on (``fdname``), by h2c mode."""

log = logs.get("sockets")


@dataclass
class Listener:
    """A bound, listening socket."""

    sock: socket.socket
    address: str
    """What was bound, as a bind string: ``127.0.0.1:43123``, ``[::1]:80``, ``unix:/run/x.sock``."""
    unlink: str | None = None
    """A Unix socket path to remove at exit (only for sockets we bound ourselves)."""
    plain: bool = False
    """Marked cleartext (a prefix or its inherited name): no TLS on it even with ``certfile``."""
    h2c: str = "off"
    """What it speaks in cleartext: ``off`` (HTTP/1.1), ``only`` (h2c with prior knowledge, an
    ``h2c:`` bind) or ``both`` (``http1+h2c:``)."""

    @property
    def tcp(self) -> bool:
        """A TCP socket (IPv4 or IPv6), which speaks TLS when ``certfile`` is set unless plain."""
        return self.sock.family in (socket.AF_INET, socket.AF_INET6)

    @property
    def tls(self) -> bool:
        """Speaks TLS when ``certfile`` is set: a TCP socket not marked plain."""
        return self.tcp and not self.plain

    def mark(self, mode: str | None) -> None:
        """Take the h2c mode of a bind's prefix (``split_bind``; None: no prefix)."""
        self.plain = mode is not None
        self.h2c = mode or "off"

    @property
    def fdname(self) -> str | None:
        """Its ``LISTEN_FDNAMES`` name when handed on (``FDNAMES``), or None when it has no prefix."""
        return MODE_FDNAMES[self.h2c] if self.plain else None

    def fileno(self) -> int:
        """The listening fd."""
        return self.sock.fileno()

    def close_socket(self) -> None:
        """Close this process's copy of the socket, keeping the file (the final stop: the
        socket itself closes once the workers' copies are closed too)."""
        self.sock.close()

    def close(self) -> None:
        """Close the socket and remove its file if we created it."""
        self.sock.close()
        if self.unlink:
            try:
                os.unlink(self.unlink)
            except FileNotFoundError:
                pass


def describe(sock: socket.socket) -> str:
    """The bind string for a socket's local address."""
    if sock.family == socket.AF_UNIX:
        name = sock.getsockname()
        return f"unix:{name.decode() if isinstance(name, bytes) else name}"
    host, port = sock.getsockname()[:2]
    return f"[{host}]:{port}" if sock.family == socket.AF_INET6 else f"{host}:{port}"


def _split_host_port(address: str) -> tuple[str, int]:
    if address.startswith("["):
        host, _, port = address[1:].partition("]:")
    else:
        host, _, port = address.rpartition(":")
    return host, int(port)


def _bind_unix(path: str, backlog: int) -> Listener:
    try:
        if stat.S_ISSOCK(os.stat(path).st_mode):
            os.unlink(path)  # a stale socket from a previous run
    except FileNotFoundError:
        pass
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        sock.listen(backlog)
    except OSError as error:
        sock.close()
        raise ConfigError(f"cannot bind unix:{path}: {error}") from None
    return Listener(sock, f"unix:{path}", unlink=path)


def _bind_inet(address: str, backlog: int) -> Listener:
    host, port = _split_host_port(address)
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as error:
        raise ConfigError(f"cannot bind {address}: {error}") from None
    family, kind, proto, _, sockaddr = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(sockaddr)
        sock.listen(backlog)
    except OSError as error:
        sock.close()
        raise ConfigError(f"cannot bind {address}: {error}") from None
    return Listener(sock, describe(sock))


def _adopt(fd: int, backlog: int, what: str) -> Listener:
    try:
        sock = socket.socket(fileno=fd)
        sock.listen(backlog)
    except OSError as error:
        raise ConfigError(f"cannot use {what}: {error}") from None
    return Listener(sock, describe(sock))


def systemd_fds(environ: dict[str, str] | None = None) -> list[int]:
    """The fds passed by systemd socket activation to this process, or []."""
    env = os.environ if environ is None else environ
    if env.get("LISTEN_PID") != str(os.getpid()):
        return []
    try:
        count = int(env.get("LISTEN_FDS", "0"))
    except ValueError:
        return []
    return list(range(SD_LISTEN_FDS_START, SD_LISTEN_FDS_START + count))


def defer_accept(sock: socket.socket, seconds: int) -> None:
    """Set ``TCP_DEFER_ACCEPT`` on a TCP listening socket (0 clears it); a Unix socket is left
    as it is. The workers read it back and read a connection as they accept it.

    Why: the kernel then queues a connection for accept once its first bytes came, so a worker
    is woken once per connection (not for the handshake, then for the request) and its first
    read finds the request (docs/mpm.md)."""
    option = getattr(socket, "TCP_DEFER_ACCEPT", None)
    if sock.family not in (socket.AF_INET, socket.AF_INET6) or option is None:
        return
    try:
        sock.setsockopt(socket.IPPROTO_TCP, option, seconds)
    except OSError as error:
        # Only latency is at stake: serve without it.
        log.warning("defer_accept: cannot set TCP_DEFER_ACCEPT on %s: %s", describe(sock), error)


def tls_flags(listeners: list[Listener], tls: bool) -> list[bool]:
    """Which of ``listeners`` speak TLS (``WorkerSpec.tls_listeners``): none without TLS
    material (``tls`` False), else the TCP ones not marked plain."""
    return [tls and listener.tls for listener in listeners]


def h2c_modes(listeners: list[Listener]) -> list[str]:
    """What each of ``listeners`` speaks in cleartext (``WorkerSpec.h2c_listeners``): ``off``,
    ``only`` or ``both``."""
    return [listener.h2c for listener in listeners]


def _inherited_mode(listener: Listener, fd: int, name: str, marked: dict[str, str]) -> str | None:
    """An inherited socket's h2c mode (None: unmarked): its ``LISTEN_FDNAMES`` name's, else the
    bind list's for its address or fd number."""
    if name in FDNAMES:
        return FDNAMES[name]
    return marked.get(listener.address, marked.get(f"fd://{fd}"))


def bind_all(binds: tuple[str, ...] | list[str], backlog: int, defer: int = 0) -> list[Listener]:
    """Bind (or adopt) every listener, with ``TCP_DEFER_ACCEPT`` set to ``defer`` seconds on the
    TCP ones; close the ones already bound if one fails."""
    listeners: list[Listener] = []
    try:
        inherited = systemd_fds()
        if inherited:
            names = os.environ.get("LISTEN_FDNAMES", "").split(":")
            for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
                os.environ.pop(name, None)
            marked = {address: mode for mode, address in map(split_bind, binds) if mode is not None}
            for index, fd in enumerate(inherited):
                listener = _adopt(fd, backlog, f"systemd socket fd {fd}")
                listeners.append(listener)
                name = names[index] if index < len(names) and names[index] else "unnamed"
                listener.mark(_inherited_mode(listener, fd, name, marked))
                log.info("socket activation: fd %d (%s) is %s", fd, name, listener.address)
            binds = []
        for bind in binds:
            mode, address = split_bind(bind)
            if address.startswith("unix:"):
                listeners.append(_bind_unix(address[len("unix:"):], backlog))
            elif address.startswith("fd://"):
                listeners.append(_adopt(int(address[len("fd://"):]), backlog, address))
            else:
                listeners.append(_bind_inet(address, backlog))
            listeners[-1].mark(mode)
    except BaseException:
        for listener in listeners:
            listener.close()
        raise
    for listener in listeners:
        defer_accept(listener.sock, defer)
        listener.sock.set_inheritable(True)
    return listeners
