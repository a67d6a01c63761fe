//! The poller loop every MPM runs: it owns the listeners, the control fds and every connection
//! that waits for bytes (idle keep-alive or a partial head), with their timers. When a head is
//! complete it hands the connection to the MPM's [`Driver`], which serves it inline (prefork)
//! or on an app thread (thread) and gives it back.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tines_proto::response::encode_error_response_with;
use tines_proto::{BodyFraming, DateCache, ParseError};

use crate::config::WorkerConfig;
use crate::connection::{BodyAhead, ConnState, Connection, Readiness};
use crate::control::{Control, StopReason};
use crate::exchange::SlotContext;
use crate::listener::{Listener, ACCEPT_BATCH};
use crate::pending::{Output, Progress};
use crate::poller::{Event, Poller, Token, Trigger};
use crate::scoreboard::now_ms;
use crate::shared::WorkerShared;

const SIGNAL_TOKEN: u64 = u64::MAX;
const LIFE_TOKEN: u64 = u64::MAX - 1;
const WAKER_TOKEN: u64 = u64::MAX - 2;
/// Listener `i` has token `LISTENER_BASE - i`.
const LISTENER_BASE: u64 = u64::MAX - 16;

/// The longest the loop sleeps: the heartbeat period written to the scoreboard.
const HEARTBEAT: Duration = Duration::from_secs(1);

/// A throttled worker looks again after this long: short enough not to leave connections in
/// the backlog when every worker is over its share, long enough not to spin.
const THROTTLE_PAUSE: Duration = Duration::from_millis(5);

/// What a driver did with a ready connection.
pub(crate) enum Dispatch {
    /// Served inline: the connection if it stays open (or has output left to write).
    Served(Option<Connection>),
    /// Handed to another thread; it comes back through [`Driver::collect`].
    Handed,
    /// Refused: `max_queued_requests` requests already wait for an app thread (503).
    Refused(Connection),
}

/// The MPM-specific part: who serves a connection whose head is complete.
pub(crate) trait Driver {
    /// Serves or hands off the connection registered under `token`.
    fn dispatch(&mut self, token: usize, conn: Connection) -> Dispatch;
    /// Moves connections handed back since the last call into `into`.
    fn collect(&mut self, into: &mut Vec<(usize, Option<Connection>)>);
    /// Connections currently handed off.
    fn in_flight(&self) -> usize;
    /// The fd that wakes the poller when connections come back, if any.
    fn waker_fd(&self) -> Option<RawFd>;
    /// Called once per loop iteration after the events were handled: a driver that batches
    /// hand-offs passes them on here (one lock and one wake-up per batch).
    fn flush(&mut self) {}
    /// True when connections were handed back without ringing the waker (they are collected
    /// at the start of the next loop iteration).
    fn has_returns(&self) -> bool {
        false
    }
    /// The loop saw a handed-out connection's socket become readable (`true`), or got such a
    /// connection back (`false`): see `mpm::event` for why a driver counts these.
    fn handed_edge(&mut self, _seen: bool) {}
}

enum Entry {
    Vacant,
    /// Waiting in the poller for bytes, until `deadline` (under the `kind` of timeout).
    Parked {
        conn: Connection,
        deadline: Instant,
        kind: TimerKind,
    },
    /// A slot owns the connection; `readable` records an event that arrived meanwhile. With
    /// the event MPM, `output` lets the loop write what the slot left pending whenever the
    /// socket becomes writable, while the slot still produces the response.
    Dispatched {
        readable: bool,
        output: Option<Arc<Output>>,
    },
    /// Lingering close (Apache's `lingering_close`): an error response was sent while the
    /// client may still be sending (a refused head, an unread body). The write side is shut
    /// and what arrives is read and dropped until EOF, `LINGER` or `LINGER_MAX_BYTES`, so
    /// the kernel does not answer the client's bytes with a reset that destroys the response
    /// before it is read.
    Lingering {
        conn: Connection,
        deadline: Instant,
        discarded: usize,
    },
    /// The loop finishes response output a slot left pending (`event` MPM), until `deadline`
    /// (the send timeout, renewed on progress); `readable` records a read event meanwhile.
    Writing {
        conn: Connection,
        deadline: Instant,
        readable: bool,
    },
}

/// Which timeout a parked connection waits under.
#[derive(Clone, Copy, PartialEq, Eq)]
enum TimerKind {
    /// Between requests: `keepalive_timeout`, then a silent close.
    Idle,
    /// A head has started (or nothing came yet on a new connection): `header_timeout`, then
    /// 408 (if any byte came) and close.
    Header,
    /// The loop reads a small request body ahead of dispatch (`event` MPM): `body_timeout`
    /// (extended at `body_min_rate`), then 408 and close.
    Body,
}

/// How long a lingering close waits for the client to stop sending (Apache: 2 s).
const LINGER: Duration = Duration::from_secs(2);

/// The most a lingering close reads and drops before it gives up and closes.
const LINGER_MAX_BYTES: usize = 1 << 20;

/// Spare read buffers kept for reuse: an idle connection gives its buffer back, so 10,000 idle
/// keep-alive connections hold no read buffer, and a busy one reuses a buffer instead of
/// allocating (and zeroing) one per request. Sized for the requests in flight at once under
/// a thousand busy connections (the event MPM hands out a whole epoll batch at a time): with
/// 64, hello at 1,000 keep-alive connections spent about 5% of the worker's CPU allocating
/// and zeroing buffers, and served 5-10% fewer requests per second. At most 8 MiB is kept,
/// and only after a burst that needed that many buffers at once.
const SPARE_BUFFERS: usize = 1024;

/// The poller loop's state.
pub struct Reactor {
    poller: Poller,
    events: Vec<Event>,
    listeners: Vec<Listener>,
    listening: bool,
    throttled_until: Option<Instant>,
    control: Control,
    entries: Vec<Entry>,
    free: Vec<usize>,
    open: usize,
    /// No parked connection's deadline is earlier than this (it may be stale-early: the
    /// sweep then finds nothing and recomputes it). Timers cost nothing per park: each parked
    /// entry keeps its deadline, and one sweep over the entries runs when this passes.
    next_deadline: Option<Instant>,
    shared: Arc<WorkerShared>,
    stop: Option<StopReason>,
    ctx: SlotContext,
    returned: Vec<(usize, Option<Connection>)>,
    /// Recycled read buffers (see [`SPARE_BUFFERS`]).
    spare_buffers: Vec<Vec<u8>>,
    /// Accept is paused because `max_connections` are open.
    full: bool,
    /// The loop finishes writes and reads bodies ahead (`event` MPM): connections are watched
    /// for writability too.
    loop_writes: bool,
}

/// Writes the error response for a rejected head and marks the connection closed.
pub(crate) fn reject(
    conn: &mut Connection,
    err: &ParseError,
    config: &WorkerConfig,
    ctx: &mut SlotContext,
) {
    crate::log::debug(&format!(
        "rejected request ({}): {}",
        err.status(),
        err.reason()
    ));
    write_error(conn, err.status(), config, &mut ctx.date, &mut ctx.out);
}

fn write_error(
    conn: &mut Connection,
    code: u16,
    config: &WorkerConfig,
    date: &mut DateCache,
    out: &mut Vec<u8>,
) {
    write_error_with(conn, code, &[], config, date, out)
}

fn write_error_with(
    conn: &mut Connection,
    code: u16,
    extra: &[(&[u8], &[u8])],
    config: &WorkerConfig,
    date: &mut DateCache,
    out: &mut Vec<u8>,
) {
    out.clear();
    encode_error_response_with(out, code, date.now(), &config.server_header, extra);
    // RFC 9110 9.3.2: a response to HEAD has no body, even an error response (the head
    // failed to parse, but its first bytes say whether it was a HEAD).
    let mut bytes = &out[..];
    if conn.buffer().starts_with(b"HEAD ") {
        if let Some(end) = out.windows(4).position(|w| w == b"\r\n\r\n") {
            bytes = &out[..end + 4];
        }
    }
    let _ = conn.reject(bytes);
    out.clear();
}

impl Reactor {
    /// Creates the poller and registers the listeners and control fds.
    pub fn new(
        listeners: Vec<Listener>,
        control: Control,
        shared: Arc<WorkerShared>,
    ) -> io::Result<Reactor> {
        let poller = Poller::new()?;
        for (index, listener) in listeners.iter().enumerate() {
            poller.register(
                listener.fd(),
                Token(LISTENER_BASE - index as u64),
                Trigger::Level,
            )?;
        }
        poller.register(control.signal_fd(), Token(SIGNAL_TOKEN), Trigger::Level)?;
        if let Some(fd) = control.life_fd() {
            poller.register(fd, Token(LIFE_TOKEN), Trigger::Level)?;
        }
        Ok(Reactor {
            poller,
            events: Vec::with_capacity(256),
            listeners,
            listening: true,
            throttled_until: None,
            control,
            entries: Vec::new(),
            free: Vec::new(),
            open: 0,
            next_deadline: None,
            stop: None,
            ctx: SlotContext::new(),
            returned: Vec::new(),
            spare_buffers: Vec::new(),
            full: false,
            loop_writes: shared.config.loop_owns_sockets(),
            shared,
        })
    }

    /// Runs until the worker must stop; returns why.
    pub(crate) fn run(&mut self, driver: &mut dyn Driver) -> io::Result<StopReason> {
        if let Some(fd) = driver.waker_fd() {
            self.poller
                .register(fd, Token(WAKER_TOKEN), Trigger::Level)?;
        }
        loop {
            if let Some(reason) = self.stop {
                if reason == StopReason::Quick || (self.open == 0 && driver.in_flight() == 0) {
                    return Ok(reason);
                }
            }
            if driver.has_returns() {
                // Returned without a wake-up (event MPM): collect before sleeping.
                self.on_returned(driver);
            }
            let timeout = self.next_timeout();
            let mut events = std::mem::take(&mut self.events);
            self.poller.wait(&mut events, Some(timeout))?;
            if driver.has_returns() {
                // Before the events: a returned connection's next request may be among them.
                self.on_returned(driver);
            }
            for event in &events {
                match event.token.0 {
                    SIGNAL_TOKEN => self.on_control(),
                    LIFE_TOKEN => {
                        if self.control.master_gone() {
                            crate::log::info("master is gone: stopping");
                            self.begin_stop(StopReason::MasterGone);
                        }
                    }
                    WAKER_TOKEN => self.on_returned(driver),
                    token if token > LISTENER_BASE - self.listeners.len() as u64 => {
                        self.on_acceptable((LISTENER_BASE - token) as usize, driver);
                    }
                    _ => self.on_connection_event(event, driver),
                }
            }
            self.events = events;
            driver.flush();
            self.expire_timers();
            self.manage_throttle();
            driver.flush();
            let slot = self.shared.slot();
            slot.heartbeat_ms.store(now_ms(), Ordering::Relaxed);
            if self.shared.recycle_requested() && self.stop.is_none() {
                crate::log::info("max_requests reached: recycling this worker");
                self.begin_stop(StopReason::MaxRequests);
            }
            if let Some(log) = &self.shared.access_log {
                log.flush();
            }
        }
    }

    fn next_timeout(&self) -> Duration {
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

    fn on_control(&mut self) {
        let requests = self.control.take_requests();
        if requests.reopen_logs {
            if let Some(log) = &self.shared.access_log {
                log.reopen();
            }
        }
        if requests.quick {
            self.begin_stop(StopReason::Quick);
        } else if requests.graceful {
            self.begin_stop(StopReason::Graceful);
        }
    }

    /// Starts the stop sequence: accept what is already queued, stop listening, close idle
    /// connections; in-flight requests finish with `Connection: close`.
    fn begin_stop(&mut self, reason: StopReason) {
        if reason == StopReason::Quick {
            self.stop = Some(reason);
            return;
        }
        if self.stop.is_some() {
            return;
        }
        self.stop = Some(reason);
        self.shared.set_stopping();
        // Accept what the listener already queued, so that it is served rather than reset when
        // the master closes the listener; then stop accepting.
        for index in 0..self.listeners.len() {
            self.accept_from(index, usize::MAX);
        }
        self.pause_listening();
        for token in 0..self.entries.len() {
            if let Entry::Parked { conn, .. } = &self.entries[token] {
                if conn.is_idle_keepalive() {
                    self.close(token);
                }
            }
        }
    }

    /// Stops watching the listeners (level-triggered: a queued connection would wake us
    /// again and again).
    fn pause_listening(&mut self) {
        if self.listening {
            for listener in &self.listeners {
                let _ = self.poller.deregister(listener.fd());
            }
            self.listening = false;
        }
    }

    /// Watches the listeners again unless stopping, throttled or full.
    fn resume_listening(&mut self) {
        if self.listening || self.stop.is_some() || self.throttled_until.is_some() || self.full {
            return;
        }
        for (index, listener) in self.listeners.iter().enumerate() {
            if let Err(err) = self.poller.register(
                listener.fd(),
                Token(LISTENER_BASE - index as u64),
                Trigger::Level,
            ) {
                crate::log::error(&format!("cannot watch the listener again: {err}"));
            }
        }
        self.listening = true;
    }

    fn over_fair_share(&self) -> bool {
        let mine = self.open as u64;
        if mine < ACCEPT_BATCH as u64 {
            return false;
        }
        let (total, live) = self.shared.scoreboard().accept_totals();
        live > 1 && mine * live > 2 * total
    }

    fn manage_throttle(&mut self) {
        if self.stop.is_some() {
            return;
        }
        if let Some(until) = self.throttled_until {
            if Instant::now() >= until && !self.over_fair_share() {
                self.throttled_until = None;
                self.resume_listening();
            } else if Instant::now() >= until {
                self.throttled_until = Some(Instant::now() + THROTTLE_PAUSE);
            }
        }
    }

    fn on_acceptable(&mut self, index: usize, driver: &mut dyn Driver) {
        if !self.listening {
            return;
        }
        if self.over_fair_share() {
            // Level-triggered: stop watching the listeners for a moment, or we would spin.
            self.pause_listening();
            self.throttled_until = Some(Instant::now() + THROTTLE_PAUSE);
            return;
        }
        let accepted = self.accept_from(index, ACCEPT_BATCH);
        if !accepted.is_empty() && self.shared.config.workers > 1 {
            // All idle workers wake for a new connection, in the order they sit in the
            // listener's wait queue, and the first one woken usually wins the accept. Moving
            // to the back of that queue after accepting gives each worker its turn (a fair
            // share of connections), at the cost of two epoll_ctl calls per accepting wake-up.
            let fd = self.listeners[index].fd();
            let token = Token(LISTENER_BASE - index as u64);
            if self.poller.deregister(fd).is_ok() {
                if let Err(err) = self.poller.register(fd, token, Trigger::Level) {
                    crate::log::error(&format!("cannot watch the listener again: {err}"));
                }
            }
        }
        for token in accepted {
            if let Entry::Parked { .. } = self.entries[token] {
                let Entry::Parked { conn, .. } = std::mem::replace(
                    &mut self.entries[token],
                    Entry::Dispatched {
                        readable: false,
                        output: None,
                    },
                ) else {
                    unreachable!()
                };
                self.advance(token, conn, driver);
            }
        }
    }

    /// Accepts up to `limit` connections and registers them; returns their tokens.
    fn accept_from(&mut self, index: usize, limit: usize) -> Vec<usize> {
        let mut tokens = Vec::new();
        while tokens.len() < limit {
            if self.open >= self.shared.config.max_connections.max(1) {
                // Resumed by `close` once a connection goes (level-triggered: no spin).
                if !self.full {
                    crate::log::debug("max_connections reached: accept paused");
                }
                self.full = true;
                self.pause_listening();
                break;
            }
            match self.listeners[index].accept() {
                Ok(Some((fd, peer))) => {
                    let conn = Connection::new(fd, peer, index);
                    let token = self.insert(conn);
                    match &self.entries[token] {
                        Entry::Parked { conn, .. } => {
                            if let Err(err) = self.poller.register_connection(
                                conn.fd(),
                                Token(token as u64),
                                self.loop_writes,
                            ) {
                                crate::log::error(&format!("cannot watch a new connection: {err}"));
                                self.close(token);
                                continue;
                            }
                        }
                        _ => unreachable!(),
                    }
                    self.shared.slot().accepted.fetch_add(1, Ordering::Relaxed);
                    tokens.push(token);
                }
                Ok(None) => break,
                Err(err) => {
                    // EMFILE/ENFILE/ENOMEM: the connection stays queued; back off briefly by
                    // pausing accept (the throttle timer re-enables it) instead of spinning.
                    crate::log::error(&format!("accept failed: {err}"));
                    if self.listening && self.stop.is_none() {
                        self.pause_listening();
                        self.throttled_until = Some(Instant::now() + Duration::from_millis(100));
                    }
                    break;
                }
            }
        }
        tokens
    }

    fn insert(&mut self, conn: Connection) -> usize {
        self.open += 1;
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

    fn close(&mut self, token: usize) {
        if let Some(entry) = self.entries.get_mut(token) {
            if !matches!(entry, Entry::Vacant) {
                // Dropping the connection closes its fd, which also removes it from epoll.
                *entry = Entry::Vacant;
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

    fn on_connection_event(&mut self, event: &Event, driver: &mut dyn Driver) {
        let token = event.token.0 as usize;
        let Some(entry) = self.entries.get_mut(token) else {
            return;
        };
        match entry {
            // A writability edge alone (the loop watches writes too, event MPM) says nothing
            // to a connection that waits for bytes.
            Entry::Parked { .. } if event.readable => {
                let Entry::Parked { conn, .. } = std::mem::replace(
                    entry,
                    Entry::Dispatched {
                        readable: false,
                        output: None,
                    },
                ) else {
                    unreachable!()
                };
                self.advance(token, conn, driver);
            }
            Entry::Parked { .. } => {}
            Entry::Lingering { .. } => self.on_linger_readable(token),
            // The slot owns it and reads for itself; remember the edge for when it comes back.
            Entry::Dispatched { readable, output } => {
                if event.readable && !*readable {
                    *readable = true;
                    driver.handed_edge(true);
                }
                if let Some(output) = output {
                    if event.writable || event.error {
                        // Errors surface to the slot's own next write.
                        let _ = output.write_some();
                    }
                }
            }
            Entry::Writing { readable, .. } => {
                *readable |= event.readable;
                // A read event alone says nothing about room to write (and must not renew
                // the send timeout of a client that sends but never reads).
                if event.writable || event.error {
                    self.on_writable(token, driver);
                }
            }
            Entry::Vacant => {}
        }
    }

    /// Writes what a `Writing` connection has pending; when done, goes on with the next
    /// request (or parks, or closes).
    fn on_writable(&mut self, token: usize, driver: &mut dyn Driver) {
        let Some(Entry::Writing {
            conn,
            deadline,
            readable,
        }) = self.entries.get_mut(token)
        else {
            return;
        };
        let output = Arc::clone(conn.output());
        let before = output.with(|pending| pending.written());
        match output.write_some() {
            Ok(Progress::Blocked) => {
                // The send timeout is per wait, as for a slot: renewed when the client took
                // bytes, not by events that wrote nothing.
                if output.with(|pending| pending.written()) > before {
                    *deadline = Instant::now() + self.shared.config.send_timeout;
                    let deadline = *deadline;
                    self.note_deadline(deadline);
                }
            }
            Ok(Progress::Done) => {
                let readable = *readable;
                let Entry::Writing { conn, .. } = std::mem::replace(
                    &mut self.entries[token],
                    Entry::Dispatched {
                        readable,
                        output: None,
                    },
                ) else {
                    unreachable!()
                };
                if conn.close_after_write {
                    return self.close_after_response(token, conn);
                }
                if readable || !conn.drained() {
                    self.advance(token, conn, driver)
                } else {
                    self.park(token, conn)
                }
            }
            Err(err) => {
                crate::log::debug(&format!("response write failed: {err}"));
                self.close(token)
            }
        }
    }

    /// Takes over a connection whose response output is not all written (event MPM).
    fn start_writing(
        &mut self,
        token: usize,
        conn: Connection,
        readable: bool,
        driver: &mut dyn Driver,
    ) {
        let deadline = Instant::now() + self.shared.config.send_timeout;
        self.note_deadline(deadline);
        self.entries[token] = Entry::Writing {
            conn,
            deadline,
            readable,
        };
        // The slot's last write may have been before the socket drained: try now (an edge
        // raised while the slot had it is not repeated).
        self.on_writable(token, driver);
    }

    /// With the event MPM, the end (in the buffer) of a Content-Length body small enough for
    /// the loop to read before the app runs, when it is not all buffered yet.
    fn body_ahead_end(&self, conn: &Connection) -> Option<usize> {
        let config = &self.shared.config;
        let head = conn.head();
        let BodyFraming::Length(length) = head.body else {
            return None;
        };
        // With `Expect: 100-continue` the app decides whether the body is wanted (the 100 goes
        // out on its first read); over `max_body_size` the slot answers 413 unread.
        if !self.loop_writes
            || length == 0
            || length > config.max_request_buffer
            || head.expect_continue
            || (config.max_body_size > 0 && length > config.max_body_size)
        {
            return None;
        }
        let end = head.head_len + length as usize;
        (conn.filled < end).then_some(end)
    }

    /// Reads and parses; reads a small body ahead (event MPM); dispatches complete requests
    /// (again and again while a prefork slot serves pipelined requests inline); parks, writes
    /// or closes the connection otherwise.
    fn advance(&mut self, token: usize, mut conn: Connection, driver: &mut dyn Driver) {
        loop {
            if conn.buf.is_empty() {
                if let Some(buf) = self.spare_buffers.pop() {
                    conn.give_buffer(buf);
                }
            }
            let readiness = if conn.state == ConnState::ReadingBody {
                Readiness::HeadComplete
            } else {
                conn.on_readable(&self.shared.config.limits)
            };
            match readiness {
                Readiness::HeadComplete => {
                    if let Some(end) = self.body_ahead_end(&conn) {
                        if conn.state != ConnState::ReadingBody {
                            conn.state = ConnState::ReadingBody;
                            conn.body_started = Some(Instant::now());
                        }
                        match conn.read_body_ahead(end) {
                            BodyAhead::Complete => {}
                            BodyAhead::Pending => return self.park(token, conn),
                            BodyAhead::Closed => return self.close(token),
                        }
                    }
                    conn.state = ConnState::Dispatched;
                    let output = self.loop_writes.then(|| Arc::clone(conn.output()));
                    match driver.dispatch(token, conn) {
                        Dispatch::Handed => {
                            self.entries[token] = Entry::Dispatched {
                                readable: false,
                                output,
                            };
                            return;
                        }
                        Dispatch::Served(Some(kept)) if kept.has_pending_output() => {
                            return self.start_writing(token, kept, false, driver)
                        }
                        Dispatch::Served(Some(kept)) if kept.close_after_write => {
                            return self.close_after_response(token, kept)
                        }
                        // Served inline: any bytes that arrive from now on raise a new event.
                        Dispatch::Served(Some(kept)) if kept.drained() => {
                            return self.park(token, kept)
                        }
                        Dispatch::Served(Some(kept)) => conn = kept,
                        Dispatch::Served(None) => return self.close(token),
                        Dispatch::Refused(mut refused) => {
                            // RFC 9110 15.6.4: overloaded; the client may retry shortly.
                            write_error_with(
                                &mut refused,
                                503,
                                &[(b"Retry-After", b"1")],
                                &self.shared.config,
                                &mut self.ctx.date,
                                &mut self.ctx.out,
                            );
                            crate::log::debug("max_queued_requests reached: 503");
                            return self.linger(token, refused);
                        }
                    }
                }
                Readiness::Pending => return self.park(token, conn),
                Readiness::Closed => return self.close(token),
                Readiness::Rejected(err) => {
                    reject(&mut conn, &err, &self.shared.config, &mut self.ctx);
                    return self.linger(token, conn);
                }
            }
        }
    }

    /// Closes a connection whose response is complete: at once, or lingering when the client
    /// may still be sending (its request body was not read).
    fn close_after_response(&mut self, token: usize, conn: Connection) {
        if conn.unread_input {
            self.linger(token, conn)
        } else {
            self.close(token)
        }
    }

    /// Starts a lingering close (see [`Entry::Lingering`]).
    fn linger(&mut self, token: usize, mut conn: Connection) {
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
    fn on_linger_readable(&mut self, token: usize) {
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

    fn park(&mut self, token: usize, conn: Connection) {
        if self.stop.is_some() && conn.is_idle_keepalive() {
            return self.close(token);
        }
        let mut conn = conn;
        if let Some(buf) = conn.take_idle_buffer() {
            if self.spare_buffers.len() < SPARE_BUFFERS {
                self.spare_buffers.push(buf);
            }
        }
        let config = &self.shared.config;
        let (kind, deadline) = match conn.head_started {
            _ if conn.state == ConnState::ReadingBody => {
                let started = conn.body_started.unwrap_or_else(Instant::now);
                let received = (conn.filled - conn.head().head_len) as u64;
                let deadline = config
                    .body_deadline(started, received)
                    .unwrap_or_else(|| Instant::now() + config.body_timeout);
                (TimerKind::Body, deadline)
            }
            Some(started) if !conn.is_idle() => (
                TimerKind::Header,
                config.header_deadline(started, conn.filled),
            ),
            // A new connection that has sent nothing yet gets the header timeout.
            _ if conn.served == 0 => (TimerKind::Header, Instant::now() + config.header_timeout),
            _ => (TimerKind::Idle, Instant::now() + config.keepalive_timeout),
        };
        self.note_deadline(deadline);
        self.entries[token] = Entry::Parked {
            conn,
            deadline,
            kind,
        };
    }

    fn note_deadline(&mut self, deadline: Instant) {
        if self.next_deadline.is_none_or(|next| deadline < next) {
            self.next_deadline = Some(deadline);
        }
    }

    /// Closes parked connections whose deadline passed (408 for a started head) and works out
    /// the next deadline. Runs only when the earliest known deadline has passed.
    fn expire_timers(&mut self) {
        let now = Instant::now();
        if self.next_deadline.is_none_or(|next| now < next) {
            return;
        }
        let mut next: Option<Instant> = None;
        for token in 0..self.entries.len() {
            let (deadline, respond) = match &self.entries[token] {
                Entry::Parked {
                    conn,
                    deadline,
                    kind,
                } => (
                    *deadline,
                    match kind {
                        // RFC 9110 15.5.9: 408 tells the client the server closes an unused
                        // connection.
                        TimerKind::Header if !conn.is_idle() => Some(408),
                        TimerKind::Body => Some(408),
                        _ => None,
                    },
                ),
                // A client that stopped reading: nothing more can be said to it.
                Entry::Writing { deadline, .. } | Entry::Lingering { deadline, .. } => {
                    (*deadline, None)
                }
                _ => continue,
            };
            if deadline > now {
                next = Some(next.map_or(deadline, |n| n.min(deadline)));
                continue;
            }
            if let (Some(code), Entry::Parked { conn, .. }) = (respond, &mut self.entries[token]) {
                write_error(
                    conn,
                    code,
                    &self.shared.config,
                    &mut self.ctx.date,
                    &mut self.ctx.out,
                );
                if let Entry::Parked { conn, .. } =
                    std::mem::replace(&mut self.entries[token], Entry::Vacant)
                {
                    // The client may still be sending (a slow head or body): linger.
                    self.entries[token] = Entry::Dispatched {
                        readable: false,
                        output: None,
                    };
                    self.linger(token, conn);
                    // The sweep sets `next_deadline` when it ends: count the new deadline in.
                    let linger_until = Instant::now() + LINGER;
                    next = Some(next.map_or(linger_until, |n| n.min(linger_until)));
                    continue;
                }
            }
            self.close(token);
        }
        self.next_deadline = next;
    }

    fn on_returned(&mut self, driver: &mut dyn Driver) {
        let mut returned = std::mem::take(&mut self.returned);
        driver.collect(&mut returned);
        for (token, conn) in returned.drain(..) {
            let edge_seen = matches!(
                self.entries.get(token),
                Some(Entry::Dispatched { readable: true, .. })
            );
            if edge_seen {
                driver.handed_edge(false);
            }
            match conn {
                Some(conn) if conn.has_pending_output() => {
                    self.start_writing(token, conn, edge_seen, driver)
                }
                Some(conn) if conn.close_after_write => self.close_after_response(token, conn),
                // Bytes that arrived while the slot had it raised an edge the poller could not
                // act on: read before parking.
                Some(conn) if conn.drained() && !edge_seen => self.park(token, conn),
                Some(conn) => self.advance(token, conn, driver),
                None => self.close(token),
            }
        }
        self.returned = returned;
        // Returns collected outside the event pass (before sleeping) may have dispatched.
        driver.flush();
    }
}
