//! The records of the shared mapping, as laid out in memory (`#[repr(C)]`, cache-line
//! aligned): the master's [`Header`], a worker's [`Slot`], the [`Retired`] totals with their
//! ring of recent exits, and the plain readings that readers get of them.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::{ExitReason, MetricsReading, RequestMetrics, WorkerState};

/// What the master publishes about the whole server, before the slots (two cache lines):
/// read by the status process (`/readyz`, uptime, generation).
#[repr(C, align(64))]
pub struct Header {
    /// The master's pid.
    pub master_pid: AtomicU32,
    /// The current generation (bumped by reloads).
    pub generation: AtomicU32,
    /// Non-zero once the master began to stop (TERM, INT, QUIT): not ready from then on.
    pub stopping: AtomicU32,
    pub(super) _reserved: AtomicU32,
    /// When the master started, milliseconds since the Unix epoch.
    pub started_ms: AtomicU64,
    /// The rate-limit table's entries ever taken (a gauge: the master sets it when it makes
    /// or adopts the table, a worker adds one per entry it takes; ADR 0038). 0: no table.
    pub rate_entries: AtomicU64,
    /// The rate-limit table's entries (its fixed size; 0: no table), set by the master.
    pub rate_capacity: AtomicU64,
    pub(super) _rest: [AtomicU64; 11],
}

/// How many recent worker exits the retired totals keep (a ring).
pub const RECENT_EXITS: usize = 16;

/// The totals of the workers reaped so far, and their last exits: written by the master
/// only, under a sequence counter ([`super::Scoreboard::retire`]), so that a reader summing them with
/// the live slots ([`super::Scoreboard::totals`]) never counts a worker twice or not at all.
#[repr(C, align(64))]
pub struct Retired {
    /// Odd while the master folds a worker in.
    pub(super) sequence: AtomicU64,
    pub(super) requests: AtomicU64,
    pub(super) accepted: AtomicU64,
    pub(super) bytes_out: AtomicU64,
    pub(super) bytes_in: AtomicU64,
    /// Exits recorded so far (the ring's next index is this modulo [`RECENT_EXITS`]).
    pub(super) exits_recorded: AtomicU64,
    pub(super) rate_limited: AtomicU64,
    pub(super) rate_evictions: AtomicU64,
    /// Workers reaped, by [`ExitReason`] value.
    pub(super) exits: [AtomicU64; 16],
    pub(super) refused_connections: AtomicU64,
    pub(super) compression: [AtomicU64; COMPRESSION_COUNTERS],
    pub(super) metrics: RequestMetrics,
    pub(super) recent: [ExitRecord; RECENT_EXITS],
}

/// One reaped worker, in the ring of recent exits.
#[repr(C)]
pub(super) struct ExitRecord {
    pub(super) pid: AtomicU32,
    pub(super) slot: AtomicU32,
    pub(super) reason: AtomicU32,
    /// The wait status (`waitpid`'s), as its bits.
    pub(super) wait_status: AtomicU32,
    pub(super) at_ms: AtomicU64,
    pub(super) requests: AtomicU64,
}

/// A recent worker exit, for readers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExitReading {
    /// The worker's pid.
    pub pid: u32,
    /// Its slot.
    pub slot: u32,
    /// Why it exited.
    pub reason: ExitReason,
    /// Its wait status (`WIFSIGNALED` and the like decode it).
    pub wait_status: i32,
    /// When it was reaped, ms since the Unix epoch.
    pub at_ms: u64,
    /// Requests it completed.
    pub requests: u64,
}

/// Server-wide totals since the master started: the live workers' slots plus the retired
/// totals, read consistently. They only grow.
#[derive(Clone, Debug, Default)]
pub struct Totals {
    /// Requests counted, by method, status class, duration and queue wait (the server's own
    /// responses included).
    pub metrics: MetricsReading,
    /// Connections accepted.
    pub accepted: u64,
    /// Response bytes handed to sockets.
    pub bytes_out: u64,
    /// Bytes read from client sockets.
    pub bytes_in: u64,
    /// Workers reaped, by [`ExitReason`] value.
    pub exits: [u64; 16],
    /// Requests in flight now (live workers).
    pub in_flight: u64,
    /// Connections open now (live workers).
    pub connections: u64,
    /// HTTP/2 connections open now (live workers; among `connections`).
    pub h2_connections: u64,
    /// HTTP/2 streams open now (live workers).
    pub h2_streams: u64,
    /// Requests waiting for an app thread now (live workers; not among `in_flight`).
    pub queued: u64,
    /// When the longest-waiting of them was read, CLOCK_MONOTONIC ns (0: none waits).
    pub queued_since_ns: u64,
    /// Requests refused `429` by the rate limits.
    pub rate_limited: u64,
    /// Rate-limit table entries taken from another client's bucket (the table was full).
    pub rate_evictions: u64,
    /// Connections closed at accept by `max_connections_per_client`.
    pub refused_connections: u64,
    /// The rate-limit table's entries in use (0: no table).
    pub rate_entries: u64,
    /// The rate-limit table's size in entries (0: no table).
    pub rate_capacity: u64,
    /// The compression counters ([`Compression`]).
    pub compression: Compression,
}

/// How many compression counters a slot has ([`Slot::compression`]).
pub const COMPRESSION_COUNTERS: usize = 7;

/// The compression counters (ADR 0037), in [`Slot::compression`]'s order: responses whose
/// compressed body was finished, by coding; the bytes of those bodies before (the app's) and
/// after compression (sent, without chunked framing); app responses compression left as
/// they were by a rule (type, size, status, `Content-Encoding`, `no-transform`, an excluded
/// path), and those it would have compressed but the client accepted no coding offered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Compression {
    /// Compressed responses by coding: gzip, br, zstd.
    pub responses: [u64; 3],
    /// Their bodies' bytes before compression.
    pub bytes_in: u64,
    /// Their bodies' bytes after compression.
    pub bytes_out: u64,
    /// Responses a rule left uncompressed.
    pub skipped: u64,
    /// Responses that qualified, to a client that accepted no coding offered.
    pub not_accepted: u64,
}

impl Compression {
    /// The counters as [`Slot::compression`] lays them out.
    pub fn from_counters(counters: [u64; COMPRESSION_COUNTERS]) -> Compression {
        let [gzip, br, zstd, bytes_in, bytes_out, skipped, not_accepted] = counters;
        Compression {
            responses: [gzip, br, zstd],
            bytes_in,
            bytes_out,
            skipped,
            not_accepted,
        }
    }

    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &Compression) {
        for (total, count) in self.responses.iter_mut().zip(other.responses) {
            *total += count;
        }
        self.bytes_in += other.bytes_in;
        self.bytes_out += other.bytes_out;
        self.skipped += other.skipped;
        self.not_accepted += other.not_accepted;
    }

    /// Compressed responses, every coding.
    pub fn compressed(&self) -> u64 {
        self.responses.iter().sum()
    }
}

/// A memory figure the master could not read (PSS and USS under `user`: docs/status.md).
pub const MEMORY_UNKNOWN: u64 = u64::MAX;

/// One worker's slot. `#[repr(C)]`, 64-byte aligned, four cache lines: the first holds what
/// the worker writes per request, the second what the master writes (exit reason, memory)
/// and what a dump leaves (the flag, the interpreter probe's time), so the master's writes
/// never take the line the worker's requests use; the third the HTTP/2 gauges (written per
/// HTTP/2 connection and stream only) and the pool's queue (thread and event MPMs: the count
/// the loop adds to and the app threads take from per hand-off, which was the pool's own
/// atomic before the status output showed it; the oldest request's time, which only the
/// loop writes, per turn and only while requests wait: an app thread's pop does the one
/// `fetch_sub` it did before; measured in benches/results/2026-11-28-issue40-status-queue.md;
/// a prefork HTTP/1.1 request never touches that line); the fourth the compression counters
/// (written only by responses compression looked at, so never with compression off), and
/// room for more (the size test in `mod.rs` says how big a slot is).
#[repr(C, align(64))]
pub struct Slot {
    /// Worker pid (0 when free).
    pub pid: AtomicU32,
    /// Generation the worker belongs to (bumped by reloads).
    pub generation: AtomicU32,
    /// A [`WorkerState`] value.
    pub state: AtomicU32,
    /// Requests being served right now.
    pub active: AtomicU32,
    /// Requests completed since the worker started.
    pub requests: AtomicU64,
    /// Connections accepted since the worker started.
    pub accepted: AtomicU64,
    /// Last heartbeat, milliseconds since the Unix epoch.
    pub heartbeat_ms: AtomicU64,
    /// Connections currently open in this worker.
    pub connections: AtomicU64,
    /// Response bytes handed to the socket, or to the poller to write (ADR 0009), since the
    /// worker started (added per request).
    pub bytes_out: AtomicU64,
    /// Bytes read from client sockets since the worker started (added per read).
    pub bytes_in: AtomicU64,
    /// An [`ExitReason`] value.
    pub exit_reason: AtomicU32,
    /// Set by the worker's dump-signal handler once the stack dump was written.
    pub dumped: AtomicU32,
    /// Last memory sample (bytes), written by the master.
    pub rss: AtomicU64,
    /// See [`Slot::rss`]; [`MEMORY_UNKNOWN`] when the master could read only RSS (the worker
    /// runs as another `user`: its smaps_rollup is not the master's to read).
    pub pss: AtomicU64,
    /// See [`Slot::pss`].
    pub uss: AtomicU64,
    /// See [`Slot::rss`].
    pub swap: AtomicU64,
    /// When the memory sample was taken, milliseconds since the Unix epoch (0: never).
    pub memory_sampled_ms: AtomicU64,
    /// An async worker's event loop (ASGI, ADR 0014) marks itself alive here, milliseconds
    /// since the Unix epoch (0: not an async worker): the master's watchdog goes by it rather
    /// than by the app threads' sub-slots, whose requests run concurrently on one loop.
    pub loop_heartbeat_ms: AtomicU64,
    /// When the worker's interpreter probe last took the interpreter lock (the GIL) after a
    /// dump, CLOCK_MONOTONIC nanoseconds (0: not since the slot was claimed): written once,
    /// by the probe's own thread; the master kills a draining worker whose probe has not
    /// reported a few seconds after the dump (ADR 0020).
    pub interpreter_seen_ns: AtomicU64,
    /// HTTP/2 connections open in this worker (each is one of [`Slot::connections`] too: a
    /// socket; its streams are not).
    pub h2_connections: AtomicU64,
    /// HTTP/2 streams open in this worker: from the stream's request head to the end of its
    /// virtual connection (ADR 0035).
    pub h2_streams: AtomicU64,
    /// Requests this worker refused `429` by the rate limits (ADR 0038; per refusal only).
    pub rate_limited: AtomicU64,
    /// Rate-limit table entries this worker took from another client's bucket.
    pub rate_evictions: AtomicU64,
    /// Connections this worker closed at accept by `max_connections_per_client`.
    pub refused_connections: AtomicU64,
    /// Requests the loop queued for an app thread that no app thread took yet (thread and
    /// event MPMs; the pool's own queue count, kept here so the status output sees it). They
    /// are not `active` and not idle connections.
    pub queued: AtomicU64,
    /// When the oldest of the [`Slot::queued`] requests that wait for a busy app thread was
    /// read, CLOCK_MONOTONIC nanoseconds (0: none waits). Written by the loop alone, under
    /// the pool's queue lock, when it queues requests and when it collects connections
    /// handed back (app threads took requests meanwhile), never by an app thread's pop: a
    /// gauge for people, which may lag the pops by up to a turn of the loop (at most its
    /// heartbeat), overstating the wait. Readers ([`super::Scoreboard::read`], the totals)
    /// take no wait from a slot whose [`Slot::queued`] is 0.
    pub queued_since_ns: AtomicU64,
    pub(super) _reserved: [AtomicU64; 1],
    /// The compression counters, in [`Compression`]'s order (gzip, br and zstd responses,
    /// bytes in, bytes out, skipped, not accepted): written by the exchange, per compressed
    /// response when its body is finished, and per response left alone, only when
    /// compression is on.
    pub compression: [AtomicU64; COMPRESSION_COUNTERS],
    pub(super) _reserved_compression: [AtomicU64; 1],
}

/// A snapshot of one slot, for readers.
#[derive(Clone, Copy, Debug)]
pub struct SlotReading {
    /// See [`Slot::pid`].
    pub pid: u32,
    /// See [`Slot::generation`].
    pub generation: u32,
    /// See [`Slot::state`].
    pub state: WorkerState,
    /// See [`Slot::active`].
    pub active: u32,
    /// See [`Slot::requests`].
    pub requests: u64,
    /// See [`Slot::accepted`].
    pub accepted: u64,
    /// See [`Slot::heartbeat_ms`].
    pub heartbeat_ms: u64,
    /// See [`Slot::connections`].
    pub connections: u64,
    /// See [`Slot::bytes_out`].
    pub bytes_out: u64,
    /// See [`Slot::bytes_in`].
    pub bytes_in: u64,
    /// See [`Slot::exit_reason`].
    pub exit_reason: ExitReason,
    /// See [`Slot::dumped`].
    pub dumped: bool,
    /// See [`Slot::rss`].
    pub rss: u64,
    /// See [`Slot::pss`].
    pub pss: u64,
    /// See [`Slot::uss`].
    pub uss: u64,
    /// See [`Slot::swap`].
    pub swap: u64,
    /// See [`Slot::memory_sampled_ms`].
    pub memory_sampled_ms: u64,
    /// See [`Slot::loop_heartbeat_ms`].
    pub loop_heartbeat_ms: u64,
    /// See [`Slot::interpreter_seen_ns`].
    pub interpreter_seen_ns: u64,
    /// See [`Slot::h2_connections`].
    pub h2_connections: u64,
    /// See [`Slot::h2_streams`].
    pub h2_streams: u64,
    /// See [`Slot::queued`].
    pub queued: u64,
    /// See [`Slot::queued_since_ns`].
    pub queued_since_ns: u64,
}

impl Slot {
    /// [`Slot::queued_since_ns`] as readers show it, `queued` a [`Slot::queued`] reading: 0
    /// when nothing is queued. Only the loop updates the time, at its next turn (see the
    /// field), while the count drops with each app thread's pop: without this, a drained
    /// queue would show its last wait growing until then.
    pub fn queued_since_shown(&self, queued: u64) -> u64 {
        if queued == 0 {
            return 0;
        }
        self.queued_since_ns.load(Ordering::Relaxed)
    }

    /// The loop made an HTTP/2 connection (its `H2Conn` entered the loop's table).
    pub fn h2_connection_opened(&self) {
        self.h2_connections.fetch_add(1, Ordering::Relaxed);
    }

    /// An HTTP/2 connection left the loop's table (closed, finished or dropped).
    pub fn h2_connection_closed(&self) {
        let _ = self
            .h2_connections
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }

    /// A stream's request head was complete and its virtual connection entered the loop's
    /// table (`Advance::opened`).
    pub fn h2_stream_opened(&self) {
        self.h2_streams.fetch_add(1, Ordering::Relaxed);
    }

    /// A stream's virtual connection was dropped (its exchange over, reset, or its HTTP/2
    /// connection gone).
    pub fn h2_stream_ended(&self) {
        let _ = self
            .h2_streams
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }

    /// Records `reason` unless one is recorded already (the worker's own decisions: the
    /// master's, made before it stops the worker, are not overwritten).
    pub fn propose_exit_reason(&self, reason: ExitReason) {
        let _ = self.exit_reason.compare_exchange(
            ExitReason::None as u32,
            reason as u32,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }
}
