//! Response output the poller finishes, on every MPM (ADR 0009): a connection whose slot left
//! output pending (memory, a file range, a spill file) is held as `Entry::Writing` and written
//! whenever the socket becomes writable, under the send timeout (renewed when the client takes
//! bytes); then the next request is read, or the connection parked or closed. On TLS, the
//! output is written only once the session's backlog (records sealed and not yet taken by
//! the socket) is written too: the pending output's write says `Done` only then. A client that
//! passes the send timeout or goes away is closed, which gives its memory and disk back.
//!
//! It writes only what the slot queued; it must not frame or produce a response.

use std::time::Instant;

use super::{Driver, Entry, Reactor};
use crate::connection::{Connection, Protocol};
use crate::pending::Progress;

impl Reactor {
    /// Writes what a `Writing` connection has pending; when done, goes on with the next
    /// request (or parks, or closes).
    pub(super) fn on_writable(&mut self, token: usize, driver: &mut dyn Driver) {
        let Some(Entry::Writing {
            conn,
            deadline,
            readable,
        }) = self.entries.get_mut(token)
        else {
            return;
        };
        match conn.output().write_some_moved() {
            Ok((Progress::Blocked, moved)) => {
                // It waits for the socket now (a batch's write that the socket did not take
                // whole, on a connection not watched yet): the poller must watch it.
                let watched = conn.watch();
                // The send timeout is per wait, as for a slot: renewed when the client took
                // bytes, not by events that wrote nothing.
                if moved {
                    let renewed = Instant::now() + self.shared.config.send_timeout;
                    let renewed = match self.websockets_until {
                        Some(until) if conn.protocol == Protocol::WebSocket => renewed.min(until),
                        _ => renewed,
                    };
                    *deadline = renewed;
                    self.note_deadline(renewed);
                }
                if let Err(err) = watched {
                    self.unwatchable(token, &err);
                }
            }
            Ok((Progress::Done, _)) => {
                let readable = *readable;
                let Entry::Writing { conn, .. } = std::mem::replace(
                    &mut self.entries[token],
                    Entry::Dispatched {
                        readable,
                        peer_closed: false,
                        output: None,
                    },
                ) else {
                    unreachable!()
                };
                // As for a returned connection: what raised an edge meanwhile is read before
                // parking, even after serving the requests already buffered.
                if let Some(conn) = self.after_served(token, Some(conn), readable, driver) {
                    self.advance(token, conn, driver)
                }
            }
            Err(err) => {
                crate::log::debug(&format!("response write failed: {err}"));
                self.close(token)
            }
        }
    }

    /// Takes over a connection whose response output is not all written.
    pub(super) fn start_writing(
        &mut self,
        token: usize,
        mut conn: Box<Connection>,
        readable: bool,
        driver: &mut dyn Driver,
    ) {
        // A stopping worker (or one about to stop: `max_requests` reached) writes at once, as
        // app threads do: its stop sequence goes by the state connections are in.
        let stopping = self.stop.is_some() || self.shared.recycle_requested();
        let batched = driver.serves_inline() && self.batch.enabled() && !stopping;
        // Written as the socket takes it from now on; a response left for the inline slot's
        // batch is watched only if the batch's write leaves some of it (`on_writable`).
        if !batched && !self.watch(token, &mut conn) {
            return;
        }
        // The response's last write (its slot read the clock then), or the loop's wake-up.
        let now = crate::clock::recent();
        let deadline = self.stop_deadline(&conn, now + self.shared.config.send_timeout);
        self.note_deadline(deadline);
        self.entries[token] = Entry::Writing {
            conn,
            deadline,
            readable,
        };
        if batched {
            // The end of the inline slot's batch writes it, with the others (ADR 0011).
            let started = self.dispatch_started.take().unwrap_or(now);
            self.batch.deferred(started, now);
            self.deferred.push(token);
            return;
        }
        // The slot's last write may have been before the socket drained: try now (an edge
        // raised while the slot had it is not repeated).
        self.on_writable(token, driver);
    }

    /// Before the inline slot serves a request: writes the batch first when that request
    /// would make the oldest deferred response wait past `response_batch_delay`.
    pub(super) fn before_inline_dispatch(&mut self, driver: &mut dyn Driver) {
        // The last response's last write, or the loop's wake-up: a few µs ago.
        let mut now = crate::clock::recent();
        if !self.deferred.is_empty() && self.batch.due(now) {
            self.flush_deferred(driver);
            now = crate::clock::now();
        }
        self.dispatch_started = Some(now);
    }

    /// Ends the inline slot's batch: writes every deferred response, back to back (a
    /// connection whose next request is already buffered is served on from there, and its
    /// response joins the next batch... which this also writes, until none is left).
    pub(super) fn flush_deferred(&mut self, driver: &mut dyn Driver) {
        while !self.deferred.is_empty() {
            let mut tokens = std::mem::take(&mut self.deferred);
            self.batch.flushed();
            for token in tokens.drain(..) {
                self.on_writable(token, driver);
            }
            if self.deferred.is_empty() {
                // Keep the allocation for the next batch.
                self.deferred = tokens;
            }
        }
    }
}
