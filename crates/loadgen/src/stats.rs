//! Counters and HDR histograms, per thread, merged at the end; and the
//! per-second timeline, merged as the run goes.
//!
//! Memory is bounded: three histograms per thread for the whole run, one small
//! histogram per thread for the current second, and a few numbers per elapsed
//! second once every thread has moved past it. No per-request records.

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;

/// Largest latency recorded, in microseconds (an hour); longer saturates.
pub const MAX_US: u64 = 3_600_000_000;

/// The kinds of failure, in report order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The connection could not be opened (refused, unreachable, connect timeout).
    Connect = 0,
    /// The connection was reset or closed with the request unanswered.
    Reset = 1,
    /// No complete response within --timeout.
    Timeout = 2,
    /// A complete response whose status is not 2xx/3xx.
    Status = 3,
    /// The response could not be parsed.
    Parse = 4,
    /// The TLS handshake failed (an untrusted or wrong certificate, no common version or
    /// suite, a server that does not speak TLS), or a TLS record could not be read.
    Tls = 5,
    /// HTTP/2: the server reset the request's stream (RST_STREAM).
    Stream = 6,
    /// HTTP/2: the server's GOAWAY refused the request's stream (an id past its last), or
    /// ended the connection with an error.
    GoAway = 7,
}

/// JSON names of the error kinds, indexed by `ErrorKind as usize`.
pub const ERROR_NAMES: [&str; 8] = [
    "connect", "reset", "timeout", "status", "parse", "tls", "stream", "goaway",
];

/// Human names of the error kinds.
pub const ERROR_LABELS: [&str; 8] = [
    "connect error",
    "connection reset/closed",
    "timeout",
    "bad status (not 2xx/3xx)",
    "parse error",
    "TLS error",
    "stream reset (RST_STREAM)",
    "refused by GOAWAY",
];

/// A histogram of microseconds for whole-run figures (3 significant digits).
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_US, 3).expect("valid histogram bounds")
}

/// A smaller histogram for one second of the timeline (2 significant digits).
pub fn new_second_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_US, 2).expect("valid histogram bounds")
}

/// Records microseconds, clamped into the histogram's range.
pub fn record_us(histogram: &mut Histogram<u64>, us: u64) {
    histogram.saturating_record(us.clamp(1, MAX_US));
}

/// One thread's figures (after warm-up unless said otherwise).
#[derive(Debug, Clone)]
pub struct Stats {
    /// Complete responses, any status.
    pub requests: u64,
    /// Complete responses with a 2xx/3xx status.
    pub ok: u64,
    /// Responses completed during the warm-up (excluded from everything else).
    pub warmup_requests: u64,
    /// Failures during the warm-up (excluded from everything else).
    pub warmup_errors: u64,
    /// Requests sent but neither answered nor failed when the run stopped.
    pub in_flight_at_end: u64,
    /// Bytes read from the sockets after the warm-up.
    pub bytes_read: u64,
    /// TLS handshakes completed after the warm-up: full ones.
    pub tls_full: u64,
    /// TLS handshakes completed after the warm-up: resumed ones (a session of an earlier
    /// connection: a ticket or a session id).
    pub tls_resumed: u64,
    /// Failures by kind.
    pub errors: [u64; 8],
    /// The first message seen for each kind.
    pub examples: [Option<String>; 8],
    /// Status code counts, indexed by code (100..=999).
    pub status: Vec<u64>,
    /// Total latency: intended (open loop) or actual start to the last byte.
    pub latency: Histogram<u64>,
    /// Connection set-up times.
    pub connect: Histogram<u64>,
    /// Start to the first byte of the response.
    pub first_byte: Histogram<u64>,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            requests: 0,
            ok: 0,
            warmup_requests: 0,
            warmup_errors: 0,
            in_flight_at_end: 0,
            bytes_read: 0,
            tls_full: 0,
            tls_resumed: 0,
            errors: [0; 8],
            examples: Default::default(),
            status: vec![0; 1000],
            latency: new_histogram(),
            connect: new_histogram(),
            first_byte: new_histogram(),
        }
    }
}

impl Stats {
    /// Adds another thread's figures.
    pub fn merge(&mut self, other: &Stats) {
        self.requests += other.requests;
        self.ok += other.ok;
        self.warmup_requests += other.warmup_requests;
        self.warmup_errors += other.warmup_errors;
        self.in_flight_at_end += other.in_flight_at_end;
        self.bytes_read += other.bytes_read;
        self.tls_full += other.tls_full;
        self.tls_resumed += other.tls_resumed;
        for kind in 0..ERROR_NAMES.len() {
            self.errors[kind] += other.errors[kind];
            if self.examples[kind].is_none() {
                self.examples[kind].clone_from(&other.examples[kind]);
            }
        }
        for (mine, theirs) in self.status.iter_mut().zip(&other.status) {
            *mine += theirs;
        }
        self.latency.add(&other.latency).expect("same bounds");
        self.connect.add(&other.connect).expect("same bounds");
        self.first_byte.add(&other.first_byte).expect("same bounds");
    }

    /// All failures (status errors included).
    pub fn total_errors(&self) -> u64 {
        self.errors.iter().sum()
    }
}

/// One thread's figures for one second of the timeline.
#[derive(Debug)]
pub struct SecondBucket {
    /// Seconds since the end of the warm-up.
    pub second: u64,
    /// Responses completed in that second.
    pub requests: u64,
    /// Failures in that second.
    pub errors: u64,
    /// Latencies of those responses.
    pub latency: Histogram<u64>,
}

impl SecondBucket {
    /// An empty bucket for `second`.
    pub fn new(second: u64) -> SecondBucket {
        SecondBucket {
            second,
            requests: 0,
            errors: 0,
            latency: new_second_histogram(),
        }
    }
}

/// One point of the timeline, over all threads.
#[derive(Debug, Clone, PartialEq)]
pub struct TimelinePoint {
    /// Start of the second, since the end of the warm-up.
    pub t_s: f64,
    /// How much of the second the run covered: 1 except for the last point,
    /// which ends when the run stopped (rates are counts over this).
    pub duration_s: f64,
    /// Responses completed in [t_s, t_s + duration_s).
    pub requests: u64,
    /// Failures in that second.
    pub errors: u64,
    /// Median latency of those responses (0 when none).
    pub p50_us: f64,
    /// 99th percentile (0 when none).
    pub p99_us: f64,
}

/// Merges the threads' per-second buckets; a second is reduced to a
/// `TimelinePoint` (and its histogram dropped) once every thread is past it.
#[derive(Debug)]
pub struct Timeline {
    pending: BTreeMap<u64, SecondBucket>,
    done_before: Vec<u64>,
    points: Vec<TimelinePoint>,
}

impl Timeline {
    /// A timeline fed by `threads` threads.
    pub fn new(threads: usize) -> Timeline {
        Timeline {
            pending: BTreeMap::new(),
            done_before: vec![0; threads],
            points: Vec::new(),
        }
    }

    /// Adds a thread's bucket; `done_before` says the thread will send nothing
    /// more for seconds before it.
    pub fn add(&mut self, thread: usize, bucket: Option<SecondBucket>, done_before: u64) {
        if let Some(bucket) = bucket {
            match self.pending.get_mut(&bucket.second) {
                Some(mine) => {
                    mine.requests += bucket.requests;
                    mine.errors += bucket.errors;
                    mine.latency.add(&bucket.latency).expect("same bounds");
                }
                None => {
                    self.pending.insert(bucket.second, bucket);
                }
            }
        }
        self.done_before[thread] = self.done_before[thread].max(done_before);
        // A finished thread says u64::MAX: reduce only up to the last second with data.
        let last = self.pending.keys().next_back().map_or(0, |s| s + 1);
        let through = self
            .done_before
            .iter()
            .copied()
            .min()
            .unwrap_or(0)
            .min(last);
        self.finalize_before(through);
    }

    fn finalize_before(&mut self, through: u64) {
        while (self.points.len() as u64) < through {
            let second = self.points.len() as u64;
            let point = match self.pending.remove(&second) {
                Some(bucket) => TimelinePoint {
                    t_s: second as f64,
                    duration_s: 1.0,
                    requests: bucket.requests,
                    errors: bucket.errors,
                    p50_us: if bucket.latency.is_empty() {
                        0.0
                    } else {
                        bucket.latency.value_at_quantile(0.5) as f64
                    },
                    p99_us: if bucket.latency.is_empty() {
                        0.0
                    } else {
                        bucket.latency.value_at_quantile(0.99) as f64
                    },
                },
                None => TimelinePoint {
                    t_s: second as f64,
                    duration_s: 1.0,
                    requests: 0,
                    errors: 0,
                    p50_us: 0.0,
                    p99_us: 0.0,
                },
            };
            self.points.push(point);
        }
    }

    /// Reduces everything left, up to and including the last second with data
    /// or the last second the run reached, whichever is later; `elapsed` (the
    /// run's length after the warm-up) gives the last point its duration.
    pub fn finish(mut self, elapsed: Duration) -> Vec<TimelinePoint> {
        let elapsed_s = elapsed.as_secs_f64();
        let last = self.pending.keys().next_back().map_or(0, |s| s + 1);
        self.finalize_before(last.max(elapsed_s.ceil() as u64));
        for point in &mut self.points {
            point.duration_s = (elapsed_s - point.t_s).clamp(0.0, 1.0);
        }
        self.points
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(second: u64, requests: u64, latency_us: u64) -> SecondBucket {
        let mut b = SecondBucket::new(second);
        b.requests = requests;
        for _ in 0..requests {
            record_us(&mut b.latency, latency_us);
        }
        b
    }

    #[test]
    fn timeline_merges_threads_and_fills_gaps() {
        let mut timeline = Timeline::new(2);
        timeline.add(0, Some(bucket(0, 10, 100)), 1);
        assert!(
            timeline.points.is_empty(),
            "thread 1 has not passed second 0"
        );
        timeline.add(1, Some(bucket(0, 5, 200)), 3);
        assert_eq!(timeline.points.len(), 1);
        assert_eq!(timeline.points[0].requests, 15);
        timeline.add(0, Some(bucket(2, 1, 50)), 3);
        let points = timeline.finish(Duration::from_secs(4));
        assert_eq!(
            points.iter().map(|p| p.requests).collect::<Vec<_>>(),
            vec![15, 0, 1, 0]
        );
        assert_eq!(points[2].p50_us, 50.0);
    }

    #[test]
    fn the_last_point_lasts_from_its_second_to_the_end_of_the_run() {
        let mut timeline = Timeline::new(1);
        timeline.add(0, Some(bucket(0, 10, 100)), 1);
        timeline.add(0, Some(bucket(1, 10, 100)), 2);
        timeline.add(0, Some(bucket(2, 5, 100)), u64::MAX);
        let points = timeline.finish(Duration::from_millis(2500));
        assert_eq!(
            points.iter().map(|p| p.duration_s).collect::<Vec<_>>(),
            vec![1.0, 1.0, 0.5]
        );
    }

    #[test]
    fn merge_adds_everything() {
        let mut a = Stats::default();
        let mut b = Stats::default();
        a.requests = 2;
        a.status[200] = 2;
        record_us(&mut a.latency, 10);
        b.requests = 1;
        b.status[200] = 1;
        b.errors[ErrorKind::Timeout as usize] = 4;
        b.examples[2] = Some("x".into());
        record_us(&mut b.latency, 0);
        a.merge(&b);
        assert_eq!((a.requests, a.status[200], a.total_errors()), (3, 3, 4));
        assert_eq!(a.latency.len(), 2);
        assert_eq!(a.latency.min(), 1);
        assert_eq!(a.examples[2].as_deref(), Some("x"));
    }
}
