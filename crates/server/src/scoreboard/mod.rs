//! The scoreboard: one `MAP_SHARED` anonymous mapping with a fixed slot per worker, and after
//! the slots one sub-slot per app thread of each slot ([`thread`]).
//!
//! The master creates it before the first fork, sized once (`Scoreboard::new(slots,
//! threads_per_slot)`), so every worker inherits the same physical pages. A worker writes only
//! its own slot and sub-slots; the master reads all of them, and writes a few fields of a
//! slot: claim and clear, the memory sample, the exit reason it decided, and the timed-out
//! mark of a sub-slot. The status endpoint will read them too. Every field is an atomic, so
//! readers never see a torn value; the sub-slot's strings are read under a seqlock. A reader
//! may see slot fields from two different moments, which the consumers tolerate: they are
//! gauges and counters.
//!
//! Layout: a [`Header`] of 128 bytes (the master's server-wide fields), `slots` [`Slot`]s of
//! 256 bytes (four cache lines), then `slots * threads_per_slot`
//! [`ThreadSlot`]s of 256 bytes, slot `s`'s thread `t` at index `s * threads_per_slot + t`;
//! then the request counters ([`metrics`]): one [`RequestMetrics`] block per app thread (the
//! same order), one per slot (the responses the server writes itself), and last the
//! [`Retired`] totals of the workers reaped so far.
//!
//! The worker states ([`WorkerState`]), for every MPM: `booting` from fork until the worker's
//! loop starts; then `busy` while at least one request is dispatched to the app (prefork: its
//! one thread; thread/event: any app thread); otherwise, as the loop last saw it (each loop
//! turn, at least once per heartbeat second): `reading` while a connection waits for its
//! first request or is part-way through a request head (or a body the loop reads before
//! dispatch), `keepalive` while
//! connections are open and none is (idle keep-alive connections, or output the loop
//! finishes), `idle` with no connection; `stopping` once it drains to exit. The state is
//! a gauge for people; decisions use `active` and the sub-slots, which are exact.

use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{fence, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

pub mod metrics;
mod records;
mod states;
pub mod thread;

pub use metrics::{Counted, MetricsReading, RequestMetrics};
pub use records::{
    Compression, ExitReading, Header, Retired, Slot, SlotReading, Totals, COMPRESSION_COUNTERS,
    MEMORY_UNKNOWN, RECENT_EXITS,
};
pub(crate) use states::slot_enum;
pub use states::{ExitReason, WorkerState};
pub use thread::{monotonic_ns, Owed, ThreadReading, ThreadSlot, ThreadState};

/// The shared mapping. Cloning is not offered: the owner (master) keeps one; forked children
/// inherit the mapping and keep using the same object.
pub struct Scoreboard {
    header: NonNull<Header>,
    base: NonNull<Slot>,
    slots: usize,
    threads_per_slot: usize,
}

// SAFETY: the mapping is plain shared memory accessed only through atomics.
unsafe impl Send for Scoreboard {}
// SAFETY: as above; every access is an atomic operation on a field of a slot.
unsafe impl Sync for Scoreboard {}

/// Milliseconds since the Unix epoch, the scoreboard's wall-clock unit.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Scoreboard {
    /// Maps a zeroed region for `slots` slots of `threads_per_slot` sub-slots each.
    pub fn new(slots: usize, threads_per_slot: usize) -> io::Result<Self> {
        if slots == 0 || threads_per_slot == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a scoreboard needs at least one slot and one thread per slot",
            ));
        }
        let len = Self::mapping_len(slots, threads_per_slot).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "scoreboard size overflows")
        })?;
        // SAFETY: an anonymous shared mapping with no address hint; the result is checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // Anonymous mappings are zero-filled, which is the Free state of every field.
        let header =
            NonNull::new(ptr.cast::<Header>()).expect("mmap returned null without MAP_FAILED");
        // SAFETY: the slots start right after the header, inside the mapping (mapping_len
        // counts it; the header's 128 bytes keep the slots 64-byte aligned).
        let base = unsafe { header.add(1).cast::<Slot>() };
        Ok(Scoreboard {
            header,
            base,
            slots,
            threads_per_slot,
        })
    }

    fn mapping_len(slots: usize, threads_per_slot: usize) -> Option<usize> {
        let slot_bytes = slots
            .checked_mul(std::mem::size_of::<Slot>())?
            .checked_add(std::mem::size_of::<Header>())?;
        let thread_bytes = slots
            .checked_mul(threads_per_slot)?
            .checked_mul(std::mem::size_of::<ThreadSlot>())?;
        let metrics_bytes = slots
            .checked_mul(threads_per_slot)?
            .checked_add(slots)?
            .checked_mul(std::mem::size_of::<RequestMetrics>())?;
        slot_bytes
            .checked_add(thread_bytes)?
            .checked_add(metrics_bytes)?
            .checked_add(std::mem::size_of::<Retired>())
    }

    /// The first request-metrics block (app thread 0 of slot 0), right after the sub-slots.
    fn metrics_base(&self) -> *const RequestMetrics {
        // SAFETY: the sub-slots end inside the mapping (mapping_len counts them and what
        // follows); every size before is a multiple of 64, RequestMetrics' alignment.
        unsafe {
            self.base
                .as_ptr()
                .add(self.slots)
                .cast::<ThreadSlot>()
                .add(self.slots * self.threads_per_slot)
                .cast::<RequestMetrics>()
        }
    }

    /// The request counters of app thread `thread` of slot `index` (only that thread writes
    /// them), or `None` when out of range.
    pub fn thread_metrics(&self, index: usize, thread: usize) -> Option<&RequestMetrics> {
        if index >= self.slots || thread >= self.threads_per_slot {
            return None;
        }
        // SAFETY: in range of the blocks mapping_len counts; atomics only.
        Some(unsafe {
            &*self
                .metrics_base()
                .add(index * self.threads_per_slot + thread)
        })
    }

    /// The counters of the responses slot `index`'s worker writes itself (400, 408, 413,
    /// 414, 431, 503: any of its threads, with locked adds), or `None` when out of range.
    pub fn server_metrics(&self, index: usize) -> Option<&RequestMetrics> {
        if index >= self.slots {
            return None;
        }
        // SAFETY: as in thread_metrics; these blocks follow the per-thread ones.
        Some(unsafe {
            &*self
                .metrics_base()
                .add(self.slots * self.threads_per_slot + index)
        })
    }

    /// The totals of the workers reaped so far (the last region of the mapping).
    pub fn retired(&self) -> &Retired {
        // SAFETY: the last region, after every metrics block; aligned as RequestMetrics is.
        unsafe {
            &*self
                .metrics_base()
                .add(self.slots * (self.threads_per_slot + 1))
                .cast::<Retired>()
        }
    }

    /// The server-wide fields.
    pub fn header(&self) -> &Header {
        // SAFETY: the header is at the start of the mapping, which lives as long as self;
        // its fields are atomics only.
        unsafe { self.header.as_ref() }
    }

    /// Master: publishes its pid and start time (before the first fork).
    pub fn publish_master(&self, pid: u32) {
        let header = self.header();
        header.started_ms.store(now_ms(), Ordering::Relaxed);
        header.master_pid.store(pid, Ordering::Release);
    }

    /// Master: the rate-limit table's size and its entries in use now (when it makes or
    /// adopts the table; the workers add to the entries as they take more).
    pub fn set_rate_table(&self, capacity: u64, entries: u64) {
        self.header()
            .rate_capacity
            .store(capacity, Ordering::Relaxed);
        self.header().rate_entries.store(entries, Ordering::Relaxed);
    }

    /// The rate-limit table's `(entries in use, capacity)`; `(0, 0)` without a table.
    pub fn rate_table(&self) -> (u64, u64) {
        let header = self.header();
        (
            header.rate_entries.load(Ordering::Relaxed),
            header.rate_capacity.load(Ordering::Relaxed),
        )
    }

    /// Master: the current generation (after a reload began).
    pub fn set_generation(&self, generation: u32) {
        self.header()
            .generation
            .store(generation, Ordering::Relaxed);
    }

    /// Master: the server began to stop (`/readyz` says not ready from now on).
    pub fn set_stopping(&self) {
        self.header().stopping.store(1, Ordering::Release);
    }

    /// How many slots there are.
    pub fn len(&self) -> usize {
        self.slots
    }

    /// Always false: a scoreboard has at least one slot.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Sub-slots (app threads) per slot.
    pub fn threads_per_slot(&self) -> usize {
        self.threads_per_slot
    }

    /// The slot at `index`, or `None` when out of range.
    pub fn slot(&self, index: usize) -> Option<&Slot> {
        if index >= self.slots {
            return None;
        }
        // SAFETY: index is in range and the mapping lives as long as self; slots are only
        // accessed through atomics, so shared references are sound across processes.
        Some(unsafe { &*self.base.as_ptr().add(index) })
    }

    /// The sub-slot of app thread `thread` of slot `index`, or `None` when out of range.
    pub fn thread_slot(&self, index: usize, thread: usize) -> Option<&ThreadSlot> {
        if index >= self.slots || thread >= self.threads_per_slot {
            return None;
        }
        // SAFETY: the sub-slots start right after the slots (Slot is 128 bytes, a multiple of
        // ThreadSlot's 64-byte alignment); the index is in range of the mapping, which lives
        // as long as self; fields are atomics only.
        Some(unsafe {
            let first = self.base.as_ptr().add(self.slots).cast::<ThreadSlot>();
            &*first.add(index * self.threads_per_slot + thread)
        })
    }

    /// Claims a slot for a newly forked worker (called by the master): every field of the
    /// previous worker (its exit reason too) is forgotten.
    pub fn claim(&self, index: usize, pid: u32, generation: u32) -> bool {
        let Some(slot) = self.slot(index) else {
            return false;
        };
        for counter in [
            &slot.requests,
            &slot.accepted,
            &slot.connections,
            &slot.bytes_out,
            &slot.bytes_in,
            &slot.rss,
            &slot.pss,
            &slot.uss,
            &slot.swap,
            &slot.memory_sampled_ms,
            &slot.loop_heartbeat_ms,
            &slot.interpreter_seen_ns,
            &slot.h2_connections,
            &slot.h2_streams,
            &slot.rate_limited,
            &slot.rate_evictions,
            &slot.refused_connections,
            &slot.queued,
            &slot.queued_since_ns,
        ]
        .into_iter()
        .chain(&slot.compression)
        {
            counter.store(0, Ordering::Relaxed);
        }
        slot.active.store(0, Ordering::Relaxed);
        slot.exit_reason
            .store(ExitReason::None as u32, Ordering::Relaxed);
        slot.dumped.store(0, Ordering::Relaxed);
        for thread in 0..self.threads_per_slot {
            if let Some(thread_slot) = self.thread_slot(index, thread) {
                thread_slot.reset();
            }
            if let Some(metrics) = self.thread_metrics(index, thread) {
                metrics.reset();
            }
        }
        if let Some(metrics) = self.server_metrics(index) {
            metrics.reset();
        }
        slot.heartbeat_ms.store(now_ms(), Ordering::Relaxed);
        slot.generation.store(generation, Ordering::Relaxed);
        slot.state
            .store(WorkerState::Booting as u32, Ordering::Relaxed);
        slot.pid.store(pid, Ordering::Release);
        true
    }

    /// Publishes the pid of the worker forked into `index`, which the master claimed just
    /// before the fork (with pid 0): claimed after the fork instead, the claim could land
    /// after the child's first records (a busy master, a quick child) and wipe them, the
    /// request it died serving among them.
    pub fn set_pid(&self, index: usize, pid: u32) -> bool {
        let Some(slot) = self.slot(index) else {
            return false;
        };
        slot.pid.store(pid, Ordering::Release);
        true
    }

    /// Frees a slot after its worker was reaped. The exit reason and the counters stay, for
    /// the log and the status output ("last exit reason"), until the slot is claimed again.
    pub fn clear(&self, index: usize) -> bool {
        let Some(slot) = self.slot(index) else {
            return false;
        };
        slot.state
            .store(WorkerState::Free as u32, Ordering::Relaxed);
        slot.active.store(0, Ordering::Relaxed);
        slot.connections.store(0, Ordering::Relaxed);
        slot.h2_connections.store(0, Ordering::Relaxed);
        slot.h2_streams.store(0, Ordering::Relaxed);
        slot.queued.store(0, Ordering::Relaxed);
        slot.queued_since_ns.store(0, Ordering::Relaxed);
        slot.pid.store(0, Ordering::Release);
        true
    }

    /// Master, for a reaped worker (pid `pid`, wait status `wait_status`) in slot `index`:
    /// adds its counters to the retired totals, counts its exit by the reason recorded in the
    /// slot, keeps it in the ring of recent exits, and frees the slot ([`Scoreboard::clear`]),
    /// all under the retired totals' sequence counter.
    pub fn retire(&self, index: usize, pid: u32, wait_status: i32) -> bool {
        let Some(slot) = self.slot(index) else {
            return false;
        };
        let retired = self.retired();
        let sequence = retired.sequence.load(Ordering::Relaxed);
        retired.sequence.store(sequence + 1, Ordering::Relaxed);
        // Orders the odd sequence before the changes (seqlock writer).
        fence(Ordering::Release);
        let requests = slot.requests.load(Ordering::Relaxed);
        for (from, to) in [
            (&slot.requests, &retired.requests),
            (&slot.accepted, &retired.accepted),
            (&slot.bytes_out, &retired.bytes_out),
            (&slot.bytes_in, &retired.bytes_in),
            (&slot.rate_limited, &retired.rate_limited),
            (&slot.rate_evictions, &retired.rate_evictions),
            (&slot.refused_connections, &retired.refused_connections),
        ]
        .into_iter()
        .chain(slot.compression.iter().zip(&retired.compression))
        {
            to.fetch_add(from.swap(0, Ordering::Relaxed), Ordering::Relaxed);
        }
        let reason = ExitReason::from_u32(slot.exit_reason.load(Ordering::Relaxed));
        retired.exits[reason as usize].fetch_add(1, Ordering::Relaxed);
        for thread in 0..self.threads_per_slot {
            if let Some(metrics) = self.thread_metrics(index, thread) {
                metrics.fold_into(&retired.metrics);
            }
        }
        if let Some(metrics) = self.server_metrics(index) {
            metrics.fold_into(&retired.metrics);
        }
        let recorded = retired.exits_recorded.load(Ordering::Relaxed);
        let record = &retired.recent[recorded as usize % RECENT_EXITS];
        record.pid.store(pid, Ordering::Relaxed);
        record.slot.store(index as u32, Ordering::Relaxed);
        record.reason.store(reason as u32, Ordering::Relaxed);
        record
            .wait_status
            .store(wait_status as u32, Ordering::Relaxed);
        record.at_ms.store(now_ms(), Ordering::Relaxed);
        record.requests.store(requests, Ordering::Relaxed);
        retired
            .exits_recorded
            .store(recorded + 1, Ordering::Relaxed);
        self.clear(index);
        retired.sequence.store(sequence + 2, Ordering::Release);
        true
    }

    /// Reads `read` consistently with the master's [`Scoreboard::retire`]: again while the
    /// master folds a worker in (it takes microseconds; bounded, in case the master died
    /// mid-fold: then the last reading is returned).
    fn read_consistent<T>(&self, mut read: impl FnMut() -> T) -> T {
        let sequence = &self.retired().sequence;
        for _ in 0..10_000 {
            let before = sequence.load(Ordering::Acquire);
            if before & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let value = read();
            // Orders the reads before the second sequence load (seqlock reader).
            fence(Ordering::Acquire);
            if sequence.load(Ordering::Relaxed) == before {
                return value;
            }
        }
        read()
    }

    /// Server-wide totals: the live slots plus the retired totals.
    pub fn totals(&self) -> Totals {
        self.read_consistent(|| {
            let retired = self.retired();
            let mut totals = Totals {
                accepted: retired.accepted.load(Ordering::Relaxed),
                bytes_out: retired.bytes_out.load(Ordering::Relaxed),
                bytes_in: retired.bytes_in.load(Ordering::Relaxed),
                rate_limited: retired.rate_limited.load(Ordering::Relaxed),
                rate_evictions: retired.rate_evictions.load(Ordering::Relaxed),
                refused_connections: retired.refused_connections.load(Ordering::Relaxed),
                rate_entries: self.header().rate_entries.load(Ordering::Relaxed),
                rate_capacity: self.header().rate_capacity.load(Ordering::Relaxed),
                compression: Compression::from_counters(
                    retired
                        .compression
                        .each_ref()
                        .map(|counter| counter.load(Ordering::Relaxed)),
                ),
                ..Totals::default()
            };
            for (total, exits) in totals.exits.iter_mut().zip(retired.exits.iter()) {
                *total = exits.load(Ordering::Relaxed);
            }
            retired.metrics.add_to(&mut totals.metrics);
            for index in 0..self.slots {
                let Some(slot) = self.slot(index) else {
                    continue;
                };
                // A free slot's counters were folded in (and zeroed) when it was retired.
                totals.accepted += slot.accepted.load(Ordering::Relaxed);
                totals.bytes_out += slot.bytes_out.load(Ordering::Relaxed);
                totals.bytes_in += slot.bytes_in.load(Ordering::Relaxed);
                totals.rate_limited += slot.rate_limited.load(Ordering::Relaxed);
                totals.rate_evictions += slot.rate_evictions.load(Ordering::Relaxed);
                totals.refused_connections += slot.refused_connections.load(Ordering::Relaxed);
                totals.compression.add(&Compression::from_counters(
                    slot.compression
                        .each_ref()
                        .map(|counter| counter.load(Ordering::Relaxed)),
                ));
                if slot.pid.load(Ordering::Relaxed) != 0 {
                    totals.in_flight += u64::from(slot.active.load(Ordering::Relaxed));
                    totals.connections += slot.connections.load(Ordering::Relaxed);
                    totals.h2_connections += slot.h2_connections.load(Ordering::Relaxed);
                    totals.h2_streams += slot.h2_streams.load(Ordering::Relaxed);
                    let queued = slot.queued.load(Ordering::Relaxed);
                    totals.queued += queued;
                    let since = slot.queued_since_shown(queued);
                    if since != 0 && (totals.queued_since_ns == 0 || since < totals.queued_since_ns)
                    {
                        totals.queued_since_ns = since;
                    }
                }
                for thread in 0..self.threads_per_slot {
                    if let Some(metrics) = self.thread_metrics(index, thread) {
                        metrics.add_to(&mut totals.metrics);
                    }
                }
                if let Some(metrics) = self.server_metrics(index) {
                    metrics.add_to(&mut totals.metrics);
                }
            }
            totals
        })
    }

    /// The counters of live slot `index` alone: requests by method and status class and the
    /// histograms (its threads' blocks and its own).
    pub fn slot_metrics(&self, index: usize) -> MetricsReading {
        let mut reading = MetricsReading::default();
        for thread in 0..self.threads_per_slot {
            if let Some(metrics) = self.thread_metrics(index, thread) {
                metrics.add_to(&mut reading);
            }
        }
        if let Some(metrics) = self.server_metrics(index) {
            metrics.add_to(&mut reading);
        }
        reading
    }

    /// The recent worker exits, newest first (at most [`RECENT_EXITS`]).
    pub fn recent_exits(&self) -> Vec<ExitReading> {
        self.read_consistent(|| {
            let retired = self.retired();
            let recorded = retired.exits_recorded.load(Ordering::Relaxed);
            let kept = recorded.min(RECENT_EXITS as u64);
            (1..=kept)
                .map(|back| {
                    let record = &retired.recent[((recorded - back) as usize) % RECENT_EXITS];
                    ExitReading {
                        pid: record.pid.load(Ordering::Relaxed),
                        slot: record.slot.load(Ordering::Relaxed),
                        reason: ExitReason::from_u32(record.reason.load(Ordering::Relaxed)),
                        wait_status: record.wait_status.load(Ordering::Relaxed) as i32,
                        at_ms: record.at_ms.load(Ordering::Relaxed),
                        requests: record.requests.load(Ordering::Relaxed),
                    }
                })
                .collect()
        })
    }

    /// Master: records the latest memory sample of slot `index` (bytes).
    pub fn set_memory(&self, index: usize, rss: u64, pss: u64, uss: u64, swap: u64) -> bool {
        let Some(slot) = self.slot(index) else {
            return false;
        };
        slot.rss.store(rss, Ordering::Relaxed);
        slot.pss.store(pss, Ordering::Relaxed);
        slot.uss.store(uss, Ordering::Relaxed);
        slot.swap.store(swap, Ordering::Relaxed);
        slot.memory_sampled_ms.store(now_ms(), Ordering::Release);
        true
    }

    /// Master: records why it is about to stop the worker in slot `index` (overwrites).
    pub fn set_exit_reason(&self, index: usize, reason: ExitReason) -> bool {
        let Some(slot) = self.slot(index) else {
            return false;
        };
        slot.exit_reason.store(reason as u32, Ordering::Relaxed);
        true
    }

    /// Reads one slot.
    pub fn read(&self, index: usize) -> Option<SlotReading> {
        let slot = self.slot(index)?;
        let queued = slot.queued.load(Ordering::Relaxed);
        Some(SlotReading {
            pid: slot.pid.load(Ordering::Acquire),
            generation: slot.generation.load(Ordering::Relaxed),
            state: WorkerState::from_u32(slot.state.load(Ordering::Relaxed)),
            active: slot.active.load(Ordering::Relaxed),
            requests: slot.requests.load(Ordering::Relaxed),
            accepted: slot.accepted.load(Ordering::Relaxed),
            heartbeat_ms: slot.heartbeat_ms.load(Ordering::Relaxed),
            connections: slot.connections.load(Ordering::Relaxed),
            bytes_out: slot.bytes_out.load(Ordering::Relaxed),
            bytes_in: slot.bytes_in.load(Ordering::Relaxed),
            exit_reason: ExitReason::from_u32(slot.exit_reason.load(Ordering::Relaxed)),
            dumped: slot.dumped.load(Ordering::Acquire) != 0,
            rss: slot.rss.load(Ordering::Relaxed),
            pss: slot.pss.load(Ordering::Relaxed),
            uss: slot.uss.load(Ordering::Relaxed),
            swap: slot.swap.load(Ordering::Relaxed),
            memory_sampled_ms: slot.memory_sampled_ms.load(Ordering::Acquire),
            loop_heartbeat_ms: slot.loop_heartbeat_ms.load(Ordering::Relaxed),
            interpreter_seen_ns: slot.interpreter_seen_ns.load(Ordering::Relaxed),
            h2_connections: slot.h2_connections.load(Ordering::Relaxed),
            h2_streams: slot.h2_streams.load(Ordering::Relaxed),
            queued,
            queued_since_ns: slot.queued_since_shown(queued),
        })
    }

    /// Reads every sub-slot of slot `index` (empty when out of range).
    pub fn read_threads(&self, index: usize) -> Vec<ThreadReading> {
        (0..self.threads_per_slot)
            .filter_map(|thread| self.thread_slot(index, thread))
            .map(ThreadSlot::read)
            .collect()
    }

    /// Total connections accepted by the live workers, and how many live workers there are
    /// (for the fair-share accept throttle).
    pub fn accept_totals(&self) -> (u64, u64) {
        let mut total = 0;
        let mut live = 0;
        for index in 0..self.slots {
            if let Some(slot) = self.slot(index) {
                if slot.pid.load(Ordering::Relaxed) != 0 {
                    live += 1;
                    total += slot.connections.load(Ordering::Relaxed);
                }
            }
        }
        (total, live)
    }
}

impl Drop for Scoreboard {
    fn drop(&mut self) {
        let len = Self::mapping_len(self.slots, self.threads_per_slot)
            .expect("checked when the mapping was made");
        // SAFETY: header/len are exactly what mmap returned; no reference outlives self.
        unsafe {
            libc::munmap(self.header.as_ptr().cast(), len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_is_two_cache_lines_before_the_slots() {
        assert_eq!(std::mem::size_of::<Header>(), 128);
        let board = Scoreboard::new(2, 1).unwrap();
        let header = board.header() as *const Header as usize;
        assert_eq!(board.slot(0).unwrap() as *const Slot as usize - header, 128);
        board.publish_master(77);
        board.set_stopping();
        assert_eq!(board.header().master_pid.load(Ordering::Relaxed), 77);
        assert_eq!(board.header().stopping.load(Ordering::Relaxed), 1);
        assert_eq!(board.slot(0).unwrap().pid.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn slots_are_four_cache_lines() {
        assert_eq!(std::mem::size_of::<Slot>(), 256);
        assert_eq!(std::mem::align_of::<Slot>(), 64);
        assert_eq!(std::mem::offset_of!(Slot, exit_reason), 64);
        // The last field of the second line: it is full.
        assert_eq!(std::mem::offset_of!(Slot, interpreter_seen_ns), 120);
        // The HTTP/2 gauges start the third.
        assert_eq!(std::mem::offset_of!(Slot, h2_connections), 128);
        assert_eq!(std::mem::offset_of!(Slot, h2_streams), 136);
        // The pool's queue is on the third line too, never on the first (the requests').
        assert_eq!(std::mem::offset_of!(Slot, queued), 168);
        assert_eq!(std::mem::offset_of!(Slot, queued_since_ns), 176);
        // The compression counters have the fourth line to themselves.
        assert_eq!(std::mem::offset_of!(Slot, compression), 192);
    }

    #[test]
    fn the_mapping_holds_the_header_the_slots_then_their_threads() {
        let board = Scoreboard::new(3, 4).unwrap();
        assert_eq!(board.threads_per_slot(), 4);
        let first = board.thread_slot(0, 0).unwrap() as *const ThreadSlot as usize;
        let last = board.thread_slot(2, 3).unwrap() as *const ThreadSlot as usize;
        assert_eq!(first - board.base.as_ptr() as usize, 3 * 256);
        assert_eq!(last - first, 11 * 256);
        assert!(board.thread_slot(2, 4).is_none());
        assert!(board.thread_slot(3, 0).is_none());
        assert_eq!(std::mem::size_of::<Retired>(), 23 * 64);
        assert_eq!(
            Scoreboard::mapping_len(3, 4),
            Some(128 + 3 * 256 + 12 * 256 + 15 * 704 + 23 * 64)
        );
        let metrics = board.thread_metrics(0, 0).unwrap() as *const RequestMetrics as usize;
        assert_eq!(metrics - last, 256);
        let server = board.server_metrics(2).unwrap() as *const RequestMetrics as usize;
        assert_eq!(server - metrics, 14 * 704);
        let retired = board.retired() as *const Retired as usize;
        assert_eq!(retired - server, 704);
        assert!(board.thread_metrics(0, 4).is_none());
        assert!(board.server_metrics(3).is_none());
        assert!(Scoreboard::new(1, 0).is_err());
    }

    #[test]
    fn claim_read_and_clear_round_trip() {
        let board = Scoreboard::new(3, 1).unwrap();
        assert!(board.claim(1, 4242, 7));
        let reading = board.read(1).unwrap();
        assert_eq!(
            (reading.pid, reading.generation, reading.state),
            (4242, 7, WorkerState::Booting)
        );
        board
            .slot(1)
            .unwrap()
            .requests
            .fetch_add(5, Ordering::Relaxed);
        assert_eq!(board.read(1).unwrap().requests, 5);
        assert!(board.clear(1));
        assert_eq!(board.read(1).unwrap().state, WorkerState::Free);
        assert!(board.read(3).is_none());
    }

    #[test]
    fn h2_connections_and_streams_are_gauges_of_the_live_workers() {
        let board = Scoreboard::new(2, 1).unwrap();
        board.claim(0, 10, 1);
        board.claim(1, 11, 1);
        let (first, second) = (board.slot(0).unwrap(), board.slot(1).unwrap());
        first.h2_connection_opened();
        first.h2_connection_opened();
        for _ in 0..5 {
            first.h2_stream_opened();
        }
        first.h2_stream_ended();
        second.h2_connection_opened();
        second.h2_stream_opened();
        let reading = board.read(0).unwrap();
        assert_eq!((reading.h2_connections, reading.h2_streams), (2, 4));
        let totals = board.totals();
        assert_eq!((totals.h2_connections, totals.h2_streams), (3, 5));
        // What a worker ends never goes below zero (a stray end is not a wrap to 2^64 - 1).
        second.h2_stream_ended();
        second.h2_stream_ended();
        second.h2_connection_closed();
        second.h2_connection_closed();
        let reading = board.read(1).unwrap();
        assert_eq!((reading.h2_connections, reading.h2_streams), (0, 0));
        // A reaped worker's gauges leave the totals; its slot's next worker starts at zero.
        assert!(board.retire(0, 10, 0));
        let totals = board.totals();
        assert_eq!((totals.h2_connections, totals.h2_streams), (0, 0));
        assert_eq!(board.read(0).unwrap().h2_streams, 0);
        first.h2_stream_opened();
        board.claim(0, 12, 2);
        assert_eq!(board.read(0).unwrap().h2_streams, 0);
    }

    #[test]
    fn compression_counters_are_summed_and_outlive_their_worker() {
        let board = Scoreboard::new(2, 1).unwrap();
        board.claim(0, 100, 1);
        board.claim(1, 101, 1);
        for (slot, counts) in [
            (0, [2, 1, 0, 900, 300, 4, 1]),
            (1, [1, 0, 3, 100, 60, 0, 2]),
        ] {
            for (counter, count) in board.slot(slot).unwrap().compression.iter().zip(counts) {
                counter.store(count, Ordering::Relaxed);
            }
        }
        let expected = Compression {
            responses: [3, 1, 3],
            bytes_in: 1000,
            bytes_out: 360,
            skipped: 4,
            not_accepted: 3,
        };
        assert_eq!(board.totals().compression, expected);
        assert_eq!(board.totals().compression.compressed(), 7);
        board.retire(0, 100, 0);
        assert_eq!(board.totals().compression, expected);
        board.claim(0, 102, 1);
        assert_eq!(board.totals().compression, expected);
        assert!(board
            .slot(0)
            .unwrap()
            .compression
            .iter()
            .all(|c| c.load(Ordering::Relaxed) == 0));
    }

    #[test]
    fn the_exit_reason_outlives_the_worker_until_the_slot_is_claimed() {
        let board = Scoreboard::new(1, 1).unwrap();
        board.claim(0, 10, 1);
        board
            .slot(0)
            .unwrap()
            .propose_exit_reason(ExitReason::MaxRequests);
        // The worker's proposal does not overwrite a recorded reason; the master's does.
        board
            .slot(0)
            .unwrap()
            .propose_exit_reason(ExitReason::CpuLimit);
        assert_eq!(board.read(0).unwrap().exit_reason, ExitReason::MaxRequests);
        board.set_exit_reason(0, ExitReason::RequestTimeout);
        board.clear(0);
        assert_eq!(
            board.read(0).unwrap().exit_reason,
            ExitReason::RequestTimeout
        );
        board.claim(0, 11, 1);
        assert_eq!(board.read(0).unwrap().exit_reason, ExitReason::None);
    }

    #[test]
    fn exit_reasons_round_trip_by_name() {
        for (value, reason) in ExitReason::ALL.iter().copied().enumerate() {
            assert_eq!(reason as usize, value);
            assert_eq!(ExitReason::from_u32(value as u32), reason);
            assert_eq!(ExitReason::from_name(reason.name()), Some(reason));
        }
        assert_eq!(ExitReason::from_name("bogus"), None);
    }

    #[test]
    fn every_slot_enum_reads_back_its_own_values_and_unknown_values_as_the_first() {
        for state in WorkerState::ALL.iter().copied() {
            assert_eq!(WorkerState::from_u32(state as u32), state);
            assert_eq!(WorkerState::from_name(state.name()), Some(state));
        }
        for state in ThreadState::ALL.iter().copied() {
            assert_eq!(ThreadState::from_u32(state as u32), state);
        }
        assert_eq!(WorkerState::from_u32(99), WorkerState::Free);
        assert_eq!(ExitReason::from_u32(99), ExitReason::None);
        assert_eq!(ThreadState::from_u32(99), ThreadState::Idle);
        assert_eq!(WorkerState::KeepAlive.name(), "keepalive");
    }

    #[test]
    fn a_retired_worker_s_counts_move_to_the_totals_which_only_grow() {
        let board = Scoreboard::new(2, 2).unwrap();
        board.claim(0, 10, 1);
        board.claim(1, 11, 1);
        let slot = board.slot(0).unwrap();
        slot.requests.store(2, Ordering::Relaxed);
        slot.accepted.store(1, Ordering::Relaxed);
        slot.bytes_out.store(300, Ordering::Relaxed);
        slot.bytes_in.store(80, Ordering::Relaxed);
        slot.active.store(1, Ordering::Relaxed);
        slot.connections.store(1, Ordering::Relaxed);
        let thread = board.thread_metrics(0, 1).unwrap();
        thread.record_owned(Counted::new(b"GET", 200, 1));
        thread.record_owned(Counted::new(b"POST", 500, 1));
        board
            .server_metrics(1)
            .unwrap()
            .record_shared(Counted::new(b"GET", 408, 0), 5);
        let before = board.totals();
        assert_eq!(before.metrics.total(), 3);
        assert_eq!(
            (before.accepted, before.bytes_out, before.bytes_in),
            (1, 300, 80)
        );
        assert_eq!((before.in_flight, before.connections), (1, 1));

        board.set_exit_reason(0, ExitReason::Crash);
        assert!(board.retire(0, 10, 9));
        let after = board.totals();
        assert_eq!(after.metrics, before.metrics);
        assert_eq!(
            (after.accepted, after.bytes_out, after.bytes_in),
            (1, 300, 80)
        );
        assert_eq!((after.in_flight, after.connections), (0, 0));
        assert_eq!(after.exits[ExitReason::Crash as usize], 1);
        assert_eq!(board.read(0).unwrap().state, WorkerState::Free);
        assert_eq!(board.slot_metrics(0), MetricsReading::default());

        // The slot's next worker starts from zero; the totals keep the first one's.
        board.claim(0, 12, 2);
        board
            .thread_metrics(0, 0)
            .unwrap()
            .record_owned(Counted::new(b"GET", 200, 1));
        assert_eq!(board.totals().metrics.total(), 4);
        let exits = board.recent_exits();
        assert_eq!(exits.len(), 1);
        assert_eq!(
            (
                exits[0].pid,
                exits[0].slot,
                exits[0].reason,
                exits[0].wait_status
            ),
            (10, 0, ExitReason::Crash, 9)
        );
        assert_eq!(exits[0].requests, 2);
        assert!(!board.retire(2, 1, 0));
    }

    #[test]
    fn a_slot_claimed_before_the_fork_keeps_what_the_child_records_before_its_pid_is_set() {
        let board = Scoreboard::new(2, 1).unwrap();
        assert!(board.claim(1, 0, 3));
        board
            .thread_slot(1, 0)
            .unwrap()
            .begin_request(b"GET", b"/exit", 5);
        assert!(board.set_pid(1, 4242));
        let reading = board.read(1).unwrap();
        assert_eq!(reading.pid, 4242);
        let threads = board.read_threads(1);
        assert_eq!(threads[0].state, ThreadState::App);
        assert_eq!(threads[0].target, b"/exit");
        assert!(!board.set_pid(9, 1));
    }

    #[test]
    fn the_ring_keeps_the_newest_exits_first() {
        let board = Scoreboard::new(1, 1).unwrap();
        for pid in 1..=(RECENT_EXITS as u32 + 3) {
            board.claim(0, pid, 1);
            board.retire(0, pid, 0);
        }
        let pids: Vec<u32> = board.recent_exits().iter().map(|exit| exit.pid).collect();
        assert_eq!(pids.len(), RECENT_EXITS);
        assert_eq!(pids[0], RECENT_EXITS as u32 + 3);
        assert_eq!(pids[RECENT_EXITS - 1], 4);
        assert_eq!(board.totals().exits[ExitReason::None as usize], 19);
    }

    #[test]
    fn memory_samples_are_kept_per_slot() {
        let board = Scoreboard::new(2, 1).unwrap();
        board.claim(1, 10, 1);
        assert!(board.set_memory(1, 4, 3, 2, 1));
        let reading = board.read(1).unwrap();
        assert_eq!(
            (reading.rss, reading.pss, reading.uss, reading.swap),
            (4, 3, 2, 1)
        );
        assert!(reading.memory_sampled_ms > 0);
        assert_eq!(board.read(0).unwrap().rss, 0);
        assert!(!board.set_memory(2, 1, 1, 1, 1));
    }

    #[test]
    fn writes_in_a_forked_child_are_seen_by_the_parent() {
        let board = Scoreboard::new(1, 2).unwrap();
        // SAFETY: the child only does atomic stores, a vDSO clock read and _exit.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            board.slot(0).unwrap().requests.store(99, Ordering::Release);
            board
                .thread_slot(0, 1)
                .unwrap()
                .begin_request(b"POST", b"/from/the/child", 5);
            // SAFETY: _exit never returns and runs no destructors in the child.
            unsafe { libc::_exit(0) };
        }
        let mut status = 0;
        // SAFETY: waits for the child just forked; status is a valid out-pointer.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(board.read(0).unwrap().requests, 99);
        let threads = board.read_threads(0);
        assert_eq!(threads[0].state, ThreadState::Idle);
        assert_eq!(
            (
                threads[1].method.as_slice(),
                threads[1].target.as_slice(),
                threads[1].fd
            ),
            (&b"POST"[..], &b"/from/the/child"[..], 5)
        );
        assert!(threads[1].dispatch_ns <= monotonic_ns());
    }
}
