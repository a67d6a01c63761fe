//! One TLS connection ([`TlsConn`]): rustls' buffered `ServerConnection` and its socket, owned
//! by `Transport::Tls` and reached by every `Link::Tls` call (ADR 0030).
//!
//! Who encrypts: whoever writes, at the moment of writing, holding the session's lock (the
//! loop and an app thread may both write a connection's output, ADR 0009); the lock is never
//! held across a wait for the client. A write seals the caller's plaintext into rustls' own
//! buffer of records (at most its 64 KiB limit per call) and writes what the socket takes;
//! the records the socket did not take stay in the session (the "backlog"), are written
//! first by the next write, and make [`TlsConn::wants_write`] true, which the pending output's
//! "finished" predicate and the loop's writability watch see. The handshake runs inside
//! [`TlsConn::read`] (a read that needs a write, a handshake flight, a key update, an alert,
//! writes what the socket takes and leaves the rest as backlog).
//!
//! It must not decide when to read or write, nor what a failed handshake or a plain request
//! is answered with (the connection and the reactor do).
//!
//! Its files: `session` (the session under its lock, the socket as rustls sees it) and
//! `tests` (against a real rustls client over a socket pair; their fixtures serve the output
//! paths' tests too).

mod session;

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rustls::{ServerConfig, ServerConnection};

use super::TlsInfo;
use crate::io::{
    input_waiting, read_nonblocking, unacknowledged_output, wait_fd, wait_fd_events,
    write_slices_nonblocking,
};
use session::{starts_plain_http, Locked, Session, Socket};

/// The first bytes on a TLS listener were a plain HTTP request (a letter, not a TLS record):
/// the error a TLS read returns, so the connection answers its plain-text 400.
#[derive(Debug)]
pub struct PlainHttpOnTls;

impl std::fmt::Display for PlainHttpOnTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a plain HTTP request on a TLS port")
    }
}

impl std::error::Error for PlainHttpOnTls {}

/// The handshake failed (rustls' reason): the error a TLS read returns; the alert, if any, is
/// already written.
#[derive(Debug)]
pub struct HandshakeFailed(pub rustls::Error);

impl std::fmt::Display for HandshakeFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TLS handshake failed: {}", self.0)
    }
}

impl std::error::Error for HandshakeFailed {}

/// True when `err` (from [`TlsConn::read`] or [`TlsConn::feed`]) says the client spoke plain
/// HTTP on the TLS port.
pub fn is_plain_http(err: &io::Error) -> bool {
    err.get_ref()
        .is_some_and(|inner| inner.is::<PlainHttpOnTls>())
}

/// rustls' reason when `err` (from [`TlsConn::read`] or [`TlsConn::feed`]) is a failed
/// handshake.
pub fn handshake_failure(err: &io::Error) -> Option<&rustls::Error> {
    err.get_ref()
        .and_then(|inner| inner.downcast_ref::<HandshakeFailed>())
        .map(|failed| &failed.0)
}

/// The most plaintext one [`TlsConn::send_file`] reads from the file and seals: rustls'
/// record buffer limit (what one write may leave as backlog), four full records.
const FILE_BLOCK: usize = 64 * 1024;

/// Parts of at most this much in all (one record's plaintext) are copied into one block
/// before they are sealed: rustls' vectored write allocates a list of the parts per call,
/// which costs more than copying a small response's head and body (callgrind: ADR 0030).
const COALESCED: usize = 16 * 1024;

thread_local! {
    /// The block a small write's parts are copied into ([`COALESCED`]) and
    /// [`TlsConn::send_file`] reads a file into, before they are sealed: one per thread that
    /// writes over TLS, grown at its first use.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// One TLS connection: its socket and its session (behind a lock: the loop and an app thread
/// may both write a connection's output, ADR 0030).
pub struct TlsConn {
    fd: OwnedFd,
    session: Mutex<Session>,
    /// Equal to the session's `wants_write()` whenever its lock is free (stored at each
    /// release): the hot path and the output's flag ask it without the lock.
    backlog: AtomicBool,
    /// The handshake finished (set once, by the loop's read).
    established: AtomicBool,
    info: OnceLock<TlsInfo>,
    started: OnceLock<Instant>,
    /// The config the session was made from (what [`TlsInfo::from_session`] needs besides the
    /// session: the leaf served, an optional client certificate's judgement).
    config: Arc<ServerConfig>,
}

impl std::fmt::Debug for TlsConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConn")
            .field("fd", &self.fd)
            .finish_non_exhaustive()
    }
}

impl TlsConn {
    /// A server session on the accepted socket `fd` (non-blocking), before its handshake.
    pub fn new(fd: OwnedFd, config: &Arc<ServerConfig>) -> io::Result<Box<TlsConn>> {
        let tls = ServerConnection::new(Arc::clone(config)).map_err(io::Error::other)?;
        Ok(Box::new(TlsConn {
            fd,
            session: Mutex::new(Session {
                tls,
                closed: false,
                shut_write_owed: false,
                eof: false,
                failed: false,
            }),
            backlog: AtomicBool::new(false),
            established: AtomicBool::new(false),
            info: OnceLock::new(),
            started: OnceLock::new(),
            config: Arc::clone(config),
        }))
    }

    /// The socket's fd, for the poller and the scoreboard; never for I/O.
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    fn lock(&self) -> Locked<'_> {
        Locked {
            guard: self
                .session
                .lock()
                .unwrap_or_else(|poison| poison.into_inner()),
            backlog: &self.backlog,
        }
    }

    /// What the handshake told, once it finished (`None` before): made the first time it is
    /// asked for (by the environ, the scope or the access log), under the session's lock
    /// once; a plain `OnceLock` read after that.
    pub fn info(&self) -> Option<&TlsInfo> {
        if let Some(info) = self.info.get() {
            return Some(info);
        }
        if self.handshaking() {
            return None;
        }
        Some(
            self.info
                .get_or_init(|| TlsInfo::from_session(&self.lock().tls, &self.config)),
        )
    }

    /// When the first byte of the ClientHello (or of the bytes given to [`TlsConn::feed`])
    /// came.
    pub fn started(&self) -> Option<Instant> {
        self.started.get().copied()
    }

    /// True until the handshake finished (no lock taken).
    pub fn handshaking(&self) -> bool {
        !self.established.load(Ordering::Acquire)
    }

    /// True while ciphertext waits for the socket (a handshake flight, a record the socket
    /// did not take): the loop watches for writable and calls `flush`. No lock taken: exact
    /// for the thread that wrote last, and for whoever holds the connection after it.
    #[inline]
    pub fn wants_write(&self) -> bool {
        self.backlog.load(Ordering::Acquire)
    }

    /// Writes waiting ciphertext; true when none is left.
    pub fn flush(&self) -> io::Result<bool> {
        self.lock().flush(self.fd())
    }

    /// Gives the session bytes read from the socket before it existed (what followed a PROXY
    /// header), as if `read` had read them: a handshake step may follow, and its flight is
    /// written as the socket takes it. [`PlainHttpOnTls`] when they start a plain request
    /// (nothing is taken then: the caller still has them), [`HandshakeFailed`] when the
    /// handshake failed.
    pub fn feed(&self, bytes: &[u8]) -> io::Result<()> {
        let Some(&first) = bytes.first() else {
            return Ok(());
        };
        // The connection's first bytes: a plain request is answered in plain text.
        if self.started.set(crate::clock::now()).is_ok() && starts_plain_http(first) {
            return Err(io::Error::new(io::ErrorKind::InvalidData, PlainHttpOnTls));
        }
        let mut session = self.lock();
        let mut rest = bytes;
        while !rest.is_empty() {
            match session.tls.read_tls(&mut rest) {
                // The client's close_notify came: what follows it is never read.
                Ok(0) => break,
                Ok(_) => session.process(self.fd(), &self.established)?,
                Err(err) => {
                    let handshaking = session.tls.is_handshaking();
                    let reason = rustls::Error::General(err.to_string());
                    return Err(session.fail(handshaking, reason));
                }
            }
        }
        Ok(())
    }

    /// One non-blocking read of plaintext: what the session already decrypted, then what the
    /// socket holds, until `buf` is full or the socket would block (so that a short read means
    /// a drained socket, as for a plain read: the loop's edge-triggered reads rely on it).
    /// `Ok(None)` when nothing came (the handshake may have progressed), `Ok(Some(0))` at the
    /// end (the client's close_notify, or EOF). The first byte on the connection, when it
    /// starts a plain request, is [`PlainHttpOnTls`] (nothing taken); a failed handshake,
    /// [`HandshakeFailed`] (its alert written as far as the socket takes it).
    pub fn read(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        if self.started.get().is_none() && !self.first_byte()? {
            return Ok(None);
        }
        let fd = self.fd();
        let mut session = self.lock();
        // Records the socket did not take earlier go first: their writable edge may have come
        // in one event with a readable one, which the loop answers by reading.
        if session.tls.wants_write() {
            session.flush(fd)?;
        }
        let mut filled = 0;
        let mut socket = Socket::new(fd);
        loop {
            if filled < buf.len() {
                match session.tls.reader().read(&mut buf[filled..]) {
                    Ok(0) => return Ok(Some(filled)),
                    Ok(n) => filled += n,
                    Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
                    // The client closed without its close_notify: an end all the same (HTTP
                    // frames its own messages; most clients never send one).
                    Err(err) if err.kind() == io::ErrorKind::UnexpectedEof => {
                        return Ok(Some(filled))
                    }
                    Err(err) => return Err(err),
                }
            }
            if filled == buf.len() {
                return Ok(Some(filled));
            }
            if session.failed {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "the TLS session failed",
                ));
            }
            if session.eof {
                // What the reader said above was all (it ends in an EOF or an error).
                return Ok(Some(filled));
            }
            if socket.drained {
                // A short read took all the socket held (one `read` per request, as on a
                // plain connection): what is not decrypted yet is a partial record.
                return Ok((filled > 0).then_some(filled));
            }
            match session.tls.read_tls(&mut socket) {
                Ok(0) => session.eof = true,
                Ok(_) => {}
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                    return Ok((filled > 0).then_some(filled));
                }
                Err(err) if err.kind() == io::ErrorKind::InvalidData => {
                    // The deframer refused the bytes (a handshake message past 64 KiB).
                    let handshaking = session.tls.is_handshaking();
                    let reason = rustls::Error::General(err.to_string());
                    return Err(session.fail(handshaking, reason));
                }
                Err(err) => return Err(err),
            }
            session.process(fd, &self.established)?;
        }
    }

    /// Looks at the connection's first byte without taking it: true when it is there and
    /// starts a TLS record (the start is noted), false when none came yet,
    /// [`PlainHttpOnTls`] when it starts a plain request. An EOF or an error is left for the
    /// read that follows (which meets it too).
    fn first_byte(&self) -> io::Result<bool> {
        let mut byte = 0u8;
        // SAFETY: one byte of writable memory for the duration of the call.
        let peeked = unsafe {
            libc::recv(
                self.fd(),
                (&raw mut byte).cast(),
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        if peeked < 0 {
            let err = io::Error::last_os_error();
            return match err.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(false),
                _ => Err(err),
            };
        }
        if peeked == 1 {
            let _ = self.started.set(crate::clock::now());
            if starts_plain_http(byte) {
                return Err(io::Error::new(io::ErrorKind::InvalidData, PlainHttpOnTls));
            }
        }
        Ok(true)
    }

    /// True when a read would not block: the session holds plaintext, or the socket holds
    /// bytes (a record, perhaps partial), an EOF or an error. Takes nothing.
    pub fn input_waiting(&self) -> bool {
        self.lock().has_plaintext() || input_waiting(self.fd())
    }

    /// Reads at least one byte of plaintext (or the end: `Ok(0)`), waiting up to `deadline`
    /// (without the lock).
    pub fn read_by(&self, buf: &mut [u8], deadline: Instant, what: &str) -> io::Result<usize> {
        loop {
            if let Some(n) = self.read(buf)? {
                return Ok(n);
            }
            // A read that asked for a write the socket did not take (a key update's answer):
            // the client may wait for it before it sends more.
            let write = self.wants_write() && !self.flush()?;
            let events = if write {
                libc::POLLIN | libc::POLLOUT
            } else {
                libc::POLLIN
            };
            wait_fd_events(self.fd(), events, deadline, what)?;
        }
    }

    /// Seals `parts` from byte `skip` on (as much as rustls' record buffer takes: 64 KiB) and
    /// writes what the socket takes: the plaintext bytes sealed (`Ok(None)`: the backlog of an
    /// earlier write is still there, and the socket would block). The sealed bytes count as
    /// written: what the socket did not take is the backlog ([`TlsConn::wants_write`]).
    pub fn write_vectored(&self, parts: &[&[u8]], mut skip: usize) -> io::Result<Option<usize>> {
        let mut slices = [io::IoSlice::new(&[]); MAX_PARTS];
        let mut count = 0;
        for part in parts {
            if skip >= part.len() {
                skip -= part.len();
                continue;
            }
            if count == MAX_PARTS {
                break;
            }
            slices[count] = io::IoSlice::new(&part[skip..]);
            skip = 0;
            count += 1;
        }
        if count == 0 {
            return Ok(Some(0));
        }
        let fd = self.fd();
        let mut session = self.writable_session()?;
        if !session.flush(fd)? {
            return Ok(None);
        }
        let slices = &slices[..count];
        let small = slices.iter().map(|slice| slice.len()).sum::<usize>() <= COALESCED;
        let sealed = match slices {
            [one] => session.tls.writer().write(one)?,
            _ if small => SCRATCH.with_borrow_mut(|block| {
                block.clear();
                for slice in slices {
                    block.extend_from_slice(slice);
                }
                session.tls.writer().write(block)
            })?,
            _ => session.tls.writer().write_vectored(slices)?,
        };
        session.flush(fd)?;
        Ok(Some(sealed))
    }

    /// The session to seal into: an error before the handshake finished (plaintext would
    /// wait in rustls unseen) or after our close_notify.
    fn writable_session(&self) -> io::Result<Locked<'_>> {
        if self.handshaking() {
            return Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "the TLS handshake is not finished",
            ));
        }
        let session = self.lock();
        if session.closed {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the TLS session is closed",
            ));
        }
        Ok(session)
    }

    /// Writes every byte of `parts` from byte `written` on, and the backlog, waiting for the
    /// client up to `timeout` per wait (without the lock).
    pub fn write_all_from(
        &self,
        parts: &[&[u8]],
        mut written: usize,
        timeout: Duration,
    ) -> io::Result<()> {
        let total: usize = parts.iter().map(|part| part.len()).sum();
        while written < total {
            match self.write_vectored(parts, written)? {
                Some(n) => written += n,
                None => wait_fd(self.fd(), true, Instant::now() + timeout, "send")?,
            }
        }
        while !self.flush()? {
            wait_fd(self.fd(), true, Instant::now() + timeout, "send")?;
        }
        Ok(())
    }

    /// Reads at most 64 KiB of the file `file_fd` from `offset` (`pread`, into the thread's
    /// block), seals it and writes what the socket takes: the file bytes sealed (0 at the
    /// file's end; `Ok(None)`: the backlog is still there and the socket would block). No
    /// `sendfile` under TLS: the records are made here.
    pub fn send_file(&self, file_fd: RawFd, offset: u64, count: u64) -> io::Result<Option<u64>> {
        let fd = self.fd();
        {
            let mut session = self.writable_session()?;
            if !session.flush(fd)? {
                return Ok(None);
            }
        }
        let want = count.min(FILE_BLOCK as u64) as usize;
        if want == 0 {
            return Ok(Some(0));
        }
        // The file is read with the session's lock let go: the loop's help_write waits for
        // that lock (ADR 0030), and a cold file's read must not stall the loop. Whoever else
        // writes this connection is ordered by the output lock or by owning it, not by this
        // lock, so records sealed meanwhile (a backlog) only come first on the socket.
        SCRATCH.with_borrow_mut(|block| {
            block.clear();
            block.reserve(want);
            let got = loop {
                // SAFETY: `block`'s capacity is valid for writes of `want` bytes; the caller
                // owns `file_fd`.
                let n = unsafe {
                    libc::pread(
                        file_fd,
                        block.as_mut_ptr().cast(),
                        want,
                        offset as libc::off_t,
                    )
                };
                if n >= 0 {
                    break n as usize;
                }
                let err = io::Error::last_os_error();
                if err.kind() != io::ErrorKind::Interrupted {
                    return Err(err);
                }
            };
            if got == 0 {
                return Ok(Some(0));
            }
            // SAFETY: `pread` wrote (initialised) the first `got <= want` bytes.
            unsafe { block.set_len(got) };
            let mut session = self.writable_session()?;
            let sealed = session.tls.writer().write(block)?;
            session.flush(fd)?;
            Ok(Some(sealed as u64))
        })
    }

    /// Waits until the connection is writable (`write`) or readable (at once when the
    /// session holds plaintext), or `deadline` passes.
    pub fn wait(&self, write: bool, deadline: Instant, what: &str) -> io::Result<()> {
        if !write && self.lock().has_plaintext() {
            return Ok(());
        }
        wait_fd(self.fd(), write, deadline, what)
    }

    /// Bytes written that the peer has not acknowledged yet: the socket's (`SIOCOUTQ`, which
    /// counts ciphertext), and at least one while a backlog waits in the session.
    pub fn unacknowledged(&self) -> io::Result<usize> {
        let queued = unacknowledged_output(self.fd())?;
        Ok(if self.wants_write() {
            queued.max(1)
        } else {
            queued
        })
    }

    /// Ends the sending side: our close_notify (after the handshake), then `shutdown(SHUT_WR)`
    /// once the socket took the backlog (at once, usually; else at the `flush` that empties
    /// it: the lingering close flushes on every event).
    pub fn shutdown_write(&self) {
        let fd = self.fd();
        let mut session = self.lock();
        session.shut_write_owed = true;
        session.close_notify(fd);
    }

    /// Ends both directions (a request timed out: its client gets what the socket takes of
    /// the 503 and our close_notify, and the stuck thread's own reads and writes fail from
    /// now on), without closing the fd, which the connection still owns.
    pub fn shutdown(&self) {
        let fd = self.fd();
        {
            let mut session = self.lock();
            session.close_notify(fd);
        }
        // SAFETY: shutdown on the connection's own open fd.
        unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
    }

    /// Writes `bytes` on the socket as they are, not sealed (one non-blocking send): for the
    /// plain-text 400 that answers a plain request ([`PlainHttpOnTls`]), before any record
    /// was written. The bytes written (`Ok(None)`: it would block).
    pub fn write_raw(&self, bytes: &[u8]) -> io::Result<Option<usize>> {
        write_slices_nonblocking(self.fd(), &[io::IoSlice::new(bytes)])
    }

    /// Reads bytes from the socket as they are, not decrypted (the lingering close drops
    /// them after our close_notify).
    pub fn read_raw(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        read_nonblocking(self.fd(), buf)
    }
}

impl Drop for TlsConn {
    fn drop(&mut self) {
        // Every close the server makes sends close_notify: after a response, at the
        // keep-alive timeout, at a drain (the lingering close and a timed-out request sent
        // theirs already). Best effort, as the socket takes it; the fd closes after this.
        let fd = self.fd.as_raw_fd();
        let session = self
            .session
            .get_mut()
            .unwrap_or_else(|poison| poison.into_inner());
        if !session.closed && !session.failed && !session.tls.is_handshaking() {
            session.close_notify(fd);
        }
    }
}

/// Parts gathered into one sealing write (the pending output gathers 8 pieces).
const MAX_PARTS: usize = 8;

#[cfg(test)]
pub(crate) mod tests;
