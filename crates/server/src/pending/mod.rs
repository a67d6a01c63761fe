//! Response output a slot could not write without waiting, on every MPM: the slot writes what
//! the socket takes at once and leaves the rest here; the poller (the loop thread) finishes it
//! as the client reads, so a slow reader holds no slot (ADR 0009).
//!
//! The output is a queue of segments, sent strictly in order: bytes in memory (charged to the
//! worker's response memory budget, `response_buffer_total`, and given back as they are
//! written), file ranges (`wsgi.file_wrapper` bodies: sendfile from a duplicated fd, so that
//! no Python object outlives the slot's work) and ranges of spill files (a complete body
//! beyond the memory budget, or a WSGI stream beyond its share of it (ADR 0024): an unlinked
//! temporary file charged to `buffer_disk_total`, sent with sendfile, which may grow while it
//! is being sent).
//!
//! The slot is the only producer and the loop only consumes, so the slot copies large blocks
//! into memory pieces and appends to spill files *outside* the queue's lock and then
//! publishes the new segment (or the longer range) under it; the loop never waits for the
//! lock at all while a slot holds the connection ([`Output::help_write`]).
//!
//! It owns the queue, its accounting and that publication protocol; it must not decide what
//! is buffered (the exchange does) nor when the socket is watched (the reactor does).
//!
//! Its files: `queue` (the segments and their writing, [`Pending`]), `output` (the queue shared
//! by the slot and the loop, and the publication protocol, [`Output`]), `spill` (the spill
//! files) and `spare` (pieces and queues kept per thread).

mod output;
mod queue;
mod spare;
mod spill;

pub(crate) use output::writable_by;
pub use output::{HandOver, Output, Store};
pub use queue::{Pending, Progress, WhenWritten};
pub use spill::SpillFile;

/// Blocks up to this size are copied into the queue under its lock (a few microseconds of
/// `memcpy`, and small items keep filling one piece instead of one allocation each); larger
/// ones are copied outside the lock and published afterwards.
const LOCKED_COPY: usize = 64 * 1024;

#[cfg(test)]
mod tests;
