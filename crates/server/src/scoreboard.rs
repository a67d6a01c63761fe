//! The scoreboard: one `MAP_SHARED` anonymous mapping with a fixed slot per worker.
//!
//! The master creates it before the first fork, so every worker inherits the same physical
//! pages. A worker writes only its own slot; the master and the status endpoint read all of
//! them. Every field is an atomic, so readers never see a torn value (a reader may see fields
//! from two different moments, which the consumers tolerate: they are gauges and counters).

use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// What a worker is doing, as published in its slot (Apache's `SERVER_*` states, ours named).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum WorkerState {
    /// No worker owns the slot.
    Free = 0,
    /// Forked, loading the app.
    Booting = 1,
    /// Waiting for connections or requests.
    Idle = 2,
    /// Running a request (in the thread MPM: at least one app thread is).
    Busy = 3,
    /// Draining before exit (graceful stop or recycling).
    Stopping = 4,
}

impl WorkerState {
    fn from_u32(value: u32) -> Self {
        match value {
            1 => WorkerState::Booting,
            2 => WorkerState::Idle,
            3 => WorkerState::Busy,
            4 => WorkerState::Stopping,
            _ => WorkerState::Free,
        }
    }

    /// The lower-case name used in Python and in the status output.
    pub fn name(self) -> &'static str {
        match self {
            WorkerState::Free => "free",
            WorkerState::Booting => "booting",
            WorkerState::Idle => "idle",
            WorkerState::Busy => "busy",
            WorkerState::Stopping => "stopping",
        }
    }
}

/// One worker's slot. `#[repr(C)]` and 64-byte aligned so slots never share a cache line.
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
    /// Start of the oldest request in progress, ms since the epoch (0 when none).
    pub request_start_ms: AtomicU64,
    /// Connections currently open in this worker.
    pub connections: AtomicU64,
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
    /// See [`Slot::request_start_ms`].
    pub request_start_ms: u64,
    /// See [`Slot::connections`].
    pub connections: u64,
}

/// The shared mapping. Cloning is not offered: the owner (master) keeps one; forked children
/// inherit the mapping and keep using the same object.
pub struct Scoreboard {
    base: NonNull<Slot>,
    slots: usize,
}

// SAFETY: the mapping is plain shared memory accessed only through atomics.
unsafe impl Send for Scoreboard {}
// SAFETY: as above; every access is an atomic operation on a field of a slot.
unsafe impl Sync for Scoreboard {}

/// Milliseconds since the Unix epoch, the scoreboard's time unit.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Scoreboard {
    /// Maps a zeroed region for `slots` slots.
    pub fn new(slots: usize) -> io::Result<Self> {
        if slots == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a scoreboard needs at least one slot",
            ));
        }
        let len = slots * std::mem::size_of::<Slot>();
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
        let base = NonNull::new(ptr.cast::<Slot>()).expect("mmap returned null without MAP_FAILED");
        Ok(Scoreboard { base, slots })
    }

    /// How many slots there are.
    pub fn len(&self) -> usize {
        self.slots
    }

    /// Always false: a scoreboard has at least one slot.
    pub fn is_empty(&self) -> bool {
        false
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

    /// Claims a slot for a newly forked worker (called by the master).
    pub fn claim(&self, index: usize, pid: u32, generation: u32) -> bool {
        let Some(slot) = self.slot(index) else {
            return false;
        };
        slot.requests.store(0, Ordering::Relaxed);
        slot.accepted.store(0, Ordering::Relaxed);
        slot.active.store(0, Ordering::Relaxed);
        slot.connections.store(0, Ordering::Relaxed);
        slot.request_start_ms.store(0, Ordering::Relaxed);
        slot.heartbeat_ms.store(now_ms(), Ordering::Relaxed);
        slot.generation.store(generation, Ordering::Relaxed);
        slot.state
            .store(WorkerState::Booting as u32, Ordering::Relaxed);
        slot.pid.store(pid, Ordering::Release);
        true
    }

    /// Frees a slot after its worker was reaped.
    pub fn clear(&self, index: usize) -> bool {
        let Some(slot) = self.slot(index) else {
            return false;
        };
        slot.state
            .store(WorkerState::Free as u32, Ordering::Relaxed);
        slot.active.store(0, Ordering::Relaxed);
        slot.connections.store(0, Ordering::Relaxed);
        slot.request_start_ms.store(0, Ordering::Relaxed);
        slot.pid.store(0, Ordering::Release);
        true
    }

    /// Reads one slot.
    pub fn read(&self, index: usize) -> Option<SlotReading> {
        let slot = self.slot(index)?;
        Some(SlotReading {
            pid: slot.pid.load(Ordering::Acquire),
            generation: slot.generation.load(Ordering::Relaxed),
            state: WorkerState::from_u32(slot.state.load(Ordering::Relaxed)),
            active: slot.active.load(Ordering::Relaxed),
            requests: slot.requests.load(Ordering::Relaxed),
            accepted: slot.accepted.load(Ordering::Relaxed),
            heartbeat_ms: slot.heartbeat_ms.load(Ordering::Relaxed),
            request_start_ms: slot.request_start_ms.load(Ordering::Relaxed),
            connections: slot.connections.load(Ordering::Relaxed),
        })
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
        let len = self.slots * std::mem::size_of::<Slot>();
        // SAFETY: base/len are exactly what mmap returned; no reference outlives self.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_one_cache_line() {
        assert_eq!(std::mem::size_of::<Slot>(), 64);
    }

    #[test]
    fn claim_read_and_clear_round_trip() {
        let board = Scoreboard::new(3).unwrap();
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
    fn writes_in_a_forked_child_are_seen_by_the_parent() {
        let board = Scoreboard::new(1).unwrap();
        // SAFETY: the child only does atomic stores and _exit (async-signal-safe).
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            board.slot(0).unwrap().requests.store(99, Ordering::Release);
            // SAFETY: _exit never returns and runs no destructors in the child.
            unsafe { libc::_exit(0) };
        }
        let mut status = 0;
        // SAFETY: waits for the child just forked; status is a valid out-pointer.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(board.read(0).unwrap().requests, 99);
    }
}
