//! The request body as the app reads it. Usually the loop read it whole before dispatch
//! (`reactor::body`): then it is read at full speed from the read buffer (in memory) or the
//! temporary file (`Body::Spooled`, by offset; large reads straight into the caller's
//! buffer). On `stream_body_paths` it streams from the socket: decoding (Content-Length or
//! chunked), `100 Continue` on the first read, the body deadlines (`body_timeout`,
//! `body_min_rate`), `max_body_size` for chunked bodies. Either way: whose fault a failed
//! read was (413, 400, 408).
//!
//! It reads only from the connection's socket, buffer and body file; it must not write a
//! response (beyond the interim `100 Continue`) nor decide about keep-alive.

use std::io;
use std::time::Instant;

use tines_proto::{BodyFraming, ChunkedEvent};

use super::{Body, Continue, Exchange, Phase};
use crate::shared::{max_body_size_line, Oversize};

/// Room reserved after the head in the read buffer for body reads.
const BODY_READ_CHUNK: usize = 16 * 1024;

/// Reads of at least this size with nothing buffered go straight into the caller's buffer.
const DIRECT_READ_MIN: usize = 8 * 1024;

fn invalid_data(message: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message.to_string())
}

impl Exchange {
    /// True when the request has a body that has not been read to its end.
    pub fn body_pending(&self) -> bool {
        !matches!(self.body, Body::Done) || !self.avail.is_empty()
    }

    fn send_continue(&mut self) -> io::Result<()> {
        if self.expect == Continue::Pending {
            self.expect = Continue::Settled;
            if self.phase == Phase::NotStarted || self.phase == Phase::Buffered {
                self.begin_client_wait();
                let written = self.parts.link.write_all_from(
                    &[b"HTTP/1.1 100 Continue\r\n\r\n"],
                    0,
                    self.shared.config.send_timeout,
                );
                // An interim response: not part of the response bytes (the final head may
                // still be a 503).
                self.end_client_wait(0);
                written?;
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
        let base = self.parts.head.head_len;
        // Keep undecoded leftovers (a partial chunk-size line) at the front of the body area.
        let left = self.raw.len();
        if left > 0 && self.raw.start != base {
            self.parts.buf.copy_within(self.raw.clone(), base);
        }
        let start = base + left;
        if self.parts.buf.len() < start + BODY_READ_CHUNK {
            self.parts.buf.resize(start + BODY_READ_CHUNK, 0);
        }
        let deadline = self.body_deadline();
        let link = self.parts.link;
        let space = self.parts.buf.len() - start;
        self.begin_client_wait();
        let n = link.read_by(&mut self.parts.buf[start..], deadline, "request body read");
        self.end_client_wait(0);
        let n = n?;
        self.parts.maybe_more = n == space;
        self.body_received += n as u64;
        self.parts.received += n as u64;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "client closed the connection before the request body ended",
            ));
        }
        self.parts.filled = start + n;
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
        Ok(&self.parts.buf[self.avail.clone()])
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
        matches!(self.parts.head.body, BodyFraming::Length(n) if limit > 0 && n > limit)
    }

    /// Answers 413 to a request whose announced body is over `max_body_size`
    /// ([`Exchange::body_too_large`]), and says so in the error log (rate-limited).
    pub(crate) fn refuse_too_large(&mut self) {
        let oversize = match self.parts.head.body {
            BodyFraming::Length(n) => Oversize::Announced(n),
            // Not asked for (only an announced length is over before reading).
            _ => Oversize::Chunked,
        };
        let limit = self.shared.config.max_body_size;
        self.shared
            .log_too_large(|| max_body_size_line(self.method(), self.target(), oversize, limit));
        self.fail(413);
    }

    fn produce_body(&mut self) -> io::Result<()> {
        self.send_continue()?;
        loop {
            match &mut self.body {
                Body::Done => return Ok(()),
                Body::Failed => return Err(invalid_data("the request body could not be read")),
                Body::Spooled { file, offset } => {
                    // After the buffered bytes that follow the body (a pipelined request).
                    let start = self.parts.filled;
                    if self.parts.buf.len() < start + BODY_READ_CHUNK {
                        self.parts.buf.resize(start + BODY_READ_CHUNK, 0);
                    }
                    let n = file.read_at(*offset, &mut self.parts.buf[start..])?;
                    *offset += n as u64;
                    if n == 0 || *offset >= file.len() {
                        self.body = Body::Done;
                    }
                    self.avail = start..start + n;
                    return Ok(());
                }
                // A buffered body's bytes are all in `raw`: it never reads the socket.
                Body::Length(remaining) | Body::Buffered(remaining) => {
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
                        .decode(&self.parts.buf[self.raw.clone()])
                        .map_err(|err| invalid_data(&format!("bad chunked body: {err:?}")))?;
                    self.raw.start += consumed;
                    match event {
                        ChunkedEvent::Data(range) => {
                            self.chunked_received += range.len() as u64;
                            let limit = self.shared.config.max_body_size;
                            if limit > 0 && self.chunked_received > limit {
                                self.fault = Some(413);
                                self.shared.log_too_large(|| {
                                    max_body_size_line(
                                        self.method(),
                                        self.target(),
                                        Oversize::Streamed,
                                        limit,
                                    )
                                });
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
        if let Body::Spooled { file, offset } = &mut self.body {
            if self.avail.is_empty() && out.len() >= DIRECT_READ_MIN {
                let read = file.read_at(*offset, out);
                let n = read.inspect_err(|err| self.body_failed(err))?;
                let Body::Spooled { file, offset } = &mut self.body else {
                    unreachable!("matched above")
                };
                *offset += n as u64;
                if n == 0 || *offset >= file.len() {
                    self.body = Body::Done;
                }
                return Ok(n);
            }
        }
        if self.avail.is_empty() && self.raw.is_empty() && out.len() >= DIRECT_READ_MIN {
            if let Body::Length(remaining) = self.body {
                if let Err(err) = self.send_continue() {
                    self.body = Body::Failed;
                    return Err(err);
                }
                let want = (out.len() as u64).min(remaining) as usize;
                let deadline = self.body_deadline();
                self.begin_client_wait();
                let read = self
                    .parts
                    .link
                    .read_by(&mut out[..want], deadline, "request body read");
                self.end_client_wait(0);
                let n = match read {
                    Ok(0) => Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "client closed the connection before the request body ended",
                    )),
                    other => other,
                };
                let n = n.inspect_err(|err| self.body_failed(err))?;
                self.parts.maybe_more = n == want;
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
}
