//! One request/response exchange on a connection owned by a slot.
//!
//! The app (through [`crate::App::serve`]) reads the request body and writes the response
//! through this type; it never sees the socket. It enforces HTTP/1.1 framing: body decoding
//! (Content-Length or chunked), `100 Continue` on the first body read, response framing
//! (Content-Length when known, else chunked for HTTP/1.1, else close-delimited), the app's
//! Content-Length honoured exactly (a longer body is truncated, a shorter one closes the
//! connection), and the keep-alive decision. One write per response where possible: the head
//! and small bodies are gathered in the slot's output buffer and sent with one `sendmsg`.

use std::io;
use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use tines_proto::response::{
    check_app_header, encode_chunk_size, encode_header, encode_status_line, parse_status,
    status_allows_body, AppHeader, ResponseFraming, ResponseHeaderError, CHUNK_END, LAST_CHUNK,
};
use tines_proto::{BodyFraming, ChunkedDecoder, ChunkedEvent, DateCache, RequestHead, Version};

use crate::access_log::LoggedRequest;
use crate::connection::{ConnState, Connection};
use crate::io::{
    read_with_deadline, send_file, send_file_nonblocking, write_all, write_all_from,
    write_vectored_nonblocking,
};
use crate::listener::{Local, Peer};
use crate::shared::WorkerShared;

/// Per-slot scratch that exchanges borrow in turn, so a request allocates nothing for them.
pub struct SlotContext {
    /// The output buffer (response head plus small bodies).
    pub(crate) out: Vec<u8>,
    /// The cached `Date` value.
    pub(crate) date: DateCache,
    /// Scratch for access-log lines.
    pub(crate) log_line: Vec<u8>,
    /// The cached access-log timestamp.
    pub(crate) log_clock: crate::clock::LogClock,
}

impl SlotContext {
    /// A fresh context for one slot thread.
    pub fn new() -> Self {
        SlotContext {
            out: Vec::with_capacity(OUT_BUFFER_LIMIT),
            date: DateCache::new(),
            log_line: Vec::with_capacity(256),
            log_clock: Default::default(),
        }
    }
}

impl Default for SlotContext {
    fn default() -> Self {
        Self::new()
    }
}

/// Bodies are gathered in the output buffer up to this size and sent with the head in one
/// write; a larger piece is written straight from the caller's memory (no copy). 16 KiB is
/// above the typical HTML page and below the point where the copy costs more than a syscall.
pub const OUT_BUFFER_LIMIT: usize = 16 * 1024;

/// Room reserved after the head in the read buffer for body reads.
const BODY_READ_CHUNK: usize = 16 * 1024;

/// Reads of at least this size with nothing buffered go straight into the caller's buffer.
const DIRECT_READ_MIN: usize = 8 * 1024;

#[derive(Debug)]
enum Body {
    /// No body, or it has been read to its end.
    Done,
    /// `Content-Length` bytes still to read.
    Length(u64),
    /// A chunked body being decoded.
    Chunked(ChunkedDecoder),
    /// Reading failed (timeout, early EOF, bad chunk): the connection must close.
    Failed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Continue {
    /// No `Expect: 100-continue`, or it was answered.
    Settled,
    /// The client waits for `100 Continue` before sending the body.
    Pending,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// No response head yet.
    NotStarted,
    /// The head is encoded in the output buffer, nothing written to the socket.
    Buffered,
    /// Bytes have reached the socket: the status can no longer change.
    Committed,
    /// The response is complete (or abandoned).
    Finished,
}

/// Why a response could not be started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResponseError {
    /// A bad status line or header from the app (no byte was written).
    Header(ResponseHeaderError, String),
    /// `begin_response` was called twice, or after bytes were written.
    AlreadyStarted,
}

impl std::fmt::Display for ResponseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ResponseError::Header(kind, detail) => {
                write!(f, "invalid response header ({kind:?}): {detail}")
            }
            ResponseError::AlreadyStarted => write!(f, "the response was already started"),
        }
    }
}

impl std::error::Error for ResponseError {}

/// One request being served.
pub struct Exchange {
    conn: Connection,
    ctx: SlotContext,
    shared: Arc<WorkerShared>,
    body: Body,
    /// Undecoded body bytes in `conn.buf`.
    raw: Range<usize>,
    /// Decoded body bytes in `conn.buf`, ready for the app.
    avail: Range<usize>,
    expect: Continue,
    phase: Phase,
    framing: ResponseFraming,
    declared: Option<u64>,
    body_sent: u64,
    status: u16,
    keep_alive: bool,
    is_head: bool,
    /// Decoded chunked-body bytes so far (for `max_body_size`).
    chunked_received: u64,
    /// When the first body read started, and the raw body bytes read from the socket since
    /// (for `body_min_rate`).
    body_started: Option<Instant>,
    body_received: u64,
    /// The status the request's own fault calls for (413, 400, 408), when reading its body
    /// failed because of it; the app layer answers with it instead of 500.
    fault: Option<u16>,
    /// When the slot took the request.
    pub started: Instant,
    /// `event` MPM: write what the socket takes now and leave the rest in the connection's
    /// pending output for the loop (up to `max_response_buffer`), instead of waiting.
    deferred: bool,
    /// The response must close the connection (an error response from [`Exchange::fail`]):
    /// the head then says `Connection: close` (RFC 9112 9.6).
    must_close: bool,
}

fn invalid_data(message: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message.to_string())
}

impl Exchange {
    pub(crate) fn new(conn: Connection, ctx: SlotContext, shared: Arc<WorkerShared>) -> Exchange {
        let head_len = conn.head.head_len;
        let body = match conn.head.body {
            BodyFraming::None | BodyFraming::Length(0) => Body::Done,
            BodyFraming::Length(n) => Body::Length(n),
            BodyFraming::Chunked => {
                Body::Chunked(ChunkedDecoder::new(shared.config.limits.max_head_size))
            }
        };
        let expect = if conn.head.expect_continue && !matches!(body, Body::Done) {
            Continue::Pending
        } else {
            Continue::Settled
        };
        let is_head = conn.head.method_is(&conn.buf, b"HEAD");
        let raw = head_len..conn.filled;
        let deferred = shared.config.loop_owns_sockets();
        let mut exchange = Exchange {
            conn,
            ctx,
            shared,
            body,
            raw,
            avail: head_len..head_len,
            expect,
            phase: Phase::NotStarted,
            framing: ResponseFraming::NoBody,
            declared: None,
            body_sent: 0,
            status: 0,
            keep_alive: false,
            is_head,
            chunked_received: 0,
            body_started: None,
            body_received: 0,
            fault: None,
            started: Instant::now(),
            deferred,
            must_close: false,
        };
        exchange.conn.state = ConnState::Dispatched;
        exchange
    }

    // ----- the request -----

    /// The parsed request head (spans index into [`Exchange::buffer`]).
    pub fn head(&self) -> &RequestHead {
        &self.conn.head
    }

    /// The connection's read buffer, for resolving the head's spans.
    pub fn buffer(&self) -> &[u8] {
        &self.conn.buf[..self.conn.head.head_len]
    }

    /// The request method.
    pub fn method(&self) -> &[u8] {
        self.conn.head.method.of(&self.conn.buf)
    }

    /// The request target, as sent.
    pub fn target(&self) -> &[u8] {
        self.conn.head.target.of(&self.conn.buf)
    }

    /// The protocol version.
    pub fn version(&self) -> Version {
        self.conn.head.version
    }

    /// The request headers, in order, as sent.
    pub fn headers(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        let buf = &self.conn.buf;
        self.conn
            .head
            .headers
            .iter()
            .map(move |(name, value)| (name.of(buf), value.of(buf)))
    }

    /// The client's address.
    pub fn peer(&self) -> Peer {
        self.conn.peer
    }

    /// The address of the listener that accepted the connection.
    pub fn local(&self) -> &Local {
        &self.shared.locals[self.conn.listener]
    }

    /// The value of the first request header named `name` (any case).
    fn header(&self, name: &[u8]) -> Option<&[u8]> {
        self.headers()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    /// What the access log records of this exchange.
    fn logged_request(&self) -> LoggedRequest<'_> {
        LoggedRequest {
            peer: self.peer(),
            method: self.method(),
            target: self.target(),
            version: self.version(),
            status: self.status(),
            body_sent: self.body_sent(),
            referer: self.header(b"referer"),
            user_agent: self.header(b"user-agent"),
        }
    }

    /// True when the request has a body that has not been read to its end.
    pub fn body_pending(&self) -> bool {
        !matches!(self.body, Body::Done) || !self.avail.is_empty()
    }

    fn send_continue(&mut self) -> io::Result<()> {
        if self.expect == Continue::Pending {
            self.expect = Continue::Settled;
            if self.phase == Phase::NotStarted || self.phase == Phase::Buffered {
                write_all(
                    self.conn.fd(),
                    &[b"HTTP/1.1 100 Continue\r\n\r\n"],
                    self.shared.config.send_timeout,
                )?;
            }
        }
        Ok(())
    }

    /// When the next body read must have data: a per-wait idle deadline, or (with
    /// `body_min_rate`) the whole body's allowance, extended by what was received.
    fn body_deadline(&mut self) -> Instant {
        let now = Instant::now();
        let started = *self.body_started.get_or_insert(now);
        let config = &self.shared.config;
        config
            .body_deadline(started, self.body_received)
            .unwrap_or(now + config.body_timeout)
    }

    fn read_more_raw(&mut self) -> io::Result<()> {
        let base = self.conn.head.head_len;
        // Keep undecoded leftovers (a partial chunk-size line) at the front of the body area.
        let left = self.raw.len();
        if left > 0 && self.raw.start != base {
            self.conn.buf.copy_within(self.raw.clone(), base);
        }
        let start = base + left;
        if self.conn.buf.len() < start + BODY_READ_CHUNK {
            self.conn.buf.resize(start + BODY_READ_CHUNK, 0);
        }
        let deadline = self.body_deadline();
        let fd = self.conn.fd();
        let space = self.conn.buf.len() - start;
        let n = read_with_deadline(
            fd,
            &mut self.conn.buf[start..],
            deadline,
            "request body read",
        )?;
        self.conn.maybe_more = n == space;
        self.body_received += n as u64;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "client closed the connection before the request body ended",
            ));
        }
        self.conn.filled = start + n;
        self.raw = base..start + n;
        Ok(())
    }

    /// Makes decoded body bytes available; returns them (empty at the end of the body).
    /// Sends `100 Continue` first if the client asked for it.
    pub fn fill_body(&mut self) -> io::Result<&[u8]> {
        if self.avail.is_empty() {
            if let Err(err) = self.produce_body() {
                self.body_failed(&err);
                return Err(err);
            }
        }
        Ok(&self.conn.buf[self.avail.clone()])
    }

    /// Marks the body unreadable and records whose fault it was.
    fn body_failed(&mut self, err: &io::Error) {
        self.body = Body::Failed;
        if self.fault.is_none() {
            self.fault = match err.kind() {
                io::ErrorKind::TimedOut => Some(408),
                // The client's fault: bad framing, or it hung up mid-body.
                io::ErrorKind::InvalidData | io::ErrorKind::UnexpectedEof => Some(400),
                _ => None,
            };
        }
    }

    /// The error status the request itself earned while its body was read (413 body too
    /// large, 400 bad chunked framing, 408 too slow), if any.
    pub fn fault(&self) -> Option<u16> {
        self.fault
    }

    /// True when the request announces a body larger than `max_body_size` (answered 413
    /// before the app runs).
    pub(crate) fn body_too_large(&self) -> bool {
        let limit = self.shared.config.max_body_size;
        matches!(self.conn.head.body, BodyFraming::Length(n) if limit > 0 && n > limit)
    }

    fn produce_body(&mut self) -> io::Result<()> {
        self.send_continue()?;
        loop {
            match &mut self.body {
                Body::Done => return Ok(()),
                Body::Failed => return Err(invalid_data("the request body could not be read")),
                Body::Length(remaining) => {
                    if self.raw.is_empty() {
                        self.read_more_raw()?;
                        continue;
                    }
                    let n = (self.raw.len() as u64).min(*remaining) as usize;
                    self.avail = self.raw.start..self.raw.start + n;
                    self.raw.start += n;
                    *remaining -= n as u64;
                    if *remaining == 0 {
                        self.body = Body::Done;
                    }
                    return Ok(());
                }
                Body::Chunked(decoder) => {
                    if self.raw.is_empty() {
                        self.read_more_raw()?;
                        continue;
                    }
                    let base = self.raw.start;
                    let (consumed, event) = decoder
                        .decode(&self.conn.buf[self.raw.clone()])
                        .map_err(|err| invalid_data(&format!("bad chunked body: {err:?}")))?;
                    self.raw.start += consumed;
                    match event {
                        ChunkedEvent::Data(range) => {
                            self.chunked_received += range.len() as u64;
                            let limit = self.shared.config.max_body_size;
                            if limit > 0 && self.chunked_received > limit {
                                self.fault = Some(413);
                                return Err(invalid_data(
                                    "the chunked request body is larger than max_body_size",
                                ));
                            }
                            self.avail = base + range.start..base + range.end;
                            if !self.avail.is_empty() {
                                return Ok(());
                            }
                        }
                        ChunkedEvent::NeedMore => {
                            if consumed == 0 || self.raw.is_empty() {
                                self.read_more_raw()?;
                            }
                        }
                        ChunkedEvent::End => {
                            self.body = Body::Done;
                            return Ok(());
                        }
                    }
                }
            }
        }
    }

    /// Marks `n` bytes of what [`Exchange::fill_body`] returned as read.
    pub fn consume_body(&mut self, n: usize) {
        self.avail.start = (self.avail.start + n).min(self.avail.end);
    }

    /// Reads body bytes into `out`; `Ok(0)` at the end of the body. Large reads with nothing
    /// buffered go straight from the socket into `out`.
    pub fn read_body(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if out.is_empty() {
            return Ok(0);
        }
        if self.avail.is_empty() && self.raw.is_empty() && out.len() >= DIRECT_READ_MIN {
            if let Body::Length(remaining) = self.body {
                if let Err(err) = self.send_continue() {
                    self.body = Body::Failed;
                    return Err(err);
                }
                let want = (out.len() as u64).min(remaining) as usize;
                let deadline = self.body_deadline();
                let n = match read_with_deadline(
                    self.conn.fd(),
                    &mut out[..want],
                    deadline,
                    "request body read",
                ) {
                    Ok(0) => Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "client closed the connection before the request body ended",
                    )),
                    other => other,
                };
                let n = n.inspect_err(|err| self.body_failed(err))?;
                self.conn.maybe_more = n == want;
                self.body_received += n as u64;
                let left = remaining - n as u64;
                self.body = if left == 0 {
                    Body::Done
                } else {
                    Body::Length(left)
                };
                return Ok(n);
            }
        }
        let available = self.fill_body()?;
        let n = available.len().min(out.len());
        out[..n].copy_from_slice(&available[..n]);
        self.consume_body(n);
        Ok(n)
    }

    // ----- the response -----

    /// Starts the response: validates the app's status and headers (nothing is written when
    /// they are bad), decides the framing and encodes the head into the output buffer.
    /// `body_length` is the body's length when the caller knows it (a WSGI list body).
    pub fn begin_response<'h, I>(
        &mut self,
        status: &[u8],
        headers: I,
        body_length: Option<u64>,
    ) -> Result<(), ResponseError>
    where
        I: IntoIterator<Item = (&'h [u8], &'h [u8])>,
    {
        if self.phase != Phase::NotStarted {
            return Err(ResponseError::AlreadyStarted);
        }
        let code = parse_status(status).map_err(|kind| {
            ResponseError::Header(
                kind,
                format!("status {:?}", String::from_utf8_lossy(status)),
            )
        })?;
        let out = &mut self.ctx.out;
        out.clear();
        encode_status_line(out, Version::Http11, status);
        let mut declared = None;
        let (mut has_date, mut has_server) = (false, false);
        for (name, value) in headers {
            let fail = |kind| {
                ResponseError::Header(
                    kind,
                    format!(
                        "{:?}: {:?}",
                        String::from_utf8_lossy(name),
                        String::from_utf8_lossy(value)
                    ),
                )
            };
            match check_app_header(name, value).map_err(fail)? {
                AppHeader::ContentLength(length) => {
                    if declared.is_some_and(|d| d != length) {
                        out.clear();
                        return Err(fail(ResponseHeaderError::InvalidContentLength));
                    }
                    if declared.is_some() {
                        continue;
                    }
                    declared = Some(length);
                }
                AppHeader::Plain => {
                    has_date |= name.eq_ignore_ascii_case(b"date");
                    has_server |= name.eq_ignore_ascii_case(b"server");
                }
            }
            encode_header(out, name, value);
        }
        let framing = if !status_allows_body(code, self.is_head) {
            if self.is_head && declared.is_none() {
                if let Some(length) = body_length {
                    let mut digits = itoa::Buffer::new();
                    encode_header(out, b"Content-Length", digits.format(length).as_bytes());
                }
            }
            ResponseFraming::NoBody
        } else if let Some(length) = declared {
            ResponseFraming::Length(length)
        } else if let Some(length) = body_length {
            let mut digits = itoa::Buffer::new();
            encode_header(out, b"Content-Length", digits.format(length).as_bytes());
            ResponseFraming::Length(length)
        } else if self.conn.head.version == Version::Http11 {
            encode_header(out, b"Transfer-Encoding", b"chunked");
            ResponseFraming::Chunked
        } else {
            ResponseFraming::CloseDelimited
        };
        self.keep_alive = self.may_keep_alive(framing);
        let out = &mut self.ctx.out;
        if !has_server && !self.shared.config.server_header.is_empty() {
            encode_header(out, b"Server", &self.shared.config.server_header);
        }
        if !has_date {
            encode_header(out, b"Date", self.ctx.date.now());
        }
        if !self.keep_alive {
            encode_header(out, b"Connection", b"close");
        } else if self.conn.head.version == Version::Http10 {
            encode_header(out, b"Connection", b"keep-alive");
        }
        out.extend_from_slice(b"\r\n");
        self.framing = framing;
        self.declared = declared.or(match framing {
            ResponseFraming::Length(length) => Some(length),
            _ => None,
        });
        self.status = code;
        self.phase = Phase::Buffered;
        Ok(())
    }

    fn may_keep_alive(&self, framing: ResponseFraming) -> bool {
        let config = &self.shared.config;
        let body_reusable = match self.body {
            Body::Done => true,
            Body::Length(remaining) => {
                self.expect == Continue::Settled && remaining <= config.max_body_drain
            }
            Body::Chunked(_) | Body::Failed => false,
        };
        !self.must_close
            && self.conn.head.keep_alive()
            && body_reusable
            && framing != ResponseFraming::CloseDelimited
            && !config.keepalive_timeout.is_zero()
            && (config.max_keepalive_requests == 0
                || self.conn.served + 1 < config.max_keepalive_requests)
            && !self.shared.is_stopping()
    }

    /// Whether a response head was started.
    pub fn response_started(&self) -> bool {
        self.phase != Phase::NotStarted
    }

    /// Whether bytes of the response reached the socket (the status can no longer change).
    pub fn response_committed(&self) -> bool {
        matches!(self.phase, Phase::Committed | Phase::Finished)
    }

    /// Drops a started but uncommitted response (to replace it with an error response).
    pub fn reset_response(&mut self) -> bool {
        if self.phase == Phase::Buffered {
            self.ctx.out.clear();
            self.phase = Phase::NotStarted;
            self.body_sent = 0;
            self.declared = None;
            self.framing = ResponseFraming::NoBody;
            self.status = 0;
            return true;
        }
        self.phase == Phase::NotStarted
    }

    fn allowed<'d>(&mut self, data: &'d [u8]) -> &'d [u8] {
        if let Some(declared) = self.declared {
            let left = declared.saturating_sub(self.body_sent);
            if data.len() as u64 > left {
                // The app sent more than its Content-Length: truncate and close (the client
                // would otherwise read the excess as the next response).
                self.keep_alive = false;
                return &data[..left as usize];
            }
        }
        data
    }

    fn discards_body(&self) -> bool {
        self.framing == ResponseFraming::NoBody
    }

    /// Appends body bytes to the output buffer if they fit without any I/O; returns false
    /// (and does nothing) when [`Exchange::write_body`] must be used instead.
    pub fn buffer_body(&mut self, data: &[u8]) -> bool {
        if self.phase == Phase::NotStarted || self.phase == Phase::Finished {
            return false;
        }
        if self.discards_body() {
            return true;
        }
        let data = self.allowed(data);
        if data.is_empty() {
            return true;
        }
        if self.ctx.out.len() + data.len() + 12 > OUT_BUFFER_LIMIT {
            return false;
        }
        if self.framing == ResponseFraming::Chunked {
            encode_chunk_size(&mut self.ctx.out, data.len());
            self.ctx.out.extend_from_slice(data);
            self.ctx.out.extend_from_slice(CHUNK_END);
        } else {
            self.ctx.out.extend_from_slice(data);
        }
        self.body_sent += data.len() as u64;
        true
    }

    /// Sends `parts` in order. Blocking MPMs wait for the client (up to `send_timeout` per
    /// wait). The event MPM writes what the socket takes without waiting and queues the rest
    /// for the loop; only when more than `max_response_buffer` is queued does the app thread
    /// wait for the client (backpressure on a large streamed body).
    fn emit(&mut self, parts: &[&[u8]]) -> io::Result<()> {
        let fd = self.conn.fd();
        let timeout = self.shared.config.send_timeout;
        if !self.deferred {
            return write_all(fd, parts, timeout);
        }
        let result = self.emit_deferred(fd, parts, timeout);
        if result.is_err() {
            // The client is gone or stopped reading past the send timeout: nothing queued
            // will be sent (the connection closes).
            if let Some(output) = &self.conn.output {
                output.with(|pending| pending.discard());
            }
        }
        result
    }

    fn emit_deferred(
        &mut self,
        fd: std::os::fd::RawFd,
        parts: &[&[u8]],
        timeout: std::time::Duration,
    ) -> io::Result<()> {
        let limit = self.shared.config.max_response_buffer;
        let output = Arc::clone(self.conn.output());
        let total: usize = parts.iter().map(|part| part.len()).sum();
        // Under the output's lock (the loop may be writing earlier output meanwhile): what
        // the socket takes now; the rest is queued if it fits `max_response_buffer`.
        let unsent = output.with(|pending| -> io::Result<Option<usize>> {
            if !pending.is_empty() {
                // Earlier output still waits: keep the order, but let it make progress.
                pending.write_some(fd)?;
            }
            let mut written = 0;
            if pending.is_empty() {
                while written < total {
                    match write_vectored_nonblocking(fd, parts, written)? {
                        Some(n) => written += n,
                        None => break,
                    }
                }
            }
            if written == total {
                return Ok(None);
            }
            if pending.buffered() + (total - written) <= limit {
                pending.push(parts, written);
                return Ok(None);
            }
            Ok(Some(written))
        })?;
        if let Some(written) = unsent {
            // More than `max_response_buffer`: the app thread waits for the client
            // (backpressure), first for what is queued, then for these bytes, written
            // straight from the caller's memory.
            output.write_all(timeout)?;
            write_all_from(fd, parts, written, timeout)?;
        }
        Ok(())
    }

    /// Writes body bytes (framed as the head announced), waiting for the client as needed.
    pub fn write_body(&mut self, data: &[u8]) -> io::Result<()> {
        if self.phase == Phase::NotStarted || self.phase == Phase::Finished {
            return Err(io::Error::other(
                "write_body before begin_response or after finish",
            ));
        }
        if self.buffer_body(data) {
            return Ok(());
        }
        let data = self.allowed(data);
        self.body_sent += data.len() as u64;
        let mut out = std::mem::take(&mut self.ctx.out);
        let result = if self.framing == ResponseFraming::Chunked {
            encode_chunk_size(&mut out, data.len());
            self.emit(&[&out, data, CHUNK_END])
        } else {
            self.emit(&[&out, data])
        };
        out.clear();
        self.ctx.out = out;
        self.phase = Phase::Committed;
        result.inspect_err(|_| self.keep_alive = false)
    }

    /// Writes out whatever is buffered (WSGI `write()` must send before it returns).
    pub fn flush(&mut self) -> io::Result<()> {
        if self.ctx.out.is_empty() || matches!(self.phase, Phase::NotStarted | Phase::Finished) {
            return Ok(());
        }
        let out = std::mem::take(&mut self.ctx.out);
        let result = self.emit(&[&out]);
        self.ctx.out = out;
        self.ctx.out.clear();
        self.phase = Phase::Committed;
        result.inspect_err(|_| self.keep_alive = false)
    }

    /// Sends `count` bytes of an open file from `offset` with sendfile (the body must have
    /// been announced with a length). Returns the bytes sent.
    pub fn send_file(
        &mut self,
        file_fd: std::os::fd::RawFd,
        offset: u64,
        count: u64,
    ) -> io::Result<u64> {
        if self.phase == Phase::NotStarted || self.phase == Phase::Finished {
            return Err(io::Error::other(
                "send_file before begin_response or after finish",
            ));
        }
        if self.discards_body() {
            return Ok(0);
        }
        let count = match self.declared {
            Some(declared) => count.min(declared.saturating_sub(self.body_sent)),
            None => count,
        };
        let fd = self.conn.fd();
        let timeout = self.shared.config.send_timeout;
        let chunked = self.framing == ResponseFraming::Chunked;
        if chunked && count > 0 {
            encode_chunk_size(&mut self.ctx.out, count as usize);
        }
        let result = if self.deferred {
            self.send_file_deferred(file_fd, offset, count)
                .inspect_err(|_| {
                    if let Some(output) = &self.conn.output {
                        output.with(|pending| pending.discard());
                    }
                })
        } else {
            write_all(fd, &[&self.ctx.out], timeout)
                .and_then(|()| send_file(fd, file_fd, offset, count, timeout))
        };
        self.ctx.out.clear();
        self.phase = Phase::Committed;
        let sent = result.inspect_err(|_| self.keep_alive = false)?;
        self.body_sent += sent;
        if chunked && count > 0 {
            if sent < count {
                self.keep_alive = false;
            } else {
                self.ctx.out.extend_from_slice(CHUNK_END);
            }
        }
        Ok(sent)
    }

    /// The event MPM's sendfile: the head (in the output buffer) and as much of the file as the
    /// socket takes now; the rest of the file is queued for the loop from a duplicate of the
    /// fd, so the app's file object can be closed at once. Reports the whole range as sent
    /// (a file found shorter later closes the connection).
    fn send_file_deferred(
        &mut self,
        file_fd: std::os::fd::RawFd,
        offset: u64,
        count: u64,
    ) -> io::Result<u64> {
        let fd = self.conn.fd();
        let timeout = self.shared.config.send_timeout;
        let out = std::mem::take(&mut self.ctx.out);
        let emitted = self.emit(&[&out]);
        self.ctx.out = out;
        emitted?;
        let output = Arc::clone(self.conn.output());
        if output.with(|pending| pending.has_file()) {
            output.write_all(timeout)?;
        }
        output.with(|pending| -> io::Result<u64> {
            let mut sent = 0u64;
            if pending.is_empty() {
                while sent < count {
                    match send_file_nonblocking(fd, file_fd, offset + sent, count - sent)? {
                        Some(0) => return Ok(sent),
                        Some(n) => sent += n,
                        None => break,
                    }
                }
            }
            if sent < count {
                // SAFETY: file_fd is a valid open fd for the duration of this call (the app's file
                // object holds it); F_DUPFD_CLOEXEC makes a new fd we own.
                let dup = unsafe { libc::fcntl(file_fd, libc::F_DUPFD_CLOEXEC, 0) };
                if dup < 0 {
                    return Err(io::Error::last_os_error());
                }
                // SAFETY: fcntl returned a fresh fd that nobody else owns.
                let owned =
                    unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(dup) };
                if let Err(owned) = pending.push_file(owned, offset + sent, count - sent) {
                    drop(owned);
                    return Err(io::Error::other("a second file range was queued"));
                }
            }
            Ok(count)
        })
    }

    /// Completes the response: the last chunk, then one write of whatever is buffered.
    /// A body shorter than its Content-Length closes the connection afterwards.
    pub fn finish(&mut self) -> io::Result<()> {
        match self.phase {
            Phase::Finished => return Ok(()),
            Phase::NotStarted => return Err(io::Error::other("finish before begin_response")),
            _ => {}
        }
        if self.framing == ResponseFraming::Chunked {
            self.ctx.out.extend_from_slice(LAST_CHUNK);
        }
        if let Some(declared) = self.declared {
            if self.body_sent < declared && !self.discards_body() {
                self.keep_alive = false;
            }
        }
        if self.framing == ResponseFraming::CloseDelimited {
            self.keep_alive = false;
        }
        let out = std::mem::take(&mut self.ctx.out);
        let result = self.emit(&[&out]);
        self.ctx.out = out;
        self.ctx.out.clear();
        self.phase = Phase::Finished;
        result.inspect_err(|_| self.keep_alive = false)
    }

    /// Gives up on the response (an error after bytes were sent): the connection closes.
    pub fn abort(&mut self) {
        self.keep_alive = false;
        self.ctx.out.clear();
        self.phase = Phase::Finished;
    }

    /// The response status (0 before `begin_response`).
    pub fn status(&self) -> u16 {
        self.status
    }

    /// Body bytes sent so far.
    pub fn body_sent(&self) -> u64 {
        self.body_sent
    }

    /// Sends a short, closing error response if nothing was sent yet (used when the app
    /// produced no response at all).
    pub fn fail(&mut self, code: u16) {
        if self.reset_response() {
            let reason = tines_proto::status::reason_phrase(code);
            let status = format!("{code} {reason}");
            let body = format!("{reason}\n");
            let length = body.len() as u64;
            self.must_close = true;
            let headers: [(&[u8], &[u8]); 1] = [(b"Content-Type", b"text/plain; charset=utf-8")];
            if self
                .begin_response(status.as_bytes(), headers, Some(length))
                .is_ok()
            {
                self.keep_alive = false;
                self.buffer_body(body.as_bytes());
                let _ = self.finish();
            }
        }
        self.abort();
    }

    /// Ends the exchange: finishes an unfinished response, drains an unread body when the
    /// connection can be kept, and returns the connection (if it stays open), the slot's
    /// context and whether the response was complete.
    pub(crate) fn complete(mut self) -> (Option<Connection>, SlotContext) {
        match self.phase {
            Phase::NotStarted => self.fail(500),
            Phase::Buffered | Phase::Committed => {
                let _ = self.finish();
            }
            Phase::Finished => {}
        }
        if let Some(log) = &self.shared.access_log {
            let mut line = std::mem::take(&mut self.ctx.log_line);
            let mut clock = std::mem::take(&mut self.ctx.log_clock);
            line.clear();
            crate::access_log::format_combined(&mut line, &self.logged_request(), &mut clock);
            log.append(&line);
            self.ctx.log_line = line;
            self.ctx.log_clock = clock;
        }
        let mut keep = self.keep_alive;
        if keep && !matches!(self.body, Body::Done) {
            keep = self.drain_body();
        }
        if keep {
            // Undecoded bytes past the body are the start of a pipelined request.
            let leftover = self.raw.clone();
            self.conn.next_request(leftover);
        }
        let unread_input = !keep && !matches!(self.body, Body::Done);
        let Exchange { mut conn, ctx, .. } = self;
        if !keep && (conn.has_pending_output() || unread_input) {
            // The loop writes the rest (if any), then closes, lingering if the client may
            // still be sending its body.
            conn.close_after_write = true;
            conn.unread_input = unread_input;
            return (Some(conn), ctx);
        }
        (keep.then_some(conn), ctx)
    }

    fn drain_body(&mut self) -> bool {
        let limit = self.shared.config.max_body_drain;
        let mut drained = 0u64;
        loop {
            match self.fill_body() {
                Ok([]) => return matches!(self.body, Body::Done),
                Ok(bytes) => {
                    let n = bytes.len();
                    drained += n as u64;
                    self.consume_body(n);
                    if drained > limit {
                        return false;
                    }
                }
                Err(_) => return false,
            }
        }
    }
}
