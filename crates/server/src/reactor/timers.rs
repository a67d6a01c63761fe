//! Timers: parking a connection in the poller under the deadline its state calls for (idle
//! keep-alive, header, body), the earliest deadline the loop sleeps until, and the sweep that
//! expires them (408 for a started head or body, then a lingering close).
//!
//! Timers cost nothing per park: each parked entry keeps its deadline, and one sweep over the
//! entries runs when the earliest known deadline passes. It must not read from a connection.

use std::time::{Duration, Instant};

use super::error_response::write_error;
use super::{Entry, Reactor, SPARE_BUFFERS};
use crate::connection::{Connection, Linger};

/// The longest the loop sleeps: the heartbeat period written to the scoreboard.
const HEARTBEAT: Duration = Duration::from_secs(1);

impl Reactor {
    pub(super) fn next_timeout(&self) -> Duration {
        let now = Instant::now();
        let mut timeout = HEARTBEAT;
        if let Some(deadline) = self.next_deadline {
            timeout = timeout.min(deadline.saturating_duration_since(now));
        }
        if let Some(until) = self.throttled_until {
            timeout = timeout.min(until.saturating_duration_since(now));
        }
        timeout
    }

    pub(super) fn park(&mut self, token: usize, conn: Box<Connection>) {
        let mut conn = conn;
        if !self.watch(token, &mut conn) {
            return;
        }
        if let Some(buf) = conn.take_idle_buffer() {
            if self.spare_buffers.len() < SPARE_BUFFERS {
                self.spare_buffers.push(buf);
            }
        }
        let config = &self.shared.config;
        /// The parked states, by the timer they wait under.
        enum Timer {
            Idle,
            Head,
            Body,
        }
        let (timer, deadline) = match conn.head_started {
            _ if conn.reads_body() => {
                let now = Instant::now();
                let (started, received, last_progress) =
                    conn.body_progress().unwrap_or((now, 0, now));
                // Without body_min_rate the timeout is per wait: from the last bytes (also
                // while the body waits for disk room, unread).
                let deadline = config
                    .body_deadline(started, received)
                    .unwrap_or(last_progress + config.body_timeout);
                (Timer::Body, deadline)
            }
            // A PROXY header and the first head share one deadline: it started with the
            // header's first byte, even when no byte of the head has come yet.
            Some(started) if !conn.is_idle() || conn.served == 0 => {
                (Timer::Head, config.header_deadline(started, conn.filled))
            }
            // A new connection that has sent nothing yet gets the header timeout.
            _ if conn.served == 0 => (Timer::Head, Instant::now() + config.header_timeout),
            // While stopping, no later than the drain's end.
            _ => {
                // After the response's last write, or the loop's wake-up: a few µs ago.
                let idle_until = crate::clock::recent() + config.keepalive_timeout;
                let deadline = self
                    .drain_until
                    .map_or(idle_until, |drain_until| drain_until.min(idle_until));
                (Timer::Idle, deadline)
            }
        };
        self.note_deadline(deadline);
        // Parked again without being taken: counted once.
        let was_reading = self.entries[token].is_reading();
        self.left_parked(was_reading);
        self.entries[token] = match timer {
            Timer::Idle => Entry::Idle { conn, deadline },
            Timer::Head => Entry::Head { conn, deadline },
            Timer::Body => Entry::Body { conn, deadline },
        };
        if self.entries[token].is_reading() {
            self.reading += 1;
        }
    }

    pub(super) fn note_deadline(&mut self, deadline: Instant) {
        if self.next_deadline.is_none_or(|next| deadline < next) {
            self.next_deadline = Some(deadline);
        }
    }

    /// Closes parked connections whose deadline passed (408 for a started head) and works out
    /// the next deadline. Runs only when the earliest known deadline has passed.
    pub(super) fn expire_timers(&mut self) {
        let now = Instant::now();
        if self.next_deadline.is_none_or(|next| now < next) {
            return;
        }
        let mut next: Option<Instant> = None;
        for token in 0..self.entries.len() {
            let (deadline, respond) = match &self.entries[token] {
                // RFC 9110 15.5.9: 408 tells the client the server closes an unused
                // connection. A slow PROXY header is closed silently: the proxy speaks no
                // HTTP yet.
                Entry::Head { conn, deadline } => (
                    *deadline,
                    (!conn.is_idle() && !conn.awaits_proxy_header()).then_some(408),
                ),
                Entry::Body { deadline, .. } => (*deadline, Some(408)),
                // An idle connection closes silently; a client that stopped reading (or
                // lingers): nothing more can be said to it.
                Entry::Idle { deadline, .. }
                | Entry::Writing { deadline, .. }
                | Entry::Lingering { deadline, .. } => (*deadline, None),
                Entry::Vacant | Entry::Dispatched { .. } => continue,
            };
            if deadline > now {
                next = Some(next.map_or(deadline, |n| n.min(deadline)));
                continue;
            }
            if let (Some(code), Some((conn, _))) = (respond, self.entries[token].parked()) {
                write_error(
                    conn,
                    code,
                    &self.shared,
                    &mut self.ctx.date,
                    &mut self.ctx.out,
                );
                if let Some(conn) = self.take_parked(token) {
                    // The client may still be sending (a slow head or body): linger.
                    self.linger(token, conn, Linger::UntilEof);
                    // The sweep sets `next_deadline` when it ends: count the new deadline in.
                    let linger_until = Instant::now() + self.shared.config.linger_timeout;
                    next = Some(next.map_or(linger_until, |n| n.min(linger_until)));
                    continue;
                }
            }
            self.close(token);
        }
        self.next_deadline = next;
    }
}
