//! How a connection's bytes cross its socket: the [`Transport`] a connection owns, chosen when
//! it is accepted, and the [`Link`] through which every read, write, `sendfile`, wait and
//! `SIOCOUTQ` of a connection goes (the connection's own reads, the exchange's writes, the
//! pending output the loop finishes, the WebSocket session, the lingering close).
//!
//! Two variants of both enums: plain bytes, and TLS records ([`TlsConn`], ADR 0030: no
//! `sendfile` of a file range but `pread` and a sealed record, a read that may need a write,
//! and ciphertext the socket did not take kept in the session, which
//! [`Link::wants_write`] tells and [`Link::flush`] writes). Static dispatch: a `Link::Plain`
//! call is the `io` function it names, inlined, on the fd.
//!
//! A link is a copy of the transport's handle, not a second owner: the loop holds one (in the
//! connection's [`crate::pending::Output`]) while a slot holds the connection, so the
//! connection closes the output ([`crate::pending::Output::close`]) before its transport
//! closes the socket. It must not decide when to read or write (the connection, the exchange
//! and the reactor do).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use crate::h2::{H2Stream, StreamLink};
use crate::io::{
    input_waiting, read_nonblocking, read_with_deadline, send_file_nonblocking,
    unacknowledged_output, wait_fd, write_all_from, write_vectored_nonblocking,
};
use crate::tls::conn::TlsConn;
use crate::tls::TlsInfo;

/// What carries a connection's bytes, owned by the connection (it closes the socket when
/// dropped).
#[derive(Debug)]
pub enum Transport {
    /// The bytes as they are, on the accepted socket.
    Plain(OwnedFd),
    /// TLS records (ADR 0030): the session and its socket.
    Tls(Box<TlsConn>),
    /// One stream of an HTTP/2 connection, as a virtual HTTP/1.1 connection (ADR 0035).
    H2(Box<H2Stream>),
}

impl Transport {
    /// The socket's fd, for the poller's registration and the scoreboard (the stuck-request
    /// dump shuts it down); never for I/O, which goes through [`Transport::link`].
    pub fn fd(&self) -> RawFd {
        match self {
            Transport::Plain(fd) => fd.as_raw_fd(),
            Transport::Tls(conn) => conn.fd(),
            Transport::H2(stream) => stream.fd(),
        }
    }

    /// The handle every read and write of this connection goes through.
    #[inline]
    pub fn link(&self) -> Link {
        match self {
            Transport::Plain(fd) => Link::Plain(fd.as_raw_fd()),
            Transport::Tls(conn) => Link::Tls(TlsLink::new(conn)),
            Transport::H2(stream) => Link::H2(StreamLink::new(stream)),
        }
    }
}

/// A connection's I/O handle: what its [`Transport`] does, as a copy that is valid while the
/// transport lives. Every call is non-blocking unless it names a deadline or a timeout.
#[derive(Clone, Copy, Debug)]
pub enum Link {
    /// Plain bytes on this socket.
    Plain(RawFd),
    /// TLS records on a session the transport owns.
    Tls(TlsLink),
    /// An HTTP/2 stream's virtual HTTP/1.1 connection (ADR 0035).
    H2(StreamLink),
}

/// A pointer to a transport's [`TlsConn`], valid while the transport lives (the contract a
/// `Link::Plain` fd copy has: the connection closes the output before the transport).
#[derive(Clone, Copy, Debug)]
pub struct TlsLink(*const TlsConn);

// SAFETY: TlsConn is Sync (its session is behind a Mutex); the pointer is only dereferenced
// while the transport that owns the TlsConn lives (the Link contract above).
unsafe impl Send for TlsLink {}
// SAFETY: as for Send.
unsafe impl Sync for TlsLink {}

impl TlsLink {
    /// A link to `conn`, which must outlive every use of it (the [`Link`] contract).
    pub fn new(conn: &TlsConn) -> TlsLink {
        TlsLink(conn as *const TlsConn)
    }

    /// The connection.
    #[inline]
    pub fn conn(&self) -> &TlsConn {
        // SAFETY: valid while the transport lives (the Link contract).
        unsafe { &*self.0 }
    }
}

impl Link {
    /// The socket's fd, for the poller's registration of a connection whose parts an exchange
    /// holds (`connection::Lent::watch`); never for I/O.
    pub fn fd(self) -> RawFd {
        match self {
            Link::Plain(fd) => fd,
            Link::Tls(t) => t.conn().fd(),
            Link::H2(h) => h.stream().fd(),
        }
    }

    /// One non-blocking read; `Ok(None)` when it would block, `Ok(Some(0))` at EOF. On TLS,
    /// plaintext (the handshake progresses inside it, and a read may write what the session
    /// owes the client); a short read still means a drained socket.
    #[inline]
    pub fn read(self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        match self {
            Link::Plain(fd) => read_nonblocking(fd, buf),
            Link::Tls(t) => t.conn().read(buf),
            Link::H2(h) => h.stream().read(buf),
        }
    }

    /// One non-blocking read of the socket's bytes as they are (TLS records not decrypted):
    /// the lingering close, which drops them. `Ok(None)` when it would block, `Ok(Some(0))`
    /// at EOF.
    pub fn read_raw(self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        match self {
            Link::Plain(fd) => read_nonblocking(fd, buf),
            Link::Tls(t) => t.conn().read_raw(buf),
            Link::H2(h) => h.stream().read_raw(buf),
        }
    }

    /// True while bytes already written (sealed) wait in the transport for the socket: a TLS
    /// session's backlog. Output is finished only when this is false too; no lock taken.
    #[inline]
    pub fn wants_write(self) -> bool {
        match self {
            Link::Plain(_) => false,
            Link::Tls(t) => t.conn().wants_write(),
            Link::H2(h) => h.stream().wants_write(),
        }
    }

    /// Writes what [`Link::wants_write`] tells of, as the socket takes it: true when nothing
    /// is left.
    #[inline]
    pub fn flush(self) -> io::Result<bool> {
        match self {
            Link::Plain(_) => Ok(true),
            Link::Tls(t) => t.conn().flush(),
            Link::H2(h) => h.stream().flush(),
        }
    }

    /// True when a read would not block (bytes wait, or an EOF or an error does), without
    /// taking anything: the loop asks a parked connection at its deadline whether the client
    /// sent something the worker did not read yet.
    pub fn input_waiting(self) -> bool {
        match self {
            Link::Plain(fd) => input_waiting(fd),
            Link::Tls(t) => t.conn().input_waiting(),
            Link::H2(h) => h.stream().input_waiting(),
        }
    }

    /// Reads at least one byte (or EOF: `Ok(0)`), waiting up to `deadline`.
    pub fn read_by(self, buf: &mut [u8], deadline: Instant, what: &str) -> io::Result<usize> {
        match self {
            Link::Plain(fd) => read_with_deadline(fd, buf, deadline, what),
            Link::Tls(t) => t.conn().read_by(buf, deadline, what),
            Link::H2(h) => h.stream().read_by(buf, deadline, what),
        }
    }

    /// One non-blocking gathered write of `parts` from byte `skip` on; the bytes written
    /// (`Ok(None)`: it would block). Never raises SIGPIPE. On TLS, the bytes sealed: some may
    /// still wait in the session ([`Link::wants_write`]).
    #[inline]
    pub fn write_vectored(self, parts: &[&[u8]], skip: usize) -> io::Result<Option<usize>> {
        match self {
            Link::Plain(fd) => write_vectored_nonblocking(fd, parts, skip),
            Link::Tls(t) => t.conn().write_vectored(parts, skip),
            Link::H2(h) => h.stream().write_vectored(parts, skip),
        }
    }

    /// Writes `parts` from byte `written` on, waiting for the client up to `timeout` per wait.
    pub fn write_all_from(
        self,
        parts: &[&[u8]],
        written: usize,
        timeout: Duration,
    ) -> io::Result<()> {
        match self {
            Link::Plain(fd) => write_all_from(fd, parts, written, timeout),
            Link::Tls(t) => t.conn().write_all_from(parts, written, timeout),
            Link::H2(h) => h.stream().write_all_from(parts, written, timeout),
        }
    }

    /// One non-blocking send of at most `count` bytes of the file `file_fd` from `offset`;
    /// the bytes sent (0 at the file's end; `Ok(None)`: it would block). On TLS, at most 64
    /// KiB read and sealed (no `sendfile`), which may still wait in the session.
    #[inline]
    pub fn send_file(self, file_fd: RawFd, offset: u64, count: u64) -> io::Result<Option<u64>> {
        match self {
            Link::Plain(fd) => send_file_nonblocking(fd, file_fd, offset, count),
            Link::Tls(t) => t.conn().send_file(file_fd, offset, count),
            Link::H2(h) => h.stream().send_file(file_fd, offset, count),
        }
    }

    /// Waits until the connection is writable (`write`) or readable, or `deadline` passes.
    pub fn wait(self, write: bool, deadline: Instant, what: &str) -> io::Result<()> {
        match self {
            Link::Plain(fd) => wait_fd(fd, write, deadline, what),
            Link::Tls(t) => t.conn().wait(write, deadline, what),
            Link::H2(h) => h.stream().wait(write, deadline, what),
        }
    }

    /// Bytes written that the peer has not acknowledged yet (the lingering close ends when
    /// there are none).
    pub fn unacknowledged(self) -> io::Result<usize> {
        match self {
            Link::Plain(fd) => unacknowledged_output(fd),
            Link::Tls(t) => t.conn().unacknowledged(),
            Link::H2(h) => h.stream().unacknowledged(),
        }
    }

    /// Ends the sending side (the lingering close: the client sees EOF, and its bytes are
    /// still read). A failure only means the peer is gone, which the next read sees. On
    /// TLS, our close_notify first (the `shutdown` follows once the socket took it: see
    /// [`Link::flush`]).
    pub fn shutdown_write(self) {
        match self {
            // SAFETY: shutdown on the transport's own open fd.
            Link::Plain(fd) => unsafe {
                libc::shutdown(fd, libc::SHUT_WR);
            },
            Link::Tls(t) => t.conn().shutdown_write(),
            Link::H2(h) => h.stream().shutdown_write(),
        }
    }

    /// Ends both directions (a request timed out: its client gets the 503 or EOF, and the
    /// stuck thread's own reads and writes fail from now on), without closing the fd, which
    /// the connection still owns. On TLS, our close_notify first, as far as the socket takes
    /// it.
    pub fn shutdown(self) {
        match self {
            // SAFETY: shutdown on the transport's own open fd.
            Link::Plain(fd) => unsafe {
                libc::shutdown(fd, libc::SHUT_RDWR);
            },
            Link::Tls(t) => t.conn().shutdown(),
            Link::H2(h) => h.stream().shutdown(),
        }
    }

    /// True on a TLS connection (an HTTP/2 stream on one too).
    pub fn is_tls(self) -> bool {
        match self {
            Link::Plain(_) => false,
            Link::Tls(_) => true,
            Link::H2(h) => h.stream().info().is_some(),
        }
    }

    /// True on an HTTP/2 stream (the access log's `HTTP/2.0`, WSGI's `SERVER_PROTOCOL`,
    /// ASGI's `http_version`; no keep-alive, no lingering close).
    #[inline]
    pub fn is_h2(self) -> bool {
        matches!(self, Link::H2(_))
    }

    /// Calls `f` with what the finished handshake told (`None`: a plain connection, or a
    /// handshake not finished).
    pub fn with_tls_info<R>(self, f: impl FnOnce(Option<&TlsInfo>) -> R) -> R {
        match self {
            Link::Plain(_) => f(None),
            Link::Tls(t) => f(t.conn().info()),
            Link::H2(h) => f(h.stream().info()),
        }
    }
}
