"""Binary upgrade with rollback (``USR2``, and ``HUP`` with ``--preload``): nginx's scheme.

Owns: the command line and working directory recorded at start (``Invocation``), starting a
new master (fork, then exec of ``sys.executable -m tines`` with that argv in that directory,
the listeners passed as inherited fds 3.. with a systemd-style ``LISTEN_PID``/``LISTEN_FDS``/
``LISTEN_FDNAMES`` environment, which ``tines.sockets.bind_all`` adopts instead of binding; a
listener marked cleartext is named ``plain``, ``h2c`` or ``http1+h2c``, so it keeps its mode), the TLS ticket
secret (a sealed memfd named in ``_TINES_UPGRADE_TICKET_FD``: the new master's ticket keys are
its old master's, so tickets resume across the upgrade; never the secret itself in the
environment, which ``/proc/PID/environ`` shows), the rate limits' shared table (its memfd named in
``_TINES_UPGRADE_RATE_TABLE_FD``: the new master's workers count in the same buckets), the
per-client connection counts (``_TINES_UPGRADE_CONNECTIONS``: their memfd and the side the old
master's workers count on; the new master's count on the other and see both), the readiness pipe (an inherited fd named in
``_TINES_UPGRADE_READY_FD``: the new master writes one byte to it once all its workers are
ready), the hand-over (this master retires its workers
with the drain and exits 0), the rollback (the new master exits before ready: this master never
stopped its workers and keeps serving, with one log line saying why), ``WINCH`` / ``HUP`` /
``TERM`` / ``USR2`` during the overlap, the Unix socket files (only the master that owns the
listeners at its exit removes them) and the pid file's moves (``tines.pidfile``).

It decides and the master acts: each look (``turn``, ``reaped``, ``winch``) returns a
``Decision`` that ``Arbiter.carry_out_upgrade`` carries out (retire every worker, tell systemd,
leave); it reads no state of the master but what it is given (``Inheritance``, a worker count).
The decisions are unit-tested without a process (tests/python/unit/test_upgrade_policy.py).

Must not: import ``tines.arbiter``, exec in place (that would end this master and any rollback),
signal a worker, or kill the new master (it is a master of its own: no parent-death signal, it is
reparented when this one exits).
Design: docs/adr/0006-binary-upgrade.md; the sequence: docs/signals.md "Upgrade".
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import sys
from dataclasses import dataclass, replace

from tines import logs
from tines.pidfile import PidFile
from tines.sockets import SD_LISTEN_FDS_START, Listener
from tines.tls import SECRET_SIZE

ENV_READY_FD = "_TINES_UPGRADE_READY_FD"
"""The fd on which a new master tells its old master it is ready (not ``TINES_*``: that prefix
is for settings, and the CLI warns about unknown ones)."""
ENV_STATUS_FD = "_TINES_UPGRADE_STATUS_FD"
"""The fd of the status listener (``status_bind``) a new master takes over, when there is one."""
ENV_OLD_MASTER = "_TINES_UPGRADE_OLD_MASTER"
"""The old master's pid (its pid file may be replaced; USR2 waits until it has exited)."""
ENV_UNLINK = "_TINES_UPGRADE_UNLINK"
"""Unix socket paths (a JSON list) that the old master bound: the new master owns them now."""
ENV_TICKET_FD = "_TINES_UPGRADE_TICKET_FD"
"""The fd of a sealed memfd holding the TLS ticket secret (``tines.tls.SECRET_SIZE`` bytes)."""
ENV_RATE_TABLE_FD = "_TINES_UPGRADE_RATE_TABLE_FD"
"""The fd of the rate limits' shared table (a memfd, ``tines.rate_limits``): the new master maps
the same buckets, so a client's limit holds across the upgrade."""
ENV_CONNECTIONS = "_TINES_UPGRADE_CONNECTIONS"
"""``FD:SIDE``: the memfd of ``max_connections_per_client``'s counts (``tines.rate_limits``) and
the side the old master's workers write: connections open on them keep counting against the new
master's admissions until they close."""
LISTEN_FDNAME = "tines"
"""The name of each passed listener in ``LISTEN_FDNAMES`` (sd_listen_fds_with_names(3)), but
for the cleartext ones (``tines.sockets.Listener.fdname``: ``plain``, ``h2c``, ``http1+h2c``)."""

READY_BYTE = b"R"
EXIT_EXEC_FAILED = 127
"""Exit status of the forked child when the exec itself fails (the shell's 'cannot execute')."""

log = logs.get("upgrade")


@dataclass(frozen=True)
class Invocation:
    """How this master was started, recorded before any ``chdir``: what a new master re-runs."""

    arguments: tuple[str, ...]
    """``sys.argv[1:]``: the words after ``tines`` / ``python -m tines``."""
    cwd: str

    @classmethod
    def record(cls) -> Invocation:
        """The current process's arguments and working directory."""
        return cls(tuple(sys.argv[1:]), os.getcwd())

    def command(self) -> list[str]:
        """The new master's argv: this interpreter running the ``tines`` package now installed."""
        return [sys.executable, "-m", "tines", *self.arguments]


@dataclass(frozen=True)
class Inheritance:
    """What a new master is given by this one."""

    pid: int
    """This master's (the new one waits for it to exit before it takes a USR2 of its own)."""
    listeners: list[Listener]
    """The public listeners, passed as fds 3.. (``LISTEN_FDS``)."""
    status: list[Listener]
    """The status listener, if bound (``ENV_STATUS_FD``)."""
    notify_socket: str | None
    """systemd's ``NOTIFY_SOCKET`` (the master took it out of its environment, tines.sdnotify)."""
    ticket_secret: bytes = b""
    """The TLS ticket secret (``ENV_TICKET_FD``); empty: none is passed."""
    rate_table_fd: int | None = None
    """The rate limits' table's memfd (``ENV_RATE_TABLE_FD``); None: this master has none."""
    client_connections: tuple[int, int] | None = None
    """The connection counts' memfd and this master's side (``ENV_CONNECTIONS``); None: none."""


@dataclass(frozen=True)
class Decision:
    """What a look at the upgrade asks of the master, carried out in the order of the fields."""

    succeeded: int | None = None
    """The new master (this pid) is ready: systemd hears that it is the main process now. The
    one place that knows an upgrade succeeded."""
    retire: str | None = None
    """Retire every worker (reason ``reload``, the drain) with these words for the log: the
    hand-over to a ready new master, or WINCH during the overlap."""
    main_again: bool = False
    """The new master died after systemd was told it is the main one: name this master again
    (``MAINPID=``, ``READY=1``)."""
    failed: bool = False
    """A rollback: this master keeps serving (``READY=1`` after a HUP with --preload's
    ``RELOADING=1``)."""
    leave: bool = False
    """The hand-over is over (this master's workers are gone, or ``graceful_timeout`` passed):
    exit 0 (shutdown kills what is left)."""


def describe_status(status: int) -> str:
    """``exited with status N`` / ``was killed by signal SIGX`` for a wait status."""
    if os.WIFSIGNALED(status):
        return f"was killed by signal {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exited with status {os.WEXITSTATUS(status)}"


def secret_fd(secret: bytes) -> int:
    """A memfd holding ``secret``, sealed (no write, no resize) and at offset 0: what the new
    master reads (``take_secret``). Not an environment variable: ``/proc/PID/environ`` shows
    those to anyone who can read the process."""
    fd = os.memfd_create("tines-tls-ticket-secret", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.write(fd, secret)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS,
                fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE)
    return fd


def take_secret(fd_text: str | None) -> bytes | None:
    """The secret in the inherited fd ``fd_text`` names (``ENV_TICKET_FD``), which is closed;
    None when there is none, or when it cannot be read (with a warning: the new master then
    makes its own, and tickets issued before the upgrade do a full handshake once)."""
    if fd_text is None:
        return None
    try:
        fd = int(fd_text)
        try:
            secret = os.pread(fd, 64, 0)
        finally:
            os.close(fd)
    except (OSError, ValueError) as error:
        log.warning("cannot take the TLS ticket secret from the old master (%s=%s): %s", ENV_TICKET_FD, fd_text, error)
        return None
    if len(secret) != SECRET_SIZE:
        log.warning("the TLS ticket secret from the old master has %d bytes, not %d: not used",
                    len(secret), SECRET_SIZE)
        return None
    return secret


def take_counts(text: str | None) -> tuple[int, int] | None:
    """The connection counts' fd and the old master's side that ``ENV_CONNECTIONS`` names (the fd
    made close-on-exec); None when there are none (or the value is not ``FD:SIDE``)."""
    fd_text, colon, side = (text or "").partition(":")
    if not colon or side not in ("0", "1"):
        return None
    fd = take_fd(fd_text)
    return None if fd is None else (fd, int(side))


def take_fd(fd_text: str | None) -> int | None:
    """The inherited fd ``fd_text`` names, made close-on-exec (the workers' forks keep it, a
    later upgrade passes its own copy); None when there is none or it is not an open fd."""
    if fd_text is None or not fd_text.isdigit():
        return None
    try:
        os.set_inheritable(int(fd_text), False)
    except OSError as error:
        log.warning("cannot take the fd the old master passed (%s): %s", fd_text, error)
        return None
    return int(fd_text)


class Upgrade:
    """The master's side of upgrades, as the old master (``start`` ... ``reaped``) and as a new
    one (``old_master``, ``tell_old_master_ready``)."""

    def __init__(self, invocation: Invocation, pid_file: str | None,
                 environ: dict[str, str] | os._Environ[str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self.invocation = invocation
        self.pid_file = PidFile(os.path.join(invocation.cwd, pid_file)) if pid_file else None
        self.new_pid: int | None = None
        """The new master during an overlap (from the fork until it is reaped)."""
        self.ready_read = -1
        self.handing_over = False
        """The new master said ready: this master's workers drain, then it exits."""
        self.deadline = 0.0
        self.workers_stopped = False
        """WINCH during the overlap stopped this master's workers (started again on rollback)."""
        self.leaving = False
        """This master's final stop (TERM, INT, QUIT) has begun."""
        self.kept_unlink: list[tuple[Listener, str]] = []
        # As a new master: what the old one passed (removed from the environment, so neither the
        # workers nor a later upgrade see it).
        self.old_master: int | None = None
        self.ready_write = -1
        self.unlink_paths: list[str] = []
        self.ticket_secret = take_secret(env.pop(ENV_TICKET_FD, None))
        """The old master's TLS ticket secret; None when none was passed (or it was unreadable)."""
        self.rate_table_fd = take_fd(env.pop(ENV_RATE_TABLE_FD, None))
        """The old master's rate-limit table's memfd (``tines.rate_limits`` adopts it); None:
        none was passed."""
        self.client_connections = take_counts(env.pop(ENV_CONNECTIONS, None))
        """The old master's connection counts' memfd and side (``tines.rate_limits`` adopts
        them); None: none were passed."""
        self.old_master_gone = False
        """``old_master_left`` said so already."""
        ready = env.pop(ENV_READY_FD, None)
        old = env.pop(ENV_OLD_MASTER, None)
        unlink = env.pop(ENV_UNLINK, None)
        if ready is not None and ready.isdigit() and old is not None and old.isdigit():
            try:
                os.set_inheritable(int(ready), False)
                self.ready_write = int(ready)
                self.old_master = int(old)
                self.unlink_paths = [str(path) for path in json.loads(unlink or "[]")]
            except (OSError, ValueError, TypeError) as error:
                log.warning("cannot take over from the old master (%s=%s): %s", ENV_READY_FD, ready, error)

    # ----- both sides ------------------------------------------------------------------------

    def write_pid_file(self, pid: int) -> None:
        """At start: PATH gets this master's pid (ConfigError while a live process holds it;
        a new master may replace its old master's pid if the rename to .oldbin failed)."""
        if self.pid_file is not None:
            self.pid_file.write(pid, may_replace=self.old_master)

    def adopt(self, listeners: list[Listener]) -> None:
        """As a new master: take over the removal at exit of the Unix socket files the old
        master bound (the adopted listeners have none: ``sockets`` never removes what it did
        not bind)."""
        for listener in listeners:
            path = listener.address[len("unix:"):] if listener.address.startswith("unix:") else None
            if path is not None and path in self.unlink_paths:
                listener.unlink = path

    def at_exit(self, pid: int) -> None:
        """Last, as the master exits: close the pipes, remove whichever of PATH and
        PATH.oldbin holds this master's pid (never the new master's PATH)."""
        for fd in (self.ready_read, self.ready_write):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.ready_read = self.ready_write = -1
        if self.pid_file is not None:
            self.pid_file.remove(pid)

    # ----- as the new master -----------------------------------------------------------------

    def tell_old_master_ready(self) -> None:
        """Once all this master's workers are ready: the old master may hand over."""
        if self.ready_write < 0:
            return
        try:
            os.write(self.ready_write, READY_BYTE)
            log.info("upgrade: told the old master %s that this master is ready", self.old_master)
        except OSError as error:
            log.info("upgrade: the old master %s is gone (%s): this master serves alone",
                     self.old_master, error.strerror)
        finally:
            os.close(self.ready_write)
            self.ready_write = -1

    # ----- as the old master -----------------------------------------------------------------

    @property
    def wants_workers(self) -> bool:
        """False while this master's workers are to stay stopped (WINCH, the hand-over)."""
        return not (self.workers_stopped or self.handing_over)

    def watched(self) -> list[int]:
        """The fds the master's loop waits on for the upgrade (the readiness pipe)."""
        return [self.ready_read] if self.ready_read >= 0 else []

    def start(self, why: str, announced: bool, passed: Inheritance) -> bool:
        """Start a new master (``why``: ``USR2``, ``HUP with --preload``), unless one runs or
        this master is not ``announced`` ready yet; True when one was started (its outcome comes
        later: ``turn``, ``reaped``)."""
        if self.new_pid is not None:
            log.warning("%s ignored: an upgrade is in progress (new master %d)", why, self.new_pid)
            return False
        if not announced:
            log.warning("%s ignored: this master is not ready yet", why)
            return False
        if self.old_master is not None and os.getppid() == self.old_master:
            # nginx's rule: the old master still holds PATH.oldbin.
            log.warning("%s ignored: this master's old master %d has not exited yet", why, self.old_master)
            return False
        read, write = os.pipe2(os.O_CLOEXEC)
        os.set_blocking(read, False)
        if self.pid_file is not None:
            self.pid_file.to_oldbin(passed.pid)
        # During the overlap the socket files belong to whichever master lives on.
        self.kept_unlink = [(listener, listener.unlink) for listener in [*passed.listeners, *passed.status]
                            if listener.unlink]
        for listener, _ in self.kept_unlink:
            listener.unlink = None
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            pid = os.fork()
        except OSError as error:
            os.close(read)
            os.close(write)
            log.error("%s: cannot fork a new master: %s; this master keeps serving", why, error)
            self.restore()
            return False
        if pid == 0:
            self.exec_new_master(passed, write)  # never returns
        os.close(write)
        self.new_pid = pid
        self.ready_read = read
        log.info("%s: started new master %d (%s); this master %d serves until it is ready",
                 why, pid, " ".join(self.invocation.command()), passed.pid)
        return True

    def exec_new_master(self, passed: Inheritance, ready_write: int) -> None:
        """In the forked child: listeners to fds 3.., the readiness pipe after them, nothing
        else inherited, then exec. Never returns (exit 127 if the exec fails)."""
        try:
            signal.set_wakeup_fd(-1)
            signal.pthread_sigmask(signal.SIG_SETMASK, set())
            # Then the status listener, if any (the new master serves it: ENV_STATUS_FD).
            status = [listener.fileno() for listener in passed.status]
            # Then the ticket secret, if any (ENV_TICKET_FD): made here, so the old master
            # never holds the copy.
            ticket = []
            if passed.ticket_secret:
                try:
                    ticket = [secret_fd(passed.ticket_secret)]
                except OSError as error:
                    # No memfd here (an old kernel, a seccomp filter): the upgrade goes on and
                    # the new master makes its own secret (tickets from before it make one full
                    # handshake), rather than fail the whole upgrade for a resumption.
                    os.write(2, f"tines: the TLS ticket secret is not passed to the new master "
                                f"(memfd: {error}); tickets from before the upgrade will not resume\n".encode())
            # Then the rate limits' table, if any (ENV_RATE_TABLE_FD): the same memfd, so both
            # masters' workers share the buckets during the overlap and after.
            table = [passed.rate_table_fd] if passed.rate_table_fd is not None else []
            # Then the connection counts, if any (ENV_CONNECTIONS), likewise shared.
            counts = [passed.client_connections[0]] if passed.client_connections is not None else []
            sources = ([listener.fileno() for listener in passed.listeners] + [ready_write] + status + ticket
                       + table + counts)
            ready_target = SD_LISTEN_FDS_START + len(passed.listeners)
            status_target = ready_target + len(status)
            ticket_target = status_target + len(ticket)
            table_target = ticket_target + len(table)
            last_target = table_target + len(counts)
            # Out of the way first, so no target number clobbers a source.
            moved = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, last_target + 1) for fd in sources]
            for index, fd in enumerate(moved):
                os.dup2(fd, SD_LISTEN_FDS_START + index, inheritable=True)
            for name in os.listdir("/proc/self/fd"):
                if int(name) > last_target:
                    try:
                        os.set_inheritable(int(name), False)
                    except OSError:
                        pass  # the listdir's own fd, closed by now
            env = dict(os.environ)
            env.update({
                "LISTEN_PID": str(os.getpid()),
                "LISTEN_FDS": str(len(passed.listeners)),
                "LISTEN_FDNAMES": ":".join(listener.fdname or LISTEN_FDNAME for listener in passed.listeners),
                ENV_READY_FD: str(ready_target),
                **({ENV_STATUS_FD: str(status_target)} if status else {}),
                **({ENV_TICKET_FD: str(ticket_target)} if ticket else {}),
                **({ENV_RATE_TABLE_FD: str(table_target)} if table else {}),
                **({ENV_CONNECTIONS: f"{last_target}:{passed.client_connections[1]}"}
                   if passed.client_connections is not None else {}),
                ENV_OLD_MASTER: str(passed.pid),
                ENV_UNLINK: json.dumps([path for _, path in self.kept_unlink]),
            })
            if passed.notify_socket is not None:
                # The master took NOTIFY_SOCKET out of its environment (tines.sdnotify): the
                # new master tells systemd its own readiness.
                env["NOTIFY_SOCKET"] = passed.notify_socket
            os.chdir(self.invocation.cwd)
            command = self.invocation.command()
            os.execve(command[0], command, env)
        except BaseException as error:  # noqa: BLE001 - the child must never return into the master
            try:
                os.write(2, f"tines: upgrade: cannot start the new master: {error}\n".encode())
            finally:
                os._exit(EXIT_EXEC_FAILED)

    def read_ready(self) -> bool:
        """True once the new master wrote its ready byte. EOF (it and its workers are gone)
        closes the pipe; its exit status comes with the reap."""
        if self.ready_read < 0:
            return False
        try:
            data = os.read(self.ready_read, 64)
        except BlockingIOError:
            return False
        if data:
            return True
        os.close(self.ready_read)
        self.ready_read = -1
        return False

    def turn(self, workers: int, graceful_timeout: float, now: float) -> Decision:
        """Each turn of the loop, with this master's ``workers`` (processes) and the clock:
        hand over once the new master is ready; leave once the workers are gone (or
        ``graceful_timeout`` after the hand-over)."""
        decision = Decision()
        if self.new_pid is not None and not self.handing_over and self.read_ready():
            decision = self.hand_over(self.new_pid, workers, now + graceful_timeout)
        if not self.handing_over:
            return decision
        if not workers:
            log.info("upgrade: this master's workers are gone; exiting (new master %s serves)", self.new_pid)
            return replace(decision, leave=True)
        if now >= self.deadline:
            log.warning("upgrade: %d worker(s) still draining after graceful_timeout: killing them and exiting",
                        workers)
            return replace(decision, leave=True)
        return decision

    def hand_over(self, new_pid: int, workers: int, deadline: float) -> Decision:
        """The new master is ready: retire every worker (the drain; the new master's workers
        take the listen queue) and leave once they are gone, by ``deadline`` at the latest."""
        if self.ready_read >= 0:
            os.close(self.ready_read)
            self.ready_read = -1
        self.handing_over = True
        self.deadline = deadline
        log.info("upgrade: new master %d is ready: this master %d retires its %d worker(s) and exits",
                 new_pid, os.getpid(), workers)
        return Decision(succeeded=new_pid, retire=f"upgrade: new master {new_pid} is ready")

    def reaped(self, pid: int, status: int) -> Decision | None:
        """The master reaped ``pid``: None when it was not the new master; else what its end
        asks (a rollback, unless this master is stopping anyway)."""
        if self.new_pid is None or pid != self.new_pid:
            return None
        self.new_pid = None
        said_ready = self.handing_over or self.read_ready()
        if self.ready_read >= 0:
            os.close(self.ready_read)
            self.ready_read = -1
        how = describe_status(status)
        if self.leaving:
            log.info("upgrade: new master %d %s while this master stops", pid, how)
            return Decision()
        restart = self.workers_stopped or self.handing_over
        self.restore()  # first: the pid file is back when the line below is read
        if said_ready:
            log.error("upgrade failed: new master %d %s after it was ready, before this master "
                      "had left; this master (%d) keeps serving", pid, how, os.getpid())
        else:
            log.error("upgrade failed: new master %d %s before ready; this master (%d) keeps serving",
                      pid, how, os.getpid())
        if restart:
            log.info("upgrade: starting this master's workers again")
        return Decision(main_again=said_ready, failed=True)

    def restore(self) -> None:
        """Rollback: PATH.oldbin back to PATH, the socket files ours again, workers wanted."""
        if self.pid_file is not None:
            self.pid_file.from_oldbin(os.getpid())
        for listener, path in self.kept_unlink:
            listener.unlink = path
        self.kept_unlink = []
        self.workers_stopped = False
        self.handing_over = False

    def winch(self, workers: int) -> Decision:
        """WINCH: during an overlap, stop (retire, with the drain) this master's ``workers``
        while it stays up for a rollback; otherwise ignored (terminals send it on resize)."""
        if self.new_pid is None or self.handing_over or self.leaving or self.workers_stopped:
            return Decision()
        self.workers_stopped = True
        log.info("WINCH during the upgrade: stopping this master's %d worker(s); this master stays "
                 "for a rollback until new master %d is ready", workers, self.new_pid)
        return Decision(retire="WINCH during an upgrade")

    def old_master_alive(self) -> bool:
        """This is the new master of an upgrade and its old master has not exited yet."""
        return self.old_master is not None and os.getppid() == self.old_master

    def old_master_left(self) -> bool:
        """True once: at the first look after this new master's old master exited. Its workers
        are gone with it (reaped, killed at its exit, or by their parent-death signal)."""
        if self.old_master is None or self.old_master_gone or self.old_master_alive():
            return False
        self.old_master_gone = True
        return True

    def inherited_fds(self) -> list[int]:
        """The readiness pipe's ends this master holds (a forked worker closes them, so the
        pipe's EOF still means the new master is gone)."""
        return [fd for fd in (self.ready_read, self.ready_write) if fd >= 0]

    @property
    def in_overlap(self) -> bool:
        """A new master exists (started, not yet reaped)."""
        return self.new_pid is not None

    def hup(self) -> None:
        """HUP during an overlap: starts the workers a WINCH stopped (nginx's manual rollback,
        followed by a TERM to the new master); otherwise ignored with a line."""
        if self.workers_stopped and not self.handing_over:
            self.workers_stopped = False
            log.info("HUP during the upgrade: starting this master's workers again (new master %s "
                     "still starting; TERM it to roll back)", self.new_pid)
            return
        log.warning("HUP ignored: an upgrade is in progress (new master %s); send HUP to the new "
                    "master once this one has exited", self.new_pid)

    def final_stop(self) -> None:
        """TERM / INT / QUIT on this master: during an overlap the new master goes on alone
        (it holds the listeners too and owns PATH); this master leaves PATH.oldbin behind it."""
        self.leaving = True
        if self.new_pid is not None and not self.handing_over:
            log.info("stopping during an upgrade: new master %d goes on without this master", self.new_pid)
