//! How a connection's bytes cross its socket: the [`Transport`] a connection owns, chosen when
//! it is accepted, and the [`Link`] through which every read, write, `sendfile`, wait and
//! `SIOCOUTQ` of a connection goes (the connection's own reads, the exchange's writes, the
//! pending output the loop finishes, the WebSocket session, the lingering close).
//!
//! Plain bytes only, for now; a TLS transport (records, not bytes: no `sendfile` of a file
//! range, and a read that may need a write) is the second variant of both enums. Static
//! dispatch: a `Link::Plain` call is the `io` function it names, inlined, on the fd.
//!
//! A link is a copy of the transport's handle, not a second owner: the loop holds one (in the
//! connection's [`crate::pending::Output`]) while a slot holds the connection, so the
//! connection closes the output ([`crate::pending::Output::close`]) before its transport
//! closes the socket. It must not decide when to read or write (the connection, the exchange
//! and the reactor do).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use crate::io::{
    input_waiting, read_nonblocking, read_with_deadline, send_file_nonblocking,
    unacknowledged_output, wait_fd, write_all_from, write_vectored_nonblocking,
};

/// What carries a connection's bytes, owned by the connection (it closes the socket when
/// dropped).
#[derive(Debug)]
pub enum Transport {
    /// The bytes as they are, on the accepted socket.
    Plain(OwnedFd),
}

impl Transport {
    /// The socket's fd, for the poller's registration and the scoreboard (the stuck-request
    /// dump shuts it down); never for I/O, which goes through [`Transport::link`].
    pub fn fd(&self) -> RawFd {
        match self {
            Transport::Plain(fd) => fd.as_raw_fd(),
        }
    }

    /// The handle every read and write of this connection goes through.
    #[inline]
    pub fn link(&self) -> Link {
        match self {
            Transport::Plain(fd) => Link::Plain(fd.as_raw_fd()),
        }
    }
}

/// A connection's I/O handle: what its [`Transport`] does, as a copy that is valid while the
/// transport lives. Every call is non-blocking unless it names a deadline or a timeout.
#[derive(Clone, Copy, Debug)]
pub enum Link {
    /// Plain bytes on this socket.
    Plain(RawFd),
}

impl Link {
    /// The socket's fd, for the poller's registration of a connection whose parts an exchange
    /// holds (`connection::Lent::watch`); never for I/O.
    pub fn fd(self) -> RawFd {
        match self {
            Link::Plain(fd) => fd,
        }
    }

    /// One non-blocking read; `Ok(None)` when it would block, `Ok(Some(0))` at EOF.
    #[inline]
    pub fn read(self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        match self {
            Link::Plain(fd) => read_nonblocking(fd, buf),
        }
    }

    /// True when a read would not block (bytes wait, or an EOF or an error does), without
    /// taking anything: the loop asks a parked connection at its deadline whether the client
    /// sent something the worker did not read yet.
    pub fn input_waiting(self) -> bool {
        match self {
            Link::Plain(fd) => input_waiting(fd),
        }
    }

    /// Reads at least one byte (or EOF: `Ok(0)`), waiting up to `deadline`.
    pub fn read_by(self, buf: &mut [u8], deadline: Instant, what: &str) -> io::Result<usize> {
        match self {
            Link::Plain(fd) => read_with_deadline(fd, buf, deadline, what),
        }
    }

    /// One non-blocking gathered write of `parts` from byte `skip` on; the bytes written
    /// (`Ok(None)`: it would block). Never raises SIGPIPE.
    #[inline]
    pub fn write_vectored(self, parts: &[&[u8]], skip: usize) -> io::Result<Option<usize>> {
        match self {
            Link::Plain(fd) => write_vectored_nonblocking(fd, parts, skip),
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
        }
    }

    /// One non-blocking send of at most `count` bytes of the file `file_fd` from `offset`;
    /// the bytes sent (0 at the file's end; `Ok(None)`: it would block).
    #[inline]
    pub fn send_file(self, file_fd: RawFd, offset: u64, count: u64) -> io::Result<Option<u64>> {
        match self {
            Link::Plain(fd) => send_file_nonblocking(fd, file_fd, offset, count),
        }
    }

    /// Waits until the connection is writable (`write`) or readable, or `deadline` passes.
    pub fn wait(self, write: bool, deadline: Instant, what: &str) -> io::Result<()> {
        match self {
            Link::Plain(fd) => wait_fd(fd, write, deadline, what),
        }
    }

    /// Bytes written that the peer has not acknowledged yet (the lingering close ends when
    /// there are none).
    pub fn unacknowledged(self) -> io::Result<usize> {
        match self {
            Link::Plain(fd) => unacknowledged_output(fd),
        }
    }

    /// Ends the sending side (the lingering close: the client sees EOF, and its bytes are
    /// still read). A failure only means the peer is gone, which the next read sees.
    pub fn shutdown_write(self) {
        match self {
            // SAFETY: shutdown on the transport's own open fd.
            Link::Plain(fd) => unsafe {
                libc::shutdown(fd, libc::SHUT_WR);
            },
        }
    }

    /// Ends both directions (a request timed out: its client gets the 503 or EOF, and the
    /// stuck thread's own reads and writes fail from now on), without closing the fd, which
    /// the connection still owns.
    pub fn shutdown(self) {
        match self {
            // SAFETY: shutdown on the transport's own open fd.
            Link::Plain(fd) => unsafe {
                libc::shutdown(fd, libc::SHUT_RDWR);
            },
        }
    }
}
