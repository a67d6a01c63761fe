//! `max_connections_per_client`: each worker's count of its open connections per client, in
//! one `MAP_SHARED` anonymous mapping the master makes before the first fork, a region per
//! scoreboard slot (ADR 0038).
//!
//! A worker writes only its own slot's region (from its loop's thread: one writer, so plain
//! atomic stores suffice), and reads every slot's to sum a client's connections at accept.
//! The master clears a slot's region when it reaps the worker that held it (and before it
//! forks another into it): a worker killed with connections open leaves no count behind.
//! Two workers accepting the same client at the same instant may both see room: the cap can
//! be passed by at most one connection per worker, for as long as those connections last.
//!
//! A region holds `per_slot` entries (a power of two, at least twice the connections a worker
//! holds: `max_connections`), each a client key and a count; an entry whose count fell to 0
//! is reused by the next new client that probes it. A client whose key finds no room within
//! [`PROBE`] entries is admitted uncounted (it cannot happen below half full).
//!
//! Must not: lock, block, or allocate after it is made.

use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

/// Entries of a region probed for a key.
pub const PROBE: usize = 32;

#[repr(C)]
struct Entry {
    key: AtomicU64,
    count: AtomicU64,
}

/// Every slot's per-client connection counts (see the module doc).
pub struct ClientConnections {
    base: NonNull<Entry>,
    slots: usize,
    per_slot: usize,
    seed: u64,
}

// SAFETY: shared memory accessed only through atomics.
unsafe impl Send for ClientConnections {}
// SAFETY: as above.
unsafe impl Sync for ClientConnections {}

/// What [`ClientConnections::open`] decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opened {
    /// Counted in the entry at this index of the slot's region (give it back on close).
    Counted(usize),
    /// Under the cap but no room to count it (admitted uncounted).
    Uncounted,
    /// The client holds the cap already: close the connection.
    Refused,
}

impl ClientConnections {
    /// Maps zeroed regions for `slots` slots of at least `2 x connections_per_worker`
    /// entries each; clients are keyed with `seed` (the master's random number).
    pub fn create(slots: usize, connections_per_worker: usize, seed: u64) -> io::Result<Self> {
        let per_slot = connections_per_worker
            .saturating_mul(2)
            .clamp(PROBE, 1 << 22)
            .next_power_of_two();
        let len = slots
            .checked_mul(per_slot)
            .and_then(|entries| entries.checked_mul(std::mem::size_of::<Entry>()))
            .filter(|&len| len > 0)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "bad size"))?;
        // SAFETY: an anonymous shared mapping; the result is checked.
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
        Ok(ClientConnections {
            base: NonNull::new(ptr.cast()).expect("mmap returned null without MAP_FAILED"),
            slots,
            per_slot,
            seed,
        })
    }

    /// The seed of its client keys.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The slots it has regions for.
    pub fn slots(&self) -> usize {
        self.slots
    }

    fn region(&self, slot: usize) -> &[Entry] {
        assert!(slot < self.slots, "no region for slot {slot}");
        // SAFETY: slot < slots; the region lies inside the mapping; atomics only.
        unsafe {
            std::slice::from_raw_parts(self.base.as_ptr().add(slot * self.per_slot), self.per_slot)
        }
    }

    /// Master: forgets slot `slot`'s counts (its worker was reaped, or one is forked into it).
    pub fn clear(&self, slot: usize) {
        if slot < self.slots {
            for entry in self.region(slot) {
                entry.count.store(0, Ordering::Relaxed);
                entry.key.store(0, Ordering::Relaxed);
            }
        }
    }

    /// The connections `key` holds in `slot`'s region.
    fn held_in(&self, slot: usize, key: u64) -> u64 {
        let region = self.region(slot);
        let home = key as usize & (self.per_slot - 1);
        let mut held = 0;
        for step in 0..PROBE {
            let entry = &region[(home + step) & (self.per_slot - 1)];
            match entry.key.load(Ordering::Acquire) {
                0 => break,
                found if found == key => held += entry.count.load(Ordering::Relaxed),
                _ => {}
            }
        }
        held
    }

    /// The worker in `slot` accepted a connection of the client `key` (non-zero): counted,
    /// unless the client holds `cap` connections already across every slot.
    pub fn open(&self, slot: usize, key: u64, cap: u64) -> Opened {
        let held: u64 = (0..self.slots).map(|other| self.held_in(other, key)).sum();
        if held >= cap {
            return Opened::Refused;
        }
        let region = self.region(slot);
        let mask = self.per_slot - 1;
        let home = key as usize & mask;
        let mut reusable = None;
        for step in 0..PROBE {
            let index = (home + step) & mask;
            let entry = &region[index];
            let found = entry.key.load(Ordering::Relaxed);
            if found == key {
                entry.count.fetch_add(1, Ordering::Relaxed);
                return Opened::Counted(index);
            }
            if found == 0 || entry.count.load(Ordering::Relaxed) == 0 {
                reusable.get_or_insert(index);
            }
            if found == 0 {
                break;
            }
        }
        let Some(index) = reusable else {
            return Opened::Uncounted;
        };
        let entry = &region[index];
        entry.count.store(1, Ordering::Relaxed);
        entry.key.store(key, Ordering::Release);
        Opened::Counted(index)
    }

    /// The worker in `slot` closed a connection counted at `index`.
    pub fn close(&self, slot: usize, index: usize) {
        let entry = &self.region(slot)[index];
        let _ = entry
            .count
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }
}

impl Drop for ClientConnections {
    fn drop(&mut self) {
        let len = self.slots * self.per_slot * std::mem::size_of::<Entry>();
        // SAFETY: exactly what mmap returned; no reference outlives self.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_s_connections_are_summed_over_every_slot_and_capped() {
        let counts = ClientConnections::create(3, 8, 1).unwrap();
        let a = 0x51;
        assert!(matches!(counts.open(0, a, 3), Opened::Counted(_)));
        assert!(matches!(counts.open(1, a, 3), Opened::Counted(_)));
        let Opened::Counted(third) = counts.open(2, a, 3) else {
            panic!("refused under the cap");
        };
        assert_eq!(counts.open(0, a, 3), Opened::Refused);
        // Another client is unaffected.
        assert!(matches!(counts.open(0, 0x52, 3), Opened::Counted(_)));
        // One closes: room for one more.
        counts.close(2, third);
        assert!(matches!(counts.open(0, a, 3), Opened::Counted(_)));
        assert_eq!(counts.open(1, a, 3), Opened::Refused);
    }

    #[test]
    fn a_cleared_slot_gives_back_what_its_dead_worker_held() {
        let counts = ClientConnections::create(2, 8, 1).unwrap();
        let a = 0x77;
        for _ in 0..2 {
            assert!(matches!(counts.open(1, a, 2), Opened::Counted(_)));
        }
        assert_eq!(counts.open(0, a, 2), Opened::Refused);
        counts.clear(1);
        assert!(matches!(counts.open(0, a, 2), Opened::Counted(_)));
    }

    #[test]
    fn an_entry_whose_count_fell_to_zero_is_reused() {
        let counts = ClientConnections::create(1, 16, 1).unwrap();
        // Keys with one home: the window fills, then reuses closed ones.
        let keys: Vec<u64> = (1..=PROBE as u64).map(|k| k << 8).collect();
        let mut held = Vec::new();
        for &key in &keys {
            let Opened::Counted(index) = counts.open(0, key, 1) else {
                panic!("not counted");
            };
            held.push(index);
        }
        assert_eq!(counts.open(0, 999 << 8, 1), Opened::Uncounted);
        counts.close(0, held[5]);
        assert!(matches!(counts.open(0, 999 << 8, 1), Opened::Counted(i) if i == held[5]));
    }
}
