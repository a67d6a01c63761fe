//! The open-loop schedule: when each request is meant to be sent.
//!
//! Request `g` (counting from 0 over the whole run) is due at `g / rate`
//! seconds after the start. Thread `i` of `T` owns the requests with
//! `g % T == i`, so the threads together follow the one global schedule
//! exactly, without talking to each other. The schedule never skips a
//! request: when the sender falls behind (no free connection, a stalled
//! server), the backlog is sent as soon as it can be, and each request's
//! latency still counts from its intended time (so coordinated omission
//! cannot hide a stall). Time is a parameter (a `Duration` since the start),
//! which makes the schedule testable on a virtual clock.

use std::time::Duration;

/// One thread's share of the global open-loop schedule.
#[derive(Debug, Clone)]
pub struct Schedule {
    rate: f64,
    stride: u64,
    offset: u64,
    next: u64,
    limit: Option<u64>,
}

impl Schedule {
    /// Thread `index` of `threads` at `rate` requests/s overall; `limit` caps
    /// the total number of requests over all threads (`-n`).
    pub fn new(rate: f64, threads: usize, index: usize, limit: Option<u64>) -> Schedule {
        Schedule {
            rate,
            stride: threads as u64,
            offset: index as u64,
            next: 0,
            limit,
        }
    }

    fn global_index(&self) -> u64 {
        self.next * self.stride + self.offset
    }

    /// The intended send time of this thread's next unsent request, or `None`
    /// when the run's request limit is reached.
    pub fn next_due(&self) -> Option<Duration> {
        let g = self.global_index();
        if self.limit.is_some_and(|limit| g >= limit) {
            return None;
        }
        // Rounded to the nanosecond, so 1/rate steps do not drift from float error.
        Some(Duration::from_nanos(
            (g as f64 * 1e9 / self.rate).round() as u64
        ))
    }

    /// If the next request is due at `now`, takes it and returns its intended time.
    pub fn take_due(&mut self, now: Duration) -> Option<Duration> {
        let due = self.next_due()?;
        if due <= now {
            self.next += 1;
            Some(due)
        } else {
            None
        }
    }

    /// Requests this thread has taken so far.
    pub fn taken(&self) -> u64 {
        self.next
    }
}

#[cfg(test)]
mod tests {
    use super::Schedule;
    use std::time::Duration;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn one_thread_follows_the_rate_exactly() {
        let mut s = Schedule::new(100.0, 1, 0, None);
        // At t=0 exactly one request is due; nothing more until 10 ms.
        assert_eq!(s.take_due(ms(0)), Some(ms(0)));
        assert_eq!(s.take_due(ms(0)), None);
        assert_eq!(s.take_due(ms(9)), None);
        assert_eq!(s.take_due(ms(10)), Some(ms(10)));
        // Late by 55 ms: the backlog comes out with its intended times, none skipped.
        let backlog: Vec<_> = std::iter::from_fn(|| s.take_due(ms(65))).collect();
        assert_eq!(backlog, vec![ms(20), ms(30), ms(40), ms(50), ms(60)]);
        // Over 10 virtual seconds: 1001 requests (t = 0 .. 10 s inclusive).
        let mut count = s.taken();
        let mut t = 65;
        while t <= 10_000 {
            while s.take_due(ms(t)).is_some() {
                count += 1;
            }
            t += 1;
        }
        assert_eq!(count, 1001);
    }

    #[test]
    fn threads_interleave_into_the_global_schedule() {
        let mut threads: Vec<Schedule> = (0..3)
            .map(|i| Schedule::new(1000.0, 3, i, Some(10)))
            .collect();
        let mut all = Vec::new();
        for s in &mut threads {
            while let Some(t) = s.take_due(Duration::from_secs(1)) {
                all.push(t);
            }
        }
        all.sort();
        let expected: Vec<Duration> = (0..10).map(|g| Duration::from_micros(g * 1000)).collect();
        assert_eq!(all, expected);
        assert!(threads.iter().all(|s| s.next_due().is_none()));
        assert_eq!(
            threads.iter().map(Schedule::taken).collect::<Vec<_>>(),
            vec![4, 3, 3]
        );
    }

    #[test]
    fn fractional_rates() {
        let mut s = Schedule::new(2.5, 1, 0, None);
        assert_eq!(s.take_due(ms(0)), Some(ms(0)));
        assert_eq!(s.take_due(ms(399)), None);
        assert_eq!(s.take_due(ms(400)), Some(ms(400)));
        assert_eq!(s.take_due(ms(1000)), Some(ms(800)));
        assert_eq!(s.take_due(ms(1000)), None);
    }
}
