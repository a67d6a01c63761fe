//! Lingering close (Apache's `lingering_close`): after an error response to a client that may
//! still be sending, shut the write side and read and drop what arrives until EOF, `LINGER` or
//! `LINGER_MAX_BYTES`, so that the kernel does not answer the client's bytes with a reset that
//! destroys the response before it is read.
//!
//! It must not write: the response was sent before the connection came here.

use std::time::{Duration, Instant};

use super::{Entry, Reactor};
use crate::connection::Connection;

/// How long a lingering close waits for the client to stop sending (Apache: 2 s).
pub(super) const LINGER: Duration = Duration::from_secs(2);

/// The most a lingering close reads and drops before it gives up and closes.
const LINGER_MAX_BYTES: usize = 1 << 20;

impl Reactor {
    /// Closes a connection whose response is complete: at once, or lingering when the client
    /// may still be sending (its request body was not read).
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
        let deadline = Instant::now() + LINGER;
        self.note_deadline(deadline);
        self.entries[token] = Entry::Lingering {
            conn,
            deadline,
            discarded: 0,
        };
        self.on_linger_readable(token);
    }

    /// Reads and drops what a lingering connection's client sent; closes at EOF or the limit.
    pub(super) fn on_linger_readable(&mut self, token: usize) {
        let Some(Entry::Lingering {
            conn, discarded, ..
        }) = self.entries.get_mut(token)
        else {
            return;
        };
        let mut sink = [0u8; 16 * 1024];
        loop {
            match crate::io::read_nonblocking(conn.fd(), &mut sink) {
                Ok(None) => return,
                Ok(Some(n)) if n > 0 && *discarded + n <= LINGER_MAX_BYTES => *discarded += n,
                _ => return self.close(token),
            }
        }
    }
}
