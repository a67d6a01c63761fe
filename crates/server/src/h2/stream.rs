//! One HTTP/2 stream as the transport of a virtual HTTP/1.1 connection (ADR 0035): its
//! reads give the request as HTTP/1.1 bytes (the head made from the HPACK header list, the
//! body as the DATA frames brought it), its writes take the response as an exchange frames
//! it for HTTP/1.1, which the connection turns into HEADERS and DATA frames. The same
//! methods as [`crate::tls::conn::TlsConn`], called through [`crate::transport::Link::H2`].
//!
//! It must not decide when to read or write (the exchange, the loop do).

use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::state::StreamState;
use super::Shared;
use crate::io::{timed_out, wait_fd_events};
use crate::tls::TlsInfo;

/// The most of a file one [`H2Stream::send_file`] reads.
const FILE_BLOCK: usize = 64 * 1024;

/// One stream of an HTTP/2 connection, boxed inside `Transport::H2`; dropping it ends the
/// stream (END_STREAM when its response was complete, else RST_STREAM).
pub struct H2Stream {
    shared: Arc<Shared>,
    id: u32,
}

impl std::fmt::Debug for H2Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H2Stream")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

fn reset_error() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionReset,
        "the HTTP/2 stream was reset",
    )
}

impl H2Stream {
    pub(super) fn new(shared: Arc<Shared>, id: u32) -> H2Stream {
        H2Stream { shared, id }
    }

    /// Tells the stream under which token the loop keeps its virtual connection (what
    /// [`super::Advance::ready`] reports).
    pub fn set_token(&self, token: u64) {
        let mut state = self.shared.lock();
        state.stream(self.id).token = Some(token);
        self.shared.settle(&mut state, false);
    }

    /// The connection's socket fd (for logs and the scoreboard; never registered for this
    /// stream, never for I/O).
    pub fn fd(&self) -> RawFd {
        self.shared.wire.fd()
    }

    /// The HTTP/2 stream id.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// What the connection's TLS handshake told (`None` on h2c).
    pub fn info(&self) -> Option<&TlsInfo> {
        self.shared.wire.info()
    }

    /// One non-blocking read of the request's HTTP/1.1 bytes (`Ok(None)`: nothing yet;
    /// `Ok(Some(0))`: the request is complete, or the stream was reset). The DATA bytes
    /// taken reopen the stream's window (a WINDOW_UPDATE follows when `h2` judges it due).
    pub fn read(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        let mut state = self.shared.lock();
        if state.reset_unread(self.id) {
            return Err(reset_error());
        }
        let (read, released) = state.read(self.id, buf);
        self.shared.settle(&mut state, released);
        Ok(read)
    }

    /// Reads at least one byte (or the end), waiting up to `deadline`.
    pub fn read_by(&self, buf: &mut [u8], deadline: Instant, what: &str) -> io::Result<usize> {
        loop {
            if let Some(n) = self.read(buf)? {
                return Ok(n);
            }
            self.block_until(deadline, what, StreamState::readable)?;
        }
    }

    /// A read for the lingering close, which an HTTP/2 stream never has: `Ok(Some(0))`.
    pub fn read_raw(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        let _ = buf;
        Ok(Some(0))
    }

    /// True when a read would not block.
    pub fn input_waiting(&self) -> bool {
        self.shared.lock().stream(self.id).readable()
    }

    /// Takes the response's HTTP/1.1 bytes `parts[skip..]`, as far as the stream's output
    /// budget allows; how many (`Ok(None)`: the budget is used, its window closed: a
    /// [`super::Readiness::writable`] follows when room comes). What it took is framed and
    /// written at once, as far as the windows and the socket allow.
    pub fn write_vectored(&self, parts: &[&[u8]], skip: usize) -> io::Result<Option<usize>> {
        let mut state = self.shared.lock();
        let written = state.write(self.id, parts, skip);
        self.shared.settle(&mut state, true);
        written
    }

    /// Writes all of `parts` from `written` on, waiting up to `timeout` per wait, until every
    /// byte is handed to `h2`.
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
                None => self.block_until(Instant::now() + timeout, "send", has_room)?,
            }
        }
        while !self.flush()? {
            self.block_until(Instant::now() + timeout, "send", |stream| {
                !stream.wants_write() || stream.broken()
            })?;
        }
        Ok(())
    }

    /// Takes at most `count` bytes of the file from `offset` (read, then framed as DATA).
    pub fn send_file(&self, file_fd: RawFd, offset: u64, count: u64) -> io::Result<Option<u64>> {
        let room = {
            let mut state = self.shared.lock();
            let budget = state.budget();
            let stream = state.stream(self.id);
            if stream.broken() {
                return Err(reset_error());
            }
            budget.saturating_sub(stream.out_len)
        };
        let want = (count.min(FILE_BLOCK as u64) as usize).min(room);
        if count == 0 {
            return Ok(Some(0));
        }
        if want == 0 {
            return self.write_vectored(&[], 0).map(|_| None);
        }
        let mut block = vec![0u8; want];
        let got = loop {
            // SAFETY: `block` is valid for writes of `want` bytes; the caller owns `file_fd`.
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
        Ok(self.write_vectored(&[&block[..got]], 0)?.map(|n| n as u64))
    }

    /// Waits until the stream is writable (`write`) or readable, or `deadline` passes.
    pub fn wait(&self, write: bool, deadline: Instant, what: &str) -> io::Result<()> {
        if write {
            self.block_until(deadline, what, StreamState::write_ready)
        } else {
            self.block_until(deadline, what, StreamState::readable)
        }
    }

    /// True while response bytes the stream took still wait to be handed to `h2` (its
    /// window is closed).
    pub fn wants_write(&self) -> bool {
        self.shared.lock().stream(self.id).wants_write()
    }

    /// Frames and writes what [`H2Stream::wants_write`] tells of, as far as the windows and
    /// the socket allow: true when nothing is left.
    pub fn flush(&self) -> io::Result<bool> {
        let mut state = self.shared.lock();
        self.shared.settle(&mut state, true);
        let stream = state.stream(self.id);
        if !stream.wants_write() {
            return Ok(true);
        }
        if stream.broken() {
            return Err(reset_error());
        }
        stream.want_writable();
        Ok(false)
    }

    /// Response bytes not yet acknowledged (0: an HTTP/2 stream has no lingering close).
    pub fn unacknowledged(&self) -> io::Result<usize> {
        Ok(0)
    }

    /// The response is complete as written: END_STREAM (the exchange's "close"); a body
    /// framed by neither a length nor chunks ends here.
    pub fn shutdown_write(&self) {
        let mut state = self.shared.lock();
        state.finish_response(self.id);
        self.shared.settle(&mut state, true);
    }

    /// Ends the stream both ways (a timed-out request: what was written goes if it is a
    /// complete response, else RST_STREAM); the other streams go on.
    pub fn shutdown(&self) {
        let mut state = self.shared.lock();
        state.shut(self.id);
        self.shared.settle(&mut state, true);
        self.shared.cond.notify_all();
    }

    /// Blocks until `ready` holds for the stream (or it broke), or `deadline` passes: on the
    /// condvar the loop's advance signals, or, `inline`, driving the connection itself.
    fn block_until(
        &self,
        deadline: Instant,
        what: &str,
        ready: impl Fn(&StreamState) -> bool,
    ) -> io::Result<()> {
        let ready = |stream: &StreamState| ready(stream) || stream.broken();
        if self.shared.inline {
            loop {
                let events = {
                    let mut state = self.shared.lock();
                    state.drive(true);
                    let done = ready(state.stream(self.id));
                    self.shared.settle(&mut state, false);
                    if done {
                        return Ok(());
                    }
                    if state.finished {
                        return Err(reset_error());
                    }
                    if state
                        .report
                        .write_blocked
                        .load(std::sync::atomic::Ordering::Relaxed)
                    {
                        libc::POLLOUT
                    } else {
                        libc::POLLIN
                    }
                };
                wait_fd_events(self.fd(), events, deadline, what)?;
            }
        }
        let mut state = self.shared.lock();
        loop {
            let stream = state.stream(self.id);
            if ready(stream) {
                stream.waiting = false;
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                stream.waiting = false;
                return Err(timed_out(what));
            }
            stream.waiting = true;
            state = self
                .shared
                .cond
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|poison| poison.into_inner())
                .0;
        }
    }
}

#[cfg(test)]
impl H2Stream {
    pub(super) fn debug(&self) -> String {
        self.shared.lock().debug()
    }
}

/// A write would take bytes.
fn has_room(stream: &StreamState) -> bool {
    stream.has_room()
}

impl Drop for H2Stream {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.detach(self.id);
        self.shared.settle(&mut state, true);
    }
}

/// A pointer to a transport's [`H2Stream`], valid while the transport lives (the
/// [`crate::transport::Link`] contract).
#[derive(Clone, Copy, Debug)]
pub struct StreamLink(*const H2Stream);

// SAFETY: H2Stream is Sync (its state is behind the connection's lock); the pointer is only
// dereferenced while the transport that owns the stream lives (the Link contract).
unsafe impl Send for StreamLink {}
// SAFETY: as for Send.
unsafe impl Sync for StreamLink {}

impl StreamLink {
    /// A link to `stream`, which must outlive every use of it.
    pub fn new(stream: &H2Stream) -> StreamLink {
        StreamLink(stream as *const H2Stream)
    }

    /// The stream.
    #[inline]
    pub fn stream(&self) -> &H2Stream {
        // SAFETY: valid while the transport lives (the Link contract).
        unsafe { &*self.0 }
    }
}
