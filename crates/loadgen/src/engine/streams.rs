//! The loop's part of HTTP/2 (`--http2`, `--h2c`): counting the streams of a connection as they
//! end (in any order, each one request), and what follows a connection's end: after a graceful
//! GOAWAY the requests it never sent go on a new connection; after an error they fail.
//!
//! Must not: touch the h2 client's state (`connection::http2` owns it) or count by rules of its
//! own (`tally` applies docs/bench.md's).

use std::time::Instant;

use super::connection::{describe_h2_error, h2_error_kind, Event, Health, State};
use super::{Outcome, Worker};
use crate::stats::ErrorKind;

impl Worker<'_> {
    /// The TLS handshake of an HTTP/2 connection ended: fails it unless the server chose
    /// `h2` by ALPN, else sends the connection preface and the requests held for it.
    pub(super) fn h2_handshake_done(&mut self, slot: usize, now: Instant) -> Outcome {
        if !self.connections[slot].alpn_is_h2() {
            let addr = self.connections[slot].addr();
            self.fail_with(slot, ErrorKind::Tls, now, || match addr {
                Some(addr) => format!("{addr}: the server did not choose h2 by ALPN (--http2)"),
                None => "the server did not choose h2 by ALPN (--http2)".into(),
            });
            return Outcome::Closed;
        }
        let generation = self.connections[slot].generation();
        self.flush(slot, now);
        if self.connections[slot].generation() != generation {
            return Outcome::Closed;
        }
        Outcome::Continue
    }

    /// Bytes came on an HTTP/2 connection: its client takes them, then what it wrote is sent
    /// and the streams that ended are counted.
    pub(super) fn h2_process(&mut self, slot: usize, now: Instant) -> Outcome {
        let generation = self.connections[slot].generation();
        self.connections[slot].h2_receive(now, &self.config.requests_specs);
        self.flush(slot, now);
        // Closed, or closed and opened again (after a GOAWAY): this event was the old socket's.
        if self.connections[slot].generation() == generation {
            Outcome::Continue
        } else {
            Outcome::Closed
        }
    }

    /// HTTP/2: counts the streams that ended, then closes a connection that is done with
    /// (after a GOAWAY its queued requests go on a new connection; after an error they fail).
    pub(super) fn settle_h2(&mut self, slot: usize, now: Instant) {
        self.count_h2_events(slot, now);
        let connection = &self.connections[slot];
        if connection.state() == State::Idle || connection.h2_open_streams() > 0 {
            return;
        }
        match connection.h2_health() {
            Health::Open => {}
            Health::Failed(kind, message) => self.fail_with(slot, kind, now, || message.clone()),
            Health::Draining => self.h2_ended(slot, now, ""),
        }
    }

    /// HTTP/2: counts the streams that ended (before anything drops the connection's client,
    /// which holds them).
    pub(super) fn count_h2_events(&mut self, slot: usize, now: Instant) {
        while let Some(event) = self.connections[slot].h2_event() {
            self.in_flight_total -= 1;
            match event {
                Event::Response(response) => self.tally.record_response(
                    now,
                    response.request.start,
                    response.first_byte,
                    response.status,
                ),
                Event::Failed { error } => {
                    self.tally
                        .record_error(h2_error_kind(&error), now, || describe_h2_error(&error))
                }
            }
            self.free(slot);
        }
    }

    /// HTTP/2: a connection that had a GOAWAY has ended (its streams done, or the server
    /// closed it): the streams still open fail as resets (`why`), and the requests queued,
    /// never sent, go on a new connection.
    pub(super) fn h2_ended(&mut self, slot: usize, now: Instant, why: &str) {
        self.count_h2_events(slot, now);
        let cut = self.connections[slot].h2_abandon_open();
        for _ in 0..cut {
            self.in_flight_total -= 1;
            self.tally
                .record_error(ErrorKind::Reset, now, || why.to_string());
        }
        let connection = &self.connections[slot];
        if connection.in_flight() == 0 {
            self.close(slot);
            self.after_close(slot);
            return;
        }
        let addr = connection
            .addr()
            .expect("an open connection has an address");
        self.close(slot);
        let spec = &self.config.requests_specs[self.connections[slot].front_spec()];
        let tls = self.config.tls.as_ref().zip(spec.server_name.as_ref());
        let registry = self.poll.registry();
        if let Err(error) = self.connections[slot].connect(slot, addr, tls, now, registry) {
            self.fail(slot, ErrorKind::Connect, now, &error, "connect");
        }
    }
}
