//! The I/O object `h2` drives (ADR 0034): tokio's `AsyncRead`/`AsyncWrite` over the
//! connection's own link (a plain socket or a TLS session), non-blocking, `Poll::Pending`
//! when the socket would block. No runtime: the connection's drive polls again until nothing
//! moves, with a waker that only raises a flag ([`Flag`]), so a wake during a poll means
//! "poll once more".
//!
//! Every byte the client sends passes the frame pre-scanner ([`super::flood`]) before `h2`
//! sees it; bytes that break a flood limit are withheld (the drive then answers GOAWAY
//! ENHANCE_YOUR_CALM). It must not decide anything about the protocol.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake};
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::flood::{FrameScanner, RateWindow, Scanned};
use crate::config::H2Config;
use crate::transport::Link;

/// A waker that raises a flag: the drive polls again while it is up.
#[derive(Debug, Default)]
pub(crate) struct Flag(AtomicBool);

impl Flag {
    /// True while the flag is up.
    pub(crate) fn is_up(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    /// Lowers the flag; true when it was up.
    pub(crate) fn take(&self) -> bool {
        self.0.swap(false, Ordering::AcqRel)
    }
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::Release);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.store(true, Ordering::Release);
    }
}

/// What the drive tells the I/O object and learns from it; only touched under the
/// connection's lock (the atomics make it shareable with the `Io` that `h2` owns).
#[derive(Debug, Default)]
pub(crate) struct Report {
    /// Reads are allowed (a slot's drive only writes: the loop reads the socket).
    pub(crate) reads: AtomicBool,
    /// A write would block: the loop waits for the socket to become writable.
    pub(crate) write_blocked: AtomicBool,
    /// The client's end came (EOF) or the socket failed.
    pub(crate) eof: AtomicBool,
    /// A flood limit was broken: GOAWAY ENHANCE_YOUR_CALM, no further reads.
    pub(crate) calm: AtomicBool,
    /// Streams refused for the client's errors since the last read (counted as resets).
    pub(crate) refused: std::sync::atomic::AtomicU64,
}

/// The connection's I/O as `h2` sees it.
pub(crate) struct Io {
    link: Link,
    /// Bytes read from the socket before the connection existed (given first).
    prefix: Vec<u8>,
    scanner: FrameScanner,
    resets: RateWindow,
    control: RateWindow,
    started: Instant,
    report: Arc<Report>,
    /// Output bytes written and not yet turned into credit ([`CREDIT_BYTES`]).
    written: usize,
    /// Control frames the client may send without counting: a client reading a large
    /// response sends WINDOW_UPDATEs in proportion to it, which is no flood.
    credit: u64,
    /// The most credit kept (one rate window's worth of the limit): a long download must not
    /// buy a flood later.
    credit_cap: u64,
}

/// Bytes of output that earn the client one uncounted control frame.
const CREDIT_BYTES: usize = 4096;

impl Io {
    /// The I/O over `link`, whose first bytes are `prefix`.
    pub(crate) fn new(link: Link, prefix: &[u8], config: &H2Config, report: Arc<Report>) -> Io {
        Io {
            link,
            prefix: prefix.to_vec(),
            scanner: FrameScanner::new(config.max_header_list_size as usize),
            resets: RateWindow::new(config.max_reset_rate),
            control: RateWindow::new(config.max_control_rate),
            started: Instant::now(),
            report,
            written: 0,
            credit: 0,
            credit_cap: u64::from(config.max_control_rate) * 10,
        }
    }

    /// Scans bytes the client sent: true when they break a flood limit.
    fn flooded(&mut self, bytes: &[u8]) -> bool {
        let mut found = Scanned {
            resets: self.report.refused.swap(0, Ordering::Relaxed),
            ..Scanned::default()
        };
        self.scanner.scan(bytes, &mut found);
        let free = found.control.min(self.credit);
        found.control -= free;
        self.credit -= free;
        let second = self.started.elapsed().as_secs();
        let resets = found.resets > 0 && self.resets.record(second, found.resets);
        let control = found.control > 0 && self.control.record(second, found.control);
        resets || control || found.block_too_large
    }
}

impl AsyncRead for Io {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if !this.report.reads.load(Ordering::Relaxed) || this.report.calm.load(Ordering::Relaxed) {
            return Poll::Pending;
        }
        if !this.prefix.is_empty() {
            let n = this.prefix.len().min(buf.remaining());
            let bytes: Vec<u8> = this.prefix.drain(..n).collect();
            if this.flooded(&bytes) {
                this.report.calm.store(true, Ordering::Relaxed);
                return Poll::Pending;
            }
            buf.put_slice(&bytes);
            return Poll::Ready(Ok(()));
        }
        let unfilled = buf.initialize_unfilled();
        match this.link.read(unfilled) {
            Ok(Some(0)) => {
                this.report.eof.store(true, Ordering::Relaxed);
                Poll::Ready(Ok(()))
            }
            Ok(Some(n)) => {
                if this.flooded(&unfilled[..n]) {
                    this.report.calm.store(true, Ordering::Relaxed);
                    return Poll::Pending;
                }
                buf.advance(n);
                Poll::Ready(Ok(()))
            }
            Ok(None) => Poll::Pending,
            Err(err) => {
                this.report.eof.store(true, Ordering::Relaxed);
                Poll::Ready(Err(err))
            }
        }
    }
}

impl Io {
    fn write(&mut self, parts: &[&[u8]]) -> Poll<io::Result<usize>> {
        match self.link.write_vectored(parts, 0) {
            Ok(Some(n)) => {
                self.written += n;
                self.credit =
                    (self.credit + (self.written / CREDIT_BYTES) as u64).min(self.credit_cap);
                self.written %= CREDIT_BYTES;
                Poll::Ready(Ok(n))
            }
            Ok(None) => {
                self.report.write_blocked.store(true, Ordering::Relaxed);
                Poll::Pending
            }
            Err(err) => Poll::Ready(Err(err)),
        }
    }
}

impl AsyncWrite for Io {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.write(&[buf])
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let mut parts: [&[u8]; 8] = [&[]; 8];
        let mut count = 0;
        for buf in bufs.iter().filter(|buf| !buf.is_empty()).take(8) {
            parts[count] = buf;
            count += 1;
        }
        self.write(&parts[..count])
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.link.flush() {
            Ok(true) => Poll::Ready(Ok(())),
            Ok(false) => {
                self.report.write_blocked.store(true, Ordering::Relaxed);
                Poll::Pending
            }
            Err(err) => Poll::Ready(Err(err)),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // The close is the connection's (it reads what came first: no RST).
        self.poll_flush(cx)
    }
}
