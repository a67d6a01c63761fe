//! The run's clock: when it started, when measuring starts (after the
//! warm-up), when it stops, and which second of the timeline an instant falls
//! in.
//!
//! Owns only arithmetic on instants; it must not read the time itself (every
//! caller passes the `now` it already has, so one event is judged by one
//! instant).

use std::time::{Duration, Instant};

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

impl Clock {
    /// Whether `now` is after the warm-up.
    pub fn is_measuring(&self, now: Instant) -> bool {
        now >= self.measure_start
    }

    /// Whether the run's duration is over at `now`.
    pub fn is_past_deadline(&self, now: Instant) -> bool {
        self.deadline.is_some_and(|deadline| now >= deadline)
    }

    /// The timeline second `now` falls in, or `None` during the warm-up.
    pub fn second_of(&self, now: Instant) -> Option<u64> {
        now.checked_duration_since(self.measure_start)
            .map(|since| since.as_secs())
    }

    /// When timeline second `second` starts.
    pub fn second_start(&self, second: u64) -> Instant {
        self.measure_start + Duration::from_secs(second)
    }
}
