//! The loop's table of connections by token: each entry's state (`Entry`: who holds the
//! connection, and the timer it waits under), taking a token for a new connection and freeing
//! it on close (with the scoreboard's connection count and the accept pause at
//! `max_connections`).
//!
//! It must not read from or write to a connection: the other files move entries between
//! states.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use super::h2::H2Entry;
use super::Reactor;
use crate::connection::{Connection, Linger};
use crate::pending::Output;

/// What the loop holds for each token: one state per stage of a connection's life in the
/// loop's hands, each with the deadline it waits under. A TLS handshake is no state of its
/// own: it waits as a head does (`Head`), since the connection's reads run it.
/// A deadline measures the client: at expiry the sweep first gives the entry what its
/// uncollected event would have (bytes waiting are read, output written, see
/// `Reactor::expire_timers`), and only what is still due then ends as said below.
pub(super) enum Entry {
    Vacant,
    /// Between requests, waiting in the poller for the next one until `deadline`
    /// (`keepalive_timeout`, or the drain's end), then a silent close.
    Idle {
        conn: Box<Connection>,
        deadline: Instant,
    },
    /// Waiting in the poller for (the rest of) a request head (or a PROXY header, a TLS
    /// handshake, or the first bytes of a new connection) until `deadline` (`header_timeout`,
    /// from the first byte of whichever came first), then 408 if any byte of a head came,
    /// and close.
    Head {
        conn: Box<Connection>,
        deadline: Instant,
    },
    /// Waiting in the poller for more of a body the loop reads before dispatch (or for disk
    /// room for it) until `deadline` (`body_timeout`, extended at `body_min_rate`), then 408
    /// and close.
    Body {
        conn: Box<Connection>,
        deadline: Instant,
    },
    /// A slot owns the connection (or the loop itself, while it advances it); `readable`
    /// records an event that arrived meanwhile, and `peer_closed` whether it said the peer
    /// shut its side. When the slot runs on another thread (thread, event), `output` lets the
    /// loop write what the slot left pending whenever the socket becomes writable, while the
    /// slot still produces the response.
    Dispatched {
        readable: bool,
        peer_closed: bool,
        output: Option<Arc<Output>>,
    },
    /// The loop finishes response output a slot left pending (every MPM), until `deadline`
    /// (the send timeout, renewed on progress); `readable` records a read event meanwhile.
    Writing {
        conn: Box<Connection>,
        deadline: Instant,
        readable: bool,
    },
    /// Lingering close (Apache's `lingering_close`): the last response was sent while the
    /// client may still be sending (a refused head, an unread body, pipelined requests past
    /// the keep-alive limit). The write side is shut and what arrives is read and dropped
    /// until EOF, until everything sent is acknowledged (`how`), or `linger_timeout` (see
    /// `reactor::linger`).
    Lingering {
        conn: Box<Connection>,
        deadline: Instant,
        how: Linger,
    },
    /// An HTTP/2 connection (ADR 0035), the loop's for its whole life: advanced on its
    /// socket's events, on the driver's waker and at `deadline` (`keepalive_timeout` from
    /// when it last had no open stream; the drain's end), then closed if it is still idle or
    /// the drain is over. Its streams are entries of their own (never in the poller).
    H2 {
        h2: Box<H2Entry>,
        deadline: Instant,
    },
}

impl Entry {
    /// A parked connection (idle, head or body: in the poller's keeping) and its deadline.
    pub(super) fn parked(&mut self) -> Option<(&mut Box<Connection>, &mut Instant)> {
        match self {
            Entry::Idle { conn, deadline }
            | Entry::Head { conn, deadline }
            | Entry::Body { conn, deadline } => Some((conn, deadline)),
            _ => None,
        }
    }

    /// True for a parked connection part-way through a request (a head or a body read
    /// ahead, not an idle keep-alive one): the scoreboard's `reading` state counts them.
    pub(super) fn is_reading(&self) -> bool {
        matches!(self, Entry::Head { .. } | Entry::Body { .. })
    }

    /// Takes the connection out of a parked entry, leaving `Dispatched` (nothing seen yet).
    fn unpark(&mut self) -> Option<Box<Connection>> {
        if !matches!(
            self,
            Entry::Idle { .. } | Entry::Head { .. } | Entry::Body { .. }
        ) {
            return None;
        }
        let dispatched = Entry::Dispatched {
            readable: false,
            peer_closed: false,
            output: None,
        };
        match std::mem::replace(self, dispatched) {
            Entry::Idle { conn, .. } | Entry::Head { conn, .. } | Entry::Body { conn, .. } => {
                Some(conn)
            }
            _ => unreachable!("checked above"),
        }
    }
}

impl Reactor {
    pub(super) fn insert(&mut self, conn: Box<Connection>) -> usize {
        self.open += 1;
        self.reading += 1;
        self.shared
            .slot()
            .connections
            .fetch_add(1, Ordering::Relaxed);
        // Parked until its first bytes arrive; the caller reads it at once or parks it again.
        let deadline = Instant::now() + self.shared.config.header_timeout;
        self.note_deadline(deadline);
        let entry = Entry::Head { conn, deadline };
        match self.free.pop() {
            Some(token) => {
                self.entries[token] = entry;
                token
            }
            None => {
                self.entries.push(entry);
                self.entries.len() - 1
            }
        }
    }

    /// Takes a parked connection out of the poller's keeping to advance it: its entry becomes
    /// `Dispatched` (any edge that arrives meanwhile is recorded there). `None` when the entry
    /// holds no parked connection.
    pub(super) fn take_parked(&mut self, token: usize) -> Option<Box<Connection>> {
        let entry = self.entries.get_mut(token)?;
        let reading = entry.is_reading();
        let conn = entry.unpark()?;
        self.left_parked(reading);
        Some(conn)
    }

    /// A parked entry left the poller's keeping (for the count of connections part-way
    /// through a request, which the scoreboard's worker state shows): `reading` when it was a
    /// head or a body.
    pub(super) fn left_parked(&mut self, reading: bool) {
        if reading {
            self.reading = self.reading.saturating_sub(1);
        }
    }

    pub(super) fn close(&mut self, token: usize) {
        if let Some(entry) = self.entries.get_mut(token) {
            if !matches!(entry, Entry::Vacant) {
                // Dropping the connection closes its fd, which also removes it from epoll.
                let reading = entry.is_reading();
                *entry = Entry::Vacant;
                self.left_parked(reading);
                self.free.push(token);
                if self.streams_open() {
                    self.stream_token_freed(token);
                }
                self.open -= 1;
                self.client_closed(token);
                self.shared
                    .slot()
                    .connections
                    .fetch_sub(1, Ordering::Relaxed);
                if self.full && self.open < self.shared.config.max_connections {
                    self.full = false;
                    self.resume_listening();
                }
            }
        }
    }
}
