//! One thread's counting: the counting rules of docs/bench.md applied to each
//! response, failure, connection and byte the thread sees, into its `Stats`,
//! its current timeline second, and its progress counters.
//!
//! - every request sent after the warm-up ends as exactly one of: a complete
//!   response (`requests`; a non-2xx/3xx one is also a `status` error), a
//!   transport failure (`connect`, `reset`, `timeout`, `parse`), or
//!   `in_flight_at_end` when the run stops first;
//! - a response or failure that happens before the warm-up ends counts only in
//!   `warmup_requests` / `warmup_errors`;
//! - a finished second goes to the main thread as one `Message::Second`.
//!
//! Must not: allocate per request (the status counters are an array indexed by
//! code, an example message is kept only for the first failure of each kind),
//! or keep per-request records.

use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::time::Instant;

use super::clock::Clock;
use super::shared::{Message, Progress};
use crate::stats::{record_us, ErrorKind, SecondBucket, Stats};

/// The figures of one thread, as it runs.
pub struct Tally<'a> {
    /// Thread index, for the timeline messages.
    thread: usize,
    clock: Clock,
    progress: &'a Progress,
    timeline: Sender<Message>,
    stats: Stats,
    bucket: SecondBucket,
    next_second: Instant,
}

impl<'a> Tally<'a> {
    /// Empty figures for thread `thread`, publishing to `progress` and sending
    /// finished seconds on `timeline`.
    pub fn new(
        thread: usize,
        clock: Clock,
        progress: &'a Progress,
        timeline: Sender<Message>,
    ) -> Tally<'a> {
        Tally {
            thread,
            clock,
            progress,
            timeline,
            stats: Stats::default(),
            bucket: SecondBucket::new(0),
            next_second: clock.second_start(1),
        }
    }

    /// When the current timeline second ends.
    pub fn next_second(&self) -> Instant {
        self.next_second
    }

    /// Sends the current second's bucket if `now` is past it.
    pub fn advance(&mut self, now: Instant) {
        if now >= self.next_second {
            self.flush_second(now);
        }
    }

    /// Sends the current second's bucket once `now` is in a later second.
    fn flush_second(&mut self, now: Instant) {
        let Some(second) = self.clock.second_of(now) else {
            return;
        };
        if second == self.bucket.second {
            return;
        }
        let old = std::mem::replace(&mut self.bucket, SecondBucket::new(second));
        let bucket = (old.requests > 0 || old.errors > 0).then_some(old);
        self.next_second = self.clock.second_start(second + 1);
        let _ = self.timeline.send(Message::Second {
            thread: self.thread,
            bucket,
            done_before: second,
        });
    }

    fn publish(&self) {
        self.progress
            .requests
            .store(self.stats.requests, Ordering::Relaxed);
        self.progress
            .errors
            .store(self.stats.total_errors(), Ordering::Relaxed);
    }

    /// Whether `now` is after the warm-up; moves to `now`'s second first.
    fn measuring(&mut self, now: Instant) -> bool {
        if !self.clock.is_measuring(now) {
            return false;
        }
        self.advance(now);
        true
    }

    /// One failed request; `message` is asked for only for the kind's first.
    pub fn record_error(
        &mut self,
        kind: ErrorKind,
        now: Instant,
        message: impl FnOnce() -> String,
    ) {
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

    /// One complete response with `status`, whose request's latency runs
    /// from `start`; its first byte came at `first_byte`.
    pub fn record_response(
        &mut self,
        now: Instant,
        start: Instant,
        first_byte: Instant,
        status: u16,
    ) {
        if !self.measuring(now) {
            self.stats.warmup_requests += 1;
            return;
        }
        let stats = &mut self.stats;
        stats.requests += 1;
        let latency = now.saturating_duration_since(start).as_micros() as u64;
        record_us(&mut stats.latency, latency);
        record_us(
            &mut stats.first_byte,
            first_byte.saturating_duration_since(start).as_micros() as u64,
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
    }

    /// A connection set up in `connect_us` microseconds.
    pub fn record_connect(&mut self, now: Instant, connect_us: u64) {
        if self.measuring(now) {
            record_us(&mut self.stats.connect, connect_us);
        }
    }

    /// A TLS handshake ended (`resumed`: with a session of an earlier connection).
    pub fn record_handshake(&mut self, now: Instant, resumed: bool) {
        if self.clock.is_measuring(now) {
            if resumed {
                self.stats.tls_resumed += 1;
            } else {
                self.stats.tls_full += 1;
            }
        }
    }

    /// `count` bytes read from a socket.
    pub fn record_bytes(&mut self, now: Instant, count: usize) {
        if self.clock.is_measuring(now) {
            self.stats.bytes_read += count as u64;
        }
    }

    /// The run stopped at `now` with `in_flight` requests unanswered: sends the
    /// last second and returns the figures.
    pub fn finish(mut self, now: Instant, in_flight: usize) -> Stats {
        self.stats.in_flight_at_end = in_flight as u64;
        self.flush_second(now);
        let last = std::mem::replace(&mut self.bucket, SecondBucket::new(0));
        let bucket = (last.requests > 0 || last.errors > 0).then_some(last);
        let _ = self.timeline.send(Message::Second {
            thread: self.thread,
            bucket,
            done_before: u64::MAX,
        });
        self.publish();
        self.stats
    }
}
