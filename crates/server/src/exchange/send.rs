//! How response bytes reach the socket. The blocking MPMs (prefork, thread) wait for the
//! client, up to `send_timeout` per wait. The event MPM writes what the socket takes now and
//! queues the rest in the connection's pending output for the loop (up to
//! `max_response_buffer`), and the file range of a sendfile from a duplicate of the fd.
//!
//! It writes what it is given, framed already; it must not decide the framing or the status.

use std::io;
use std::sync::Arc;

use tines_proto::response::{encode_chunk_size, ResponseFraming, CHUNK_END};

use super::{Exchange, Phase};
use crate::io::{
    send_file, send_file_nonblocking, write_all, write_all_from, write_vectored_nonblocking,
};

impl Exchange {
    /// Sends `parts` in order. Blocking MPMs wait for the client (up to `send_timeout` per
    /// wait). The event MPM writes what the socket takes without waiting and queues the rest
    /// for the loop; only when more than `max_response_buffer` is queued does the app thread
    /// wait for the client (backpressure on a large streamed body).
    ///
    /// The time it takes is the client's, not the app's (`request_timeout`); its return is
    /// a progress point, and its end time after the last write is the request's "last byte
    /// handed to the socket".
    pub(super) fn emit(&mut self, parts: &[&[u8]]) -> io::Result<()> {
        self.begin_client_wait();
        let result = self.emit_parts(parts);
        let total = if result.is_ok() {
            parts.iter().map(|part| part.len() as u64).sum()
        } else {
            0
        };
        self.end_client_wait(total);
        result
    }

    fn emit_parts(&mut self, parts: &[&[u8]]) -> io::Result<()> {
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
        // The deferred path emits the head through `emit`, which counts it.
        let head = if self.deferred {
            0
        } else {
            self.ctx.out.len() as u64
        };
        self.begin_client_wait();
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
        self.end_client_wait(result.as_ref().map_or(0, |sent| head + sent));
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
}
