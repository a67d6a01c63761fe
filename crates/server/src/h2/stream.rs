//! One HTTP/2 stream as the transport of a virtual HTTP/1.1 connection (ADR 0035): its
//! reads give the request as HTTP/1.1 bytes (the head made from the HPACK header list, the
//! body as the DATA frames brought it), its writes take the response as an exchange frames
//! it for HTTP/1.1, which the connection turns into HEADERS and DATA frames. The same
//! methods as [`crate::tls::conn::TlsConn`], called through [`crate::transport::Link::H2`].
//!
//! It must not decide when to read or write (the exchange, the loop do).

use std::io;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use crate::tls::TlsInfo;

/// One stream of an HTTP/2 connection (role A defines it), boxed inside
/// `Transport::H2`; dropping it ends the stream (END_STREAM when its response was complete,
/// else RST_STREAM).
#[derive(Debug)]
pub struct H2Stream {}

impl H2Stream {
    /// Tells the stream under which token the loop keeps its virtual connection (what
    /// [`super::Advance::ready`] reports).
    pub fn set_token(&self, token: u64) {
        let _ = token;
        todo!("role A")
    }

    /// The connection's socket fd (for logs and the scoreboard; never registered for this
    /// stream, never for I/O).
    pub fn fd(&self) -> RawFd {
        todo!("role A")
    }

    /// The HTTP/2 stream id.
    pub fn id(&self) -> u32 {
        todo!("role A")
    }

    /// What the connection's TLS handshake told (`None` on h2c).
    pub fn info(&self) -> Option<&TlsInfo> {
        todo!("role A")
    }

    /// One non-blocking read of the request's HTTP/1.1 bytes (`Ok(None)`: nothing yet;
    /// `Ok(Some(0))`: the request is complete, or the stream was reset).
    pub fn read(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        let _ = buf;
        todo!("role A")
    }

    /// Reads at least one byte (or the end), waiting up to `deadline`.
    pub fn read_by(&self, buf: &mut [u8], deadline: Instant, what: &str) -> io::Result<usize> {
        let _ = (buf, deadline, what);
        todo!("role A")
    }

    /// A read for the lingering close, which an HTTP/2 stream never has: `Ok(Some(0))`.
    pub fn read_raw(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        let _ = buf;
        todo!("role A")
    }

    /// True when a read would not block.
    pub fn input_waiting(&self) -> bool {
        todo!("role A")
    }

    /// Takes the response's HTTP/1.1 bytes `parts[skip..]`; how many (`Ok(None)`: the stream's
    /// buffer is full: its window is closed and `response_buffer_total`'s share is used).
    pub fn write_vectored(&self, parts: &[&[u8]], skip: usize) -> io::Result<Option<usize>> {
        let _ = (parts, skip);
        todo!("role A")
    }

    /// Writes all of `parts` from `written` on, waiting up to `timeout` per wait.
    pub fn write_all_from(
        &self,
        parts: &[&[u8]],
        written: usize,
        timeout: Duration,
    ) -> io::Result<()> {
        let _ = (parts, written, timeout);
        todo!("role A")
    }

    /// Takes at most `count` bytes of the file from `offset` (read, then framed as DATA).
    pub fn send_file(&self, file_fd: RawFd, offset: u64, count: u64) -> io::Result<Option<u64>> {
        let _ = (file_fd, offset, count);
        todo!("role A")
    }

    /// Waits until the stream is writable (`write`) or readable, or `deadline` passes.
    pub fn wait(&self, write: bool, deadline: Instant, what: &str) -> io::Result<()> {
        let _ = (write, deadline, what);
        todo!("role A")
    }

    /// True while response bytes the stream took still wait to be framed and written.
    pub fn wants_write(&self) -> bool {
        todo!("role A")
    }

    /// Frames and writes what [`H2Stream::wants_write`] tells of, as far as the windows and
    /// the socket allow: true when nothing is left.
    pub fn flush(&self) -> io::Result<bool> {
        todo!("role A")
    }

    /// Response bytes not yet acknowledged (0: an HTTP/2 stream has no lingering close).
    pub fn unacknowledged(&self) -> io::Result<usize> {
        todo!("role A")
    }

    /// The response is complete as written: END_STREAM (the exchange's "close").
    pub fn shutdown_write(&self) {
        todo!("role A")
    }

    /// Ends the stream both ways (a timed-out request: what was written goes, then
    /// RST_STREAM if the response was not complete); the other streams go on.
    pub fn shutdown(&self) {
        todo!("role A")
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
