//! Timers: parking a connection in the poller under the deadline its state calls for (idle
//! keep-alive, header, body), the earliest deadline the loop sleeps until, and the sweep that
//! expires them (408 for a started head or body, then a lingering close).
//!
//! Timers cost nothing per park: each parked entry keeps its deadline, and one sweep over the
//! entries runs when the earliest known deadline passes. A deadline measures the client's
//! silence (or slowness), never the worker's: before it ends a connection, the sweep gives it
//! what its uncollected event would have (ADR 0022). It must not read from a connection
//! itself: it only looks whether bytes wait, and `dispatch`, `writing` and `linger` do the
//! rest.

use std::time::{Duration, Instant};

use super::error_response::write_error;
use super::{Driver, Entry, Reactor, SPARE_BUFFERS};
use crate::connection::{Connection, Linger, Phase, Protocol};

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
        if self.h2_due() {
            timeout = Duration::ZERO;
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

    /// `deadline` for writing to or lingering on `conn`, kept within a graceful stop's bound
    /// for a WebSocket: the stop closes every WebSocket (1001) and gives it back at once, and
    /// clients that do not read must not hold the stop for `send_timeout` (or one linger
    /// after another): all of it ends by the stop's start plus `linger_timeout`.
    pub(super) fn stop_deadline(&self, conn: &Connection, deadline: Instant) -> Instant {
        match self.websockets_until {
            Some(until) if conn.protocol == Protocol::WebSocket => deadline.min(until),
            _ => deadline,
        }
    }

    pub(super) fn note_deadline(&mut self, deadline: Instant) {
        if self.next_deadline.is_none_or(|next| deadline < next) {
            self.next_deadline = Some(deadline);
        }
    }

    /// Ends what waited past its deadline (408 for a started head or body, then a lingering
    /// close; a silent close otherwise) and works out the next deadline. Runs only when the
    /// earliest known deadline has passed, so nothing here costs anything per request.
    ///
    /// A deadline measures the client, not the worker: a worker that was busy (prefork
    /// serves on this thread) or stopped finds deadlines past whose clients did send, or
    /// read, meanwhile, with events it has not collected yet. So an expired entry first gets
    /// what its event would have given it: a parked connection whose bytes wait unread (one
    /// `MSG_PEEK`) is read (an idle connection's next request is served; a head or a body
    /// goes on under the deadline its progress gives); a `Writing` one is written to (the
    /// send timeout is renewed if the client took bytes); a lingering one is drained, so
    /// that its close is not a reset. Only what is still due then ends.
    pub(super) fn expire_timers(&mut self, driver: &mut dyn Driver) {
        let now = Instant::now();
        if self.next_deadline.is_none_or(|next| now < next) {
            return;
        }
        // Rebuilt by the sweep: each entry still waiting notes its deadline, and so does
        // each one the sweep parks, writes or lingers anew.
        self.next_deadline = None;
        for token in 0..self.entries.len() {
            let (deadline, unread) = match &self.entries[token] {
                // Bytes a body waiting for disk room has not taken wait by the loop's choice.
                Entry::Body { conn, deadline }
                    if conn
                        .parked_body
                        .as_ref()
                        .is_some_and(|body| body.waiting_for_disk) =>
                {
                    (*deadline, None)
                }
                Entry::Idle { conn, deadline }
                | Entry::Head { conn, deadline }
                | Entry::Body { conn, deadline } => (*deadline, Some(conn.link())),
                Entry::Writing { deadline, .. }
                | Entry::Lingering { deadline, .. }
                | Entry::H2 { deadline, .. } => (*deadline, None),
                Entry::Vacant | Entry::Dispatched { .. } => continue,
            };
            if deadline > now {
                self.note_deadline(deadline);
                continue;
            }
            if unread.is_some_and(|link| link.input_waiting()) {
                // Not silent: read as the event would have been (a head still incomplete
                // after this is parked under a past deadline, and the next sweep ends it).
                if let Some(conn) = self.take_parked(token) {
                    self.advance(token, conn, driver);
                }
                continue;
            }
            match self.entries[token] {
                Entry::Writing { .. } => {
                    self.on_writable(token, driver);
                    if matches!(self.entries[token], Entry::Writing { deadline, .. } if deadline <= now)
                    {
                        // The client took nothing: a client that stopped reading.
                        self.close(token);
                    }
                    continue;
                }
                Entry::Lingering { .. } => {
                    // What came meanwhile is read first: a close with unread bytes resets.
                    self.on_linger_readable(token);
                    self.close(token);
                    continue;
                }
                Entry::H2 { .. } => {
                    self.expire_h2(token, now, driver);
                    continue;
                }
                _ => {}
            }
            self.end_parked(token);
        }
    }

    /// Ends a parked connection past its deadline that sent nothing since: RFC 9110 15.5.9's
    /// 408 tells the client of a started head or body that the server closes an unused
    /// connection (then it lingers: the client may still be sending); an idle connection, a
    /// new one that sent nothing and a slow PROXY header (the proxy speaks no HTTP yet) close
    /// silently.
    fn end_parked(&mut self, token: usize) {
        if let Some((conn, _)) = self.entries[token].parked() {
            if conn
                .tls()
                .is_some_and(|tls| tls.handshaking() && tls.started().is_some())
            {
                // Closed without a word: no key to write a 408 with.
                let peer = conn.peer;
                self.log_tls_failure(|| {
                    format!("TLS handshake with {peer} not finished within header_timeout: closed")
                });
            }
        }
        let respond = match &self.entries[token] {
            // Not before the protocol is known (a partial HTTP/2 preface is no HTTP/1.1 head).
            Entry::Head { conn, .. } => {
                !conn.is_idle()
                    && !conn.awaits_proxy_header()
                    && conn.protocol != Protocol::Http1(Phase::Preface)
            }
            Entry::Body { .. } => true,
            _ => false,
        };
        if respond {
            if let Some((conn, _)) = self.entries[token].parked() {
                write_error(
                    conn,
                    408,
                    &self.shared,
                    &mut self.ctx.date,
                    &mut self.ctx.out,
                );
            }
            if let Some(conn) = self.take_parked(token) {
                return self.linger(token, conn, Linger::UntilEof);
            }
        }
        self.close(token);
    }
}
