//! `max_connections_per_client`: each worker's count of its open connections per client, in
//! one shared memfd mapping the master makes before the first fork, a region per scoreboard
//! slot (ADR 0038), and passed to a new master on USR2 as the rate table is.
//!
//! Layout: a [`Header`] (magic, slots, entries per region, the key seed), then two sides of
//! `slots` regions each. A master's workers write the regions of its side; a new master
//! adopting the mapping on USR2 takes the other side (clearing it: whatever is there was left
//! by a master two upgrades back, or by a new master that failed), so the old master's
//! workers and the new one's never write one region, and every worker sums both sides:
//! connections still open on the old master's workers count against the new master's
//! admissions, and are given back as they close.
//!
//! A worker writes only its own slot's region (from its loop's thread), and reads every
//! region to sum a client's connections at accept. The master clears a slot's region when it
//! reaps the worker that held it (and before it forks another into it): a worker killed with
//! connections open leaves no count behind.
//!
//! The cap is never passed (changed by issue 39's follow-up): a worker first counts the new
//! connection in its own region, then (after a `SeqCst` fence) sums every region, and takes
//! the count back and refuses when the sum is over the cap. Two workers accepting the same
//! client at the same instant each see the other's count, or at least one of them does (the
//! fences' total order): never both admit past the cap (both may refuse, one of them
//! needlessly: the client's retry finds room).
//!
//! A region holds `per_slot` entries (a power of two, at least twice the connections a worker
//! holds: `max_connections`), each a client key and a count; an entry whose count fell to 0
//! is reused by the next new client that probes it. A client whose key finds no room within
//! [`PROBE`] entries is admitted uncounted (it cannot happen below half full).
//!
//! Must not: lock, block, or allocate after it is made, nor make a syscall per connection.

use std::io;
use std::os::fd::RawFd;
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU64, Ordering};

use crate::shm::SharedMapping;

/// Entries of a region probed for a key.
pub const PROBE: usize = 32;

/// The header's first word: "tines cc" and a layout version.
const MAGIC: u64 = 0x7469_6e65_7363_6301;

#[repr(C)]
struct Entry {
    key: AtomicU64,
    count: AtomicU64,
}

/// The mapping's first cache line: what an adopting master checks and takes.
#[repr(C, align(64))]
struct Header {
    magic: AtomicU64,
    slots: AtomicU64,
    per_slot: AtomicU64,
    seed: AtomicU64,
    _rest: [AtomicU64; 4],
}

/// Every slot's per-client connection counts (see the module doc).
pub struct ClientConnections {
    mapping: SharedMapping,
    base: NonNull<Entry>,
    slots: usize,
    per_slot: usize,
    seed: u64,
    /// The side (0 or 1) this master's workers write.
    side: usize,
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

fn per_slot_of(connections_per_worker: usize) -> usize {
    connections_per_worker
        .saturating_mul(2)
        .clamp(PROBE, 1 << 22)
        .next_power_of_two()
}

fn mapping_len(slots: usize, per_slot: usize) -> Option<usize> {
    slots
        .checked_mul(2 * per_slot)
        .and_then(|entries| entries.checked_mul(std::mem::size_of::<Entry>()))
        .filter(|&len| len > 0)
        .and_then(|len| len.checked_add(std::mem::size_of::<Header>()))
}

impl ClientConnections {
    /// Maps zeroed regions for `slots` slots (on each side) of at least `2 x
    /// connections_per_worker` entries each, in a new memfd; clients are keyed with `seed`
    /// (the master's random number). This master's workers write side 0.
    pub fn create(slots: usize, connections_per_worker: usize, seed: u64) -> io::Result<Self> {
        let per_slot = per_slot_of(connections_per_worker);
        let len = mapping_len(slots, per_slot)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "bad size"))?;
        let mapping = SharedMapping::memfd(c"tines-client-connections", len)?;
        let counts = Self::over(mapping, slots, per_slot, seed, 0);
        let header = counts.header();
        header.slots.store(slots as u64, Ordering::Relaxed);
        header.per_slot.store(per_slot as u64, Ordering::Relaxed);
        header.seed.store(seed, Ordering::Relaxed);
        header.magic.store(MAGIC, Ordering::Release);
        Ok(counts)
    }

    /// Maps the counts in the memfd `fd` an old master passed on USR2 (this object then owns
    /// it; closed on error too), whose workers write side `old_side`: this master's write the
    /// other, cleared first. Refused unless the mapping has this master's `slots` and
    /// regions sized for `connections_per_worker`.
    pub fn adopt(
        fd: RawFd,
        slots: usize,
        connections_per_worker: usize,
        old_side: usize,
    ) -> io::Result<Self> {
        let mapping = SharedMapping::adopt(fd)?;
        let per_slot = per_slot_of(connections_per_worker);
        let bad = |what: String| io::Error::new(io::ErrorKind::InvalidData, what);
        if old_side > 1 {
            return Err(bad(format!("no side {old_side}")));
        }
        if Some(mapping.len()) != mapping_len(slots, per_slot) {
            return Err(bad(format!(
                "the passed counts have {} bytes, not the {:?} of {slots} slots of {per_slot} entries",
                mapping.len(),
                mapping_len(slots, per_slot)
            )));
        }
        // SAFETY: the header is the mapping's first bytes (its length was checked).
        let header = unsafe { mapping.ptr().cast::<Header>().as_ref() };
        if header.magic.load(Ordering::Acquire) != MAGIC
            || header.slots.load(Ordering::Relaxed) != slots as u64
            || header.per_slot.load(Ordering::Relaxed) != per_slot as u64
        {
            return Err(bad(
                "the passed fd holds no connection counts of this layout".into(),
            ));
        }
        let seed = header.seed.load(Ordering::Relaxed);
        let counts = Self::over(mapping, slots, per_slot, seed, 1 - old_side);
        counts.clear_side(counts.side);
        Ok(counts)
    }

    fn over(mapping: SharedMapping, slots: usize, per_slot: usize, seed: u64, side: usize) -> Self {
        // SAFETY: the regions follow the header inside the mapping (mapping_len counts them).
        let base = unsafe { mapping.ptr().cast::<Header>().add(1).cast::<Entry>() };
        ClientConnections {
            mapping,
            base,
            slots,
            per_slot,
            seed,
            side,
        }
    }

    fn header(&self) -> &Header {
        // SAFETY: the mapping's first bytes, mapped for self's life; atomics only.
        unsafe { self.mapping.ptr().cast::<Header>().as_ref() }
    }

    /// The seed of its client keys.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The slots it has regions for (on each side).
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// The side this master's workers write (passed on USR2 with the fd).
    pub fn side(&self) -> usize {
        self.side
    }

    /// The memfd (close-on-exec; an upgrade dups it for the new master).
    pub fn fd(&self) -> RawFd {
        self.mapping.fd()
    }

    /// Region `region` of the `2 x slots` (side 0's first).
    fn region_at(&self, region: usize) -> &[Entry] {
        assert!(region < 2 * self.slots, "no region {region}");
        // SAFETY: inside the mapping; atomics only.
        unsafe {
            std::slice::from_raw_parts(
                self.base.as_ptr().add(region * self.per_slot),
                self.per_slot,
            )
        }
    }

    /// This master's region for `slot`.
    fn region(&self, slot: usize) -> &[Entry] {
        assert!(slot < self.slots, "no region for slot {slot}");
        self.region_at(self.side * self.slots + slot)
    }

    fn clear_region(&self, region: &[Entry]) {
        for entry in region {
            entry.count.store(0, Ordering::Relaxed);
            entry.key.store(0, Ordering::Relaxed);
        }
    }

    /// Master: forgets slot `slot`'s counts (its worker was reaped, or one is forked into it).
    pub fn clear(&self, slot: usize) {
        if slot < self.slots {
            self.clear_region(self.region(slot));
        }
    }

    /// Master: forgets every count of `side` (its master's workers are all gone).
    pub fn clear_side(&self, side: usize) {
        for slot in 0..self.slots {
            self.clear_region(self.region_at(side * self.slots + slot));
        }
    }

    /// The connections `key` holds in region `region`.
    fn held_in(&self, region: usize, key: u64) -> u64 {
        let region = self.region_at(region);
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
    /// unless the client would hold more than `cap` connections across every region.
    pub fn open(&self, slot: usize, key: u64, cap: u64) -> Opened {
        let region = self.region(slot);
        let mask = self.per_slot - 1;
        let home = key as usize & mask;
        let mut own = None;
        let mut reusable = None;
        for step in 0..PROBE {
            let index = (home + step) & mask;
            let entry = &region[index];
            let found = entry.key.load(Ordering::Relaxed);
            if found == key {
                own = Some(index);
                break;
            }
            if found == 0 || entry.count.load(Ordering::Relaxed) == 0 {
                reusable.get_or_insert(index);
            }
            if found == 0 {
                break;
            }
        }
        let Some(index) = own.or(reusable) else {
            // No room to count it: under the cap it is admitted uncounted.
            let held: u64 = (0..2 * self.slots).map(|r| self.held_in(r, key)).sum();
            return if held >= cap {
                Opened::Refused
            } else {
                Opened::Uncounted
            };
        };
        // Reserve first: counted, then summed with everyone's, then taken back if over.
        let entry = &region[index];
        if own.is_none() {
            entry.key.store(key, Ordering::Relaxed);
        }
        entry.count.fetch_add(1, Ordering::Relaxed);
        // Orders this count before the loads below, against every other worker's same two
        // steps: of two workers counting at once, at least one sees the other's count.
        fence(Ordering::SeqCst);
        let held: u64 = (0..2 * self.slots).map(|r| self.held_in(r, key)).sum();
        if held > cap {
            let _ = entry
                .count
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
            return Opened::Refused;
        }
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
    fn workers_counting_one_client_at_once_never_pass_the_cap() {
        // Eight workers (threads, one slot each) try to open connections of one client at
        // once, never closing: however they interleave, no more than the cap are counted.
        let counts = std::sync::Arc::new(ClientConnections::create(8, 64, 1).unwrap());
        let (key, cap) = (0x99, 5);
        let threads: Vec<_> = (0..8)
            .map(|slot| {
                let counts = std::sync::Arc::clone(&counts);
                std::thread::spawn(move || {
                    (0..2_000)
                        .filter(|_| matches!(counts.open(slot, key, cap), Opened::Counted(_)))
                        .count() as u64
                })
            })
            .collect();
        let admitted: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert!((1..=cap).contains(&admitted), "{admitted}");
        // A refusal took its count back: alone, a worker fills exactly the rest.
        let more = (0..cap)
            .filter(|_| matches!(counts.open(0, key, cap), Opened::Counted(_)))
            .count() as u64;
        assert_eq!(admitted + more, cap);
        assert_eq!(counts.open(3, key, cap), Opened::Refused);
    }

    #[test]
    fn a_new_master_adopting_the_counts_sees_the_old_master_s_connections() {
        let old = ClientConnections::create(2, 8, 0xabc).unwrap();
        let a = 0x31;
        let held: Vec<_> = (0..2)
            .map(|slot| match old.open(slot, a, 2) {
                Opened::Counted(index) => (slot, index),
                other => panic!("{other:?}"),
            })
            .collect();
        // SAFETY: dup of a valid fd.
        let new =
            ClientConnections::adopt(unsafe { libc::dup(old.fd()) }, 2, 8, old.side()).unwrap();
        assert_eq!((new.side(), new.seed()), (1, 0xabc));
        // The new master's worker in slot 0 (the old one's slot 0 is another region).
        assert_eq!(new.open(0, a, 2), Opened::Refused);
        let (slot, index) = held[1];
        old.close(slot, index);
        let Opened::Counted(index) = new.open(0, a, 2) else {
            panic!("not counted after an old connection closed");
        };
        assert_eq!(old.open(1, a, 2), Opened::Refused);
        // A new master that fails leaves counts on its side: the next one clears them.
        drop(new);
        // SAFETY: dup of a valid fd.
        let next = ClientConnections::adopt(unsafe { libc::dup(old.fd()) }, 2, 8, 0).unwrap();
        assert_eq!(next.side(), 1);
        assert!(matches!(next.open(0, a, 2), Opened::Counted(i) if i == index));
        // Another geometry is refused.
        // SAFETY: dup of a valid fd.
        assert!(ClientConnections::adopt(unsafe { libc::dup(old.fd()) }, 3, 8, 0).is_err());
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
