//! The I/O object `h2` drives (ADR 0034): tokio's `AsyncRead`/`AsyncWrite` over the
//! connection's own link (a plain socket or a TLS session), non-blocking, `Poll::Pending`
//! when the socket would block. No runtime: the connection's drive polls again until nothing
//! moves, with a waker that only raises a flag ([`Flag`]), so a wake during a poll means
//! "poll once more".
//!
//! Writes are gathered: what `h2` writes during one drive goes to the connection's output
//! buffer ([`Report::out`]), and the drive writes it once at its end ([`send_out`]), so every
//! frame a drive produced (HEADERS and DATA of many streams' responses) leaves in one
//! syscall. Reads stop for the rest of a drive after a short one (on a plain socket, a read
//! that did not fill the buffer drained it; the poller is edge-triggered).
//!
//! Every byte the client sends passes the frame pre-scanner ([`super::flood`]) before `h2`
//! sees it; bytes that break a flood limit are withheld (the drive then answers GOAWAY
//! ENHANCE_YOUR_CALM). It must not decide anything about the protocol.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, RawWaker, RawWakerVTable, Waker};
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::config::H2Config;
use super::flood::{FrameScanner, RateWindow, Scanned};
use super::wire::WireLink;

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

    /// A waker that raises this flag and counts no reference: a clone copies the pointer, a
    /// drop does nothing (`h2` clones and drops wakers on every poll; an `Arc` waker made
    /// that two locked instructions each time), and every clone `will_wake` the others, so
    /// `h2` keeps the one it has.
    ///
    /// # Safety
    /// The flag must outlive every waker made from it (and their clones).
    pub(crate) unsafe fn waker(self: &Arc<Self>) -> Waker {
        // SAFETY: the vtable's functions only read the flag, which the caller keeps alive.
        unsafe { Waker::from_raw(RawWaker::new(Arc::as_ptr(self).cast(), &FLAG_WAKER)) }
    }
}

static FLAG_WAKER: RawWakerVTable =
    RawWakerVTable::new(flag_clone, flag_wake, flag_wake, flag_drop);

unsafe fn flag_clone(flag: *const ()) -> RawWaker {
    RawWaker::new(flag, &FLAG_WAKER)
}

unsafe fn flag_wake(flag: *const ()) {
    // SAFETY: a live flag ([`Flag::waker`]'s contract).
    unsafe { &*flag.cast::<Flag>() }
        .0
        .store(true, Ordering::Release);
}

unsafe fn flag_drop(_flag: *const ()) {}

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
    /// A read this drive did not fill its buffer: the socket is drained until the poller's
    /// next edge (plain sockets only: a TLS session may hold decrypted bytes).
    pub(crate) drained: AtomicBool,
    /// Writing the gathered output failed: `h2` learns it at its next write or flush.
    pub(crate) broken: AtomicBool,
    /// What `h2` wrote and the socket has not taken yet (only touched under the
    /// connection's lock: the mutex is never contended).
    pub(crate) out: Mutex<Vec<u8>>,
}

/// Gathered output past which a write goes to the socket at once instead of waiting for the
/// drive's end (bounds the buffer; a large DATA frame is not copied).
const GATHER_LIMIT: usize = 64 * 1024;

impl Report {
    fn out(&self) -> std::sync::MutexGuard<'_, Vec<u8>> {
        self.out.lock().unwrap_or_else(|poison| poison.into_inner())
    }
}

/// Writes the gathered output to `link` as far as the socket takes it: true when nothing is
/// left (a TLS session's ciphertext included); false when the socket is full
/// ([`Report::write_blocked`] is then raised).
pub(crate) fn send_out(link: WireLink, report: &Report) -> io::Result<bool> {
    let mut out = report.out();
    drain_out(link, report, &mut out)
}

fn drain_out(link: WireLink, report: &Report, out: &mut Vec<u8>) -> io::Result<bool> {
    let mut sent = 0;
    let result = loop {
        if sent == out.len() {
            break link.flush();
        }
        match link.write_vectored(&[&out[sent..]], 0) {
            Ok(Some(n)) => sent += n,
            Ok(None) => break Ok(false),
            Err(err) => break Err(err),
        }
    };
    out.drain(..sent);
    match result {
        Ok(true) => Ok(true),
        Ok(false) => {
            report.write_blocked.store(true, Ordering::Relaxed);
            Ok(false)
        }
        Err(err) => {
            report.broken.store(true, Ordering::Relaxed);
            Err(err)
        }
    }
}

fn broken() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "the connection's socket failed")
}

/// The connection's I/O as `h2` sees it.
pub(crate) struct Io {
    link: WireLink,
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
    pub(crate) fn new(link: WireLink, prefix: &[u8], config: &H2Config, report: Arc<Report>) -> Io {
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
        if this.report.broken.load(Ordering::Relaxed) {
            return Poll::Ready(Err(broken()));
        }
        if !this.report.reads.load(Ordering::Relaxed)
            || this.report.calm.load(Ordering::Relaxed)
            || this.report.drained.load(Ordering::Relaxed)
        {
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
                if n < unfilled.len() && matches!(this.link, WireLink::Plain(_)) {
                    this.report.drained.store(true, Ordering::Relaxed);
                }
                if this.flooded(&unfilled[..n]) {
                    this.report.calm.store(true, Ordering::Relaxed);
                    return Poll::Pending;
                }
                buf.advance(n);
                Poll::Ready(Ok(()))
            }
            Ok(None) => {
                this.report.drained.store(true, Ordering::Relaxed);
                Poll::Pending
            }
            Err(err) => {
                this.report.eof.store(true, Ordering::Relaxed);
                Poll::Ready(Err(err))
            }
        }
    }
}

impl Io {
    /// Takes `parts` into the gathered output (written at the drive's end), or, past
    /// [`GATHER_LIMIT`], writes what is gathered and then `parts` to the socket at once.
    fn write(&mut self, parts: &[&[u8]]) -> Poll<io::Result<usize>> {
        if self.report.broken.load(Ordering::Relaxed) {
            return Poll::Ready(Err(broken()));
        }
        let total: usize = parts.iter().map(|part| part.len()).sum();
        let report = Arc::clone(&self.report);
        let mut out = report.out();
        let n = if out.len() + total <= GATHER_LIMIT {
            for part in parts {
                out.extend_from_slice(part);
            }
            total
        } else {
            match drain_out(self.link, &report, &mut out) {
                Ok(true) => {}
                Ok(false) => return Poll::Pending,
                Err(err) => return Poll::Ready(Err(err)),
            }
            match self.link.write_vectored(parts, 0) {
                Ok(Some(n)) => n,
                Ok(None) => {
                    report.write_blocked.store(true, Ordering::Relaxed);
                    return Poll::Pending;
                }
                Err(err) => {
                    report.broken.store(true, Ordering::Relaxed);
                    return Poll::Ready(Err(err));
                }
            }
        };
        self.written += n;
        self.credit = (self.credit + (self.written / CREDIT_BYTES) as u64).min(self.credit_cap);
        self.written %= CREDIT_BYTES;
        Poll::Ready(Ok(n))
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
        // The drive's end writes what is gathered ([`send_out`]): one write per drive.
        if self.report.broken.load(Ordering::Relaxed) {
            return Poll::Ready(Err(broken()));
        }
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // The close is the connection's (it reads what came first: no RST).
        self.poll_flush(cx)
    }
}
