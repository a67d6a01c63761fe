//! Responses written in batches (ADR 0011): when to let complete responses that wait for the
//! end of their slot's batch go out.
//!
//! A slot that serves several ready requests in a row (prefork's loop after one `epoll_wait`,
//! an app thread taking queued requests) leaves each small, complete response queued instead
//! of writing it at once, and writes them all back to back when the batch ends: before the
//! slot would sleep, or before the next request would make the oldest one wait longer than
//! `response_batch_delay`. One write per response still, but one wake-up of a client (or of a
//! proxy in front) per batch instead of one per response: on a machine whose other CPU sleeps
//! between responses, that wake-up (an inter-processor interrupt, a VM exit under
//! virtualisation) cost more than the rest of the server's work on a request. Measured in
//! docs/mpm.md.
//!
//! This file owns only the clock of a batch; who queues and who writes is the slot's
//! (`reactor` for an inline slot, `mpm::pool` for app threads).

use std::time::{Duration, Instant};

/// The timing of one slot's batch of deferred responses.
pub(crate) struct BatchClock {
    /// `response_batch_delay`: the longest the oldest deferred response may wait for the rest
    /// of its batch (zero: batching is off).
    delay: Duration,
    /// When the oldest response still deferred was ready.
    since: Option<Instant>,
    /// How long the last request served took: the guess for the next one.
    last_service: Duration,
}

impl BatchClock {
    /// A clock for a slot; `delay` zero turns batching off.
    pub(crate) fn new(delay: Duration) -> Self {
        BatchClock {
            delay,
            since: None,
            last_service: Duration::ZERO,
        }
    }

    /// Whether this slot defers small complete responses at all.
    pub(crate) fn enabled(&self) -> bool {
        !self.delay.is_zero()
    }

    /// Before serving the next request at `now`: whether the deferred responses must go out
    /// first, because serving it (guessed to take as long as the last one) would make the
    /// oldest wait past the delay. A slow app thus writes each response at once; a fast one
    /// collects a batch.
    pub(crate) fn due(&self, now: Instant) -> bool {
        self.since.is_some_and(|since| {
            now.saturating_duration_since(since) + self.last_service >= self.delay
        })
    }

    /// A request that started at `started` was served, and its response deferred, at `now`.
    pub(crate) fn deferred(&mut self, started: Instant, now: Instant) {
        self.last_service = now.saturating_duration_since(started);
        self.since.get_or_insert(now);
    }

    /// Every deferred response was written (or handed on).
    pub(crate) fn flushed(&mut self) {
        self.since = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn nothing_is_due_before_a_response_is_deferred() {
        let clock = BatchClock::new(MS);
        assert!(!clock.due(Instant::now() + 10 * MS));
    }

    #[test]
    fn fast_requests_collect_a_batch_until_the_delay() {
        let mut clock = BatchClock::new(MS);
        let start = Instant::now();
        let step = Duration::from_micros(100);
        clock.deferred(start, start + step);
        assert!(!clock.due(start + step));
        // The oldest waited 0.8 ms; one more request of 0.1 ms keeps it under 1 ms.
        clock.deferred(start + 8 * step, start + 9 * step);
        assert!(!clock.due(start + 9 * step));
        // 0.9 ms waited + 0.1 ms guessed: due.
        clock.deferred(start + 9 * step, start + 10 * step);
        assert!(clock.due(start + 10 * step));
    }

    #[test]
    fn a_slow_request_makes_the_batch_due_at_once() {
        let mut clock = BatchClock::new(MS);
        let start = Instant::now();
        clock.deferred(start, start + 5 * MS);
        assert!(clock.due(start + 5 * MS));
    }

    #[test]
    fn flushing_starts_a_new_batch() {
        let mut clock = BatchClock::new(MS);
        let start = Instant::now();
        clock.deferred(start, start + Duration::from_micros(50));
        clock.flushed();
        assert!(!clock.due(start + 10 * MS));
    }

    #[test]
    fn a_zero_delay_turns_batching_off() {
        assert!(!BatchClock::new(Duration::ZERO).enabled());
        assert!(BatchClock::new(MS).enabled());
    }
}
