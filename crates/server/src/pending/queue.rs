//! The queue of segments a connection's pending output is made of, sent strictly in order,
//! and its accounting: bytes in memory (charged to `response_buffer_total` and given back as
//! they are written), file ranges and spill-file ranges (sendfile).

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::spare;
use super::spill::SpillFile;
use crate::spool::{Budget, Buffers, Held};
use crate::transport::Link;

/// Bytes in memory are kept in pieces of at most this size, so that a piece is freed (and its
/// charge given back) soon after it is written, not only when a whole large body is out; 256
/// KiB is a few socket buffers' worth, large enough that one `sendmsg` of the leading pieces
/// fills any socket.
const MEMORY_PIECE: usize = 256 * 1024;

/// Leading memory pieces gathered into one `sendmsg` (the vectored write's limit).
const GATHERED_PIECES: usize = 8;

/// One run of output, in queue order.
#[derive(Debug)]
pub(super) enum Segment {
    /// Bytes in memory; `sent` of them are written.
    Memory { bytes: Vec<u8>, sent: usize },
    /// A range of a file the app handed over (a duplicate of its fd).
    File {
        fd: OwnedFd,
        offset: u64,
        remaining: u64,
    },
    /// Bytes `sent..end` of a spill file. The slot appends past `end` without the lock and
    /// then publishes a larger `end` (or, if this range was finished meanwhile, a new range
    /// of the same file).
    Spill {
        file: Arc<SpillFile>,
        sent: u64,
        end: u64,
    },
}

/// What to do once the bytes queued before it are written, or dropped: called with the number
/// of those bytes that were not written (0 when all were). The exchange uses it to write an
/// access-log line when its response has really gone out.
pub type WhenWritten = Box<dyn FnOnce(u64) + Send>;

/// A [`WhenWritten`] waiting for the written count to reach `until`.
struct Deferred {
    until: u64,
    action: WhenWritten,
}

impl std::fmt::Debug for Deferred {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deferred")
            .field("until", &self.until)
            .finish_non_exhaustive()
    }
}

/// Output waiting for the client. Empty (and allocation-free) until something is deferred.
#[derive(Debug, Default)]
pub struct Pending {
    pub(super) segments: VecDeque<Segment>,
    /// Unsent bytes held in memory segments.
    memory: usize,
    /// Bytes charged by [`Pending::reserve`] whose copy is not published yet.
    pub(super) reserved: usize,
    /// The charge of `memory + reserved` against the worker's response memory (created at
    /// the first charged push; [`Pending::push`] in tests queues uncharged).
    held: Option<Held>,
    /// Bytes written so far (to tell progress from an event that wrote nothing).
    written: u64,
    /// Actions waiting for the bytes queued before them ([`Pending::when_written`]), in the
    /// order they were queued.
    deferred: VecDeque<Deferred>,
}

/// How far a non-blocking write got.
#[derive(Debug, PartialEq, Eq)]
pub enum Progress {
    /// Everything was written.
    Done,
    /// The socket is full: wait until it is writable.
    Blocked,
}

pub(super) fn remaining(parts: &[&[u8]], skip: usize) -> usize {
    parts
        .iter()
        .map(|part| part.len())
        .sum::<usize>()
        .saturating_sub(skip)
}

/// `parts` from byte `skip` on, copied into pieces of at most [`MEMORY_PIECE`] (no lock held).
pub(super) fn copy_pieces(parts: &[&[u8]], mut skip: usize) -> Vec<Vec<u8>> {
    let mut left = remaining(parts, skip);
    let mut pieces: Vec<Vec<u8>> = Vec::with_capacity(left.div_ceil(MEMORY_PIECE));
    for part in parts {
        if skip >= part.len() {
            skip -= part.len();
            continue;
        }
        let mut data = &part[skip..];
        skip = 0;
        while !data.is_empty() {
            if pieces
                .last()
                .is_none_or(|piece| piece.len() == MEMORY_PIECE)
            {
                pieces.push(Vec::with_capacity(left.min(MEMORY_PIECE)));
            }
            let Some(piece) = pieces.last_mut() else {
                unreachable!("pushed above")
            };
            let take = (MEMORY_PIECE - piece.len()).min(data.len());
            piece.extend_from_slice(&data[..take]);
            data = &data[take..];
            left -= take;
        }
    }
    pieces
}

impl Pending {
    /// True when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.segments.iter().all(|segment| match segment {
            Segment::Memory { bytes, sent } => *sent == bytes.len(),
            Segment::File { remaining, .. } => *remaining == 0,
            Segment::Spill { sent, end, .. } => sent == end,
        })
    }

    /// Bytes written to the socket from this queue so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Unsent bytes held in memory (what `max_response_buffer` bounds for a streamed body).
    pub fn buffered(&self) -> usize {
        self.memory
    }

    /// Queues `parts` in memory, skipping their first `skip` bytes (already written), without
    /// charging any budget.
    pub fn push(&mut self, parts: &[&[u8]], mut skip: usize) {
        // The whole rest goes in one piece when it fits (a head and its body: one allocation,
        // not one grown by the second part).
        let mut left = remaining(parts, skip);
        for part in parts {
            if skip >= part.len() {
                skip -= part.len();
                continue;
            }
            self.push_bytes(&part[skip..], left);
            left -= part.len() - skip;
            skip = 0;
        }
    }

    /// Queues `data`, of which `left` (at least `data.len()`) bytes are still to come in this
    /// push: a new piece is sized for them.
    fn push_bytes(&mut self, mut data: &[u8], mut left: usize) {
        self.memory += data.len();
        while !data.is_empty() {
            let room = match self.segments.back() {
                Some(Segment::Memory { bytes, .. }) => MEMORY_PIECE.saturating_sub(bytes.len()),
                _ => 0,
            };
            if room == 0 {
                let first = left.min(MEMORY_PIECE);
                if self.segments.capacity() == 0 {
                    self.segments = spare::queue();
                }
                self.segments.push_back(Segment::Memory {
                    bytes: spare::piece(first),
                    sent: 0,
                });
                continue;
            }
            let take = room.min(data.len());
            if let Some(Segment::Memory { bytes, .. }) = self.segments.back_mut() {
                bytes.extend_from_slice(&data[..take]);
            }
            data = &data[take..];
            left -= take;
        }
    }

    /// Charges `bytes` to the worker's response memory if it allows them and the memory
    /// queued (and reserved) for this response stays within `limit`; false (nothing charged)
    /// if not.
    pub(super) fn reserve(&mut self, buffers: &Arc<Buffers>, bytes: usize, limit: usize) -> bool {
        if self.memory + self.reserved + bytes > limit {
            return false;
        }
        let held = self
            .held
            .get_or_insert_with(|| Held::new(buffers, Budget::ResponseMemory));
        if !held.try_grow(bytes as u64) {
            return false;
        }
        self.reserved += bytes;
        true
    }

    /// Queues `parts` (from byte `skip` on) in memory if the worker's response memory allows
    /// them and the memory queued for this response stays within `limit`; false (nothing
    /// queued) if not. Copies under the caller's lock: for small blocks (`LOCKED_COPY`).
    pub fn try_push(
        &mut self,
        buffers: &Arc<Buffers>,
        parts: &[&[u8]],
        skip: usize,
        limit: usize,
    ) -> bool {
        let bytes = remaining(parts, skip);
        if !self.reserve(buffers, bytes, limit) {
            return false;
        }
        self.reserved -= bytes;
        self.push(parts, skip);
        true
    }

    /// Queues pieces copied outside the lock, whose charge [`Pending::reserve`] took.
    pub(super) fn publish_memory(&mut self, pieces: Vec<Vec<u8>>) {
        for bytes in pieces {
            let count = bytes.len();
            self.reserved = self.reserved.saturating_sub(count);
            self.memory += count;
            self.segments.push_back(Segment::Memory { bytes, sent: 0 });
        }
    }

    /// The spill file the next spilled bytes may go to: the last segment's, when it is a
    /// spill range (a new file is started otherwise, or when the store caps the file).
    pub(super) fn spill_target(&self) -> Option<Arc<SpillFile>> {
        match self.segments.back() {
            Some(Segment::Spill { file, .. }) => Some(Arc::clone(file)),
            _ => None,
        }
    }

    /// Whether the last segment is a spill range. A stream's later blocks go on into its file
    /// (or, past the stream's cap, a new one) rather than into memory freed meanwhile: its
    /// bytes would otherwise alternate between memory and a new spill file each time memory
    /// filled again (one descriptor per file).
    pub(super) fn ends_in_spill(&self) -> bool {
        matches!(self.segments.back(), Some(Segment::Spill { .. }))
    }

    /// Queues bytes `start..end` of `file`, appended outside the lock: the last range grows
    /// when it ends at `start` in the same file, else a new range follows everything queued.
    pub(super) fn publish_spill(&mut self, file: Arc<SpillFile>, start: u64, end: u64) {
        if end == start {
            return;
        }
        if let Some(Segment::Spill {
            file: last,
            end: last_end,
            ..
        }) = self.segments.back_mut()
        {
            if Arc::ptr_eq(last, &file) && *last_end == start {
                *last_end = end;
                return;
            }
        }
        self.segments.push_back(Segment::Spill {
            file,
            sent: start,
            end,
        });
    }

    /// Queues `count` bytes of the file `fd` from `offset`, after whatever is queued.
    pub fn push_file(&mut self, fd: OwnedFd, offset: u64, count: u64) {
        if count > 0 {
            self.segments.push_back(Segment::File {
                fd,
                offset,
                remaining: count,
            });
        }
    }

    /// Bytes queued and not written yet.
    pub fn unsent(&self) -> u64 {
        self.segments
            .iter()
            .map(|segment| match segment {
                Segment::Memory { bytes, sent } => (bytes.len() - sent) as u64,
                Segment::File { remaining, .. } => *remaining,
                Segment::Spill { sent, end, .. } => end - sent,
            })
            .sum()
    }

    /// Runs `action` once everything queued now is written (with 0), or dropped (with the
    /// number of those bytes never written); at once when nothing is queued.
    pub fn when_written(&mut self, action: WhenWritten) {
        let unsent = self.unsent();
        if unsent == 0 {
            action(0);
            return;
        }
        self.deferred.push_back(Deferred {
            until: self.written + unsent,
            action,
        });
    }

    /// Runs the actions whose bytes are all written.
    fn run_written(&mut self) {
        while self
            .deferred
            .front()
            .is_some_and(|deferred| deferred.until <= self.written)
        {
            if let Some(deferred) = self.deferred.pop_front() {
                (deferred.action)(0);
            }
        }
    }

    /// Runs every waiting action with the bytes of its own that will never be written.
    fn run_dropped(&mut self) {
        while let Some(deferred) = self.deferred.pop_front() {
            (deferred.action)(deferred.until.saturating_sub(self.written));
        }
    }

    /// Drops everything queued (the response was abandoned: the connection closes), giving
    /// the memory and disk back and closing the files.
    pub fn discard(&mut self) {
        self.run_dropped();
        spare::give_queue(std::mem::take(&mut self.segments));
        self.memory = 0;
        self.reserved = 0;
        if let Some(held) = &mut self.held {
            held.release();
        }
    }

    /// Writes as much as the socket takes without waiting (and runs the actions whose bytes
    /// went out).
    pub fn write_some(&mut self, link: Link) -> io::Result<Progress> {
        let result = self.write_segments(link);
        if !self.deferred.is_empty() {
            self.run_written();
        }
        result
    }

    fn write_segments(&mut self, link: Link) -> io::Result<Progress> {
        loop {
            let Some(front) = self.segments.front_mut() else {
                // Give the memory back: a connection that once held a large response must not
                // keep it while it idles (a small queue is kept for the thread's next one).
                spare::give_queue(std::mem::take(&mut self.segments));
                // Done when the transport holds nothing either: the records a TLS session
                // sealed and the socket did not take yet.
                if !link.flush()? {
                    return Ok(Progress::Blocked);
                }
                return Ok(Progress::Done);
            };
            match front {
                Segment::Memory { .. } => {
                    let mut gathered: [&[u8]; GATHERED_PIECES] = [&[]; GATHERED_PIECES];
                    let mut count = 0;
                    for segment in self.segments.iter().take(GATHERED_PIECES) {
                        let Segment::Memory { bytes, sent } = segment else {
                            break;
                        };
                        gathered[count] = &bytes[*sent..];
                        count += 1;
                    }
                    let Some(n) = link.write_vectored(&gathered[..count], 0)? else {
                        return Ok(Progress::Blocked);
                    };
                    self.advance_memory(n);
                }
                Segment::File {
                    fd: file,
                    offset,
                    remaining,
                } => {
                    if *remaining == 0 {
                        self.segments.pop_front();
                        continue;
                    }
                    match link.send_file(file.as_raw_fd(), *offset, *remaining)? {
                        Some(0) => {
                            // The file is shorter than announced: the response cannot be
                            // completed.
                            return Err(io::Error::new(
                                io::ErrorKind::UnexpectedEof,
                                "the file ended before its announced length",
                            ));
                        }
                        Some(n) => {
                            *offset += n;
                            *remaining -= n;
                            self.written += n;
                        }
                        None => return Ok(Progress::Blocked),
                    }
                }
                Segment::Spill { file, sent, end } => {
                    // The range is out: dropping it closes the file (and gives its disk
                    // back) unless the slot is appending to it or a later range needs it.
                    if sent == end {
                        self.segments.pop_front();
                        continue;
                    }
                    match link.send_file(file.fd, *sent, *end - *sent)? {
                        Some(0) => {
                            return Err(io::Error::new(
                                io::ErrorKind::UnexpectedEof,
                                "a response spill file ended early",
                            ))
                        }
                        Some(n) => {
                            *sent += n;
                            self.written += n;
                        }
                        None => return Ok(Progress::Blocked),
                    }
                }
            }
        }
    }

    /// Marks `n` bytes of the leading memory segments written: frees written pieces and
    /// gives their charge back.
    fn advance_memory(&mut self, mut n: usize) {
        self.written += n as u64;
        self.memory -= n;
        if let Some(held) = &mut self.held {
            held.shrink(n as u64);
        }
        while n > 0 {
            let Some(Segment::Memory { bytes, sent }) = self.segments.front_mut() else {
                unreachable!("wrote more than the memory segments held")
            };
            let take = n.min(bytes.len() - *sent);
            *sent += take;
            n -= take;
            if *sent == bytes.len() {
                self.pop_written_piece();
            }
        }
        while matches!(self.segments.front(), Some(Segment::Memory { bytes, sent }) if *sent == bytes.len())
        {
            self.pop_written_piece();
        }
    }

    /// Drops the written memory segment in front, keeping a small piece for reuse.
    fn pop_written_piece(&mut self) {
        if let Some(Segment::Memory { bytes, .. }) = self.segments.pop_front() {
            spare::give_piece(bytes);
        }
    }

    /// Writes everything, waiting for the client up to `timeout` per wait (backpressure on the
    /// slot when the store is full).
    pub fn write_all(&mut self, link: Link, timeout: Duration) -> io::Result<()> {
        while self.write_some(link)? == Progress::Blocked {
            link.wait(true, Instant::now() + timeout, "send")?;
        }
        Ok(())
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        // A connection dropped with bytes still queued: what waited for them learns they
        // were not written.
        self.run_dropped();
    }
}
