//! The socket under an HTTP/2 connection: the plain fd or the TLS session the connection
//! came with ([`Wire`]), owned by the connection's shared state, and the copy of its handle
//! ([`WireLink`]) through which the I/O object `h2` drives and the connection's own raw
//! writes (a GOAWAY without `h2`) and shutdowns reach it. The same static dispatch as
//! [`crate::transport::Link`]'s plain and TLS arms, kept here so that `h2` sits below
//! `transport` (whose `Transport::H2` holds an [`super::H2Stream`]).
//!
//! It must not decide when to read or write (the connection's drive does).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use crate::io::{read_nonblocking, write_vectored_nonblocking};
use crate::tls::conn::TlsConn;
use crate::tls::TlsInfo;

/// What carries an HTTP/2 connection's bytes (the connection's transport before it was
/// known to speak HTTP/2).
#[derive(Debug)]
pub enum Wire {
    /// Plain bytes on the socket (h2c).
    Plain(OwnedFd),
    /// TLS records (ALPN chose `h2`).
    Tls(Box<TlsConn>),
}

impl Wire {
    /// The socket's fd.
    pub fn fd(&self) -> RawFd {
        match self {
            Wire::Plain(fd) => fd.as_raw_fd(),
            Wire::Tls(conn) => conn.fd(),
        }
    }

    /// What the TLS handshake told (`None` on h2c).
    pub fn info(&self) -> Option<&TlsInfo> {
        match self {
            Wire::Plain(_) => None,
            Wire::Tls(conn) => conn.info(),
        }
    }

    /// A copy of the handle, valid while this wire lives.
    pub(crate) fn link(&self) -> WireLink {
        match self {
            Wire::Plain(fd) => WireLink::Plain(fd.as_raw_fd()),
            Wire::Tls(conn) => WireLink::Tls(&**conn as *const TlsConn),
        }
    }
}

/// A copy of a [`Wire`]'s handle, not a second owner: used only while the wire lives (the
/// connection's shared state owns both the wire and everything that holds a link to it,
/// and drops the latter first).
#[derive(Clone, Copy, Debug)]
pub(crate) enum WireLink {
    Plain(RawFd),
    Tls(*const TlsConn),
}

// SAFETY: TlsConn is Sync (its session is behind a Mutex); the pointer is only dereferenced
// while the wire that owns the TlsConn lives (the contract above).
unsafe impl Send for WireLink {}
// SAFETY: as for Send.
unsafe impl Sync for WireLink {}

impl WireLink {
    #[inline]
    fn tls<'a>(conn: *const TlsConn) -> &'a TlsConn {
        // SAFETY: valid while the wire lives (the contract above); the reference is used
        // only within the calls below, never kept.
        unsafe { &*conn }
    }

    /// One non-blocking read (`Ok(None)`: it would block; `Ok(Some(0))`: the end).
    #[inline]
    pub(crate) fn read(self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        match self {
            WireLink::Plain(fd) => read_nonblocking(fd, buf),
            WireLink::Tls(conn) => Self::tls(conn).read(buf),
        }
    }

    /// One non-blocking gathered write of `parts[skip..]` (`Ok(None)`: it would block).
    #[inline]
    pub(crate) fn write_vectored(self, parts: &[&[u8]], skip: usize) -> io::Result<Option<usize>> {
        match self {
            WireLink::Plain(fd) => write_vectored_nonblocking(fd, parts, skip),
            WireLink::Tls(conn) => Self::tls(conn).write_vectored(parts, skip),
        }
    }

    /// Writes what a TLS session holds (true when nothing is left).
    #[inline]
    pub(crate) fn flush(self) -> io::Result<bool> {
        match self {
            WireLink::Plain(_) => Ok(true),
            WireLink::Tls(conn) => Self::tls(conn).flush(),
        }
    }

    /// Shuts the sending side.
    pub(crate) fn shutdown_write(self) {
        match self {
            // SAFETY: shutdown on the wire's own open fd.
            WireLink::Plain(fd) => unsafe {
                libc::shutdown(fd, libc::SHUT_WR);
            },
            WireLink::Tls(conn) => Self::tls(conn).shutdown_write(),
        }
    }

    /// Shuts both ways.
    pub(crate) fn shutdown(self) {
        match self {
            // SAFETY: shutdown on the wire's own open fd.
            WireLink::Plain(fd) => unsafe {
                libc::shutdown(fd, libc::SHUT_RDWR);
            },
            WireLink::Tls(conn) => Self::tls(conn).shutdown(),
        }
    }
}
