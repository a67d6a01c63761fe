//! The poller loop every MPM runs: it owns the listeners, the control fds and every connection
//! that waits for bytes (idle keep-alive or a partial head), with their timers. When a head is
//! complete it hands the connection to the MPM's `Driver`, which serves it inline (prefork)
//! or on an app thread (thread, event) and gives it back.
//!
//! This file holds the loop itself (wait, route each event, the per-iteration chores) and the
//! stop sequence; each other idea has its own file: `accept` (listening, the fair-share
//! throttle, `max_connections`), `entries` (the table of connections by token), `timers`
//! (parking under a deadline, expiry), `dispatch` (the MPM's `Driver`, handing ready
//! connections out and taking them back, answering timed-out ones), `body` (reading request bodies before dispatch),
//! `writing` (response output the poller finishes, every MPM),
//! `linger` (lingering close), `error_response` (the responses the loop writes itself),
//! `tls` (a TLS connection before its first head: the handshake flight, the plain 400,
//! failed handshakes logged) and `h2` (HTTP/2 connections and their streams' connections,
//! ADR 0035), `client_cap` (`max_connections_per_client`).
//!
//! It must not decide how HTTP works (that is the connection's and the exchange's) nor run the
//! app: the MPM's driver does.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::batch::BatchClock;
use crate::connection::{Connection, Protocol};
use crate::control::{Control, StopReason};
use crate::exchange::SlotContext;
use crate::listener::Listener;
use crate::poller::{Event, Poller, Token, Trigger};
use crate::scoreboard::{now_ms, ExitReason};
use crate::shared::WorkerShared;

mod accept;
mod body;
mod client_cap;
mod dispatch;
mod entries;
mod error_response;
mod h2;
mod linger;
mod timers;
mod tls;
mod writing;

pub(crate) use body::must_read_before_dispatch;
pub(crate) use dispatch::{Dispatch, Driver};
use entries::Entry;
pub(crate) use error_response::{refuse_rate_limited, reject};

const SIGNAL_TOKEN: u64 = u64::MAX;
const LIFE_TOKEN: u64 = u64::MAX - 1;
const WAKER_TOKEN: u64 = u64::MAX - 2;
/// The loop's own waker for HTTP/2 work, when the driver has none (`h2`).
const H2_WAKER_TOKEN: u64 = u64::MAX - 3;
/// Listener `i` has token `LISTENER_BASE - i`.
const LISTENER_BASE: u64 = u64::MAX - 16;

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
    /// The listeners reported ready in this turn (kept for its allocation).
    acceptable: Vec<usize>,
    listeners: Vec<Listener>,
    listening: bool,
    throttled_until: Option<Instant>,
    /// Failed accepts, for logging at most one line a second.
    accept_errors: crate::log::LineThrottle,
    /// Failed TLS handshakes (and plain requests on a TLS port, handshakes past the header
    /// deadline), for logging at most one line a second (`tls`).
    tls_failures: crate::log::LineThrottle,
    control: Control,
    entries: Vec<Entry>,
    free: Vec<usize>,
    open: usize,
    /// Parked connections waiting for (the rest of) a request head or a body read ahead,
    /// not idle keep-alive ones: the scoreboard's `reading` state.
    reading: usize,
    /// No parked connection's deadline is earlier than this (it may be stale-early: the
    /// sweep then finds nothing and recomputes it). Timers cost nothing per park: each parked
    /// entry keeps its deadline, and one sweep over the entries runs when this passes.
    next_deadline: Option<Instant>,
    shared: Arc<WorkerShared>,
    stop: Option<StopReason>,
    /// While stopping: the latest an idle keep-alive connection is kept for its next request
    /// (the stop's start plus `drain_timeout`).
    drain_until: Option<Instant>,
    /// While stopping: the latest a WebSocket closed by the stop (1001) is written to and
    /// lingered on (the stop's start plus `linger_timeout`; `Reactor::stop_deadline`).
    websockets_until: Option<Instant>,
    ctx: SlotContext,
    returned: Vec<(usize, Option<Box<Connection>>)>,
    /// Recycled read buffers (see [`SPARE_BUFFERS`]).
    spare_buffers: Vec<Vec<u8>>,
    /// Accept is paused because `max_connections` are open.
    full: bool,
    /// Accept is paused because every app slot is taken (more than one worker only; see
    /// [`Driver::can_take_connection`]).
    saturated: bool,
    /// Reading request bodies before dispatch (`body`).
    bodies: body::BodyReading,
    /// An inline slot's batch of responses (ADR 0011): connections whose response waits,
    /// queued, for the end of the batch (`Entry::Writing`), and the batch's clock.
    deferred: Vec<usize>,
    batch: BatchClock,
    /// When the inline slot started serving the request being served.
    dispatch_started: Option<Instant>,
    /// Tokens of handed-out connections whose request timed out and was answered by the loop
    /// (`dispatch::pay_timed_out`): their stuck threads may never give them back, so the
    /// drain does not wait for them.
    abandoned: Vec<usize>,
    /// The app whose interpreter lock the first dump probes (`dispatch::probe_interpreter`),
    /// while the loop pays timed-out requests; taken by that probe, so it runs once per
    /// worker.
    interpreter_probe: Option<Arc<dyn crate::App>>,
    /// The HTTP/2 connections among the entries (`h2`).
    h2: h2::H2Connections,
    /// `max_connections_per_client` (`client_cap`); None when off.
    cap: Option<Box<client_cap::ClientCap>>,
}

/// The worker owns the listener fds it was given: whatever way the loop ends, its copies are
/// closed with it (the final stop closed them already: then there is nothing left to close).
impl Drop for Reactor {
    fn drop(&mut self) {
        self.close_listeners();
    }
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
            acceptable: Vec::new(),
            listeners,
            listening: true,
            throttled_until: None,
            accept_errors: crate::log::LineThrottle::default(),
            tls_failures: crate::log::LineThrottle::default(),
            control,
            entries: Vec::new(),
            free: Vec::new(),
            open: 0,
            reading: 0,
            next_deadline: None,
            stop: None,
            drain_until: None,
            websockets_until: None,
            ctx: SlotContext::new(),
            returned: Vec::new(),
            spare_buffers: Vec::new(),
            full: false,
            saturated: false,
            bodies: body::BodyReading::new(),
            deferred: Vec::new(),
            batch: BatchClock::new(shared.config.response_batch_delay),
            dispatch_started: None,
            abandoned: Vec::new(),
            interpreter_probe: None,
            h2: h2::H2Connections::default(),
            cap: client_cap::ClientCap::new(&shared),
            shared,
        })
    }

    /// Runs until the worker must stop; returns why.
    pub(crate) fn run(&mut self, driver: &mut dyn Driver) -> io::Result<StopReason> {
        self.start(driver)?;
        loop {
            if let Some(reason) = self.turn(driver, true)? {
                return Ok(reason);
            }
        }
    }

    /// Registers the driver's waker and announces the worker ready: the loop serves from now
    /// on (through [`Reactor::run`], or turn by turn).
    pub(crate) fn start(&mut self, driver: &mut dyn Driver) -> io::Result<()> {
        if let Some(fd) = driver.waker_fd() {
            self.poller
                .register(fd, Token(WAKER_TOKEN), Trigger::Level)?;
        }
        // Every MPM starts its app threads before its loop: the set-up is complete.
        self.shared.announce_ready();
        Ok(())
    }

    /// The poller's fd: readable while events wait (a loop that runs the reactor turn by
    /// turn, ADR 0014, watches it).
    pub(crate) fn poller_fd(&self) -> std::os::fd::RawFd {
        self.poller.fd()
    }

    /// How long until the reactor has something to do with no event (a deadline, the
    /// heartbeat).
    pub(crate) fn timeout(&self) -> Duration {
        self.next_timeout()
    }

    /// One turn of the loop: collect returned connections, wait for events (at most until the
    /// next deadline when `wait`, else not at all), handle them, run the chores. Returns why
    /// the worker stops once it must.
    pub(crate) fn turn(
        &mut self,
        driver: &mut dyn Driver,
        wait: bool,
    ) -> io::Result<Option<StopReason>> {
        {
            if let Some(reason) = self.stop {
                let stuck = self.abandoned.len();
                if reason.is_immediate() || (self.open == stuck && driver.in_flight() == stuck) {
                    return Ok(Some(reason));
                }
            }
            // Before the look at `has_returns` (a Dekker pair with the app threads' returns).
            driver.note_listening(self.listening);
            if driver.has_returns() {
                // Returned without a wake-up (event MPM): collect before sleeping.
                self.on_returned(driver);
            }
            let mut events = std::mem::take(&mut self.events);
            events.clear();
            // The batch ends before the loop sleeps: nothing deferred waits for an event. A
            // look that does not wait comes first: events ready now (a request, a connection
            // to accept) extend the batch, as they did when the loop took several
            // connections per turn; `before_inline_dispatch` and the check here still write
            // it before its oldest response would wait past the delay.
            if !self.deferred.is_empty() {
                if self.batch.due(Instant::now()) {
                    self.flush_deferred(driver);
                } else {
                    self.poller.wait(&mut events, Some(Duration::ZERO))?;
                    if events.is_empty() {
                        self.flush_deferred(driver);
                    }
                }
            }
            if events.is_empty() {
                let timeout = if wait {
                    self.next_timeout()
                } else {
                    Duration::ZERO
                };
                let poller = &mut self.poller;
                let mut waited = Ok(());
                driver.wait(&mut || waited = poller.wait(&mut events, Some(timeout)));
                waited?;
                // The wake-up: what the turn marks with `clock::recent` dates from here.
                crate::clock::now();
            }
            if driver.has_returns() {
                // Before the events: a returned connection's next request may be among them.
                self.on_returned(driver);
            }
            // Listener events go last: a connection accepted in the last turn, whose head is
            // among these events, is served before this worker takes another (a worker takes
            // no connection it cannot start serving now; see `accept`).
            let mut acceptable = std::mem::take(&mut self.acceptable);
            for event in &events {
                match event.token.0 {
                    SIGNAL_TOKEN => self.on_control(),
                    LIFE_TOKEN => {
                        if self.control.master_gone() {
                            // The pipe's EOF stays readable (level-triggered): stop watching
                            // it, or every later turn would wake at once (a busy loop for the
                            // whole drain, and this line logged each time).
                            if let Some(fd) = self.control.life_fd() {
                                let _ = self.poller.deregister(fd);
                            }
                            crate::log::info("master is gone: stopping");
                            self.begin_stop(StopReason::MasterGone);
                        }
                    }
                    WAKER_TOKEN => {
                        self.on_h2_waker(driver.waker_fd());
                        self.on_returned(driver)
                    }
                    H2_WAKER_TOKEN => self.on_own_h2_waker(),
                    token if token > LISTENER_BASE - self.listeners.len() as u64 => {
                        acceptable.push((LISTENER_BASE - token) as usize);
                    }
                    _ => self.on_connection_event(event, driver),
                }
            }
            for index in acceptable.drain(..) {
                self.on_acceptable(index, driver);
            }
            self.acceptable = acceptable;
            self.events = events;
            // After the events and the returns: what HTTP/2 connections were left to do.
            self.sweep_h2(driver);
            driver.flush();
            self.expire_timers(driver);
            self.retry_disk_waiters(driver);
            self.manage_throttle();
            driver.flush();
            if !self.abandoned.is_empty() {
                self.refuse_stranded(driver);
            }
            self.manage_saturation(driver);
            let slot = self.shared.slot();
            slot.heartbeat_ms.store(now_ms(), Ordering::Relaxed);
            self.shared.publish_loop_state(self.open, self.reading);
            if self.shared.recycle_requested() && self.stop.is_none() {
                // At debug: with `max_requests` 1 there is one per request (the master sums
                // the recycles up at info).
                crate::log::debug("max_requests reached: recycling this worker");
                self.shared.propose_exit_reason(ExitReason::MaxRequests);
                self.begin_stop(StopReason::MaxRequests);
            }
            if let Some(log) = &self.shared.access_log {
                log.flush();
            }
        }
        Ok(None)
    }

    fn on_control(&mut self) {
        let requests = self.control.take_requests();
        if requests.reopen_logs {
            if let Some(log) = &self.shared.access_log {
                log.reopen();
            }
            if let Some(path) = &self.shared.config.error_log {
                crate::log::reopen_stderr(path);
            }
        }
        // The dump signal's handler woke the loop through the same self-pipe.
        if crate::dump_signal::take_request() {
            self.pay_timed_out();
        }
        if requests.quick {
            self.begin_stop(StopReason::Quick);
        } else if requests.interrupt {
            self.begin_stop(StopReason::Interrupt);
        } else if requests.graceful {
            self.begin_stop(StopReason::Graceful);
        } else if requests.retire {
            crate::log::info("retired by the master: draining");
            self.begin_stop(StopReason::Retire);
        } else if requests.cpu_limit && self.stop.is_none() {
            let limit = self
                .control
                .cpu_time_limit()
                .map_or_else(|| "unknown".to_string(), |seconds| seconds.to_string());
            crate::log::info(&format!(
                "cpu time limit (limit_cpu {limit} s) reached: recycling this worker"
            ));
            self.shared.propose_exit_reason(ExitReason::CpuLimit);
            self.begin_stop(StopReason::CpuLimit);
        }
    }

    /// Starts the stop sequence, the one drain every graceful stop shares: stop accepting;
    /// in-flight requests finish with `Connection: close`; an idle keep-alive connection stays
    /// open for its next request (answered with `Connection: close`) until `drain_timeout`,
    /// then closes; a partial head or body goes on under its own timeout. The loop ends when
    /// no connection is left.
    ///
    /// Only a stop of every worker (TERM, the master gone) first accepts what the listener
    /// already queued, so that it is served rather than reset, and then closes this worker's
    /// copy of the listeners: once every worker has (and the master, as it sent TERM), the
    /// socket is gone and a new connection is refused at once, where it used to wait in the
    /// queue, unserved, until the master's close reset it. The listeners are shared by all
    /// workers (one socket each, inherited from the master; no per-worker `SO_REUSEPORT`
    /// socket), so a retiring worker leaves the queue to the others and its replacement:
    /// nothing queued is lost when it stops.
    fn begin_stop(&mut self, reason: StopReason) {
        if reason.is_immediate() {
            // A QUIT after an INT still wins: it is the one that means "no clean-up at all".
            if self.stop != Some(StopReason::Quick) {
                self.stop = Some(reason);
            }
            return;
        }
        if reason.accepts_backlog() && !self.stop.is_some_and(StopReason::accepts_backlog) {
            // Also when already draining (a retire, max_requests): the final TERM means no
            // worker is left to take the queue.
            for index in 0..self.listeners.len() {
                self.accept_from(index, usize::MAX);
            }
            self.close_listeners();
        }
        if self.stop.is_some() {
            if reason.accepts_backlog() {
                self.stop = Some(reason);
            }
            return;
        }
        self.stop = Some(reason);
        self.shared.set_stopping();
        if reason.is_own_decision() {
            self.shared.announce_draining(reason);
        }
        self.pause_listening();
        let now = Instant::now();
        let drain_until = now + self.shared.config.drain_timeout;
        self.drain_until = Some(drain_until);
        let websockets_until = now + self.shared.config.linger_timeout;
        self.websockets_until = Some(websockets_until);
        for token in 0..self.entries.len() {
            match &mut self.entries[token] {
                Entry::Idle { conn, deadline }
                    if conn.is_idle_keepalive() && *deadline > drain_until =>
                {
                    *deadline = drain_until;
                }
                // A WebSocket given back before the stop: its writing ends with the others'.
                Entry::Writing { conn, deadline, .. }
                    if conn.protocol == Protocol::WebSocket && *deadline > websockets_until =>
                {
                    *deadline = websockets_until;
                }
                _ => {}
            }
        }
        self.close_h2_gracefully(drain_until);
        self.note_deadline(drain_until);
        self.note_deadline(websockets_until);
    }

    fn on_connection_event(&mut self, event: &Event, driver: &mut dyn Driver) {
        let token = event.token.0 as usize;
        let Some(entry) = self.entries.get_mut(token) else {
            return;
        };
        match entry {
            // A writability edge alone (connections are watched for writes too, ADR 0009) says
            // nothing to a connection that waits for bytes.
            Entry::Idle { .. } | Entry::Head { .. } | Entry::Body { .. } if event.readable => {
                if let Some(mut conn) = self.take_parked(token) {
                    if event.peer_closed {
                        conn.note_peer_closed();
                    }
                    self.advance(token, conn, driver);
                }
            }
            // A TLS session's handshake flight (or alert) the socket did not take waits for
            // this edge.
            Entry::Idle { .. } | Entry::Head { .. } | Entry::Body { .. } if event.writable => {
                self.flush_parked_tls(token)
            }
            Entry::Idle { .. } | Entry::Head { .. } | Entry::Body { .. } => {}
            Entry::Lingering { .. } => self.on_linger_readable(token),
            // The slot owns it and reads for itself; remember the edge for when it comes back.
            Entry::Dispatched {
                readable,
                peer_closed,
                output,
            } => {
                if (event.peer_closed || event.error) && !*peer_closed {
                    driver.handed_peer_closed(token);
                }
                *peer_closed |= event.peer_closed;
                if event.readable {
                    driver.handed_readable(token);
                }
                if event.readable && !*readable {
                    *readable = true;
                    driver.handed_edge(true);
                }
                if let Some(output) = output {
                    if event.writable || event.error {
                        // Never waits for the slot's lock (it may be mid-hand-over).
                        output.help_write();
                    }
                }
            }
            Entry::Writing { conn, readable, .. } => {
                *readable |= event.readable;
                if event.peer_closed {
                    conn.note_peer_closed();
                }
                // A read event alone says nothing about room to write (and must not renew
                // the send timeout of a client that sends but never reads).
                if event.writable || event.error {
                    self.on_writable(token, driver);
                }
            }
            Entry::H2 { .. } => self.advance_h2(token, driver),
            Entry::Vacant => {}
        }
    }
}
