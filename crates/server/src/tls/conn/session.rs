//! The session under its lock ([`Session`], [`Locked`]) and the socket as rustls' `read_tls`
//! and `write_tls` see it ([`Socket`]): the steps every [`super::TlsConn`] call is made of.

use std::io::{self, BufRead, Read, Write};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::MutexGuard;

use rustls::ServerConnection;

use super::HandshakeFailed;
use crate::io::{read_nonblocking, write_slices_nonblocking};

/// What the lock guards: the session and what this side did to it.
pub(super) struct Session {
    pub(super) tls: ServerConnection,
    /// Our close_notify is queued (or the session failed): nothing more is sealed.
    pub(super) closed: bool,
    /// `shutdown(SHUT_WR)` is owed once the backlog (its close_notify last) is written.
    pub(super) shut_write_owed: bool,
    /// The socket's EOF was read: no more `read_tls`.
    pub(super) eof: bool,
    /// A record or the handshake failed (rustls keeps its error): no more `read_tls`.
    pub(super) failed: bool,
}

/// The session's lock, which publishes the backlog flag when it is let go.
pub(super) struct Locked<'a> {
    pub(super) guard: MutexGuard<'a, Session>,
    pub(super) backlog: &'a AtomicBool,
}

impl std::ops::Deref for Locked<'_> {
    type Target = Session;
    fn deref(&self) -> &Session {
        &self.guard
    }
}

impl std::ops::DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut Session {
        &mut self.guard
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        self.backlog
            .store(self.guard.tls.wants_write(), Ordering::Release);
    }
}

/// The socket as rustls' `read_tls` / `write_tls` see it: non-blocking, `WouldBlock` when it
/// would block, `MSG_NOSIGNAL` writes.
pub(super) struct Socket {
    fd: RawFd,
    /// The last read returned fewer bytes than asked for: the socket is drained (until its
    /// next edge), and asking again would only be told `EAGAIN`.
    pub(super) drained: bool,
}

impl Socket {
    pub(super) fn new(fd: RawFd) -> Socket {
        Socket { fd, drained: false }
    }
}

impl Read for Socket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = read_nonblocking(self.fd, buf)?.ok_or(io::ErrorKind::WouldBlock)?;
        self.drained = n < buf.len();
        Ok(n)
    }
}

impl Write for Socket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[io::IoSlice::new(buf)])
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        write_slices_nonblocking(self.fd, bufs)?.ok_or_else(|| io::ErrorKind::WouldBlock.into())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Session {
    /// Writes the backlog until the socket would block; true when none is left (then a
    /// `shutdown(SHUT_WR)` owed is made).
    pub(super) fn flush(&mut self, fd: RawFd) -> io::Result<bool> {
        while self.tls.wants_write() {
            match self.tls.write_tls(&mut Socket::new(fd)) {
                Ok(_) => {}
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(err) => return Err(err),
            }
        }
        if self.shut_write_owed {
            self.shut_write_owed = false;
            // SAFETY: shutdown on the connection's own open fd.
            unsafe { libc::shutdown(fd, libc::SHUT_WR) };
        }
        Ok(true)
    }

    /// Queues our close_notify (once; not before the handshake finished, nor after a fatal
    /// alert) and writes what the socket takes.
    pub(super) fn close_notify(&mut self, fd: RawFd) {
        if !self.closed && !self.tls.is_handshaking() {
            self.tls.send_close_notify();
        }
        self.closed = true;
        // Best effort: a peer gone is seen by whatever comes next.
        let _ = self.flush(fd);
    }

    /// Plaintext the session holds, already decrypted.
    pub(super) fn has_plaintext(&mut self) -> bool {
        self.tls
            .reader()
            .fill_buf()
            .is_ok_and(|chunk| !chunk.is_empty())
    }

    /// Decrypts what `read_tls` took, and writes what that asks to be written (a handshake
    /// flight, a key update, an alert). An error is the connection's end (the alert written
    /// as far as the socket takes it): [`HandshakeFailed`] while handshaking.
    pub(super) fn process(&mut self, fd: RawFd, established: &AtomicBool) -> io::Result<()> {
        let handshaking = self.tls.is_handshaking();
        let processed = self.tls.process_new_packets();
        // A flight, or the alert of a failure: best effort when it failed.
        let flushed = self.flush(fd);
        match processed {
            Ok(_) => {
                if handshaking && !self.tls.is_handshaking() {
                    established.store(true, Ordering::Release);
                }
                flushed.map(|_| ())
            }
            Err(err) => Err(self.fail(handshaking, err)),
        }
    }

    /// The connection's end by `err`.
    pub(super) fn fail(&mut self, handshaking: bool, err: rustls::Error) -> io::Error {
        self.failed = true;
        self.closed = true;
        if handshaking {
            io::Error::new(io::ErrorKind::InvalidData, HandshakeFailed(err))
        } else {
            io::Error::new(io::ErrorKind::InvalidData, err)
        }
    }
}

/// True when `byte` starts a plain HTTP request (a method's first letter) rather than a TLS
/// record (a handshake record starts 0x16).
pub(super) fn starts_plain_http(byte: u8) -> bool {
    byte.is_ascii_alphabetic()
}
