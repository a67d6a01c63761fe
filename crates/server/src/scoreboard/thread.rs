//! One app thread's sub-slot: what request the thread is serving (method, target, fd), since
//! when (dispatch and last progress on CLOCK_MONOTONIC), how much of the response went out,
//! and the timing of the last finished request.
//!
//! Only the owning app thread writes it, except the `verdict` word (below). The
//! request identity (request number, fd, dispatch time, method, target) is written under a
//! sequence counter (a seqlock: odd while the owner writes); readers retry until they see the
//! same even value before and after, so a reader never sees the method of one request with
//! the target of another, and the writer never waits. The other fields are single atomics
//! that change while a request runs (state, progress, bytes) and are read as they are.
//!
//! What each write costs (x86-64; every store is `Relaxed` to a cache line only this thread
//! writes, so it stays in this core's cache): [`ThreadSlot::begin_request`] is one
//! CLOCK_MONOTONIC read (vDSO, ~20 ns, no syscall) and about 20 plain stores (the release
//! fence and the `Release` store compile to plain moves on x86);
//! [`ThreadSlot::app_returned`] and [`ThreadSlot::progressed`] one clock read and two or
//! three stores each; [`ThreadSlot::waiting_on_client`] one store; [`ThreadSlot::end_request`]
//! a handful of loads and stores and no clock read (the last write's progress time is the
//! moment the last byte was handed to the socket).
//!
//! The `verdict` word settles who answers a request the master judged timed out, with one
//! atomic claim (docs/signals.md, "A stuck request"): it holds a request number and a tag.
//! The app thread claims its request's response ([`ThreadSlot::claim_response`]: one load and,
//! once per request, one CAS on this thread's own line) before the first response byte goes
//! to the socket or to the poller; the master marks an overdue request
//! ([`ThreadSlot::mark_timed_out`], a CAS): marked before the claim, the app thread's claim
//! fails and its response is never written (a 503 is owed instead); marked after it, only a
//! shutdown of the connection is owed. Whoever pays what is owed (the worker's loop, or the
//! stuck thread itself when it returns first) takes it with a CAS ([`ThreadSlot::take_owed`]),
//! so it is paid once.

use std::sync::atomic::{fence, AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// Bytes of the request method kept (longer ones are cut: `PROPFIND` and the like fit).
pub const METHOD_BYTES: usize = 16;
/// Bytes of the request target kept (longer ones are cut): enough to tell which view of an
/// app a stuck request is in, small enough that the sub-slot fits four cache lines.
pub const TARGET_BYTES: usize = 96;

/// The bit of a sub-slot's `lengths` word that says its request's connection speaks TLS
/// (the lengths need 15 bits).
const TLS_BIT: u32 = 1 << 31;

/// Low bits of the verdict word that hold its tag.
const VERDICT_BITS: u32 = 3;
const TAG_MASK: u64 = (1 << VERDICT_BITS) - 1;
/// The app thread claimed the response of the request (it writes it).
const RESPONDING: u64 = 1;
/// The master judged the request timed out before its response was claimed: a 503 is owed.
const TIMED_OUT: u64 = 2;
/// The master judged the request timed out after its response began: a shutdown is owed.
const STALLED: u64 = 3;
/// What was owed for a timed-out request was paid.
const ANSWERED: u64 = 4;

/// What is owed to the client of a request the master judged timed out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owed {
    /// No response byte went out: a 503 with `Connection: close`, then the connection is shut.
    Response,
    /// The response had begun: the connection is shut down.
    Shutdown,
}

const METHOD_WORDS: usize = METHOD_BYTES / 8;
const TARGET_WORDS: usize = TARGET_BYTES / 8;

/// How often a reader retries a sub-slot whose writer is mid-write before it gives up on the
/// strings (the writer finishes in well under a microsecond unless it was killed mid-write).
const READ_RETRIES: usize = 1000;

super::slot_enum! {
    /// What an app thread is doing.
    pub enum ThreadState {
        /// No request.
        Idle = 0 => "idle",
        /// The app holds the thread: from dispatch until it returned its iterable, and between
        /// one body block and the next. `request_timeout` counts this time only.
        App = 1 => "app",
        /// The thread waits on the client: reading the request body, or sending (body and send
        /// timeouts bound those waits).
        Client = 2 => "client",
    }
}

/// One app thread's sub-slot. `#[repr(C)]`, 64-byte aligned, four cache lines (three and the
/// HTTP/2 stream id, the rest padding; the first holds what every request writes).
#[repr(C, align(64))]
pub struct ThreadSlot {
    /// Seqlock counter over the request identity: odd while the owner writes it.
    sequence: AtomicU32,
    /// A [`ThreadState`].
    state: AtomicU32,
    /// The connection's fd (-1 when idle).
    fd: AtomicI32,
    /// Method length in the low 8 bits, target length above (both after truncation), and
    /// [`TLS_BIT`] when the connection speaks TLS.
    lengths: AtomicU32,
    /// The HTTP/2 stream id of the current request (0: not a stream). A connection's streams
    /// share its fd: with it, the loop finds the stuck stream among them
    /// ([`ThreadSlot::stream`]).
    stream: AtomicU32,
    /// Number of the current (or last) request on this thread: requests started so far.
    request: AtomicU64,
    /// Dispatch time of the current request, CLOCK_MONOTONIC nanoseconds.
    dispatch_ns: AtomicU64,
    /// Last progress: dispatch, the app returning its iterable, or a write returning.
    progress_ns: AtomicU64,
    /// When the app returned its iterable (0 before it did).
    app_returned_ns: AtomicU64,
    /// Bytes of the current response handed to the socket or to the poller (head and framing
    /// included).
    response_bytes: AtomicU64,
    /// Last finished request: dispatch to the app returning its iterable, microseconds.
    last_app_us: AtomicU64,
    /// Last finished request: dispatch to the last byte handed to the socket, microseconds.
    last_response_us: AtomicU64,
    /// Who answers the current request: a request number shifted left by [`VERDICT_BITS`],
    /// and a tag in the low bits (`RESPONDING`, `TIMED_OUT`, `STALLED`, `ANSWERED`; 0: none).
    verdict: AtomicU64,
    method: [AtomicU64; METHOD_WORDS],
    target: [AtomicU64; TARGET_WORDS],
}

/// A consistent snapshot of a sub-slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadReading {
    /// See [`ThreadState`].
    pub state: ThreadState,
    /// The connection's fd (-1 when idle).
    pub fd: i32,
    /// Number of the current (or last) request on this thread.
    pub request: u64,
    /// Requests finished on this thread.
    pub requests: u64,
    /// Dispatch time, CLOCK_MONOTONIC ns (of the last request when idle).
    pub dispatch_ns: u64,
    /// Last progress, CLOCK_MONOTONIC ns.
    pub progress_ns: u64,
    /// Bytes of the current response handed to the socket.
    pub response_bytes: u64,
    /// Last finished request: dispatch to app returned, µs.
    pub last_app_us: u64,
    /// Last finished request: dispatch to last byte handed to the socket, µs.
    pub last_response_us: u64,
    /// The request number the master judged timed out (0: none).
    pub timed_out: u64,
    /// What was owed for it was paid (the 503 written, or the connection shut down).
    pub timed_out_answered: bool,
    /// The request method (truncated to [`METHOD_BYTES`]).
    pub method: Vec<u8>,
    /// The request target (truncated to [`TARGET_BYTES`]).
    pub target: Vec<u8>,
}

/// CLOCK_MONOTONIC in nanoseconds: system-wide, so the master compares a worker's times with
/// its own clock (Python's `time.monotonic_ns()` reads the same clock). A vDSO call: no
/// syscall.
pub fn monotonic_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid out-pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// CLOCK_MONOTONIC in nanoseconds at `instant`, without reading the clock: `Instant` reads
/// CLOCK_MONOTONIC on Linux too, so one pair of readings taken once per process (a few ns
/// apart, far below the µs the scoreboard shows) converts between the two. For callers that
/// already hold the moment as an `Instant` (each clock read is ~25 ns of a ~10 µs request).
pub fn monotonic_ns_of(instant: Instant) -> u64 {
    static ANCHOR: OnceLock<(Instant, u64)> = OnceLock::new();
    let &(anchor, anchor_ns) = ANCHOR.get_or_init(|| (Instant::now(), monotonic_ns()));
    match instant.checked_duration_since(anchor) {
        Some(after) => anchor_ns + after.as_nanos() as u64,
        None => anchor_ns.saturating_sub((anchor - instant).as_nanos() as u64),
    }
}

fn store_bytes(words: &[AtomicU64], bytes: &[u8]) {
    for (word, chunk) in words.iter().zip(bytes.chunks(8)) {
        let mut packed = [0u8; 8];
        packed[..chunk.len()].copy_from_slice(chunk);
        word.store(u64::from_le_bytes(packed), Ordering::Relaxed);
    }
}

fn load_bytes(words: &[AtomicU64], len: usize, out: &mut Vec<u8>) {
    out.clear();
    for word in words.iter().take(len.div_ceil(8)) {
        out.extend_from_slice(&word.load(Ordering::Relaxed).to_le_bytes());
    }
    out.truncate(len);
}

impl ThreadSlot {
    /// Owner: a request was dispatched to this thread (the app is about to run).
    pub fn begin_request(&self, method: &[u8], target: &[u8], fd: i32) {
        self.begin_request_at(method, target, fd, false, monotonic_ns());
    }

    /// Owner: [`ThreadSlot::begin_request`] for a dispatch at `now` (CLOCK_MONOTONIC ns), for
    /// a caller that read the clock already; `tls`: the connection speaks TLS (the dump
    /// handler must not write plaintext on it, [`ThreadSlot::serves_tls`]).
    pub fn begin_request_at(&self, method: &[u8], target: &[u8], fd: i32, tls: bool, now: u64) {
        let method = &method[..method.len().min(METHOD_BYTES)];
        let target = &target[..target.len().min(TARGET_BYTES)];
        let sequence = self.sequence.load(Ordering::Relaxed);
        self.sequence
            .store(sequence.wrapping_add(1), Ordering::Relaxed);
        // Orders the odd sequence before the field stores (seqlock writer, as in the C++
        // memory model paper by Boehm, "Can seqlocks get along with programming language
        // memory models?").
        fence(Ordering::Release);
        // One writer: a load and a store, not a locked read-modify-write.
        let request = self.request.load(Ordering::Relaxed);
        self.request.store(request + 1, Ordering::Relaxed);
        self.fd.store(fd, Ordering::Relaxed);
        // Same cache line as `fd`; a stream's slot sets it after ([`ThreadSlot::serves_stream`]).
        self.stream.store(0, Ordering::Relaxed);
        self.lengths.store(
            method.len() as u32 | (target.len() as u32) << 8 | if tls { TLS_BIT } else { 0 },
            Ordering::Relaxed,
        );
        store_bytes(&self.method, method);
        store_bytes(&self.target, target);
        self.dispatch_ns.store(now, Ordering::Relaxed);
        self.progress_ns.store(now, Ordering::Relaxed);
        self.app_returned_ns.store(0, Ordering::Relaxed);
        self.response_bytes.store(0, Ordering::Relaxed);
        self.state.store(ThreadState::App as u32, Ordering::Relaxed);
        self.sequence
            .store(sequence.wrapping_add(2), Ordering::Release);
    }

    /// Owner, right after [`ThreadSlot::begin_request_at`]: the request is HTTP/2 stream `id`
    /// of its connection (whose fd the connection's other streams share).
    pub fn serves_stream(&self, id: u32) {
        self.stream.store(id, Ordering::Relaxed);
    }

    /// The loop: the HTTP/2 stream id of the current request (0: not a stream). Set long
    /// before a request can be judged timed out, so no seqlock is needed for it.
    pub fn stream(&self) -> u32 {
        self.stream.load(Ordering::Relaxed)
    }

    /// Owner: the app returned its iterable (a progress point, and the "app done" time).
    pub fn app_returned(&self) {
        let now = monotonic_ns_of(crate::clock::now());
        self.app_returned_ns.store(now, Ordering::Relaxed);
        self.progress_ns.store(now, Ordering::Relaxed);
    }

    /// Owner: the thread starts waiting on the client (a body read, a write); the time until
    /// [`ThreadSlot::progressed`] is not the app's.
    pub fn waiting_on_client(&self) {
        self.state
            .store(ThreadState::Client as u32, Ordering::Relaxed);
    }

    /// Owner: a wait on the client ended, `sent` response bytes went to the socket; the app
    /// holds the thread again from now.
    pub fn progressed(&self, sent: u64) {
        self.progressed_at(sent, crate::clock::now());
    }

    /// Owner: [`ThreadSlot::progressed`] at `now`, a reading the caller has.
    pub fn progressed_at(&self, sent: u64, now: Instant) {
        if sent > 0 {
            let bytes = self.response_bytes.load(Ordering::Relaxed);
            self.response_bytes.store(bytes + sent, Ordering::Relaxed);
        }
        self.progress_ns
            .store(monotonic_ns_of(now), Ordering::Relaxed);
        self.state.store(ThreadState::App as u32, Ordering::Relaxed);
    }

    /// Owner: the request is complete; records its timing. Returns the response bytes (for
    /// the slot's total) and the time from dispatch to the last byte handed to the socket, µs.
    pub fn end_request(&self) -> (u64, u64) {
        let dispatch = self.dispatch_ns.load(Ordering::Relaxed);
        let returned = self.app_returned_ns.load(Ordering::Relaxed);
        let done = self.progress_ns.load(Ordering::Relaxed);
        let app_done = if returned == 0 { done } else { returned };
        self.last_app_us
            .store(app_done.saturating_sub(dispatch) / 1000, Ordering::Relaxed);
        let response_us = done.saturating_sub(dispatch) / 1000;
        self.last_response_us.store(response_us, Ordering::Relaxed);
        self.fd.store(-1, Ordering::Relaxed);
        self.state
            .store(ThreadState::Idle as u32, Ordering::Relaxed);
        (self.response_bytes.load(Ordering::Relaxed), response_us)
    }

    /// App thread: claims the response of its current request, before the first response
    /// byte goes to the socket or the poller. `false` when the master judged the request timed
    /// out first: nothing of its response may be written (a 503 is owed instead, see
    /// [`ThreadSlot::take_owed`]). Called again once claimed, it is one load.
    pub fn claim_response(&self) -> bool {
        let request = self.request.load(Ordering::Relaxed);
        let mine = request << VERDICT_BITS | RESPONDING;
        let mut current = self.verdict.load(Ordering::Acquire);
        loop {
            if current == mine {
                return true;
            }
            if current >> VERDICT_BITS == request {
                // Timed out, stalled or answered: the master came first.
                return false;
            }
            match self.verdict.compare_exchange_weak(
                current,
                mine,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return true,
                Err(seen) => current = seen,
            }
        }
    }

    /// Master: judges request number `request` timed out. Before its response was claimed, a
    /// 503 is owed (the app thread's claim then fails); after, a shutdown. A request that
    /// ended meanwhile is marked all the same and owes nothing (the payer checks that the
    /// thread still serves it).
    pub fn mark_timed_out(&self, request: u64) {
        let mut current = self.verdict.load(Ordering::Acquire);
        loop {
            let tag = if current == request << VERDICT_BITS | RESPONDING {
                STALLED
            } else if current >> VERDICT_BITS == request && current & TAG_MASK != 0 {
                // Marked already.
                return;
            } else {
                TIMED_OUT
            };
            match self.verdict.compare_exchange(
                current,
                request << VERDICT_BITS | tag,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return,
                Err(seen) => current = seen,
            }
        }
    }

    /// Async-signal-safe (atomics only): the request marked timed out whose debt is unpaid,
    /// with what is owed, while this thread still serves it (not between requests, not writing
    /// a new identity). The caller pays it only after [`ThreadSlot::take_owed`] succeeds.
    pub fn owed(&self) -> Option<(u64, Owed)> {
        let sequence = self.sequence.load(Ordering::Acquire);
        let verdict = self.verdict.load(Ordering::Acquire);
        let request = verdict >> VERDICT_BITS;
        let owed = match verdict & TAG_MASK {
            TIMED_OUT => Owed::Response,
            STALLED => Owed::Shutdown,
            _ => return None,
        };
        let serving = self.request.load(Ordering::Relaxed) == request
            && ThreadState::from_u32(self.state.load(Ordering::Relaxed)) != ThreadState::Idle;
        fence(Ordering::Acquire);
        let unchanged = sequence & 1 == 0 && self.sequence.load(Ordering::Relaxed) == sequence;
        (unchanged && serving).then_some((request, owed))
    }

    /// Takes what is owed for `request` (async-signal-safe: one CAS): `true` for the one
    /// caller that pays it; `false` when it was paid already or never owed.
    pub fn take_owed(&self, request: u64, owed: Owed) -> bool {
        let tag = match owed {
            Owed::Response => TIMED_OUT,
            Owed::Shutdown => STALLED,
        };
        self.verdict
            .compare_exchange(
                request << VERDICT_BITS | tag,
                request << VERDICT_BITS | ANSWERED,
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// Owner: what is owed for its own current request, when the master judged it timed out
    /// (the stuck thread returning). Unlike [`ThreadSlot::owed`], needs no sequence check: the
    /// owner is not writing.
    pub fn owed_by_owner(&self) -> Option<(u64, Owed)> {
        let request = self.request.load(Ordering::Relaxed);
        let verdict = self.verdict.load(Ordering::Acquire);
        if verdict >> VERDICT_BITS != request {
            return None;
        }
        match verdict & TAG_MASK {
            TIMED_OUT => Some((request, Owed::Response)),
            STALLED => Some((request, Owed::Shutdown)),
            _ => None,
        }
    }

    /// Any reader: a consistent snapshot, retrying while the owner writes the identity. If the
    /// owner stays mid-write (it was killed there), the strings come back empty.
    pub fn read(&self) -> ThreadReading {
        let mut reading = ThreadReading {
            state: ThreadState::Idle,
            fd: -1,
            request: 0,
            requests: 0,
            dispatch_ns: 0,
            progress_ns: 0,
            response_bytes: 0,
            last_app_us: 0,
            last_response_us: 0,
            timed_out: 0,
            timed_out_answered: false,
            method: Vec::with_capacity(METHOD_BYTES),
            target: Vec::with_capacity(TARGET_BYTES),
        };
        for _ in 0..READ_RETRIES {
            let before = self.sequence.load(Ordering::Acquire);
            if before & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            self.read_fields(&mut reading);
            // Orders the field loads before the second sequence load (seqlock reader).
            fence(Ordering::Acquire);
            if self.sequence.load(Ordering::Relaxed) == before {
                return reading;
            }
        }
        self.read_fields(&mut reading);
        reading.method.clear();
        reading.target.clear();
        reading
    }

    fn read_fields(&self, reading: &mut ThreadReading) {
        reading.state = ThreadState::from_u32(self.state.load(Ordering::Relaxed));
        reading.fd = self.fd.load(Ordering::Relaxed);
        reading.request = self.request.load(Ordering::Relaxed);
        reading.requests = reading
            .request
            .saturating_sub(u64::from(reading.state != ThreadState::Idle));
        reading.dispatch_ns = self.dispatch_ns.load(Ordering::Relaxed);
        reading.progress_ns = self.progress_ns.load(Ordering::Relaxed);
        reading.response_bytes = self.response_bytes.load(Ordering::Relaxed);
        reading.last_app_us = self.last_app_us.load(Ordering::Relaxed);
        reading.last_response_us = self.last_response_us.load(Ordering::Relaxed);
        let verdict = self.verdict.load(Ordering::Relaxed);
        let judged = matches!(verdict & TAG_MASK, TIMED_OUT | STALLED | ANSWERED);
        reading.timed_out = if judged { verdict >> VERDICT_BITS } else { 0 };
        reading.timed_out_answered = verdict & TAG_MASK == ANSWERED;
        let lengths = (self.lengths.load(Ordering::Relaxed) & !TLS_BIT) as usize;
        load_bytes(
            &self.method,
            (lengths & 0xff).min(METHOD_BYTES),
            &mut reading.method,
        );
        load_bytes(
            &self.target,
            (lengths >> 8).min(TARGET_BYTES),
            &mut reading.target,
        );
    }

    /// Async-signal-safe (an atomic load): whether the current (or last) request's connection
    /// speaks TLS: the dump handler cannot write a record there (the session is the stuck
    /// thread's), only shut the connection down.
    pub fn serves_tls(&self) -> bool {
        self.lengths.load(Ordering::Relaxed) & TLS_BIT != 0
    }

    /// Async-signal-safe (atomics only): for a worker whose stuck request runs on its loop
    /// thread (prefork), the fd to answer 503 on, when this thread still serves the request
    /// the master marked timed out before its response was claimed, in the app, with nothing
    /// sent; the debt is taken ([`ThreadSlot::take_owed`]) before the fd is returned, so the
    /// request's own thread writes nothing after. `None` otherwise.
    pub fn take_timed_out_fd(&self) -> Option<i32> {
        let (request, owed) = self.owed()?;
        let state = ThreadState::from_u32(self.state.load(Ordering::Relaxed));
        let fd = self.fd.load(Ordering::Relaxed);
        let unsent = self.response_bytes.load(Ordering::Relaxed) == 0;
        if owed != Owed::Response || state != ThreadState::App || !unsent || fd < 0 {
            return None;
        }
        self.take_owed(request, owed).then_some(fd)
    }

    /// Master, on claiming the slot for a new worker: forget the previous worker's requests.
    pub(super) fn reset(&self) {
        self.state
            .store(ThreadState::Idle as u32, Ordering::Relaxed);
        self.fd.store(-1, Ordering::Relaxed);
        self.stream.store(0, Ordering::Relaxed);
        self.request.store(0, Ordering::Relaxed);
        self.verdict.store(0, Ordering::Relaxed);
        self.response_bytes.store(0, Ordering::Relaxed);
        self.lengths.store(0, Ordering::Relaxed);
        // Even: a worker killed mid-write left it odd.
        let sequence = self.sequence.load(Ordering::Relaxed);
        self.sequence
            .store(sequence.wrapping_add(sequence & 1), Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zeroed() -> Box<ThreadSlot> {
        // SAFETY: every field is an atomic integer, for which all-zero bytes are valid.
        Box::new(unsafe { std::mem::zeroed() })
    }

    #[test]
    fn converts_an_instant_to_the_monotonic_clock_it_was_read_from() {
        let before = monotonic_ns();
        let instant = Instant::now();
        let after = monotonic_ns();
        let converted = monotonic_ns_of(instant);
        // The anchor pair is read a few ns apart: allow a microsecond either way.
        assert!(converted + 1_000 >= before && converted <= after + 1_000);
        let later = instant + std::time::Duration::from_millis(5);
        assert_eq!(monotonic_ns_of(later) - converted, 5_000_000);
    }

    #[test]
    fn sub_slots_are_four_cache_lines() {
        assert_eq!(std::mem::size_of::<ThreadSlot>(), 256);
        assert_eq!(std::mem::align_of::<ThreadSlot>(), 64);
    }

    #[test]
    fn a_tls_request_is_marked_so_and_its_strings_read_as_any_other() {
        let slot = zeroed();
        slot.begin_request_at(b"POST", &[b'y'; 200], 5, true, monotonic_ns());
        assert!(slot.serves_tls());
        let reading = slot.read();
        assert_eq!(reading.method, b"POST");
        assert_eq!(reading.target, vec![b'y'; TARGET_BYTES]);
        slot.end_request();
        slot.begin_request(b"GET", b"/", 5);
        assert!(!slot.serves_tls());
        assert_eq!(slot.read().target, b"/");
    }

    #[test]
    fn a_request_round_trips_with_truncated_strings() {
        let slot = zeroed();
        let long_target = vec![b'x'; 200];
        slot.begin_request(b"GET", &long_target, 7);
        let reading = slot.read();
        assert_eq!(reading.state, ThreadState::App);
        assert_eq!(reading.method, b"GET");
        assert_eq!(reading.target, vec![b'x'; TARGET_BYTES]);
        assert_eq!((reading.fd, reading.request, reading.requests), (7, 1, 0));
        slot.waiting_on_client();
        assert_eq!(slot.read().state, ThreadState::Client);
        slot.progressed(100);
        assert_eq!(slot.end_request().0, 100);
        let done = slot.read();
        assert_eq!(
            (done.state, done.fd, done.requests),
            (ThreadState::Idle, -1, 1)
        );
        assert!(done.last_response_us >= done.last_app_us);
    }

    #[test]
    fn the_raw_answer_takes_only_the_marked_request_with_nothing_sent() {
        let slot = zeroed();
        slot.begin_request(b"GET", b"/stuck", 9);
        assert_eq!(slot.take_timed_out_fd(), None);
        slot.mark_timed_out(1);
        slot.waiting_on_client();
        assert_eq!(slot.take_timed_out_fd(), None, "waiting on the client");
        slot.progressed(0);
        assert_eq!(slot.take_timed_out_fd(), Some(9));
        assert_eq!(slot.take_timed_out_fd(), None, "paid once");
        assert!(
            !slot.claim_response(),
            "the stuck thread writes nothing after"
        );
        assert!(slot.read().timed_out_answered);
        slot.end_request();
        slot.begin_request(b"GET", b"/next", 9);
        assert_eq!(
            slot.take_timed_out_fd(),
            None,
            "a later request on a reused fd"
        );
        assert!(slot.claim_response());
    }

    #[test]
    fn a_mark_before_the_claim_owes_a_503_and_the_claim_fails() {
        let slot = zeroed();
        slot.begin_request(b"GET", b"/stuck", 4);
        slot.mark_timed_out(1);
        assert_eq!(slot.owed(), Some((1, Owed::Response)));
        assert_eq!(slot.read().timed_out, 1);
        assert!(!slot.claim_response());
        assert!(!slot.claim_response(), "and again");
        assert_eq!(slot.owed_by_owner(), Some((1, Owed::Response)));
        assert!(!slot.take_owed(1, Owed::Shutdown), "not what is owed");
        assert!(slot.take_owed(1, Owed::Response));
        assert!(!slot.take_owed(1, Owed::Response), "paid once");
        assert_eq!((slot.owed(), slot.owed_by_owner()), (None, None));
        assert!(slot.read().timed_out_answered);
    }

    #[test]
    fn a_mark_after_the_claim_owes_a_shutdown_and_the_response_goes_on() {
        let slot = zeroed();
        slot.begin_request(b"GET", b"/stream", 4);
        assert!(slot.claim_response());
        slot.mark_timed_out(1);
        assert_eq!(slot.owed(), Some((1, Owed::Shutdown)));
        assert_eq!(slot.read().timed_out, 1);
        assert!(!slot.claim_response(), "a claim made is not made again");
        assert!(slot.take_owed(1, Owed::Shutdown));
        assert_eq!(slot.owed(), None);
    }

    #[test]
    fn a_mark_of_a_request_that_ended_owes_nothing_and_the_next_claims_as_usual() {
        let slot = zeroed();
        slot.begin_request(b"GET", b"/quick", 4);
        assert!(slot.claim_response());
        slot.end_request();
        slot.mark_timed_out(1);
        assert_eq!(slot.owed(), None, "between requests");
        slot.begin_request(b"GET", b"/next", 5);
        assert_eq!(slot.owed(), None, "another request");
        assert!(slot.claim_response());
        assert_eq!(
            slot.read().timed_out,
            0,
            "the claim replaced the stale mark"
        );
        slot.mark_timed_out(1);
        assert!(
            slot.claim_response(),
            "a stale mark does not undo a claim made"
        );
        slot.mark_timed_out(2);
        slot.mark_timed_out(2);
        assert_eq!(slot.owed(), Some((2, Owed::Shutdown)), "marked once");
    }

    #[test]
    fn the_claim_and_the_mark_race_to_one_winner() {
        // Each round: a fresh request, claimed by one thread while another marks it; exactly
        // one side wins (the claim, then a shutdown is owed; or the mark, then a 503 is owed
        // and the claim fails).
        let slot: &'static ThreadSlot = Box::leak(zeroed());
        let rounds = 20_000u64;
        let asked: &'static AtomicU64 = Box::leak(Box::new(AtomicU64::new(0)));
        let marked: &'static AtomicU64 = Box::leak(Box::new(AtomicU64::new(0)));
        let marker = std::thread::spawn(move || {
            for round in 1..=rounds {
                while asked.load(Ordering::Acquire) < round {
                    std::hint::spin_loop();
                }
                slot.mark_timed_out(round);
                marked.store(round, Ordering::Release);
            }
        });
        let (mut claimed, mut lost) = (0, 0);
        for round in 1..=rounds {
            slot.begin_request(b"GET", b"/race", 3);
            asked.store(round, Ordering::Release);
            let won = slot.claim_response();
            while marked.load(Ordering::Acquire) < round {
                std::hint::spin_loop();
            }
            let expected = if won { Owed::Shutdown } else { Owed::Response };
            assert_eq!(slot.owed(), Some((round, expected)));
            assert!(slot.take_owed(round, expected));
            if won {
                claimed += 1;
            } else {
                lost += 1;
            }
            slot.end_request();
        }
        marker.join().unwrap();
        assert_eq!(claimed + lost, rounds);
    }

    #[test]
    fn readers_never_see_a_torn_method_and_target() {
        let slot: &'static ThreadSlot = Box::leak(zeroed());
        let writer = std::thread::spawn(move || {
            for round in 0..20_000u32 {
                let (method, target): (&[u8], &[u8]) = if round % 2 == 0 {
                    (b"GET", b"/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
                } else {
                    (
                        b"DELETE",
                        b"/bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",
                    )
                };
                slot.begin_request(method, target, round as i32);
                slot.end_request();
            }
        });
        let mut checked = 0;
        while !writer.is_finished() || checked == 0 {
            let reading = slot.read();
            match reading.method.as_slice() {
                b"GET" => assert!(reading.target.iter().skip(1).all(|&b| b == b'a')),
                b"DELETE" => assert!(reading.target.iter().skip(1).all(|&b| b == b'b')),
                b"" => assert!(reading.target.is_empty()),
                other => panic!("torn method {other:?}"),
            }
            checked += 1;
        }
        writer.join().unwrap();
    }
}
