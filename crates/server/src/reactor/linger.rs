//! Lingering close (Apache's `lingering_close`): after the last response to a client that may
//! still be sending (an error before its body was read, a response that left the body unread,
//! the last response at `max_keepalive_requests` with pipelined requests behind it), shut the
//! write side and read and drop what arrives, so that the kernel does not answer the client's
//! bytes with a reset that destroys responses it has not read yet. It ends at EOF, once
//! everything sent has been acknowledged (`SIOCOUTQ` is 0: the responses are in the client's
//! receive queue, where a reset no longer destroys them), or at `linger_timeout`. There is no
//! byte cap: a client that keeps sending is bounded by the timeout.
//!
//! It must not write: the response was sent before the connection came here.

use std::time::Instant;

use super::{Entry, Reactor};
use crate::connection::Connection;
use crate::io::{read_nonblocking, unacknowledged_output};

impl Reactor {
    /// Closes a connection whose response is complete: at once, or lingering when the client
    /// may still be sending (see the module header).
    pub(super) fn close_after_response(&mut self, token: usize, conn: Connection) {
        if conn.unread_input {
            self.linger(token, conn)
        } else {
            self.close(token)
        }
    }

    /// Starts a lingering close (see [`Entry::Lingering`]).
    pub(super) fn linger(&mut self, token: usize, mut conn: Connection) {
        // SAFETY: shutdown on the connection's own open fd; a failure only means the peer is
        // gone, which the reads below see.
        unsafe { libc::shutdown(conn.fd(), libc::SHUT_WR) };
        conn.buf = Vec::new();
        let deadline = Instant::now() + self.shared.config.linger_timeout;
        self.note_deadline(deadline);
        self.entries[token] = Entry::Lingering { conn, deadline };
        self.on_linger_readable(token);
    }

    /// Reads and drops what a lingering connection's client sent; closes at EOF, once all that
    /// was sent is acknowledged, or on an error.
    pub(super) fn on_linger_readable(&mut self, token: usize) {
        let Some(Entry::Lingering { conn, .. }) = self.entries.get_mut(token) else {
            return;
        };
        let fd = conn.fd();
        let mut sink = [0u8; 16 * 1024];
        loop {
            match read_nonblocking(fd, &mut sink) {
                Ok(None) => break,
                Ok(Some(n)) if n > 0 => {}
                _ => return self.close(token),
            }
        }
        if unacknowledged_output(fd).map_or(true, |queued| queued == 0) {
            self.close(token);
        }
    }
}
