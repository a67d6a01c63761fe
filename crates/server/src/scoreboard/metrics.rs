//! Request counters and histograms in the scoreboard, for `/metrics` and `/status.json`.
//!
//! Each app thread's sub-slot has a [`RequestMetrics`] block that only that thread writes, so
//! a request's counts are plain loads and stores to a line no other core writes (no locked
//! instruction: 4 adds per request, about 10 instructions with the bucket searches). The
//! responses the server writes itself (400, 408, 413, 414, 431, 503), from the loop or from
//! a slot, go to one block per worker slot with locked adds (`fetch_add`): they are rare.
//! When the master reaps a worker it folds the worker's blocks into the retired totals
//! ([`super::Retired`]) under a sequence counter, so the totals a reader computes only grow.
//!
//! A request is counted when its response is complete in the server's hands and before its
//! last byte is written (`Exchange::count_request`): a client that has its response and asks
//! the status listener sees it counted.

use std::sync::atomic::{AtomicU64, Ordering};

/// The methods counted by name: RFC 9110's registered set (section 9, and PATCH from RFC
/// 5789); any other token counts as `OTHER`, so the label set stays bounded.
pub const METHODS: [&str; 10] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH", "OTHER",
];

/// The status classes counted (a status outside 100-599 cannot be sent).
pub const STATUS_CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// Upper bounds (inclusive, µs) of the request duration buckets; one more bucket, `+Inf`,
/// holds the rest. Prometheus' default buckets (5 ms to 10 s) start too high for a server
/// whose own cost is a few µs: these start at 100 µs.
pub const DURATION_BOUNDS_US: [u64; 16] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000,
];

/// Upper bounds (inclusive, µs) of the queue wait buckets (request read to app start): a
/// hand-off to a free app thread is a few µs; a wait behind busy threads, ms and more.
pub const WAIT_BOUNDS_US: [u64; 16] = [
    10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000,
    500_000, 1_000_000,
];

/// Buckets per histogram (the bounds and `+Inf`).
pub const BUCKETS: usize = DURATION_BOUNDS_US.len() + 1;

const CELLS: usize = METHODS.len() * STATUS_CLASSES.len();

/// The index of `method` in [`METHODS`] (`OTHER` for an unregistered one; methods are
/// case-sensitive, RFC 9110 9.1).
pub fn method_index(method: &[u8]) -> usize {
    match method {
        b"GET" => 0,
        b"HEAD" => 1,
        b"POST" => 2,
        b"PUT" => 3,
        b"DELETE" => 4,
        b"CONNECT" => 5,
        b"OPTIONS" => 6,
        b"TRACE" => 7,
        b"PATCH" => 8,
        _ => 9,
    }
}

/// The index of `status`'s class in [`STATUS_CLASSES`] (clamped to 1xx..5xx).
pub fn class_index(status: u16) -> usize {
    (usize::from(status / 100)).clamp(1, 5) - 1
}

fn bucket(bounds: &[u64; 16], value: u64) -> usize {
    bounds.partition_point(|&bound| bound < value)
}

/// One block of counters: requests by method and status class, and two histograms with
/// their sums. `#[repr(C)]`, 64-byte aligned, 11 cache lines.
#[repr(C, align(64))]
pub struct RequestMetrics {
    requests: [AtomicU64; CELLS],
    duration: [AtomicU64; BUCKETS],
    duration_sum_us: AtomicU64,
    wait: [AtomicU64; BUCKETS],
    wait_sum_us: AtomicU64,
    _pad: [AtomicU64; 2],
}

/// A sum of blocks, for readers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MetricsReading {
    /// Requests by `[method][class]` (indices of [`METHODS`] and [`STATUS_CLASSES`]).
    pub requests: [[u64; 5]; 10],
    /// Requests per duration bucket (not cumulative; the last is `+Inf`).
    pub duration: [u64; BUCKETS],
    /// Sum of the request durations, µs.
    pub duration_sum_us: u64,
    /// Requests per queue wait bucket (not cumulative; the last is `+Inf`).
    pub wait: [u64; BUCKETS],
    /// Sum of the queue waits, µs.
    pub wait_sum_us: u64,
}

impl MetricsReading {
    /// Every request counted.
    pub fn total(&self) -> u64 {
        self.requests.iter().flatten().sum()
    }

    /// Requests of status class `class` (an index of [`STATUS_CLASSES`]).
    pub fn by_class(&self, class: usize) -> u64 {
        self.requests.iter().map(|row| row[class]).sum()
    }
}

/// What a request is counted by when its response is complete (its duration is observed
/// when it ends: [`RequestMetrics::observe_duration_owned`]).
#[derive(Clone, Copy, Debug)]
pub struct Counted {
    /// Index in [`METHODS`].
    pub method: usize,
    /// Index in [`STATUS_CLASSES`].
    pub class: usize,
    /// Request read to app start, µs.
    pub wait_us: u64,
}

impl Counted {
    /// The figures of a request: `method` and `status` as sent.
    pub fn new(method: &[u8], status: u16, wait_us: u64) -> Self {
        Counted {
            method: method_index(method),
            class: class_index(status),
            wait_us,
        }
    }
}

/// Adds `n` to a counter only one thread writes: a load and a store, no locked instruction.
fn bump(counter: &AtomicU64, n: u64) {
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(n),
        Ordering::Relaxed,
    );
}

impl RequestMetrics {
    /// Owner (the one thread that writes this block): counts one request (its duration
    /// follows when it ends).
    pub fn record_owned(&self, counted: Counted) {
        bump(&self.requests[counted.method * 5 + counted.class], 1);
        bump(&self.wait[bucket(&WAIT_BOUNDS_US, counted.wait_us)], 1);
        bump(&self.wait_sum_us, counted.wait_us);
    }

    /// Owner: observes the duration of a request it counted, when the request ends.
    pub fn observe_duration_owned(&self, duration_us: u64) {
        bump(&self.duration[bucket(&DURATION_BOUNDS_US, duration_us)], 1);
        bump(&self.duration_sum_us, duration_us);
    }

    /// Any thread: counts one request and its duration with locked adds (for a block several
    /// threads write).
    pub fn record_shared(&self, counted: Counted, duration_us: u64) {
        let add = |counter: &AtomicU64, n: u64| counter.fetch_add(n, Ordering::Relaxed);
        add(&self.requests[counted.method * 5 + counted.class], 1);
        add(&self.duration[bucket(&DURATION_BOUNDS_US, duration_us)], 1);
        add(&self.duration_sum_us, duration_us);
        add(&self.wait[bucket(&WAIT_BOUNDS_US, counted.wait_us)], 1);
        add(&self.wait_sum_us, counted.wait_us);
    }

    fn cells(&self) -> impl Iterator<Item = &AtomicU64> {
        self.requests
            .iter()
            .chain(self.duration.iter())
            .chain(std::iter::once(&self.duration_sum_us))
            .chain(self.wait.iter())
            .chain(std::iter::once(&self.wait_sum_us))
    }

    /// Adds this block to `into`.
    pub fn add_to(&self, into: &mut MetricsReading) {
        for (cell, counter) in into.requests.iter_mut().flatten().zip(self.requests.iter()) {
            *cell += counter.load(Ordering::Relaxed);
        }
        for (cell, counter) in into.duration.iter_mut().zip(self.duration.iter()) {
            *cell += counter.load(Ordering::Relaxed);
        }
        for (cell, counter) in into.wait.iter_mut().zip(self.wait.iter()) {
            *cell += counter.load(Ordering::Relaxed);
        }
        into.duration_sum_us += self.duration_sum_us.load(Ordering::Relaxed);
        into.wait_sum_us += self.wait_sum_us.load(Ordering::Relaxed);
    }

    /// Master, for a reaped worker's block: adds it to `totals` and zeroes it.
    pub fn fold_into(&self, totals: &RequestMetrics) {
        for (from, to) in self.cells().zip(totals.cells()) {
            to.fetch_add(from.swap(0, Ordering::Relaxed), Ordering::Relaxed);
        }
    }

    /// Zeroes every counter.
    pub fn reset(&self) {
        for cell in self.cells() {
            cell.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zeroed() -> Box<RequestMetrics> {
        // SAFETY: every field is an atomic integer, for which all-zero bytes are valid.
        unsafe { Box::new(std::mem::zeroed()) }
    }

    #[test]
    fn the_block_is_eleven_cache_lines() {
        assert_eq!(std::mem::size_of::<RequestMetrics>(), 11 * 64);
    }

    #[test]
    fn methods_outside_the_registered_set_count_as_other() {
        for (index, name) in METHODS.iter().enumerate().take(9) {
            assert_eq!(method_index(name.as_bytes()), index);
        }
        assert_eq!(METHODS[method_index(b"PROPFIND")], "OTHER");
        assert_eq!(METHODS[method_index(b"get")], "OTHER");
        assert_eq!(METHODS[method_index(b"")], "OTHER");
    }

    #[test]
    fn statuses_fall_in_their_class() {
        let classes: Vec<_> = [100, 101, 200, 204, 299, 301, 404, 431, 500, 503, 599]
            .iter()
            .map(|&status| STATUS_CLASSES[class_index(status)])
            .collect();
        assert_eq!(
            classes,
            ["1xx", "1xx", "2xx", "2xx", "2xx", "3xx", "4xx", "4xx", "5xx", "5xx", "5xx"]
        );
    }

    #[test]
    fn a_value_on_a_bound_falls_in_that_bucket() {
        assert_eq!(bucket(&DURATION_BOUNDS_US, 0), 0);
        assert_eq!(bucket(&DURATION_BOUNDS_US, 100), 0);
        assert_eq!(bucket(&DURATION_BOUNDS_US, 101), 1);
        assert_eq!(bucket(&DURATION_BOUNDS_US, 10_000_000), 15);
        assert_eq!(bucket(&DURATION_BOUNDS_US, 10_000_001), 16);
        assert_eq!(bucket(&WAIT_BOUNDS_US, 11), 1);
    }

    #[test]
    fn owned_and_shared_records_add_up_and_fold_into_the_totals() {
        let worker = zeroed();
        let server = zeroed();
        let retired = zeroed();
        worker.record_owned(Counted::new(b"GET", 200, 3));
        worker.observe_duration_owned(150);
        worker.record_owned(Counted::new(b"GET", 404, 2_000_000));
        worker.observe_duration_owned(20_000_000);
        server.record_shared(Counted::new(b"BREW", 400, 0), 0);
        let mut reading = MetricsReading::default();
        worker.add_to(&mut reading);
        server.add_to(&mut reading);
        assert_eq!(reading.total(), 3);
        assert_eq!(reading.requests[0][1], 1);
        assert_eq!(reading.requests[0][3], 1);
        assert_eq!(reading.requests[9][3], 1);
        assert_eq!(reading.by_class(3), 2);
        assert_eq!(reading.duration[1], 1);
        assert_eq!(reading.duration[16], 1);
        assert_eq!(reading.duration[0], 1);
        assert_eq!(reading.duration_sum_us, 20_000_150);
        assert_eq!((reading.wait[0], reading.wait[16]), (2, 1));
        assert_eq!(reading.wait_sum_us, 2_000_003);

        worker.fold_into(&retired);
        server.fold_into(&retired);
        let mut after = MetricsReading::default();
        worker.add_to(&mut after);
        assert_eq!(after, MetricsReading::default());
        retired.add_to(&mut after);
        assert_eq!(after, reading);
    }
}
