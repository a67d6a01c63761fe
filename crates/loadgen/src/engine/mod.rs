//! The engine: one mio event loop per thread over its share of the connections.
//!
//! This module owns the loop (`Worker`): which requests go out when (the
//! closed loop refills a connection as its responses complete, against the
//! shared `-n` budget; the open loop sends what the schedule says is due on a
//! free connection), the reaction to each socket event, failing and closing
//! connections, and the connect and request timeouts.
//!
//! - `clock`: the run's instants (start, end of the warm-up, deadline, seconds);
//! - `shared`: what the threads share (stop flag, `-n` budget, progress, messages);
//! - `connection`: one connection's socket, buffers and response framing (HTTP/2:
//!   its client, whose streams end as `Event`s in any order);
//! - `streams`: what the loop does with an HTTP/2 connection's streams as they end;
//! - `tally`: the counting rules of docs/bench.md, applied to what the loop sees.
//!
//! A request's latency runs, in the closed loop, from its write (without
//! keep-alive from the start of its connect, ab's "total"); in the open loop
//! from its intended send time on the schedule.
//!
//! Must not: allocate per request (buffers are per connection and reused), or
//! keep per-request records.

mod clock;
mod connection;
mod shared;
mod streams;
mod tally;

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use mio::{Events, Poll};

use crate::args::Config;
use crate::schedule::Schedule;
use crate::stats::{ErrorKind, Stats};
pub use clock::Clock;
use connection::{
    slot_and_generation, ConnectProgress, Connection, Framed, Health, Received, State,
};
pub use shared::{shared, Message, Progress, Shared};
use tally::Tally;

/// How often the connect and request timeouts are checked.
const SWEEP_EVERY: Duration = Duration::from_millis(10);
/// The longest the loop sleeps, so the stop flag and Ctrl-C are seen soon.
const MAX_WAIT: Duration = Duration::from_millis(50);

/// Whether the socket reported an event or was closed by the event's handler.
enum Outcome {
    Continue,
    Closed,
}

/// One thread's event loop.
pub struct Worker<'a> {
    config: &'a Config,
    shared: &'a Shared,
    clock: Clock,
    poll: Poll,
    connections: Vec<Connection>,
    schedule: Option<Schedule>,
    /// Open loop: slots (with their generation) that may take a request.
    ready: VecDeque<(usize, u32)>,
    /// Closed loop: slots to refill after this batch of events.
    retry: Vec<usize>,
    next_spec: usize,
    in_flight_total: usize,
    budget_exhausted: bool,
    tally: Tally<'a>,
    keepalive: bool,
    closed_loop_start_at_write: bool,
}

fn error_kind_of(error: &io::Error) -> ErrorKind {
    match error.kind() {
        io::ErrorKind::TimedOut => ErrorKind::Timeout,
        _ => ErrorKind::Reset,
    }
}

impl<'a> Worker<'a> {
    /// A worker for `connections` of the run's connections.
    pub fn new(
        index: usize,
        connections: usize,
        config: &'a Config,
        shared: &'a Shared,
        clock: Clock,
        tx: Sender<Message>,
    ) -> io::Result<Worker<'a>> {
        let pipeline = match (config.http2, config.keepalive) {
            (Some(_), _) => config.streams,
            (None, true) => config.pipeline,
            (None, false) => 1,
        };
        let largest_request = config
            .requests_specs
            .iter()
            .map(|s| s.bytes.len())
            .max()
            .unwrap_or(0);
        let slots = (0..connections)
            .map(|_| {
                Connection::new(
                    pipeline,
                    largest_request,
                    clock.start,
                    config.http2.is_some(),
                )
            })
            .collect();
        let schedule = config
            .rate
            .map(|rate| Schedule::new(rate, config.threads, index, config.requests));
        let mut ready = VecDeque::with_capacity(connections * pipeline * 2);
        if schedule.is_some() {
            for _ in 0..pipeline {
                for slot in 0..connections {
                    ready.push_back((slot, 0));
                }
            }
        }
        Ok(Worker {
            config,
            shared,
            clock,
            poll: Poll::new()?,
            connections: slots,
            schedule,
            ready,
            retry: Vec::with_capacity(connections),
            next_spec: index % config.requests_specs.len(),
            in_flight_total: 0,
            budget_exhausted: false,
            tally: Tally::new(index, clock, &shared.progress[index], tx),
            keepalive: config.keepalive,
            closed_loop_start_at_write: config.rate.is_none() && config.keepalive,
        })
    }

    /// Requests in flight per connection: HTTP/2 streams, or HTTP/1.1 pipelining.
    fn pipeline(&self) -> usize {
        if self.config.http2.is_some() {
            self.config.streams
        } else if self.keepalive {
            self.config.pipeline
        } else {
            1
        }
    }

    /// Runs until the deadline, the request limit, or a stop; returns the
    /// figures and when the loop stopped.
    pub fn run(mut self) -> (Stats, Instant) {
        let mut events = Events::with_capacity(1024);
        let mut next_sweep = Instant::now() + SWEEP_EVERY;
        if self.schedule.is_none() {
            for slot in 0..self.connections.len() {
                self.refill(slot);
            }
        }
        loop {
            let now = Instant::now();
            if self.shared.stop.load(Ordering::Relaxed)
                || crate::signal::interrupted()
                || self.clock.is_past_deadline(now)
            {
                break;
            }
            self.tally.advance(now);
            if !self.retry.is_empty() {
                let retry = std::mem::take(&mut self.retry);
                for &slot in &retry {
                    self.refill(slot);
                }
                let mut retry = retry;
                retry.clear();
                if self.retry.is_empty() {
                    self.retry = retry;
                }
            }
            let mut wait = MAX_WAIT.min(self.tally.next_second().saturating_duration_since(now));
            if let Some(deadline) = self.clock.deadline {
                wait = wait.min(deadline.saturating_duration_since(now));
            }
            if self.schedule.is_some() {
                match self.dispatch_due(now) {
                    Some(next) => wait = wait.min(next.saturating_duration_since(now)),
                    None => {
                        if self.in_flight_total == 0 {
                            break;
                        }
                    }
                }
            } else if self.budget_exhausted && self.in_flight_total == 0 && self.retry.is_empty() {
                break;
            }
            if now >= next_sweep {
                self.sweep(now);
                next_sweep = now + SWEEP_EVERY;
            }
            if self.in_flight_total > 0 {
                wait = wait.min(next_sweep.saturating_duration_since(now));
            }
            if !self.retry.is_empty() {
                wait = Duration::ZERO;
            }
            if let Err(error) = self.poll.poll(&mut events, Some(wait)) {
                if error.kind() != io::ErrorKind::Interrupted {
                    break;
                }
            }
            for event in events.iter() {
                let (slot, generation) = slot_and_generation(event.token());
                if slot >= self.connections.len()
                    || self.connections[slot].generation() != generation
                {
                    continue;
                }
                let now = Instant::now();
                match self.connections[slot].state() {
                    State::Connecting => self.on_connecting(slot, now, event.is_error()),
                    State::Open => {
                        if event.is_readable() || event.is_read_closed() || event.is_error() {
                            if let Outcome::Closed = self.on_readable(slot, now) {
                                continue;
                            }
                        }
                        if event.is_writable() && self.connections[slot].has_unwritten() {
                            self.flush(slot, now);
                        }
                    }
                    State::Idle => {}
                }
            }
        }
        let now = Instant::now();
        (self.tally.finish(now, self.in_flight_total), now)
    }

    /// Closed loop: claims a request against `-n`.
    fn claim(&mut self, now: Instant) -> bool {
        if self.shared.stop.load(Ordering::Relaxed) {
            return false;
        }
        match self.config.requests {
            Some(limit) if self.clock.is_measuring(now) => {
                if self.budget_exhausted
                    || self.shared.issued.fetch_add(1, Ordering::Relaxed) >= limit
                {
                    self.budget_exhausted = true;
                    return false;
                }
                true
            }
            _ => true,
        }
    }

    /// Closed loop: fills a connection up to the pipeline depth.
    fn refill(&mut self, slot: usize) {
        if self.schedule.is_some() {
            return;
        }
        let now = Instant::now();
        if self.clock.is_past_deadline(now) {
            return;
        }
        while self.can_take(slot) && self.claim(now) {
            self.dispatch(slot, now, now);
            if self.connections[slot].state() == State::Idle {
                // The connect failed at once; the slot is retried on the next turn of the loop.
                return;
            }
        }
    }

    /// Open loop: sends every due request that has a free connection; returns
    /// the next due time, or `None` when the schedule is exhausted.
    fn dispatch_due(&mut self, now: Instant) -> Option<Instant> {
        let since_start = now.saturating_duration_since(self.clock.start);
        loop {
            let schedule = self.schedule.as_mut().expect("open loop");
            let due = schedule.next_due()?;
            if due > since_start {
                return Some(self.clock.start + due);
            }
            // Find a free slot; stale entries (closed since) are dropped.
            let slot = loop {
                match self.ready.pop_front() {
                    None => break None,
                    Some((slot, generation)) => {
                        if self.connections[slot].generation() == generation && self.can_take(slot)
                        {
                            break Some(slot);
                        }
                    }
                }
            };
            let Some(slot) = slot else {
                // Backlog: wait for a connection to free up (latency keeps counting).
                return Some(now + MAX_WAIT);
            };
            let schedule = self.schedule.as_mut().expect("open loop");
            schedule.take_due(since_start);
            self.dispatch(slot, self.clock.start + due, now);
        }
    }

    fn can_take(&self, slot: usize) -> bool {
        let addr = self.config.requests_specs[self.next_spec].target.addr;
        self.connections[slot].can_take(self.pipeline(), addr)
    }

    fn dispatch(&mut self, slot: usize, start: Instant, now: Instant) {
        let spec_index = self.next_spec;
        self.next_spec = (self.next_spec + 1) % self.config.requests_specs.len();
        let spec = &self.config.requests_specs[spec_index];
        let addr = spec.target.addr;
        let connection = &self.connections[slot];
        if connection.state() != State::Idle && connection.addr() != Some(addr) {
            self.close(slot);
        }
        let connection = &mut self.connections[slot];
        if connection.state() == State::Idle {
            if let Some(handshake) = &spec.handshake {
                connection.begin_websocket(handshake);
            }
        }
        connection.queue(start, spec_index as u32, &spec.bytes);
        self.in_flight_total += 1;
        match connection.state() {
            State::Idle => {
                let tls = self.config.tls.as_ref().zip(spec.server_name.as_ref());
                if let Err(error) = connection.connect(slot, addr, tls, now, self.poll.registry()) {
                    self.fail(slot, ErrorKind::Connect, now, &error, "connect");
                }
            }
            State::Connecting => {}
            State::Open => self.flush(slot, now),
        }
    }

    fn on_connecting(&mut self, slot: usize, now: Instant, is_error: bool) {
        let connection = &mut self.connections[slot];
        match connection.connect_progress(is_error) {
            ConnectProgress::Pending => {}
            ConnectProgress::Failed(error) => {
                self.fail(slot, ErrorKind::Connect, now, &error, "connect")
            }
            ConnectProgress::Connected => {
                let set_up = connection.on_connected(now, self.closed_loop_start_at_write);
                self.tally.record_connect(now, set_up.as_micros() as u64);
                self.flush(slot, now);
            }
        }
    }

    fn flush(&mut self, slot: usize, now: Instant) {
        let specs = &self.config.requests_specs;
        if let Err(error) = self.connections[slot].write_pending(now, specs) {
            if self.connections[slot].h2_health() == Health::Draining {
                // A server that sent GOAWAY closes once its streams are done.
                self.h2_ended(slot, now, &format!("write after GOAWAY: {error}"));
            } else {
                self.fail(slot, ErrorKind::Reset, now, &error, "write");
            }
            return;
        }
        if self.connections[slot].is_h2() {
            self.settle_h2(slot, now);
        }
    }

    fn on_readable(&mut self, slot: usize, now: Instant) -> Outcome {
        loop {
            let received = self.connections[slot].receive();
            if let Some(resumed) = self.connections[slot].handshake_done() {
                self.tally.record_handshake(now, resumed);
                if self.connections[slot].is_h2() {
                    if let Outcome::Closed = self.h2_handshake_done(slot, now) {
                        return Outcome::Closed;
                    }
                }
                // Plaintext the session could not hold before the handshake ended.
                if self.connections[slot].has_unwritten() {
                    self.flush(slot, now);
                    if self.connections[slot].state() == State::Idle {
                        return Outcome::Closed;
                    }
                }
            }
            match received {
                Received::Bytes {
                    count,
                    filled_buffer,
                } => {
                    self.tally.record_bytes(now, count);
                    if let Outcome::Closed = self.process(slot, now) {
                        return Outcome::Closed;
                    }
                    if !filled_buffer {
                        return Outcome::Continue;
                    }
                }
                Received::Eof => return self.on_eof(slot, now),
                Received::WouldBlock => return Outcome::Continue,
                Received::HeadTooLarge => {
                    self.fail_with(slot, ErrorKind::Parse, now, || {
                        "response head too large".into()
                    });
                    return Outcome::Closed;
                }
                Received::Failed(error) => {
                    let kind = error_kind_of(&error);
                    self.fail(slot, kind, now, &error, "read");
                    return Outcome::Closed;
                }
                Received::Tls(message) => {
                    let addr = self.connections[slot].addr();
                    self.fail_with(slot, ErrorKind::Tls, now, || match addr {
                        Some(addr) => format!("{addr}: {message}"),
                        None => message.clone(),
                    });
                    return Outcome::Closed;
                }
            }
        }
    }

    fn on_eof(&mut self, slot: usize, now: Instant) -> Outcome {
        if self.connections[slot].h2_health() == Health::Draining {
            self.h2_ended(slot, now, "connection closed by the server after GOAWAY");
            return Outcome::Closed;
        }
        let connection = &self.connections[slot];
        if connection.reads_until_close() && connection.in_flight() > 0 {
            self.complete(slot, now);
        }
        let connection = &self.connections[slot];
        if connection.in_flight() == 0 {
            self.close(slot);
            self.after_close(slot);
        } else {
            let what = if connection.oldest_was_sent() {
                "connection closed by the server before the response"
            } else {
                "connection closed by the server"
            };
            self.fail_with(slot, ErrorKind::Reset, now, || what.into());
        }
        Outcome::Closed
    }

    /// Frames the responses in the read buffer.
    fn process(&mut self, slot: usize, now: Instant) -> Outcome {
        if self.connections[slot].is_h2() {
            return self.h2_process(slot, now);
        }
        let mut position = 0;
        loop {
            let specs = &self.config.requests_specs;
            match self.connections[slot].frame(&mut position, now, specs) {
                Framed::NeedMore => break,
                Framed::Response => {
                    if let Outcome::Closed = self.complete(slot, now) {
                        return Outcome::Closed;
                    }
                }
                Framed::Malformed(message) => {
                    self.fail_with(slot, ErrorKind::Parse, now, || message.clone());
                    return Outcome::Closed;
                }
            }
        }
        self.connections[slot].discard_framed(position);
        Outcome::Continue
    }

    /// A request of `slot` ended and the connection stays: it may take another.
    fn free(&mut self, slot: usize) {
        if self.schedule.is_some() {
            self.ready
                .push_back((slot, self.connections[slot].generation()));
        } else {
            self.retry.push(slot);
        }
    }

    /// The front request's response is complete.
    fn complete(&mut self, slot: usize, now: Instant) -> Outcome {
        let response = self.connections[slot].finish_response(now);
        self.in_flight_total -= 1;
        let keep = response.keep_alive && self.keepalive;
        self.tally.record_response(
            now,
            response.request.start,
            response.first_byte,
            response.status,
        );
        if !keep {
            if self.connections[slot].in_flight() == 0 {
                self.close(slot);
                self.after_close(slot);
            } else {
                self.fail_with(slot, ErrorKind::Reset, now, || {
                    "server closed the connection with pipelined requests unanswered".into()
                });
            }
            return Outcome::Closed;
        }
        if self.schedule.is_some() {
            self.ready
                .push_back((slot, self.connections[slot].generation()));
        } else {
            // Written after this batch of events (as wrk does): the server then gets the
            // requests of a whole batch together.
            self.retry.push(slot);
        }
        Outcome::Continue
    }

    fn fail(&mut self, slot: usize, kind: ErrorKind, now: Instant, error: &io::Error, what: &str) {
        let addr = self.connections[slot].addr();
        self.fail_with(slot, kind, now, || match addr {
            Some(addr) => format!("{what} {addr}: {error}"),
            None => format!("{what}: {error}"),
        });
    }

    /// Fails every request on the connection with `kind`, closes it, and
    /// schedules the slot to be used again.
    fn fail_with(
        &mut self,
        slot: usize,
        kind: ErrorKind,
        now: Instant,
        message: impl Fn() -> String,
    ) {
        if self.connections[slot].is_h2() {
            self.count_h2_events(slot, now);
        }
        let failed = self.connections[slot].abandon_requests();
        for _ in 0..failed {
            self.tally.record_error(kind, now, &message);
        }
        self.in_flight_total -= failed;
        self.close(slot);
        if self.schedule.is_some() {
            self.after_close(slot);
        } else {
            self.retry.push(slot);
        }
    }

    fn close(&mut self, slot: usize) {
        self.connections[slot].close(self.poll.registry());
    }

    /// A slot that was closed cleanly (not failed) gets new work.
    fn after_close(&mut self, slot: usize) {
        if self.schedule.is_some() {
            let generation = self.connections[slot].generation();
            for _ in 0..self.pipeline() {
                self.ready.push_back((slot, generation));
            }
        } else {
            self.refill(slot);
        }
    }

    /// Connect and request timeouts.
    fn sweep(&mut self, now: Instant) {
        for slot in 0..self.connections.len() {
            let connection = &self.connections[slot];
            if connection.connect_expired(now, self.config.connect_timeout) {
                let limit = self.config.connect_timeout;
                self.fail_with(slot, ErrorKind::Connect, now, || {
                    format!("connect timed out after {limit:?}")
                });
            } else if connection.request_expired(now, self.config.timeout) {
                let limit = self.config.timeout;
                self.fail_with(slot, ErrorKind::Timeout, now, || {
                    format!("no response within {limit:?}")
                });
            }
        }
    }
}

/// Splits `total` connections over `threads` as evenly as possible.
pub fn share(total: usize, threads: usize, index: usize) -> usize {
    total / threads + usize::from(index < total % threads)
}
