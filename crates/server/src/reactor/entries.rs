//! The loop's table of connections by token: what each entry is doing (`Entry`, and the
//! `TimerKind` a parked one waits under), taking a token for a new connection and freeing it
//! on close (with the scoreboard's connection count and the accept pause at
//! `max_connections`).
//!
//! It must not read from or write to a connection: the other files move entries between
//! states.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use super::Reactor;
use crate::connection::Connection;
use crate::pending::Output;

/// What the loop holds for each token.
pub(super) enum Entry {
    Vacant,
    /// Waiting in the poller for bytes, until `deadline` (under the `kind` of timeout).
    Parked {
        conn: Box<Connection>,
        deadline: Instant,
        kind: TimerKind,
    },
    /// A slot owns the connection; `readable` records an event that arrived meanwhile, and
    /// `peer_closed` whether it said the peer shut its side. When
    /// the slot runs on another thread (thread, event), `output` lets the loop write what the
    /// slot left pending whenever the socket becomes writable, while the slot still produces
    /// the response.
    Dispatched {
        readable: bool,
        peer_closed: bool,
        output: Option<Arc<Output>>,
    },
    /// Lingering close (Apache's `lingering_close`): the last response was sent while the
    /// client may still be sending (a refused head, an unread body, pipelined requests past
    /// the keep-alive limit). The write side is shut and what arrives is read and dropped
    /// until EOF, until everything sent is acknowledged, or `linger_timeout` (see
    /// `reactor::linger`).
    Lingering {
        conn: Box<Connection>,
        deadline: Instant,
    },
    /// The loop finishes response output a slot left pending (every MPM), until `deadline`
    /// (the send timeout, renewed on progress); `readable` records a read event meanwhile.
    Writing {
        conn: Box<Connection>,
        deadline: Instant,
        readable: bool,
    },
}

/// Which timeout a parked connection waits under.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum TimerKind {
    /// Between requests: `keepalive_timeout`, then a silent close.
    Idle,
    /// A head has started (or nothing came yet on a new connection): `header_timeout`, then
    /// 408 (if any byte came) and close.
    Header,
    /// The loop reads a small request body ahead of dispatch (`event` MPM): `body_timeout`
    /// (extended at `body_min_rate`), then 408 and close.
    Body,
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
        let entry = Entry::Parked {
            conn,
            deadline,
            kind: TimerKind::Header,
        };
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
        if !matches!(entry, Entry::Parked { .. }) {
            return None;
        }
        let dispatched = Entry::Dispatched {
            readable: false,
            peer_closed: false,
            output: None,
        };
        match std::mem::replace(entry, dispatched) {
            Entry::Parked { conn, kind, .. } => {
                self.unparked(kind);
                Some(conn)
            }
            _ => unreachable!("checked above"),
        }
    }

    /// A parked entry of `kind` left the `Parked` state (for the count of connections part-way
    /// through a request, which the scoreboard's worker state shows).
    pub(super) fn unparked(&mut self, kind: TimerKind) {
        if kind != TimerKind::Idle {
            self.reading = self.reading.saturating_sub(1);
        }
    }

    pub(super) fn close(&mut self, token: usize) {
        if let Some(entry) = self.entries.get_mut(token) {
            if !matches!(entry, Entry::Vacant) {
                // Dropping the connection closes its fd, which also removes it from epoll.
                if let Entry::Parked { kind, .. } = std::mem::replace(entry, Entry::Vacant) {
                    self.unparked(kind);
                }
                self.free.push(token);
                self.open -= 1;
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
