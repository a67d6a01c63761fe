//! What the threads of one run share with each other and with the main
//! thread: the stop flag, the `-n` budget of the closed loop, the progress
//! counters, and the messages that carry finished timeline seconds.
//!
//! Owns only these types; the rules for what is counted live in `tally`.

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;

use crate::stats::SecondBucket;

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

/// Builds the shared state for `threads` threads.
pub fn shared(threads: usize) -> Arc<Shared> {
    Arc::new(Shared {
        stop: AtomicBool::new(false),
        issued: AtomicU64::new(0),
        progress: (0..threads).map(|_| Progress::default()).collect(),
    })
}
