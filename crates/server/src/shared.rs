//! The state every slot of a worker shares: the settings, the listeners' addresses, the
//! access log, the scoreboard slot and the stop/recycle flags with the request counters that
//! drive them.
//!
//! It sits below the reactor, the exchange and the MPMs, which all read it; it must not
//! depend on any of them (nor run anything: it is data and counters).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::access_log::AccessLog;
use crate::compress::{Coding, Decision};
use crate::config::WorkerConfig;
use crate::connection::Lent;
use crate::control::StopReason;
use crate::listener::Local;
use crate::rate_limit::{ClientConnections, Found, RateLimiter, RateTable, Refusal, Verdict};
use crate::scoreboard::thread::monotonic_ns_of;
use crate::scoreboard::{Counted, ExitReason, Scoreboard, Slot, ThreadSlot, WorkerState};
use crate::spool::Buffers;
use std::time::Instant;

/// What every slot of a worker shares (read-mostly).
pub struct WorkerShared {
    /// The worker's settings.
    pub config: WorkerConfig,
    /// The address of each listener, by listener index.
    pub locals: Vec<Local>,
    /// The access log, when enabled.
    pub access_log: Option<AccessLog>,
    /// The worker's buffer budgets and temporary files (request bodies read before dispatch,
    /// response output handed to the poller).
    pub buffers: Arc<Buffers>,
    scoreboard: Arc<Scoreboard>,
    slot: usize,
    stopping: AtomicBool,
    recycle: AtomicBool,
    /// Requests left before recycling (`u64::MAX` when `max_requests` is off).
    budget: AtomicU64,
    /// The worker serves on one thread ([`WorkerConfig::serves_on_one_thread`]): its slot's
    /// counters take a plain load and store instead of a locked add (see
    /// [`WorkerShared::add`]).
    one_thread: bool,
    /// Called once, when the worker's set-up is complete (see [`crate::WorkerSpec::on_ready`]).
    pub(crate) on_ready: Mutex<Option<ReadyHook>>,
    /// Called when the worker starts draining by its own decision.
    on_draining: Option<DrainingHook>,
    /// The draining hook ran (it runs once: at the dispatch of the budget's last request, or
    /// at the stop).
    draining_announced: AtomicBool,
    /// The rate limits' check (ADR 0038); None when no limit is set: one branch per request.
    rate_limiter: Option<RateLimiter>,
    /// Every worker's per-client connection counts (`max_connections_per_client`; ADR 0038).
    pub(crate) client_connections: Option<Arc<ClientConnections>>,
    /// How often a body refused 413 is logged ([`WorkerShared::log_too_large`]): locked
    /// only by a refusal.
    too_large_log: Mutex<crate::log::LineThrottle>,
}

/// The longest part of a refused request's target its 413 line quotes.
const QUOTED_TARGET: usize = 200;

/// How a request's body was found over `max_body_size`, for its error-log line.
#[derive(Clone, Copy)]
pub(crate) enum Oversize {
    /// Its `Content-Length` (refused 413 before any of it is read).
    Announced(u64),
    /// A chunked body that grew past the limit while the server read it (refused 413).
    Chunked,
    /// A chunked body on `stream_body_paths` that grew past the limit while the app read it:
    /// the read failed, and the response is 413 unless the app answers otherwise.
    Streamed,
}

/// What [`WorkerShared::log_too_large`] logs for a refusal at `now` (`line` made only then):
/// `None` while `throttle` holds it back, else the line, with the count of those held back
/// since the previous one. Apart, so that the rate and the count are tested with made-up
/// times, not by racing the clock.
fn too_large_line(
    throttle: &mut crate::log::LineThrottle,
    now: Instant,
    line: impl FnOnce() -> String,
) -> Option<String> {
    let held_back = throttle.note(now)?;
    let line = line();
    Some(if held_back == 0 {
        line
    } else {
        let s = if held_back == 1 { "" } else { "s" };
        format!("{line} ({held_back} more such refusal{s} since the last such line, not logged)")
    })
}

/// The error-log line of a request whose body is over `max_body_size` (`limit` bytes): it
/// names the request, the limit and the setting that sets it.
pub(crate) fn max_body_size_line(
    method: &[u8],
    target: &[u8],
    oversize: Oversize,
    limit: u64,
) -> String {
    let request = format!(
        "{} {}",
        String::from_utf8_lossy(method),
        String::from_utf8_lossy(&target[..target.len().min(QUOTED_TARGET)]).escape_debug(),
    );
    let over = format!("over max_body_size ({limit} bytes)");
    let fix = "raise max_body_size (--max-body-size) to accept such bodies";
    match oversize {
        Oversize::Announced(length) => {
            format!(
                "413 for {request}: its body of {length} bytes (Content-Length) is {over}; {fix}"
            )
        }
        Oversize::Chunked => format!("413 for {request}: its chunked body is {over}; {fix}"),
        Oversize::Streamed => format!(
            "{request}: its chunked body went {over} as the app read it (stream_body_paths): \
             the read failed, 413 unless the app answers otherwise; {fix}"
        ),
    }
}

/// What a worker runs once it can serve (e.g. telling its master it is ready).
pub type ReadyHook = Box<dyn FnOnce() + Send>;

/// What a worker runs when it starts draining by its own decision (e.g. telling its master,
/// which starts the replacement at once), with the reason.
pub type DrainingHook = Box<dyn Fn(StopReason) + Send + Sync>;

impl WorkerShared {
    pub(crate) fn new(
        config: WorkerConfig,
        locals: Vec<Local>,
        access_log: Option<AccessLog>,
        scoreboard: Arc<Scoreboard>,
        slot: usize,
        budget: u64,
        on_draining: Option<DrainingHook>,
    ) -> WorkerShared {
        WorkerShared {
            one_thread: config.serves_on_one_thread(),
            buffers: Arc::new(Buffers::new(&config)),
            config,
            locals,
            access_log,
            scoreboard,
            slot,
            stopping: AtomicBool::new(false),
            recycle: AtomicBool::new(false),
            budget: AtomicU64::new(budget),
            on_ready: Mutex::new(None),
            on_draining,
            draining_announced: AtomicBool::new(false),
            rate_limiter: None,
            client_connections: None,
            too_large_log: Mutex::default(),
        }
    }

    /// Logs a request answered 413 for a body over a limit (`line`, made only when it is
    /// written): one warning, at most one a second per worker whichever thread refuses, the
    /// next one saying how many were held back (a client retrying a large upload, or a flood,
    /// must not bury the log). Only a refusal calls it: a request within the limits pays
    /// nothing.
    pub(crate) fn log_too_large(&self, line: impl FnOnce() -> String) {
        let now = Instant::now();
        let logged = match self.too_large_log.lock() {
            Ok(mut throttle) => too_large_line(&mut throttle, now, line),
            Err(poisoned) => too_large_line(&mut poisoned.into_inner(), now, line),
        };
        if let Some(logged) = logged {
            crate::log::warning(&logged);
        }
    }

    /// Gives the worker the shared rate-limit table and connection counts (the master's,
    /// inherited at the fork): its requests and connections are checked from now on when the
    /// settings limit any.
    pub(crate) fn with_rate_limits(
        mut self,
        table: Option<Arc<RateTable>>,
        connections: Option<Arc<ClientConnections>>,
    ) -> WorkerShared {
        self.rate_limiter =
            table.and_then(|table| RateLimiter::new(&self.config.rate_limit, table));
        self.client_connections = connections.filter(|counts| self.slot < counts.slots());
        self
    }

    /// This worker's scoreboard slot.
    pub(crate) fn slot_index(&self) -> usize {
        self.slot
    }

    /// Counts the request head in `lent` against the rate limits, once per request (the loop
    /// before it reads the body, marking `lent`; a slot for a head the loop did not see): the
    /// refusal when the client is over its limit (its `429` is the caller's to write). Off:
    /// one branch.
    #[inline]
    pub(crate) fn rate_refusal(&self, lent: &mut Lent, now: Instant) -> Option<Refusal> {
        let limiter = self.rate_limiter.as_ref()?;
        self.check_rate(limiter, lent, now)
    }

    fn check_rate(&self, limiter: &RateLimiter, lent: &mut Lent, now: Instant) -> Option<Refusal> {
        lent.rate_counted = true;
        let client = lent.client_ip(&self.config.trusted_proxies);
        let target = lent.head.target.of(&lent.buf);
        let (refusal, found) = match limiter.check(client, target, monotonic_ns_of(now)) {
            Verdict::Pass(found) => (None, found),
            Verdict::Limited(refusal, found) => (Some(refusal), Some(found)),
        };
        match found {
            Some(Found::New) => {
                self.scoreboard
                    .header()
                    .rate_entries
                    .fetch_add(1, Ordering::Relaxed);
            }
            Some(Found::Evicted) => self.add(&self.slot().rate_evictions, 1),
            _ => {}
        }
        if refusal.is_some() {
            self.add(&self.slot().rate_limited, 1);
        }
        refusal
    }

    /// Runs the draining hook, if any, the first time only: when the budget's last request
    /// is dispatched ([`WorkerShared::request_started`]), or when the reactor starts a stop it
    /// decided itself.
    pub(crate) fn announce_draining(&self, reason: StopReason) {
        if let Some(hook) = &self.on_draining {
            if !self.draining_announced.swap(true, Ordering::Relaxed) {
                hook(reason);
            }
        }
    }

    /// Runs the ready hook, the first time only: the MPM calls this when its loop starts,
    /// after the listeners, the signal control, the access log and the app threads are set up.
    pub(crate) fn announce_ready(&self) {
        let hook = self
            .on_ready
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .take();
        if let Some(hook) = hook {
            hook();
        }
    }

    /// Counts a compressed response whose body was finished (ADR 0037): its coding, and its
    /// body's bytes before (`app_bytes`) and after (`coded_bytes`) compression. Only the
    /// compressed path calls it.
    #[cold]
    pub(crate) fn count_compressed(&self, coding: Coding, app_bytes: u64, coded_bytes: u64) {
        let counters = &self.slot().compression;
        let by_coding = match coding {
            Coding::Gzip => 0,
            Coding::Brotli => 1,
            Coding::Zstd => 2,
        };
        self.add(&counters[by_coding], 1);
        self.add(&counters[3], app_bytes);
        self.add(&counters[4], coded_bytes);
    }

    /// Counts an app response compression (on) left as it is: by a rule
    /// ([`Decision::Identity`]), or as the client accepted no coding offered
    /// ([`Decision::VaryOnly`]). A compressed one is counted when its body ends.
    #[cold]
    pub(crate) fn count_left_uncompressed(&self, decision: Decision) {
        let counters = &self.slot().compression;
        match decision {
            Decision::Identity => self.add(&counters[5], 1),
            Decision::VaryOnly => self.add(&counters[6], 1),
            Decision::Compress(_) => {}
        }
    }

    /// Counts a request answered on app thread `thread` (its own counters: plain stores)
    /// and the `received` bytes it came in.
    pub(crate) fn count_request(&self, thread: usize, counted: Counted, received: u64) {
        if let Some(metrics) = self.scoreboard.thread_metrics(self.slot, thread) {
            metrics.record_owned(counted);
        }
        if received > 0 {
            self.add(&self.slot().bytes_in, received);
        }
    }

    /// Counts a response of `sent` bytes the server wrote itself (a refused or timed-out
    /// request) that took `duration_us`, from any thread of the worker, and the `received`
    /// bytes of the request.
    pub(crate) fn count_server_response(
        &self,
        counted: Counted,
        duration_us: u64,
        received: u64,
        sent: u64,
    ) {
        if let Some(metrics) = self.scoreboard.server_metrics(self.slot) {
            metrics.record_shared(counted, duration_us);
        }
        let slot = self.slot();
        if received > 0 {
            self.add(&slot.bytes_in, received);
        }
        self.add(&slot.bytes_out, sent);
    }

    /// True once the worker is draining: responses close their connections.
    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }

    pub(crate) fn set_stopping(&self) {
        self.stopping.store(true, Ordering::Relaxed);
        self.slot()
            .state
            .store(WorkerState::Stopping as u32, Ordering::Relaxed);
    }

    /// This worker's scoreboard slot.
    pub fn slot(&self) -> &Slot {
        self.scoreboard
            .slot(self.slot)
            .expect("worker slot index checked at start")
    }

    /// The whole scoreboard (for the fair-share accept throttle).
    pub fn scoreboard(&self) -> &Scoreboard {
        &self.scoreboard
    }

    /// App thread `thread`'s sub-slot (`None` past the scoreboard's threads per slot, which
    /// `run_worker` rules out).
    pub fn thread_slot(&self, thread: usize) -> Option<&ThreadSlot> {
        self.scoreboard.thread_slot(self.slot, thread)
    }

    /// Adds `n` to one of the slot's counters. The master only reads them while the worker
    /// lives, so a worker on one thread, whose writes come one at a time, loads and stores;
    /// one with app threads adds atomically.
    ///
    /// Why: a locked add costs about 20 cycles here and waits for the stores before it to
    /// drain (perf's samples pile up behind each), and a request made five of them on
    /// counters no other thread writes.
    fn add(&self, counter: &AtomicU64, n: u64) {
        if self.one_thread {
            counter.store(
                counter.load(Ordering::Relaxed).wrapping_add(n),
                Ordering::Relaxed,
            );
        } else {
            counter.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// [`WorkerShared::add`] for the `active` count, by `delta`; returns the old value.
    fn add_active(&self, counter: &AtomicU32, delta: i32) -> u32 {
        if self.one_thread {
            let old = counter.load(Ordering::Relaxed);
            counter.store(old.wrapping_add_signed(delta), Ordering::Relaxed);
            old
        } else if delta >= 0 {
            counter.fetch_add(delta.unsigned_abs(), Ordering::Relaxed)
        } else {
            counter.fetch_sub(delta.unsigned_abs(), Ordering::Relaxed)
        }
    }

    /// Records the dispatch of a request to app thread `thread`: the slot's `active` count
    /// (one add on the slot's line, see [`WorkerShared::add`]) and the thread's sub-slot
    /// ([`ThreadSlot::begin_request_at`]: plain stores) at `now`; `tls`: its connection
    /// speaks TLS.
    pub(crate) fn request_started(
        &self,
        thread: usize,
        method: &[u8],
        target: &[u8],
        fd: i32,
        tls: bool,
        now: Instant,
    ) {
        let slot = self.slot();
        if let Some(thread_slot) = self.thread_slot(thread) {
            thread_slot.begin_request_at(method, target, fd, tls, monotonic_ns_of(now));
        }
        if self.add_active(&slot.active, 1) == 0 && !self.is_stopping() {
            slot.state
                .store(WorkerState::Busy as u32, Ordering::Relaxed);
        }
    }

    /// The request just started goes to the app (or gets the server's own refusal): it spends
    /// the `max_requests` budget, unlike a static answer (ADR 0036). When it is the budget's
    /// last, the master starts the replacement (promotes a standby) while this one runs, not
    /// after its response (with `max_requests` 1 the next client would wait for it). One load
    /// per request; `u64::MAX` when off.
    #[inline]
    pub(crate) fn request_spends_budget(&self) {
        if self.budget.load(Ordering::Relaxed) == 1 {
            self.announce_draining(StopReason::MaxRequests);
        }
    }

    /// Records the end of a response on app thread `thread`, before its connection may be
    /// closed (so a client that sees the close finds its bytes counted): its timing in the
    /// sub-slot and its duration in the thread's counters (no clock read: the last write's end
    /// is the last progress point) and one add on the slot's line (bytes out).
    ///
    /// `counted`: false for a request the master judged timed out before its response began:
    /// its 503 was counted, with its duration, by whoever wrote it (`exchange::timeout`).
    pub(crate) fn response_ended(&self, thread: usize, counted: bool) {
        if let Some(thread_slot) = self.thread_slot(thread) {
            let (sent, duration_us) = thread_slot.end_request();
            self.add(&self.slot().bytes_out, sent);
            if !counted {
                return;
            }
            if let Some(metrics) = self.scoreboard.thread_metrics(self.slot, thread) {
                metrics.observe_duration_owned(duration_us);
            }
        }
    }

    /// Records the end of a request on app thread `thread` (one add on the slot's
    /// line: requests, after [`WorkerShared::response_ended`]); when it `spends` (not a
    /// static answer, ADR 0036), takes it from the `max_requests` budget and asks the worker
    /// to recycle when the budget is spent.
    pub(crate) fn request_finished(&self, spends: bool) {
        let slot = self.slot();
        self.add(&slot.requests, 1);
        if self.add_active(&slot.active, -1) == 1 && !self.is_stopping() {
            // The loop refines this (reading / keepalive / idle) on its next turn.
            slot.state
                .store(WorkerState::KeepAlive as u32, Ordering::Relaxed);
        }
        if !spends {
            return;
        }
        // Saturating: requests a draining worker still answers do not wrap the budget round
        // to "unlimited".
        let spent = self
            .budget
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                (left != u64::MAX && left > 0).then(|| left - 1)
            });
        if spent == Ok(1) {
            self.recycle.store(true, Ordering::Relaxed);
        }
    }

    /// The loop, once per turn: the worker state when no request runs (see the scoreboard's
    /// module doc), from the loop's own counts of open connections and of connections
    /// part-way through a request. One load and at most one store.
    pub(crate) fn publish_loop_state(&self, open: usize, reading: usize) {
        let slot = self.slot();
        if self.is_stopping() || slot.active.load(Ordering::Relaxed) > 0 {
            return;
        }
        let state = if reading > 0 {
            WorkerState::Reading
        } else if open > 0 {
            WorkerState::KeepAlive
        } else {
            WorkerState::Idle
        };
        slot.state.store(state as u32, Ordering::Relaxed);
    }

    /// Records why the worker decided to stop (unless the master recorded a reason first).
    pub(crate) fn propose_exit_reason(&self, reason: ExitReason) {
        self.slot().propose_exit_reason(reason);
    }

    /// True when the request being answered is the last of this worker's `max_requests`
    /// budget: its response closes the connection, so the client's next request goes to
    /// another worker (or the replacement) instead of waiting in this one's drain. With
    /// threads, requests in flight at once may each see the last unit; then all of them close.
    pub(crate) fn is_last_request(&self) -> bool {
        self.budget.load(Ordering::Relaxed) <= 1
    }

    /// True once `max_requests` was reached.
    pub(crate) fn recycle_requested(&self) -> bool {
        self.recycle.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_max_body_size_line_quotes_at_most_200_bytes_of_the_target_escaped() {
        let long = [b"/up?".as_slice(), &[b'a'; 300]].concat();
        let line = max_body_size_line(b"PUT", &long, Oversize::Chunked, 5);
        let quoted = format!("/up?{}", "a".repeat(QUOTED_TARGET - 4));
        assert_eq!(
            line,
            format!(
                "413 for PUT {quoted}: its chunked body is over max_body_size (5 bytes); \
                 raise max_body_size (--max-body-size) to accept such bodies"
            )
        );
        let line = max_body_size_line(b"POST", b"/a\nb", Oversize::Announced(9), 5);
        assert!(line.starts_with("413 for POST /a\\nb: its body of 9 bytes (Content-Length)"));
    }

    #[test]
    fn refusals_within_a_second_of_a_413_line_are_held_back_and_counted_in_the_next() {
        // Review of issue 40, item 15b: the rate and the count, with made-up times.
        let mut throttle = crate::log::LineThrottle::default();
        let start = Instant::now();
        let at = |ms: u64| start + std::time::Duration::from_millis(ms);
        let mut made = 0;
        let mut refuse = |ms: u64, n: u32| {
            too_large_line(&mut throttle, at(ms), || {
                made += 1;
                format!("413 for POST /upload?n={n}")
            })
        };
        // The first is logged whole, with no count.
        assert_eq!(refuse(0, 0).as_deref(), Some("413 for POST /upload?n=0"));
        // Three more within the second: held back, and their lines never made.
        assert_eq!(refuse(1, 1), None);
        assert_eq!(refuse(500, 2), None);
        assert_eq!(refuse(999, 3), None);
        // A second after the last line: logged, counting the three.
        assert_eq!(
            refuse(1000, 4).as_deref(),
            Some(
                "413 for POST /upload?n=4 (3 more such refusals since the last such line, \
                 not logged)"
            )
        );
        assert_eq!(refuse(1500, 5), None);
        assert_eq!(
            refuse(2000, 6).as_deref(),
            Some(
                "413 for POST /upload?n=6 (1 more such refusal since the last such line, \
                 not logged)"
            )
        );
        // None held back since: no count.
        assert_eq!(refuse(9000, 7).as_deref(), Some("413 for POST /upload?n=7"));
        assert_eq!(made, 4);
    }
}
