//! One reading of the scoreboard, taken per status request and rendered as JSON, HTML or
//! Prometheus text; and the history of request totals behind the rates over 1, 5 and 15
//! minutes.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;

use crate::scoreboard::{
    monotonic_ns, now_ms, ExitReading, ExitReason, SlotReading, ThreadReading, Totals, WorkerState,
};
use crate::Scoreboard;

/// The windows of the request rates, in seconds (as a load average's).
pub const RATE_WINDOWS_S: [u64; 3] = [60, 300, 900];

/// How often the request total is sampled for the rates.
pub const SAMPLE_EVERY_MS: u64 = 5_000;

/// The request totals sampled every [`SAMPLE_EVERY_MS`] over the longest window: a rate over
/// a window is the growth from the oldest sample inside it to now. The status process keeps
/// it: a status process started again starts a new history (the rates then cover its life).
#[derive(Debug, Default)]
pub struct History {
    /// (CLOCK_MONOTONIC ms, requests), oldest first.
    samples: VecDeque<(u64, u64)>,
}

impl History {
    /// Whether a sample is due at `now_ms` (none was taken within the sampling period).
    pub fn due(&self, now_ms: u64) -> bool {
        self.samples
            .back()
            .is_none_or(|&(at, _)| now_ms >= at + SAMPLE_EVERY_MS)
    }

    /// Takes a sample at `now_ms` (monotonic) of `requests`, unless one was taken within the
    /// sampling period; forgets those older than the longest window.
    pub fn sample(&mut self, now_ms: u64, requests: u64) {
        if !self.due(now_ms) {
            return;
        }
        self.samples.push_back((now_ms, requests));
        let longest = RATE_WINDOWS_S[RATE_WINDOWS_S.len() - 1] * 1000;
        while self
            .samples
            .front()
            .is_some_and(|&(at, _)| at + longest < now_ms)
        {
            self.samples.pop_front();
        }
    }

    /// Requests per second over the last `window_s` seconds, from the oldest sample inside
    /// the window (over less when the history is younger); 0 with no sample a second old.
    pub fn rate(&self, now_ms: u64, requests: u64, window_s: u64) -> f64 {
        let since = now_ms.saturating_sub(window_s * 1000);
        let Some(&(at, then)) = self.samples.iter().find(|&&(at, _)| at >= since) else {
            return 0.0;
        };
        let span = now_ms.saturating_sub(at);
        if span < 1000 {
            return 0.0;
        }
        requests.saturating_sub(then) as f64 * 1000.0 / span as f64
    }
}

/// One live worker.
pub struct WorkerView {
    /// Its slot.
    pub index: usize,
    /// The slot's fields.
    pub slot: SlotReading,
    /// Its app threads' sub-slots.
    pub threads: Vec<ThreadReading>,
    /// The exit of the worker this slot held before, if the ring still has it.
    pub last_exit: Option<ExitReading>,
}

/// Everything a status page shows, read at one moment.
pub struct Snapshot {
    /// The master's pid.
    pub master_pid: u32,
    /// The current generation.
    pub generation: u32,
    /// The MPM.
    pub mpm: String,
    /// The master began to stop.
    pub stopping: bool,
    /// Wall clock now, ms since the Unix epoch.
    pub now_ms: u64,
    /// CLOCK_MONOTONIC now, ns (the sub-slots' clock).
    pub now_mono_ns: u64,
    /// Seconds since the master started.
    pub uptime_s: f64,
    /// Totals since the master started.
    pub totals: Totals,
    /// Requests per second over [`RATE_WINDOWS_S`].
    pub rates: [f64; 3],
    /// Live workers, by slot.
    pub workers: Vec<WorkerView>,
    /// Every slot's state, in slot order (free ones too).
    pub states: Vec<WorkerState>,
    /// Recent worker exits, newest first.
    pub exits: Vec<ExitReading>,
    /// How much of a request target is shown.
    pub shown: Shown,
}

/// How much of a request target the status output shows (`status_show_query`,
/// `status_redact_paths`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shown {
    /// The target as received.
    Whole,
    /// The path, its query replaced by `?...` (the default: a query may carry tokens).
    WithoutQuery,
    /// `-`: only the method is shown (a path may name a customer or carry a token too).
    Nothing,
}

impl Snapshot {
    /// Reads the scoreboard now (and samples the history).
    pub fn take(board: &Scoreboard, mpm: &str, shown: Shown, history: &mut History) -> Self {
        let header = board.header();
        let now = now_ms();
        let now_mono_ns = monotonic_ns();
        let started = header.started_ms.load(Ordering::Relaxed);
        let totals = board.totals();
        let requests = totals.metrics.total();
        let now_mono_ms = now_mono_ns / 1_000_000;
        history.sample(now_mono_ms, requests);
        let rates = RATE_WINDOWS_S.map(|window| history.rate(now_mono_ms, requests, window));
        let exits = board.recent_exits();
        let mut workers = Vec::new();
        let mut states = Vec::with_capacity(board.len());
        for index in 0..board.len() {
            let Some(slot) = board.read(index) else {
                continue;
            };
            states.push(if slot.pid == 0 {
                WorkerState::Free
            } else {
                slot.state
            });
            if slot.pid == 0 {
                continue;
            }
            workers.push(WorkerView {
                index,
                slot,
                threads: board.read_threads(index),
                last_exit: exits
                    .iter()
                    .find(|exit| exit.slot as usize == index)
                    .copied(),
            });
        }
        Snapshot {
            master_pid: header.master_pid.load(Ordering::Acquire),
            generation: header.generation.load(Ordering::Relaxed),
            mpm: mpm.to_owned(),
            stopping: header.stopping.load(Ordering::Acquire) != 0,
            now_ms: now,
            now_mono_ns,
            uptime_s: now.saturating_sub(started) as f64 / 1000.0,
            totals,
            rates,
            workers,
            states,
            exits,
            shown,
        }
    }

    /// Open HTTP/1.1 connections with no request in the app nor waiting for an app thread
    /// (idle keep-alive, or being read). An HTTP/2 connection is counted by its streams instead ([`Totals::h2_streams`]):
    /// the requests in flight on them (at most its open streams) are not taken from the
    /// HTTP/1.1 connections, and which of them have no stream open is not known.
    ///
    /// [`Totals::h2_streams`]: crate::scoreboard::Totals::h2_streams
    pub fn idle_connections(&self) -> u64 {
        let totals = &self.totals;
        let http1 = totals.connections.saturating_sub(totals.h2_connections);
        let http1_in_flight = totals.in_flight.saturating_sub(totals.h2_streams);
        http1
            .saturating_sub(http1_in_flight)
            .saturating_sub(totals.queued)
    }

    /// How long the longest-waiting queued request has waited for an app thread, ms (0: none
    /// waits); `since_ns` a [`crate::scoreboard::Slot::queued_since_ns`] reading.
    pub fn queued_wait_ms(&self, since_ns: u64) -> f64 {
        if since_ns == 0 {
            return 0.0;
        }
        self.now_mono_ns.saturating_sub(since_ns) as f64 / 1e6
    }

    /// The mean time a client saw per request counted, ms: the queue wait (request read to
    /// an app thread taking it) plus the duration (from there to the last byte handed to the
    /// socket). The duration alone leaves out the wait, which is most of the time under
    /// load.
    pub fn mean_response_ms(&self) -> f64 {
        let metrics = &self.totals.metrics;
        if metrics.total() == 0 {
            return 0.0;
        }
        (metrics.duration_sum_us + metrics.wait_sum_us) as f64 / metrics.total() as f64 / 1000.0
    }

    /// How long the request on `thread` has run, ms.
    pub fn elapsed_ms(&self, thread: &ThreadReading) -> f64 {
        self.now_mono_ns.saturating_sub(thread.dispatch_ns) as f64 / 1e6
    }

    /// A request target as shown ([`Shown`]).
    pub fn shown_target(&self, target: &[u8]) -> Vec<u8> {
        match (self.shown, target.iter().position(|&b| b == b'?')) {
            (Shown::Nothing, _) => b"-".to_vec(),
            (Shown::WithoutQuery, Some(at)) => {
                let mut shown = target[..at].to_vec();
                shown.extend_from_slice(b"?...");
                shown
            }
            _ => target.to_vec(),
        }
    }
}

/// The restart reasons `/metrics` and `/status.json` count workers by: the scoreboard's
/// exit reasons, a death by a signal the master did not send counted as a crash, and a spare
/// worker retired as `retire`; a worker that exited 0 on its own with no reason, `exit`.
pub fn restart_reason(reason: ExitReason) -> &'static str {
    match reason {
        ExitReason::Crash | ExitReason::Signal => "crash",
        ExitReason::IdleRetire => "retire",
        ExitReason::None => "exit",
        other => other.name(),
    }
}

/// Every restart reason label, in a fixed order.
pub const RESTART_REASONS: [&str; 9] = [
    "crash",
    "max_requests",
    "memory",
    "cpu_limit",
    "request_timeout",
    "boot_timeout",
    "retire",
    "reload",
    "stop",
];

/// Workers reaped, by restart reason (in [`RESTART_REASONS`] order, then `exit`).
pub fn restarts(totals: &Totals) -> Vec<(&'static str, u64)> {
    let mut counts: Vec<(&'static str, u64)> = RESTART_REASONS
        .iter()
        .chain(std::iter::once(&"exit"))
        .map(|&name| (name, 0))
        .collect();
    for reason in ExitReason::ALL {
        let label = restart_reason(*reason);
        if let Some(entry) = counts.iter_mut().find(|(name, _)| *name == label) {
            entry.1 += totals.exits[*reason as usize];
        }
    }
    counts
}

/// What a wait status says: `("signal", n)` or `("exit_code", n)`.
pub fn wait_status_parts(status: i32) -> (&'static str, i32) {
    if libc::WIFSIGNALED(status) {
        ("signal", libc::WTERMSIG(status))
    } else {
        ("exit_code", libc::WEXITSTATUS(status))
    }
}

/// The one-character state of a slot for the map (Apache's server-status letters where the
/// states match).
pub fn state_char(state: WorkerState) -> char {
    match state {
        WorkerState::Free => '.',
        WorkerState::Booting => 'S',
        WorkerState::Idle => '_',
        WorkerState::Busy => 'W',
        WorkerState::Stopping => 'G',
        WorkerState::Reading => 'R',
        WorkerState::KeepAlive => 'K',
        WorkerState::Standby => 'P',
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_the_growth_over_each_window() {
        let mut history = History::default();
        history.sample(0, 0);
        history.sample(1_000, 5); // within the sampling period: not kept
        for step in 1..=200u64 {
            // 10 requests a second for 1000 s, sampled every 5 s.
            history.sample(step * 5_000, step * 50);
        }
        let now = 200 * 5_000;
        let requests = 200 * 50;
        for window in RATE_WINDOWS_S {
            assert_eq!(history.rate(now, requests, window), 10.0);
        }
        // The history keeps only what the longest window needs.
        assert!(history.samples.len() <= 900 / 5 + 2);
        assert_eq!(History::default().rate(now, 1, 60), 0.0);
    }

    #[test]
    fn a_young_history_gives_the_rate_over_its_life() {
        let mut history = History::default();
        history.sample(10_000, 100);
        assert_eq!(history.rate(14_000, 140, 60), 10.0);
        assert_eq!(history.rate(10_500, 140, 60), 0.0);
    }

    #[test]
    fn a_killed_worker_is_a_crash_and_every_reason_has_a_label() {
        assert_eq!(restart_reason(ExitReason::Signal), "crash");
        assert_eq!(restart_reason(ExitReason::IdleRetire), "retire");
        for reason in ExitReason::ALL {
            let label = restart_reason(*reason);
            assert!(
                label == "exit" || RESTART_REASONS.contains(&label),
                "{label}"
            );
        }
        let mut totals = Totals::default();
        totals.exits[ExitReason::Signal as usize] = 2;
        totals.exits[ExitReason::Crash as usize] = 1;
        assert_eq!(restarts(&totals)[0], ("crash", 3));
        assert_eq!(wait_status_parts(9), ("signal", 9));
        assert_eq!(wait_status_parts(3 << 8), ("exit_code", 3));
    }
}
