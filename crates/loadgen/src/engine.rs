//! The engine: one mio event loop per thread over its share of the connections.
//!
//! Owns: connecting, writing the pre-encoded requests, reading and framing
//! responses (`tines_proto::client` for heads, `ChunkedDecoder` for chunked
//! bodies), timeouts, and the counting rules (see docs/bench.md):
//!
//! - every request sent after the warm-up ends as exactly one of: a complete
//!   response (`requests`; a non-2xx/3xx one is also a `status` error), a
//!   transport failure (`connect`, `reset`, `timeout`, `parse`), or
//!   `in_flight_at_end` when the run stops first;
//! - a response or failure that happens before the warm-up ends counts only in
//!   `warmup_requests` / `warmup_errors`;
//! - closed loop: a request's latency runs from its write; without keep-alive
//!   from the start of its connect (ab's "total"); open loop: from its intended
//!   send time on the schedule.
//!
//! Must not: allocate per request (buffers are per connection and reused), or
//! keep per-request records.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use tines_proto::client::{parse_response_head, BodyKind};
use tines_proto::{ChunkedDecoder, ChunkedEvent};

use crate::args::Config;
use crate::schedule::Schedule;
use crate::stats::{record_us, ErrorKind, SecondBucket, Stats};

const READ_BUFFER: usize = 16 * 1024;
const MAX_HEAD: usize = 64 * 1024;
const SWEEP_EVERY: Duration = Duration::from_millis(10);
const MAX_WAIT: Duration = Duration::from_millis(50);

/// Counters one thread publishes for the progress line (only it writes them).
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct Progress {
    /// Responses completed after the warm-up.
    pub requests: AtomicU64,
    /// Failures after the warm-up.
    pub errors: AtomicU64,
}

/// State shared by the threads of one run.
#[derive(Debug)]
pub struct Shared {
    /// Set to stop every thread (Ctrl-C).
    pub stop: AtomicBool,
    /// Requests claimed against `-n` in the closed loop.
    pub issued: AtomicU64,
    /// One per thread.
    pub progress: Vec<Progress>,
}

/// Messages from the threads to the main thread.
#[derive(Debug)]
pub enum Message {
    /// A finished second (or none) and the first second the thread may still report.
    Second {
        /// Thread index.
        thread: usize,
        /// The bucket, if it had anything.
        bucket: Option<SecondBucket>,
        /// No more buckets before this second will come from this thread.
        done_before: u64,
    },
}

/// Timing of one run, shared by the threads.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    /// When the run (and the warm-up) started; the open-loop schedule's zero.
    pub start: Instant,
    /// When measuring starts (start + warm-up).
    pub measure_start: Instant,
    /// When to stop sending (measure_start + duration), if a duration is set.
    pub deadline: Option<Instant>,
}

#[derive(Clone, Copy, Debug)]
struct InFlight {
    /// Latency origin: intended time (open loop), write, or connect start.
    start: Instant,
    /// When the request was written (for the timeout); `None` until then.
    sent: Option<Instant>,
    /// Index into the request specs.
    spec: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Idle,
    Connecting,
    Open,
}

#[derive(Debug)]
enum Body {
    Head,
    Length(u64),
    Chunked(ChunkedDecoder),
    UntilClose,
}

struct Conn {
    gen: u32,
    state: State,
    stream: Option<TcpStream>,
    addr: Option<SocketAddr>,
    connect_started: Instant,
    rbuf: Vec<u8>,
    rlen: usize,
    wbuf: Vec<u8>,
    wpos: usize,
    inflight: VecDeque<InFlight>,
    body: Body,
    status: u16,
    keep_alive: bool,
    first_byte: Option<Instant>,
}

enum Outcome {
    Continue,
    Closed,
}

/// One thread's event loop.
pub struct Worker<'a> {
    index: usize,
    config: &'a Config,
    shared: &'a Shared,
    clock: Clock,
    tx: Sender<Message>,
    poll: Poll,
    conns: Vec<Conn>,
    schedule: Option<Schedule>,
    ready: VecDeque<(usize, u32)>,
    retry: Vec<usize>,
    next_spec: usize,
    inflight_total: usize,
    budget_exhausted: bool,
    stats: Stats,
    bucket: SecondBucket,
    next_second: Instant,
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
        let pipeline = if config.keepalive { config.pipeline } else { 1 };
        let conns = (0..connections)
            .map(|_| Conn {
                gen: 0,
                state: State::Idle,
                stream: None,
                addr: None,
                connect_started: clock.start,
                rbuf: vec![0; READ_BUFFER],
                rlen: 0,
                wbuf: Vec::with_capacity(
                    pipeline
                        * config
                            .requests_specs
                            .iter()
                            .map(|s| s.bytes.len())
                            .max()
                            .unwrap_or(0),
                ),
                wpos: 0,
                inflight: VecDeque::with_capacity(pipeline),
                body: Body::Head,
                status: 0,
                keep_alive: true,
                first_byte: None,
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
            index,
            config,
            shared,
            clock,
            tx,
            poll: Poll::new()?,
            conns,
            schedule,
            ready,
            retry: Vec::with_capacity(connections),
            next_spec: index % config.requests_specs.len(),
            inflight_total: 0,
            budget_exhausted: false,
            stats: Stats::default(),
            bucket: SecondBucket::new(0),
            next_second: clock.measure_start + Duration::from_secs(1),
            keepalive: config.keepalive,
            closed_loop_start_at_write: config.rate.is_none() && config.keepalive,
        })
    }

    fn pipeline(&self) -> usize {
        if self.keepalive {
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
            for slot in 0..self.conns.len() {
                self.refill(slot);
            }
        }
        loop {
            let now = Instant::now();
            if self.shared.stop.load(Ordering::Relaxed)
                || crate::signal::interrupted()
                || self.clock.deadline.is_some_and(|d| now >= d)
            {
                break;
            }
            if now >= self.next_second {
                self.flush_second(now);
            }
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
            let mut wait = MAX_WAIT.min(self.next_second.saturating_duration_since(now));
            if let Some(deadline) = self.clock.deadline {
                wait = wait.min(deadline.saturating_duration_since(now));
            }
            if self.schedule.is_some() {
                match self.dispatch_due(now) {
                    Some(next) => wait = wait.min(next.saturating_duration_since(now)),
                    None => {
                        if self.inflight_total == 0 {
                            break;
                        }
                    }
                }
            } else if self.budget_exhausted && self.inflight_total == 0 && self.retry.is_empty() {
                break;
            }
            if now >= next_sweep {
                self.sweep(now);
                next_sweep = now + SWEEP_EVERY;
            }
            if self.inflight_total > 0 {
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
                let token = event.token().0;
                let (slot, gen) = (token & 0xffff_ffff, (token >> 32) as u32);
                if slot >= self.conns.len() || self.conns[slot].gen != gen {
                    continue;
                }
                let now = Instant::now();
                match self.conns[slot].state {
                    State::Connecting => self.on_connecting(slot, now, event.is_error()),
                    State::Open => {
                        if event.is_readable() || event.is_read_closed() || event.is_error() {
                            if let Outcome::Closed = self.on_readable(slot, now) {
                                continue;
                            }
                        }
                        if event.is_writable()
                            && self.conns[slot].wpos < self.conns[slot].wbuf.len()
                        {
                            self.flush(slot, now);
                        }
                    }
                    State::Idle => {}
                }
            }
        }
        let now = Instant::now();
        self.stats.in_flight_at_end = self.inflight_total as u64;
        self.flush_second(now);
        let last = std::mem::replace(&mut self.bucket, SecondBucket::new(0));
        let bucket = (last.requests > 0 || last.errors > 0).then_some(last);
        let _ = self.tx.send(Message::Second {
            thread: self.index,
            bucket,
            done_before: u64::MAX,
        });
        self.publish();
        (self.stats, now)
    }

    fn second_of(&self, now: Instant) -> Option<u64> {
        now.checked_duration_since(self.clock.measure_start)
            .map(|d| d.as_secs())
    }

    /// Sends the current second's bucket once `now` is in a later second.
    fn flush_second(&mut self, now: Instant) {
        let Some(second) = self.second_of(now) else {
            return;
        };
        if second == self.bucket.second {
            return;
        }
        let old = std::mem::replace(&mut self.bucket, SecondBucket::new(second));
        let bucket = (old.requests > 0 || old.errors > 0).then_some(old);
        self.next_second = self.clock.measure_start + Duration::from_secs(second + 1);
        let _ = self.tx.send(Message::Second {
            thread: self.index,
            bucket,
            done_before: second,
        });
    }

    fn publish(&self) {
        let progress = &self.shared.progress[self.index];
        progress
            .requests
            .store(self.stats.requests, Ordering::Relaxed);
        progress
            .errors
            .store(self.stats.total_errors(), Ordering::Relaxed);
    }

    fn measuring(&mut self, now: Instant) -> bool {
        if now < self.clock.measure_start {
            return false;
        }
        if now >= self.next_second {
            self.flush_second(now);
        }
        true
    }

    fn record_error(&mut self, kind: ErrorKind, now: Instant, message: impl FnOnce() -> String) {
        if !self.measuring(now) {
            self.stats.warmup_errors += 1;
            return;
        }
        self.stats.errors[kind as usize] += 1;
        if self.stats.examples[kind as usize].is_none() {
            self.stats.examples[kind as usize] = Some(message());
        }
        self.bucket.errors += 1;
        self.publish();
    }

    /// Closed loop: claims a request against `-n`.
    fn claim(&mut self, now: Instant) -> bool {
        if self.shared.stop.load(Ordering::Relaxed) {
            return false;
        }
        match self.config.requests {
            Some(limit) if now >= self.clock.measure_start => {
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
        if self.clock.deadline.is_some_and(|d| now >= d) {
            return;
        }
        while self.can_take(slot) && self.claim(now) {
            self.dispatch(slot, now, now);
            if self.conns[slot].state == State::Idle {
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
                    Some((slot, gen)) => {
                        if self.conns[slot].gen == gen && self.can_take(slot) {
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
        let conn = &self.conns[slot];
        if conn.inflight.len() >= self.pipeline() {
            return false;
        }
        if conn.state == State::Idle {
            return true;
        }
        // A keep-alive connection to another address must drain first.
        let addr = self.config.requests_specs[self.next_spec].target.addr;
        conn.addr == Some(addr) || conn.inflight.is_empty()
    }

    fn dispatch(&mut self, slot: usize, start: Instant, now: Instant) {
        let spec_index = self.next_spec;
        self.next_spec = (self.next_spec + 1) % self.config.requests_specs.len();
        let spec = &self.config.requests_specs[spec_index];
        let addr = spec.target.addr;
        if self.conns[slot].state != State::Idle && self.conns[slot].addr != Some(addr) {
            self.close(slot);
        }
        let conn = &mut self.conns[slot];
        conn.inflight.push_back(InFlight {
            start,
            sent: None,
            spec: spec_index as u32,
        });
        conn.wbuf.extend_from_slice(&spec.bytes);
        self.inflight_total += 1;
        match conn.state {
            State::Idle => self.connect(slot, addr, now),
            State::Connecting => {}
            State::Open => self.flush(slot, now),
        }
    }

    fn connect(&mut self, slot: usize, addr: SocketAddr, now: Instant) {
        let conn = &mut self.conns[slot];
        conn.connect_started = now;
        conn.addr = Some(addr);
        match TcpStream::connect(addr) {
            Ok(mut stream) => {
                let token = Token(slot | ((conn.gen as usize) << 32));
                if let Err(error) = self.poll.registry().register(
                    &mut stream,
                    token,
                    Interest::READABLE | Interest::WRITABLE,
                ) {
                    self.fail(slot, ErrorKind::Connect, now, &error, "connect");
                    return;
                }
                conn.stream = Some(stream);
                conn.state = State::Connecting;
            }
            Err(error) => self.fail(slot, ErrorKind::Connect, now, &error, "connect"),
        }
    }

    fn on_connecting(&mut self, slot: usize, now: Instant, is_error: bool) {
        let conn = &mut self.conns[slot];
        let stream = conn.stream.as_ref().expect("connecting has a stream");
        let error = match stream.take_error() {
            Ok(Some(error)) => Some(error),
            Err(error) => Some(error),
            Ok(None) if is_error => Some(io::Error::from(io::ErrorKind::ConnectionRefused)),
            Ok(None) => match stream.peer_addr() {
                Ok(_) => None,
                Err(error) if error.kind() == io::ErrorKind::NotConnected => return,
                Err(error) => Some(error),
            },
        };
        if let Some(error) = error {
            self.fail(slot, ErrorKind::Connect, now, &error, "connect");
            return;
        }
        let _ = stream.set_nodelay(true);
        conn.state = State::Open;
        let connect_us = now
            .saturating_duration_since(conn.connect_started)
            .as_micros() as u64;
        if self.closed_loop_start_at_write {
            for request in conn.inflight.iter_mut() {
                request.start = now;
            }
        }
        if self.measuring(now) {
            record_us(&mut self.stats.connect, connect_us);
        }
        self.flush(slot, now);
    }

    fn flush(&mut self, slot: usize, now: Instant) {
        let conn = &mut self.conns[slot];
        let stream = conn.stream.as_mut().expect("open has a stream");
        while conn.wpos < conn.wbuf.len() {
            match stream.write(&conn.wbuf[conn.wpos..]) {
                Ok(0) => {
                    let error = io::Error::from(io::ErrorKind::WriteZero);
                    self.fail(slot, ErrorKind::Reset, now, &error, "write");
                    return;
                }
                Ok(n) => conn.wpos += n,
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => {
                    self.fail(slot, ErrorKind::Reset, now, &error, "write");
                    return;
                }
            }
        }
        if conn.wpos == conn.wbuf.len() {
            conn.wbuf.clear();
            conn.wpos = 0;
            for request in conn.inflight.iter_mut().rev() {
                if request.sent.is_some() {
                    break;
                }
                request.sent = Some(now);
            }
        }
    }

    fn on_readable(&mut self, slot: usize, now: Instant) -> Outcome {
        loop {
            let conn = &mut self.conns[slot];
            if conn.rlen == conn.rbuf.len() {
                if conn.rbuf.len() >= MAX_HEAD {
                    self.fail_msg(slot, ErrorKind::Parse, now, || {
                        "response head too large".into()
                    });
                    return Outcome::Closed;
                }
                let grown = conn.rbuf.len() * 2;
                conn.rbuf.resize(grown, 0);
            }
            let stream = conn.stream.as_mut().expect("open has a stream");
            let space = conn.rbuf.len() - conn.rlen;
            match stream.read(&mut conn.rbuf[conn.rlen..]) {
                Ok(0) => return self.on_eof(slot, now),
                Ok(n) => {
                    conn.rlen += n;
                    if now >= self.clock.measure_start {
                        self.stats.bytes_read += n as u64;
                    }
                    if let Outcome::Closed = self.process(slot, now) {
                        return Outcome::Closed;
                    }
                    if n < space {
                        return Outcome::Continue;
                    }
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    return Outcome::Continue
                }
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => {
                    let kind = error_kind_of(&error);
                    self.fail(slot, kind, now, &error, "read");
                    return Outcome::Closed;
                }
            }
        }
    }

    fn on_eof(&mut self, slot: usize, now: Instant) -> Outcome {
        let conn = &mut self.conns[slot];
        if matches!(conn.body, Body::UntilClose) && !conn.inflight.is_empty() {
            self.complete(slot, now);
        }
        let conn = &mut self.conns[slot];
        if conn.inflight.is_empty() {
            self.close(slot);
            self.after_close(slot);
        } else {
            let sent = conn.inflight.front().is_some_and(|r| r.sent.is_some());
            let what = if sent {
                "connection closed by the server before the response"
            } else {
                "connection closed by the server"
            };
            self.fail_msg(slot, ErrorKind::Reset, now, || what.into());
        }
        Outcome::Closed
    }

    /// Frames the responses in the read buffer.
    fn process(&mut self, slot: usize, now: Instant) -> Outcome {
        let mut pos = 0;
        let outcome = loop {
            let conn = &mut self.conns[slot];
            if pos == conn.rlen {
                break Outcome::Continue;
            }
            match &mut conn.body {
                Body::Head => {
                    let Some(front) = conn.inflight.front() else {
                        self.fail_msg(slot, ErrorKind::Parse, now, || {
                            "bytes from the server with no request outstanding".into()
                        });
                        return Outcome::Closed;
                    };
                    if conn.first_byte.is_none() {
                        conn.first_byte = Some(now);
                    }
                    let is_head = self.config.requests_specs[front.spec as usize].is_head;
                    match parse_response_head(&conn.rbuf[pos..conn.rlen], is_head, MAX_HEAD) {
                        Ok(None) => break Outcome::Continue,
                        Err(error) => {
                            self.fail_msg(slot, ErrorKind::Parse, now, || error.reason().into());
                            return Outcome::Closed;
                        }
                        Ok(Some(head)) => {
                            pos += head.head_len;
                            if head.is_interim() && head.status != 101 {
                                continue;
                            }
                            conn.status = head.status;
                            conn.keep_alive = head.keep_alive;
                            match head.body {
                                BodyKind::None => {
                                    if let Outcome::Closed = self.complete(slot, now) {
                                        return Outcome::Closed;
                                    }
                                }
                                BodyKind::Length(n) => conn.body = Body::Length(n),
                                BodyKind::Chunked => {
                                    conn.body = Body::Chunked(ChunkedDecoder::new(16 * 1024))
                                }
                                BodyKind::UntilClose => conn.body = Body::UntilClose,
                            }
                        }
                    }
                }
                Body::Length(remaining) => {
                    let take = (*remaining).min((conn.rlen - pos) as u64);
                    pos += take as usize;
                    *remaining -= take;
                    if *remaining == 0 {
                        if let Outcome::Closed = self.complete(slot, now) {
                            return Outcome::Closed;
                        }
                    }
                }
                Body::Chunked(decoder) => match decoder.decode(&conn.rbuf[pos..conn.rlen]) {
                    Ok((consumed, event)) => {
                        pos += consumed;
                        match event {
                            ChunkedEvent::Data(_) => {}
                            ChunkedEvent::NeedMore => break Outcome::Continue,
                            ChunkedEvent::End => {
                                if let Outcome::Closed = self.complete(slot, now) {
                                    return Outcome::Closed;
                                }
                            }
                        }
                    }
                    Err(error) => {
                        self.fail_msg(slot, ErrorKind::Parse, now, || {
                            format!("chunked body: {}", error.reason())
                        });
                        return Outcome::Closed;
                    }
                },
                Body::UntilClose => {
                    pos = conn.rlen;
                }
            }
        };
        let conn = &mut self.conns[slot];
        conn.rbuf.copy_within(pos..conn.rlen, 0);
        conn.rlen -= pos;
        outcome
    }

    /// The front request's response is complete.
    fn complete(&mut self, slot: usize, now: Instant) -> Outcome {
        let conn = &mut self.conns[slot];
        let request = conn
            .inflight
            .pop_front()
            .expect("a request was outstanding");
        self.inflight_total -= 1;
        let status = conn.status;
        let first_byte = conn.first_byte.take().unwrap_or(now);
        conn.body = Body::Head;
        let keep = conn.keep_alive && self.keepalive;
        if self.measuring(now) {
            let stats = &mut self.stats;
            stats.requests += 1;
            let latency = now.saturating_duration_since(request.start).as_micros() as u64;
            record_us(&mut stats.latency, latency);
            record_us(
                &mut stats.first_byte,
                first_byte
                    .saturating_duration_since(request.start)
                    .as_micros() as u64,
            );
            record_us(&mut self.bucket.latency, latency);
            self.bucket.requests += 1;
            stats.status[(status as usize).min(999)] += 1;
            if (200..400).contains(&status) {
                stats.ok += 1;
            } else {
                stats.errors[ErrorKind::Status as usize] += 1;
                self.bucket.errors += 1;
                if stats.examples[ErrorKind::Status as usize].is_none() {
                    stats.examples[ErrorKind::Status as usize] = Some(format!("status {status}"));
                }
            }
            self.publish();
        } else {
            self.stats.warmup_requests += 1;
        }
        if !keep {
            if self.conns[slot].inflight.is_empty() {
                self.close(slot);
                self.after_close(slot);
            } else {
                self.fail_msg(slot, ErrorKind::Reset, now, || {
                    "server closed the connection with pipelined requests unanswered".into()
                });
            }
            return Outcome::Closed;
        }
        if self.schedule.is_some() {
            self.ready.push_back((slot, self.conns[slot].gen));
        } else {
            // Written after this batch of events (as wrk does): the server then gets the
            // requests of a whole batch together.
            self.retry.push(slot);
        }
        Outcome::Continue
    }

    fn fail(&mut self, slot: usize, kind: ErrorKind, now: Instant, error: &io::Error, what: &str) {
        let addr = self.conns[slot].addr;
        self.fail_msg(slot, kind, now, || match addr {
            Some(addr) => format!("{what} {addr}: {error}"),
            None => format!("{what}: {error}"),
        });
    }

    /// Fails every request on the connection with `kind`, closes it, and
    /// schedules the slot to be used again.
    fn fail_msg(
        &mut self,
        slot: usize,
        kind: ErrorKind,
        now: Instant,
        message: impl Fn() -> String,
    ) {
        let failed = self.conns[slot].inflight.len();
        for _ in 0..failed {
            self.record_error(kind, now, &message);
        }
        self.inflight_total -= failed;
        self.conns[slot].inflight.clear();
        self.close(slot);
        if self.schedule.is_some() {
            self.after_close(slot);
        } else {
            self.retry.push(slot);
        }
    }

    fn close(&mut self, slot: usize) {
        let conn = &mut self.conns[slot];
        if let Some(mut stream) = conn.stream.take() {
            let _ = self.poll.registry().deregister(&mut stream);
        }
        conn.gen = conn.gen.wrapping_add(1);
        conn.state = State::Idle;
        conn.rlen = 0;
        conn.wbuf.clear();
        conn.wpos = 0;
        conn.body = Body::Head;
        conn.first_byte = None;
    }

    /// A slot that was closed cleanly (not failed) gets new work.
    fn after_close(&mut self, slot: usize) {
        if self.schedule.is_some() {
            for _ in 0..self.pipeline() {
                self.ready.push_back((slot, self.conns[slot].gen));
            }
        } else {
            self.refill(slot);
        }
    }

    /// Connect and request timeouts.
    fn sweep(&mut self, now: Instant) {
        for slot in 0..self.conns.len() {
            let conn = &self.conns[slot];
            match conn.state {
                State::Connecting
                    if now.saturating_duration_since(conn.connect_started)
                        >= self.config.connect_timeout =>
                {
                    let limit = self.config.connect_timeout;
                    self.fail_msg(slot, ErrorKind::Connect, now, || {
                        format!("connect timed out after {limit:?}")
                    });
                }
                State::Open => {
                    let expired = conn
                        .inflight
                        .front()
                        .and_then(|r| r.sent)
                        .is_some_and(|sent| {
                            now.saturating_duration_since(sent) >= self.config.timeout
                        });
                    if expired {
                        let limit = self.config.timeout;
                        self.fail_msg(slot, ErrorKind::Timeout, now, || {
                            format!("no response within {limit:?}")
                        });
                    }
                }
                _ => {}
            }
        }
    }
}

/// Splits `total` connections over `threads` as evenly as possible.
pub fn share(total: usize, threads: usize, index: usize) -> usize {
    total / threads + usize::from(index < total % threads)
}

/// Builds the shared state for `threads` threads.
pub fn shared(threads: usize) -> Arc<Shared> {
    Arc::new(Shared {
        stop: AtomicBool::new(false),
        issued: AtomicU64::new(0),
        progress: (0..threads).map(|_| Progress::default()).collect(),
    })
}
