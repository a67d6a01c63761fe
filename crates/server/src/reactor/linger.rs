//! Lingering close (Apache's `lingering_close`): after the last response to a client that may
//! still be sending (an error before its body was read, a response that left the body unread,
//! the last response at `max_keepalive_requests` with pipelined requests behind it), shut the
//! write side and read and drop what arrives, so that the kernel does not answer the client's
//! bytes with a reset that destroys responses it has not read yet. It ends at EOF, once
//! everything sent has been acknowledged (`SIOCOUTQ` is 0: the responses are in the client's
//! receive queue, where a reset no longer destroys them; only for [`Linger::UntilAcknowledged`]:
//! a client still uploading a body may not read before its next send fails, and some stacks
//! drop received data on a reset), or at `linger_timeout`. There is no byte cap: a client that
//! keeps sending is bounded by the timeout, and one event reads at most `LINGER_READ_PER_EVENT`
//! so a flood cannot hold the loop.
//!
//! On TLS, our close_notify goes first (`Link::shutdown_write`; the `shutdown(SHUT_WR)` waits
//! until the socket took it, written on the lingering events), and what the client sends is
//! read as it is and dropped, never decrypted.
//!
//! It must not write: the response was sent before the connection came here.

use std::time::Instant;

use super::{Entry, Reactor};
use crate::connection::{Connection, Linger};

/// The most one readiness event reads and drops from a lingering connection (a client that
/// sends faster than the loop reads must not keep the loop thread from its other work).
const LINGER_READ_PER_EVENT: usize = 1 << 20;

impl Reactor {
    /// Starts a lingering close (see [`Entry::Lingering`]). Whatever the connection held for
    /// its request goes now, not when the lingering ends: the read buffer and a body read
    /// before dispatch (its memory charge and temporary file; a 408, a 413 or a 503 for a
    /// body read whole).
    pub(super) fn linger(&mut self, token: usize, mut conn: Box<Connection>, how: Linger) {
        if conn.link().is_h2() {
            // An HTTP/2 stream never lingers (ADR 0035): dropping it ends the stream (its
            // response sent, then END_STREAM; RST_STREAM for a request left unread).
            return self.close(token);
        }
        if !self.watch(token, &mut conn) {
            return;
        }
        // A failure only means the peer is gone, which the reads below see.
        conn.link().shutdown_write();
        conn.buf = Vec::new();
        conn.parked_body = None;
        let deadline =
            self.stop_deadline(&conn, Instant::now() + self.shared.config.linger_timeout);
        self.note_deadline(deadline);
        self.entries[token] = Entry::Lingering {
            conn,
            deadline,
            how,
        };
        self.on_linger_readable(token);
    }

    /// Reads and drops what a lingering connection's client sent; closes at EOF, once all that
    /// was sent is acknowledged, or on an error.
    pub(super) fn on_linger_readable(&mut self, token: usize) {
        let Some(Entry::Lingering { conn, how, .. }) = self.entries.get_mut(token) else {
            return;
        };
        let link = conn.link();
        let until_acknowledged = *how == Linger::UntilAcknowledged;
        // A TLS close_notify the socket did not take at once (and the shutdown after it).
        if link.wants_write() && link.flush().is_err() {
            return self.close(token);
        }
        let mut sink = [0u8; 16 * 1024];
        let mut read = 0;
        while read < LINGER_READ_PER_EVENT {
            match link.read_raw(&mut sink) {
                Ok(None) => break,
                Ok(Some(n)) if n > 0 => read += n,
                _ => return self.close(token),
            }
        }
        // Past the per-event bound no further edge comes (edge-triggered): the deadline
        // closes it, unless everything sent is already acknowledged.
        if until_acknowledged && link.unacknowledged().map_or(true, |queued| queued == 0) {
            self.close(token);
        }
    }
}
