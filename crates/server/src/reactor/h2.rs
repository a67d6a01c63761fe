//! HTTP/2 connections in the loop (ADR 0035): the entry that owns an [`H2Conn`] for its whole
//! life (`Entry::H2`), advanced when its socket is readable or writable, when a slot left it
//! work (the driver's waker, or, with an inline slot, the end of the loop's turn), and at its
//! deadline (`keepalive_timeout` while no stream is open; the drain's end); and its streams,
//! each a virtual HTTP/1.1 connection in the table under a token of its own, never registered
//! with the poller: what `advance` reports of them (`Advance::opened`, `Advance::ready`) is
//! handled as the poller's events on their tokens would be.
//!
//! It must not speak HTTP/2 (the `h2` module does) nor serve a stream differently from an
//! HTTP/1.1 connection once it is in the table (`dispatch` does, as for any connection).

use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use super::{Driver, Entry, Reactor, H2_WAKER_TOKEN, SPARE_BUFFERS};
use crate::connection::Connection;
use crate::h2::{H2Conn, H2Context, H2Stream, Readiness, Wire};
use crate::listener::Peer;
use crate::poller::{Event, Poller, Token, Trigger};
use crate::spool::INITIAL_BUFFER;
use crate::transport::{Link, Transport};

/// How many times one turn's sweep advances connections that keep asking for it (an inline
/// slot's stream that frees room and writes again): past it the loop comes back at once
/// (`Reactor::next_timeout`) after its other work instead of starving it.
const SWEEPS_PER_TURN: usize = 16;

/// An HTTP/2 connection the loop owns, and who it came from (for its streams' connections).
pub(super) struct H2Entry {
    conn: H2Conn,
    peer: Peer,
    listener: usize,
    /// No stream was open at the last advance (its deadline then runs from when it became
    /// so: a client that only pings does not keep it).
    idle: bool,
    /// When a stream whose exchange is over times out unless its bytes move
    /// (`Advance::deadline`): the entry's deadline is never later.
    detached_until: Option<Instant>,
    /// The idle close's GOAWAY went: the entry waits [`IDLE_CLOSE_GRACE`] at most for the
    /// connection to finish, then is dropped.
    closing: bool,
}

/// How long an idle-closed connection's GOAWAY may take to go out before its socket closes
/// anyway (a client that does not read).
const IDLE_CLOSE_GRACE: Duration = Duration::from_secs(1);

/// The loop's HTTP/2 bookkeeping: which entries hold HTTP/2 connections (a list, so the
/// waker's sweep visits only them and HTTP/1.1 pays nothing), and what the sweep owes them.
#[derive(Default)]
pub(super) struct H2Connections {
    /// Tokens of `Entry::H2` entries.
    tokens: Vec<usize>,
    /// A copy of `tokens` the sweep walks (kept for its allocation).
    walking: Vec<usize>,
    /// Every connection is advanced at the next sweep (a stop began: their GOAWAY goes out).
    nudge: bool,
    /// Some connection still asked for an advance when the last sweep gave up.
    behind: bool,
    /// The loop's own waker for HTTP/2 work, made at the first HTTP/2 connection when the
    /// driver has none and does not serve inline (the ASGI bridge: a stream's call made on
    /// the event loop's thread between turns leaves work no socket event announces), watched
    /// under `H2_WAKER_TOKEN`. Never closed: a stream that outlives the loop (the bridge
    /// keeps the shells of the connections its event loop serves) may still write it, and
    /// must not write into an fd number reused meanwhile; one per worker process.
    waker: Option<RawFd>,
    /// Which tokens hold a stream's connection (by token; grown as tokens are), and how many:
    /// the scoreboard's open streams, ended when the token is freed on whatever path.
    stream_tokens: Vec<bool>,
    streams: usize,
}

impl Reactor {
    /// `Readiness::Http2`: the connection speaks HTTP/2 from here on. Its transport goes to
    /// an [`H2Conn`] (with the bytes read so far), which its entry now holds, watched by the
    /// poller under the same token.
    pub(super) fn start_h2(&mut self, token: usize, conn: Connection, driver: &mut dyn Driver) {
        let (transport, mut parts) = conn.into_h2();
        if let Some((epoll, owed)) = parts.unwatched.take() {
            // Read as it was accepted (ADR 0017): it waits for the poller from now on.
            if let Err(err) = Poller::add_connection(epoll, transport.fd(), Token(owed)) {
                drop(parts);
                drop(transport);
                return self.unwatchable(token, &err);
            }
        }
        let waker = self.h2_waker(driver);
        let config = &self.shared.config;
        let context = H2Context {
            config: config.h2.clone(),
            inline: driver.serves_inline(),
            waker,
            one_stream: driver.serves_inline(),
            stream_output_budget: config.max_response_buffer,
            send_timeout: config.send_timeout,
        };
        let wire = match transport {
            Transport::Plain(fd) => Wire::Plain(fd),
            Transport::Tls(conn) => Wire::Tls(conn),
            // A stream's virtual connection is served as HTTP/1.1, never chooses again.
            Transport::H2(_) => unreachable!("an HTTP/2 stream chose HTTP/2"),
        };
        let conn = H2Conn::new(wire, &parts.buf[..parts.filled], context);
        let buf = std::mem::take(&mut parts.buf);
        if buf.len() == INITIAL_BUFFER && self.spare_buffers.len() < SPARE_BUFFERS {
            self.spare_buffers.push(buf);
        }
        if self.stop.is_some() {
            conn.close_gracefully();
        }
        let h2 = Box::new(H2Entry {
            conn,
            peer: parts.peer,
            listener: parts.listener,
            idle: true,
            detached_until: None,
            closing: false,
        });
        let deadline = self.h2_idle_deadline();
        self.note_deadline(deadline);
        self.entries[token] = Entry::H2 { h2, deadline };
        self.h2.tokens.push(token);
        self.shared.slot().h2_connection_opened();
        self.advance_h2(token, driver);
    }

    /// Advances the HTTP/2 connection under `token`: reads, runs the protocol, writes; then
    /// opens its new streams' connections, reports its streams' readiness to them, and drops
    /// it once it is finished.
    pub(super) fn advance_h2(&mut self, token: usize, driver: &mut dyn Driver) {
        let Some(Entry::H2 { h2, .. }) = self.entries.get(token) else {
            return;
        };
        let advance = h2.conn.advance(Instant::now());
        let (peer, listener) = (h2.peer, h2.listener);
        // Before the new streams: a stream that ends here frees a token a new one may take,
        // and a readiness is never for a token given out in this advance.
        for (stream, readiness) in advance.ready {
            self.on_stream_ready(stream as usize, readiness, driver);
        }
        for stream in advance.opened {
            self.open_stream(stream, peer, listener, driver);
        }
        if advance.finished {
            return self.close_h2(token);
        }
        let idle_until = self.h2_idle_deadline();
        let mut noted = None;
        if let Some(Entry::H2 { h2, deadline }) = self.entries.get_mut(token) {
            let idle = h2.conn.open_streams() == 0;
            if idle && !h2.idle {
                *deadline = idle_until;
                noted = Some(idle_until);
            }
            h2.idle = idle;
            h2.detached_until = advance.deadline;
            if let Some(until) = advance.deadline.filter(|until| until < deadline) {
                *deadline = until;
                noted = Some(until);
            }
        }
        if let Some(until) = noted {
            self.note_deadline(until);
        }
    }

    /// When an HTTP/2 connection with no open stream is closed: `keepalive_timeout` from now,
    /// and no later than the drain's end while stopping.
    fn h2_idle_deadline(&self) -> Instant {
        let idle_until = Instant::now() + self.shared.config.keepalive_timeout;
        self.drain_until
            .map_or(idle_until, |drain_until| drain_until.min(idle_until))
    }

    /// Drops an HTTP/2 connection's entry (its socket closes once its streams' connections
    /// are gone too: they hold its state).
    fn close_h2(&mut self, token: usize) {
        self.h2.tokens.retain(|&t| t != token);
        self.shared.slot().h2_connection_closed();
        if let Some(Entry::H2 { h2, .. }) = self.entries.get(token) {
            // A slot's stream may keep the socket open past the entry: its events must not
            // reach whoever gets the token next.
            let _ = self.poller.deregister(h2.conn.fd());
        }
        self.close(token);
    }

    /// The waker a new HTTP/2 connection's streams write when they leave work for the loop:
    /// the driver's, else none when the driver serves inline (the end-of-turn sweep covers
    /// its slot's work), else the loop's own eventfd, made and watched once.
    fn h2_waker(&mut self, driver: &dyn Driver) -> Option<RawFd> {
        if let Some(fd) = driver.waker_fd() {
            return Some(fd);
        }
        if driver.serves_inline() {
            return None;
        }
        if let Some(waker) = self.h2.waker {
            return Some(waker);
        }
        // SAFETY: eventfd takes no pointer; a valid fd is owned from here on.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            let err = std::io::Error::last_os_error();
            crate::log::warning(&format!(
                "HTTP/2: no waker ({err}): streams' leftover work waits for the next event"
            ));
            return None;
        }
        if let Err(err) = self
            .poller
            .register(fd, Token(H2_WAKER_TOKEN), Trigger::Level)
        {
            crate::log::warning(&format!(
                "HTTP/2: no waker ({err}): streams' leftover work waits for the next event"
            ));
            // SAFETY: `fd` was just created, is owned by nothing else and was never shared.
            unsafe { libc::close(fd) };
            return None;
        }
        self.h2.waker = Some(fd);
        Some(fd)
    }

    /// The loop's own HTTP/2 waker fired: cleared; the turn's sweep advances what the
    /// connections ask for.
    pub(super) fn on_own_h2_waker(&mut self) {
        if let Some(waker) = self.h2.waker {
            clear_eventfd(waker);
        }
    }

    /// A token was freed: when it held a stream's connection, the stream ended (on any
    /// path: served, refused, timed out, its client gone).
    pub(super) fn stream_token_freed(&mut self, token: usize) {
        if let Some(stream) = self.h2.stream_tokens.get_mut(token) {
            if std::mem::take(stream) {
                self.h2.streams -= 1;
                self.shared.slot().h2_stream_ended();
            }
        }
    }

    /// True while some stream's connection is in the table (`close` then asks
    /// [`Reactor::stream_token_freed`]; HTTP/1.1 pays this one comparison per close).
    pub(super) fn streams_open(&self) -> bool {
        self.h2.streams > 0
    }

    /// A stream whose request head is complete: a connection of its own in the table, read
    /// at once (its head's bytes wait in the stream), never watched by the poller.
    fn open_stream(
        &mut self,
        stream: Box<H2Stream>,
        peer: Peer,
        listener: usize,
        driver: &mut dyn Driver,
    ) {
        let conn = Connection::new(Transport::H2(stream), peer, listener);
        let token = self.insert(conn);
        if self.h2.stream_tokens.len() <= token {
            self.h2.stream_tokens.resize(token + 1, false);
        }
        self.h2.stream_tokens[token] = true;
        self.h2.streams += 1;
        self.shared.slot().h2_stream_opened();
        if let Some((conn, _)) = self.entries[token].parked() {
            if let Link::H2(link) = conn.link() {
                link.stream().set_token(token as u64);
            }
        }
        if let Some(conn) = self.take_parked(token) {
            self.advance(token, conn, driver);
        }
    }

    /// A stream became readable or writable: as the poller's event on its connection.
    fn on_stream_ready(&mut self, token: usize, readiness: Readiness, driver: &mut dyn Driver) {
        match self.entries.get(token) {
            None | Some(Entry::Vacant | Entry::H2 { .. }) => return,
            Some(_) => {}
        }
        let event = Event {
            token: Token(token as u64),
            readable: readiness.readable,
            writable: readiness.writable,
            error: false,
            peer_closed: false,
        };
        self.on_connection_event(&event, driver);
    }

    /// The driver's waker fired while HTTP/2 connections are open: clears it (a slot's
    /// stream rang it, which the driver's own bookkeeping does not know of) before the
    /// driver collects and the sweep looks at what the connections ask for.
    pub(super) fn on_h2_waker(&mut self, fd: Option<RawFd>) {
        if let Some(fd) = fd.filter(|_| !self.h2.tokens.is_empty()) {
            clear_eventfd(fd);
        }
    }

    /// Advances every HTTP/2 connection a slot's stream left work for (or all of them after
    /// a stop began), again while advancing leaves more (an inline slot drives its stream
    /// from the loop's thread), up to [`SWEEPS_PER_TURN`] times.
    pub(super) fn sweep_h2(&mut self, driver: &mut dyn Driver) {
        if self.h2.tokens.is_empty() {
            self.h2.nudge = false;
            self.h2.behind = false;
            return;
        }
        let mut walking = std::mem::take(&mut self.h2.walking);
        for _ in 0..SWEEPS_PER_TURN {
            let all = std::mem::take(&mut self.h2.nudge);
            walking.clear();
            walking.extend_from_slice(&self.h2.tokens);
            let mut advanced = false;
            for &token in &walking {
                let due = match self.entries.get(token) {
                    Some(Entry::H2 { h2, .. }) => all || h2.conn.needs_advance(),
                    _ => false,
                };
                if due {
                    advanced = true;
                    self.advance_h2(token, driver);
                }
            }
            self.h2.behind = advanced;
            if !advanced {
                break;
            }
        }
        self.h2.walking = walking;
    }

    /// True when the loop must not sleep: an HTTP/2 connection waits for an advance (a stop's
    /// GOAWAY, work an inline slot left since the last sweep: the end of its batch of
    /// responses, ADR 0011, writes into streams after the sweep and before the sleep).
    pub(super) fn h2_due(&self) -> bool {
        if self.h2.tokens.is_empty() {
            return false;
        }
        self.h2.nudge
            || self.h2.behind
            || self.h2.tokens.iter().any(|&token| {
                matches!(self.entries.get(token), Some(Entry::H2 { h2, .. }) if h2.conn.needs_advance())
            })
    }

    /// A stop began: every HTTP/2 connection sends its two-step GOAWAY (at the next sweep)
    /// and ends when its streams are done, or at the drain's end.
    pub(super) fn close_h2_gracefully(&mut self, drain_until: Instant) {
        for &token in &self.h2.tokens {
            if let Some(Entry::H2 { h2, deadline }) = self.entries.get_mut(token) {
                h2.conn.close_gracefully();
                *deadline = (*deadline).min(drain_until);
            }
        }
        self.h2.nudge = !self.h2.tokens.is_empty();
    }

    /// An HTTP/2 connection's deadline passed: advanced first (as its event would have);
    /// then closed if no stream is open (a GOAWAY first) or the drain is over, else given
    /// another `keepalive_timeout` (its streams have deadlines of their own).
    pub(super) fn expire_h2(&mut self, token: usize, now: Instant, driver: &mut dyn Driver) {
        self.advance_h2(token, driver);
        let drained = self.drain_until.is_some_and(|until| until <= now);
        let renewed = now + self.shared.config.keepalive_timeout;
        let renewed = self.drain_until.map_or(renewed, |until| until.min(renewed));
        let Some(Entry::H2 { h2, deadline }) = self.entries.get_mut(token) else {
            return;
        };
        if *deadline > now {
            let deadline = *deadline;
            return self.note_deadline(deadline);
        }
        if h2.conn.open_streams() > 0 && !drained {
            let renewed = h2
                .detached_until
                .map_or(renewed, |until| until.min(renewed));
            *deadline = renewed.max(now + Duration::from_millis(1));
            let deadline = *deadline;
            return self.note_deadline(deadline);
        }
        if h2.conn.open_streams() == 0 && !h2.closing && !drained {
            // Idle past keepalive_timeout: told so (GOAWAY with the last stream id processed);
            // the entry stays while it goes out and the connection ends by itself.
            h2.closing = true;
            h2.conn.close_idle();
            *deadline = now + IDLE_CLOSE_GRACE;
            let deadline = *deadline;
            self.note_deadline(deadline);
            return self.advance_h2(token, driver);
        }
        self.close_h2(token);
    }
}

/// Resets an eventfd the loop watches (level-triggered: readable until read).
fn clear_eventfd(fd: RawFd) {
    let mut value: u64 = 0;
    // SAFETY: reads 8 bytes into a valid u64 from the eventfd the loop watches
    // (non-blocking: nothing pending is EAGAIN, ignored).
    let _ = unsafe { libc::read(fd, (&mut value as *mut u64).cast(), 8) };
}
