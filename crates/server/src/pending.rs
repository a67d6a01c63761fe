//! Response output a slot could not write without waiting, on every MPM: the slot writes what
//! the socket takes at once and leaves the rest here; the poller (the loop thread) finishes it
//! as the client reads, so a slow reader holds no slot (ADR 0009).
//!
//! The output is a queue of segments, sent strictly in order: bytes in memory (charged to the
//! worker's response memory budget, `response_buffer_total`, and given back as they are
//! written), file ranges (`wsgi.file_wrapper` bodies: sendfile from a duplicated fd, so that
//! no Python object outlives the slot's work) and ranges of spill files (a complete body
//! beyond the memory budget: an unlinked temporary file charged to `buffer_disk_total`, sent
//! with sendfile, which may grow while it is being sent).
//!
//! The slot is the only producer and the loop only consumes, so the slot copies large blocks
//! into memory pieces and appends to spill files *outside* the queue's lock and then
//! publishes the new segment (or the longer range) under it; the loop never waits for the
//! lock at all while a slot holds the connection ([`Output::help_write`]).
//!
//! It owns the queue, its accounting and that publication protocol; it must not decide what
//! is buffered (the exchange does) nor when the socket is watched (the reactor does).

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use crate::io::{send_file_nonblocking, wait_fd, write_vectored_nonblocking};
use crate::spool::{Budget, Buffers, Held, SpoolError, SpoolFile};

/// Bytes in memory are kept in pieces of at most this size, so that a piece is freed (and its
/// charge given back) soon after it is written, not only when a whole large body is out; 256
/// KiB is a few socket buffers' worth, large enough that one `sendmsg` of the leading pieces
/// fills any socket.
const MEMORY_PIECE: usize = 256 * 1024;

/// Leading memory pieces gathered into one `sendmsg` (the vectored write's limit).
const GATHERED_PIECES: usize = 8;

/// Blocks up to this size are copied into the queue under its lock (a few microseconds of
/// `memcpy`, and small items keep filling one piece instead of one allocation each); larger
/// ones are copied outside the lock and published afterwards.
const LOCKED_COPY: usize = 64 * 1024;

/// One run of output, in queue order.
#[derive(Debug)]
enum Segment {
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

/// Small pieces and empty queues kept for reuse on this thread. A small response queued for
/// the batch (ADR 0011) took a piece and, in an idle connection's empty queue, the queue's
/// first slots: two allocations and two frees per response. Kept per thread (no lock), so
/// they come back where the same thread queues again (prefork's one thread; in the pool the
/// loop thread frees what app threads allocated, and only gains nothing). A connection keeps
/// neither while it idles.
mod spare {
    use std::cell::RefCell;
    use std::collections::VecDeque;

    use super::Segment;

    /// Pieces and queues kept per thread, at most.
    const KEPT: usize = 32;
    /// The largest piece kept (a small response's head and body).
    const PIECE: usize = 4096;
    /// The largest queue kept, in segments.
    const QUEUE: usize = 8;

    thread_local! {
        static PIECES: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
        static QUEUES: RefCell<Vec<Vec<Segment>>> = const { RefCell::new(Vec::new()) };
    }

    /// An empty piece with room for `capacity` bytes.
    pub(super) fn piece(capacity: usize) -> Vec<u8> {
        if capacity <= PIECE {
            if let Some(piece) = PIECES.with_borrow_mut(Vec::pop) {
                return piece;
            }
            return Vec::with_capacity(PIECE);
        }
        Vec::with_capacity(capacity)
    }

    /// Keeps a written piece for [`piece`], if it is one of the small ones.
    pub(super) fn give_piece(mut piece: Vec<u8>) {
        if piece.capacity() == PIECE {
            piece.clear();
            PIECES.with_borrow_mut(|pieces| {
                if pieces.len() < KEPT {
                    pieces.push(piece);
                }
            });
        }
    }

    /// An empty queue, with room for a few segments when one was kept.
    pub(super) fn queue() -> VecDeque<Segment> {
        QUEUES
            .with_borrow_mut(Vec::pop)
            .map(VecDeque::from)
            .unwrap_or_default()
    }

    /// Keeps an emptied queue for [`queue`], if it is small.
    pub(super) fn give_queue(mut queue: VecDeque<Segment>) {
        queue.clear();
        if queue.capacity() > 0 && queue.capacity() <= QUEUE {
            QUEUES.with_borrow_mut(|queues| {
                if queues.len() < KEPT {
                    queues.push(Vec::from(queue));
                }
            });
        }
    }
}

/// A response spill file, shared by the queue's ranges (the loop sends from its fd) and the
/// slot (which appends to it without the output's lock). The descriptor and its disk charge
/// go when the last holder drops it: once every range is sent and the slot appends no more.
#[derive(Debug)]
pub struct SpillFile {
    /// `appender`'s descriptor, stable for the file's life (read with sendfile by offset, so
    /// no shared position).
    fd: RawFd,
    /// Only the slot appends, so this lock is never contended: the loop reads by `fd`.
    appender: Mutex<SpoolFile>,
}

impl SpillFile {
    /// A new empty spill file in the worker's `request_buffer_dir`.
    pub fn create(buffers: &Arc<Buffers>) -> io::Result<Arc<SpillFile>> {
        let file = SpoolFile::create(buffers)?;
        Ok(Arc::new(SpillFile {
            fd: file.fd(),
            appender: Mutex::new(file),
        }))
    }

    /// Appends `parts` from byte `*skip` on, advancing `*skip` past what was appended;
    /// returns the file's length before and after (the bytes to publish), and why it stopped
    /// early if it did ([`SpoolError::BudgetFull`] when `buffer_disk_total` has no room for
    /// the next part; the parts before it are appended and charged).
    fn append(&self, parts: &[&[u8]], skip: &mut usize) -> (u64, u64, Result<(), SpoolError>) {
        let mut file = self
            .appender
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        let start = file.len();
        let mut offset = 0;
        for part in parts {
            let end = offset + part.len();
            if *skip < end {
                if let Err(err) = file.append(&part[*skip - offset..]) {
                    return (start, file.len(), Err(err));
                }
                *skip = end;
            }
            offset = end;
        }
        (start, file.len(), Ok(()))
    }
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
    segments: VecDeque<Segment>,
    /// Unsent bytes held in memory segments.
    memory: usize,
    /// Bytes charged by [`Pending::reserve`] whose copy is not published yet.
    reserved: usize,
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

fn remaining(parts: &[&[u8]], skip: usize) -> usize {
    parts
        .iter()
        .map(|part| part.len())
        .sum::<usize>()
        .saturating_sub(skip)
}

/// `parts` from byte `skip` on, copied into pieces of at most [`MEMORY_PIECE`] (no lock held).
fn copy_pieces(parts: &[&[u8]], mut skip: usize) -> Vec<Vec<u8>> {
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
    fn reserve(&mut self, buffers: &Arc<Buffers>, bytes: usize, limit: usize) -> bool {
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
    /// queued) if not. Copies under the caller's lock: for small blocks ([`LOCKED_COPY`]).
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
    fn publish_memory(&mut self, pieces: Vec<Vec<u8>>) {
        for bytes in pieces {
            let count = bytes.len();
            self.reserved = self.reserved.saturating_sub(count);
            self.memory += count;
            self.segments.push_back(Segment::Memory { bytes, sent: 0 });
        }
    }

    /// The spill file the next spilled bytes go to: the last segment's, when it is a spill
    /// range (a new file is started otherwise).
    fn spill_target(&self) -> Option<Arc<SpillFile>> {
        match self.segments.back() {
            Some(Segment::Spill { file, .. }) => Some(Arc::clone(file)),
            _ => None,
        }
    }

    /// Queues bytes `start..end` of `file`, appended outside the lock: the last range grows
    /// when it ends at `start` in the same file, else a new range follows everything queued.
    fn publish_spill(&mut self, file: Arc<SpillFile>, start: u64, end: u64) {
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
    pub fn write_some(&mut self, fd: RawFd) -> io::Result<Progress> {
        let result = self.write_segments(fd);
        if !self.deferred.is_empty() {
            self.run_written();
        }
        result
    }

    fn write_segments(&mut self, fd: RawFd) -> io::Result<Progress> {
        loop {
            let Some(front) = self.segments.front_mut() else {
                // Give the memory back: a connection that once held a large response must not
                // keep it while it idles (a small queue is kept for the thread's next one).
                spare::give_queue(std::mem::take(&mut self.segments));
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
                    let Some(n) = write_vectored_nonblocking(fd, &gathered[..count], 0)? else {
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
                    match send_file_nonblocking(fd, file.as_raw_fd(), *offset, *remaining)? {
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
                    match send_file_nonblocking(fd, file.fd, *sent, *end - *sent)? {
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
    pub fn write_all(&mut self, fd: RawFd, timeout: Duration) -> io::Result<()> {
        while self.write_some(fd)? == Progress::Blocked {
            wait_fd(fd, true, Instant::now() + timeout, "send")?;
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

/// Where [`Output::hand_over`] may keep bytes the socket did not take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Store {
    /// A body still being produced: at most this many bytes in memory for the response.
    Streamed(usize),
    /// A complete body: memory while the worker's budget allows, then a spill file.
    Complete,
}

/// What [`Output::hand_over`] did with the bytes.
#[derive(Debug, PartialEq, Eq)]
pub enum HandOver {
    /// Everything is written or queued.
    Queued,
    /// The store is full: the caller must write `parts` from this byte on itself, after what
    /// is queued (waiting for the client).
    Full(usize),
}

/// What a hand-over does once the lock is released.
enum Staging {
    Copy,
    Spill(Option<Arc<SpillFile>>),
}

/// A connection's pending output, shared by the thread that owns the connection (a slot) and
/// the poller. While an app thread still produces a streamed body, the loop writes what it
/// left pending whenever the socket becomes writable (PEP 3333: transmission continues while
/// the app produces the next block); once the connection is back, the loop finishes it.
///
/// The owner holds the lock only for work that never waits for the client (a non-blocking
/// `sendmsg`/`sendfile`, which may still read a file not in the page cache; moving queued
/// bytes; copies up to [`LOCKED_COPY`]); large copies and spill-file writes happen outside it
/// and are published under it. The loop, while a slot holds the
/// connection, does not even wait for that: [`Output::help_write`] only tries the lock, and
/// when it cannot write (the lock is taken, or a block is being staged) it leaves a request
/// that the owner answers as soon as it publishes or lets go of the lock, so that no
/// writability edge is lost. Whether anything waits is also kept in an atomic flag, so the
/// common case (nothing pending) takes no lock at all.
#[derive(Debug)]
pub struct Output {
    fd: RawFd,
    /// True while the pending output is not empty (written under the lock; read without it).
    queued: AtomicBool,
    /// The loop saw the socket writable but could not write: the owner writes for it.
    help_wanted: AtomicBool,
    state: Mutex<OutputState>,
}

#[derive(Debug, Default)]
struct OutputState {
    pending: Pending,
    /// The owner is copying or appending bytes outside the lock, to be published after
    /// everything queued.
    staging: bool,
    /// The connection was dropped (its fd is about to close): nothing may be written.
    closed: bool,
}

impl Output {
    /// The output of the connection whose socket is `fd` (the connection owns the fd and
    /// calls [`Output::close`] before closing it).
    pub fn new(fd: RawFd) -> Output {
        Output {
            fd,
            queued: AtomicBool::new(false),
            help_wanted: AtomicBool::new(false),
            state: Mutex::new(OutputState::default()),
        }
    }

    fn state(&self) -> MutexGuard<'_, OutputState> {
        self.state
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    fn note_queued(&self, state: &OutputState) {
        self.queued
            .store(!state.pending.is_empty(), Ordering::Release);
    }

    /// Releases the owner's lock, then writes for the loop if it asked while the lock was
    /// taken (called only when nothing is being staged).
    fn release(&self, state: MutexGuard<'_, OutputState>) {
        drop(state);
        // The loop sets the request *before* it tries the lock: if it failed because this
        // thread held it, the request is visible here, after the unlock (both sides store,
        // then load, in sequentially consistent order: the unlock is a swap). Loaded first,
        // swapped only when set: a swap is a locked instruction, and a worker whose loop
        // serves inline never asks.
        while self.help_wanted.load(Ordering::SeqCst)
            && self.help_wanted.swap(false, Ordering::SeqCst)
        {
            let mut state = self.state();
            if !state.closed {
                // An error shows at the owner's next write of its own.
                let _ = state.pending.write_some(self.fd);
            }
            self.note_queued(&state);
        }
    }

    /// Runs `f` on the pending output, under the lock (the connection's owner only).
    pub fn with<R>(&self, f: impl FnOnce(&mut Pending) -> R) -> R {
        let mut state = self.state();
        let result = f(&mut state.pending);
        self.note_queued(&state);
        self.release(state);
        result
    }

    /// True when nothing waits. Takes no lock: only the connection's owner adds output, so
    /// for the owner "empty" stays true until it queues something; anyone else may see a
    /// stale value.
    pub fn is_empty(&self) -> bool {
        !self.queued.load(Ordering::Acquire)
    }

    /// Queues `parts` from byte `written` on after what is pending (the connection's owner
    /// only), in `store`; first lets what is pending make progress, and writes `parts`
    /// straight to the socket when that empties it. Large blocks are copied, and spill files
    /// appended to, without the lock. A spill that fails on the file system is logged and
    /// reported as [`HandOver::Full`] (the response then waits for its client); what was
    /// appended before the failure stays queued, in order.
    pub fn hand_over(
        &self,
        buffers: &Arc<Buffers>,
        parts: &[&[u8]],
        mut written: usize,
        store: Store,
    ) -> io::Result<HandOver> {
        let total = remaining(parts, 0);
        let staging = {
            let mut state = self.state();
            let pending = &mut state.pending;
            if !pending.is_empty() {
                // Earlier output still waits: keep the order, but let it make progress.
                self.help_wanted.store(false, Ordering::SeqCst);
                let progress = pending.write_some(self.fd);
                if let Err(err) = progress {
                    self.note_queued(&state);
                    drop(state);
                    return Err(err);
                }
                if pending.is_empty() {
                    while written < total {
                        match write_vectored_nonblocking(self.fd, parts, written) {
                            Ok(Some(n)) => written += n,
                            Ok(None) => break,
                            Err(err) => {
                                drop(state);
                                return Err(err);
                            }
                        }
                    }
                }
            }
            let bytes = total - written;
            let limit = match store {
                Store::Streamed(limit) => limit,
                Store::Complete => usize::MAX,
            };
            let queued_now = bytes == 0
                || (bytes <= LOCKED_COPY && pending.try_push(buffers, parts, written, limit));
            let staging = if queued_now {
                None
            } else if bytes > LOCKED_COPY && pending.reserve(buffers, bytes, limit) {
                Some(Staging::Copy)
            } else if store == Store::Complete {
                Some(Staging::Spill(pending.spill_target()))
            } else {
                self.note_queued(&state);
                self.release(state);
                return Ok(HandOver::Full(written));
            };
            self.note_queued(&state);
            match staging {
                None => {
                    self.release(state);
                    return Ok(HandOver::Queued);
                }
                Some(staging) => {
                    state.staging = true;
                    staging
                }
            }
        };
        // Outside the lock: the loop may write what is queued meanwhile.
        match staging {
            Staging::Copy => {
                let pieces = copy_pieces(parts, written);
                self.publish(|pending| pending.publish_memory(pieces));
                Ok(HandOver::Queued)
            }
            Staging::Spill(target) => {
                let file = match target.map_or_else(|| SpillFile::create(buffers), Ok) {
                    Ok(file) => file,
                    Err(err) => {
                        self.publish(|_| ());
                        crate::log::info(&format!("response spill file: {err}"));
                        return Ok(HandOver::Full(written));
                    }
                };
                let (start, end, appended) = file.append(parts, &mut written);
                self.publish(|pending| pending.publish_spill(file, start, end));
                match appended {
                    Ok(()) => Ok(HandOver::Queued),
                    Err(SpoolError::BudgetFull) => Ok(HandOver::Full(written)),
                    Err(err) => {
                        // The disk is full or failing: this response waits for its client.
                        crate::log::info(&format!("response spill file: {err}"));
                        Ok(HandOver::Full(written))
                    }
                }
            }
        }
    }

    /// Ends a staging: publishes under the lock, then writes for the loop if it asked.
    fn publish(&self, f: impl FnOnce(&mut Pending)) {
        let mut state = self.state();
        f(&mut state.pending);
        state.staging = false;
        self.note_queued(&state);
        self.release(state);
    }

    /// Queues `parts` after nothing (the queue is empty) when that takes no write and no
    /// wait: they fit the copy made under the lock and the store has room. `false`, with
    /// nothing done, otherwise; the caller then goes through [`Output::hand_over`]. For a
    /// slot that queues a small response for its batch while it holds the GIL (ADR 0011).
    pub fn try_queue(&self, buffers: &Arc<Buffers>, parts: &[&[u8]], store: Store) -> bool {
        if remaining(parts, 0) > LOCKED_COPY {
            return false;
        }
        let limit = match store {
            Store::Streamed(limit) => limit,
            Store::Complete => usize::MAX,
        };
        let mut state = self.state();
        if state.staging
            || !state.pending.is_empty()
            || !state.pending.try_push(buffers, parts, 0, limit)
        {
            return false;
        }
        self.note_queued(&state);
        self.release(state);
        true
    }

    /// The loop's write while a slot (another thread) holds the connection and the socket
    /// became writable: never waits for the lock. When the lock is taken, or the queue ran
    /// dry (the slot may be staging more bytes, or queue some later), the request stays for
    /// the slot, which writes as soon as it lets go of the lock or publishes (a returned
    /// connection with output pending is written at once by the loop too). Errors surface to
    /// the slot's own next write.
    pub fn help_write(&self) {
        self.help_wanted.store(true, Ordering::SeqCst);
        let mut state = match self.state.try_lock() {
            Ok(state) => state,
            Err(TryLockError::Poisoned(poison)) => poison.into_inner(),
            Err(TryLockError::WouldBlock) => return,
        };
        if state.closed {
            self.help_wanted.store(false, Ordering::SeqCst);
            return;
        }
        // Blocked: a new edge comes when the client has read. Done: the socket may still take
        // bytes and no new edge will say so, so the request stays for whatever the slot queues
        // next (bytes being staged now, or a later block) and costs nothing until then.
        if !matches!(state.pending.write_some(self.fd), Ok(Progress::Done)) {
            self.help_wanted.store(false, Ordering::SeqCst);
        }
        self.note_queued(&state);
    }

    /// Writes what the socket takes now (the loop's writes once the connection is back, and
    /// the owner's while it waits for the client).
    pub fn write_some(&self) -> io::Result<Progress> {
        self.write_some_moved().map(|(progress, _)| progress)
    }

    /// [`Output::write_some`], and whether it wrote anything (under the same lock).
    pub fn write_some_moved(&self) -> io::Result<(Progress, bool)> {
        let mut state = self.state();
        if state.closed {
            return Ok((Progress::Done, false));
        }
        // This write answers a request for help; cleared only when set (see `release`).
        if self.help_wanted.load(Ordering::SeqCst) {
            self.help_wanted.store(false, Ordering::SeqCst);
        }
        let before = state.pending.written();
        let result = state.pending.write_some(self.fd);
        let moved = state.pending.written() > before;
        self.note_queued(&state);
        result.map(|progress| (progress, moved))
    }

    /// Writes everything, waiting for the client up to `timeout` per wait, without holding
    /// the lock while it waits.
    pub fn write_all(&self, timeout: Duration) -> io::Result<()> {
        while self.write_some()? == Progress::Blocked {
            wait_fd(self.fd, true, Instant::now() + timeout, "send")?;
        }
        Ok(())
    }

    /// Drops what is queued (the response was abandoned), giving its memory and disk back.
    pub fn discard(&self) {
        self.with(Pending::discard);
    }

    /// Marks the connection closed and drops what is queued.
    pub fn close(&self) {
        let mut state = self.state();
        state.closed = true;
        state.pending.discard();
        self.queued.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::WorkerConfig;
    use std::io::Read;
    use std::os::unix::net::UnixStream;

    fn raw(stream: &UnixStream) -> RawFd {
        std::os::fd::AsRawFd::as_raw_fd(stream)
    }

    fn buffers(memory: u64, disk: u64, dir: &std::path::Path) -> Arc<Buffers> {
        let config = WorkerConfig {
            response_buffer_total: memory,
            buffer_disk_total: disk,
            request_buffer_dir: dir.to_path_buf(),
            ..WorkerConfig::default()
        };
        Arc::new(Buffers::new(&config))
    }

    fn scratch_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("tines-pending-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn writes_bytes_file_and_tail_in_order() {
        let (a, mut b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let path = std::env::temp_dir().join(format!("tines-pending-{}", std::process::id()));
        std::fs::write(&path, b"0123456789").unwrap();
        let file = std::fs::File::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let mut pending = Pending::default();
        assert!(pending.is_empty());
        pending.push(&[b"head:", b"xx"], 1);
        pending.push_file(OwnedFd::from(file), 2, 5);
        pending.push(&[b":tail"], 0);
        assert_eq!(pending.buffered(), "ead:xx".len() + ":tail".len());
        assert_eq!(pending.write_some(raw(&a)).unwrap(), Progress::Done);
        assert!(pending.is_empty());
        drop(a);
        let mut got = Vec::new();
        b.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"ead:xx23456:tail");
    }

    #[test]
    fn blocks_on_a_full_socket_and_resumes() {
        let (a, mut b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let big = vec![7u8; 4 << 20];
        let mut pending = Pending::default();
        pending.push(&[&big], 0);
        let fd = raw(&a);
        assert_eq!(pending.write_some(fd).unwrap(), Progress::Blocked);
        assert!(!pending.is_empty());
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            b.read_to_end(&mut got).unwrap();
            got.len()
        });
        pending.write_all(fd, Duration::from_secs(10)).unwrap();
        drop(a);
        assert_eq!(reader.join().unwrap(), 4 << 20);
    }

    #[test]
    fn an_action_runs_once_the_bytes_before_it_are_written_or_with_those_never_written() {
        use std::sync::atomic::AtomicU64;
        use std::sync::Arc;
        let record = |into: &Arc<AtomicU64>| -> WhenWritten {
            let into = Arc::clone(into);
            Box::new(move |unsent| into.store(unsent + 1, Ordering::SeqCst))
        };
        // Nothing queued: at once, nothing unsent.
        let now = Arc::new(AtomicU64::new(0));
        Pending::default().when_written(record(&now));
        assert_eq!(now.load(Ordering::SeqCst), 1);

        // Written: run with 0 when the queue gets past its bytes, not before.
        let (a, b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let mut pending = Pending::default();
        pending.push(&[&vec![1u8; 4 << 20]], 0);
        let first = Arc::new(AtomicU64::new(0));
        pending.when_written(record(&first));
        pending.push(&[b"after"], 0);
        let second = Arc::new(AtomicU64::new(0));
        pending.when_written(record(&second));
        assert_eq!(pending.write_some(raw(&a)).unwrap(), Progress::Blocked);
        assert_eq!(first.load(Ordering::SeqCst), 0);
        let got = reader(b);
        pending.write_all(raw(&a), Duration::from_secs(10)).unwrap();
        assert_eq!(
            (first.load(Ordering::SeqCst), second.load(Ordering::SeqCst)),
            (1, 1)
        );
        drop(a);
        assert_eq!(got.join().unwrap().len(), (4 << 20) + 5);

        // Dropped: run with the bytes of its own never written, also when the queue itself
        // goes away without a discard.
        let (a, _b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let mut pending = Pending::default();
        pending.push(&[&vec![1u8; 4 << 20]], 0);
        let dropped = Arc::new(AtomicU64::new(0));
        pending.when_written(record(&dropped));
        assert_eq!(pending.write_some(raw(&a)).unwrap(), Progress::Blocked);
        let written = pending.written();
        assert!(written > 0 && written < 4 << 20);
        pending.discard();
        assert_eq!(dropped.load(Ordering::SeqCst), (4 << 20) - written + 1);
        let mut pending = Pending::default();
        pending.push(&[b"never"], 0);
        let gone = Arc::new(AtomicU64::new(0));
        pending.when_written(record(&gone));
        drop(pending);
        assert_eq!(gone.load(Ordering::SeqCst), 6);
    }

    /// Numbers as 4-byte words: any missing, repeated or reordered piece shows.
    fn pattern(from: u32, words: u32) -> Vec<u8> {
        (from..from + words).flat_map(u32::to_be_bytes).collect()
    }

    fn reader(mut stream: UnixStream) -> std::thread::JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut got = Vec::new();
            stream.read_to_end(&mut got).unwrap();
            got
        })
    }

    #[test]
    fn memory_then_a_growing_spill_file_then_memory_arrive_in_order_and_give_their_budgets_back() {
        let dir = scratch_dir("order");
        let buffers = buffers(1 << 20, 64 << 20, &dir);
        let (a, b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let output = Output::new(raw(&a));
        let memory = pattern(0, 100_000);
        let spilled = pattern(100_000, 1_000_000);
        let grown = pattern(1_100_000, 500_000);
        let tail = pattern(1_600_000, 1000);
        // Larger than a locked copy: copied outside the lock, then published.
        let handed = output.hand_over(&buffers, &[&memory], 0, Store::Complete);
        assert_eq!(handed.unwrap(), HandOver::Queued);
        let buffered = output.with(|pending| pending.buffered());
        assert_eq!(buffers.response_memory.used(), buffered as u64);
        assert!(buffered > 0, "the socket did not take it all");
        // Over the memory budget: spilled, nothing more charged to memory.
        let handed = output.hand_over(&buffers, &[&spilled], 0, Store::Complete);
        assert_eq!(handed.unwrap(), HandOver::Queued);
        let buffered = output.with(|pending| pending.buffered());
        assert_eq!(buffers.response_memory.used(), buffered as u64);
        assert_eq!(buffers.disk.used(), spilled.len() as u64);
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            0,
            "the file has no name"
        );
        // The socket is full part-way through: the file grows while it waits (the next list
        // item), then a small tail is queued in memory behind it.
        assert_eq!(output.write_some().unwrap(), Progress::Blocked);
        let handed = output.hand_over(&buffers, &[&grown], 0, Store::Complete);
        assert_eq!(handed.unwrap(), HandOver::Queued);
        assert_eq!(buffers.disk.used(), (spilled.len() + grown.len()) as u64);
        let handed = output.hand_over(&buffers, &[&tail], 0, Store::Complete);
        assert_eq!(handed.unwrap(), HandOver::Queued);
        let reader = reader(b);
        output.write_all(Duration::from_secs(10)).unwrap();
        assert!(output.is_empty());
        drop(a);
        let got = reader.join().unwrap();
        assert_eq!(got.len(), (1_601_000 * 4) as usize);
        assert!(got == pattern(0, 1_601_000), "bytes arrived out of order");
        assert_eq!(buffers.response_memory.used(), 0);
        assert_eq!(
            buffers.disk.used(),
            0,
            "the spill file was closed once sent"
        );
        std::fs::remove_dir(&dir).unwrap();
    }

    #[test]
    fn a_copy_made_outside_the_lock_is_charged_before_it_is_published_and_exactly_once() {
        let dir = scratch_dir("reserve");
        let buffers = buffers(4 << 20, 0, &dir);
        let (a, b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let fd = raw(&a);
        let first = pattern(0, 200_000);
        let second = pattern(200_000, 300_000);
        let mut pending = Pending::default();
        assert!(pending.try_push(&buffers, &[&first], 0, usize::MAX));
        // The slot takes the charge under the lock...
        assert!(pending.reserve(&buffers, second.len(), usize::MAX));
        let charged = (first.len() + second.len()) as u64;
        assert_eq!(buffers.response_memory.used(), charged);
        assert_eq!(pending.buffered(), first.len(), "not queued yet");
        // ... a second reservation past the per-response limit is refused, charging nothing ...
        assert!(!pending.reserve(&buffers, 1, first.len() + second.len()));
        assert_eq!(buffers.response_memory.used(), charged);
        // ... the loop writes meanwhile, giving back exactly what it wrote ...
        assert_eq!(pending.write_some(fd).unwrap(), Progress::Blocked);
        let written = pending.written();
        assert!(written > 0);
        assert_eq!(buffers.response_memory.used(), charged - written);
        // ... and the copy is published behind what was queued, its charge already taken.
        pending.publish_memory(copy_pieces(&[&second], 0));
        assert_eq!(pending.reserved, 0);
        assert_eq!(buffers.response_memory.used(), pending.buffered() as u64);
        let reader = reader(b);
        pending.write_all(fd, Duration::from_secs(10)).unwrap();
        drop(a);
        assert!(
            reader.join().unwrap() == pattern(0, 500_000),
            "out of order"
        );
        assert_eq!(buffers.response_memory.used(), 0, "given back as written");
        std::fs::remove_dir(&dir).unwrap();
    }

    #[test]
    fn bytes_appended_after_the_loop_finished_a_spill_range_go_out_as_a_new_range_of_the_file() {
        let dir = scratch_dir("ranges");
        let buffers = buffers(0, 1 << 20, &dir);
        let (a, b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let fd = raw(&a);
        let mut pending = Pending::default();
        let file = SpillFile::create(&buffers).unwrap();
        let first = pattern(0, 1000);
        let mut skip = 0;
        let (start, end, appended) = file.append(&[&first], &mut skip);
        appended.unwrap();
        pending.publish_spill(Arc::clone(&file), start, end);
        // The loop sends the whole range and drops it while the slot appends more.
        assert_eq!(pending.write_some(fd).unwrap(), Progress::Done);
        assert!(pending.spill_target().is_none());
        let second = pattern(1000, 1000);
        let mut skip = 0;
        let (start, end, appended) = file.append(&[&second], &mut skip);
        appended.unwrap();
        assert_eq!((start, end), (4000, 8000));
        pending.publish_spill(Arc::clone(&file), start, end);
        assert_eq!(buffers.disk.used(), 8000);
        drop(file);
        assert_eq!(pending.write_some(fd).unwrap(), Progress::Done);
        assert_eq!(buffers.disk.used(), 0, "closed with its last range");
        drop(a);
        assert!(reader(b).join().unwrap() == pattern(0, 2000));
        std::fs::remove_dir(&dir).unwrap();
    }

    #[test]
    fn a_full_disk_budget_mid_list_keeps_what_was_spilled_in_order_and_the_rest_is_the_callers() {
        let dir = scratch_dir("budgets");
        let buffers = buffers(0, 300_000, &dir);
        let (a, b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let output = Output::new(raw(&a));
        let parts = [pattern(0, 50_000), pattern(50_000, 50_000)];
        let refs: [&[u8]; 2] = [&parts[0], &parts[1]];
        let handed = output
            .hand_over(&buffers, &refs, 0, Store::Complete)
            .unwrap();
        let HandOver::Full(written) = handed else {
            panic!("the second part cannot fit the disk budget")
        };
        assert_eq!(
            written, 200_000,
            "the first part is queued, the second is not"
        );
        assert_eq!(buffers.disk.used(), 200_000 - output_sent(&output));
        // The caller writes the rest after what is queued (the slot's wait for the client).
        let reader = reader(b);
        output.write_all(Duration::from_secs(10)).unwrap();
        crate::io::write_all_from(raw(&a), &refs, written, Duration::from_secs(10)).unwrap();
        drop(a);
        assert!(
            reader.join().unwrap() == pattern(0, 100_000),
            "out of order"
        );
        assert_eq!(buffers.disk.used(), 0);
        std::fs::remove_dir(&dir).unwrap();
    }

    /// Bytes of the first hand-over the socket took at once (they were never spilled).
    fn output_sent(output: &Output) -> u64 {
        output.with(|pending| match pending.segments.front() {
            Some(Segment::Spill { sent, .. }) => *sent,
            _ => 0,
        })
    }

    #[test]
    fn the_loops_help_never_waits_for_the_slots_lock_and_the_slot_writes_for_it_on_release() {
        let (a, b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let output = Arc::new(Output::new(raw(&a)));
        // The slot holds the lock (mid-hand-over: a spill write may take 100 ms and more).
        let mut state = output.state();
        state
            .pending
            .push(&[b"queued while the loop could not write"], 0);
        output.note_queued(&state);
        let helper = Arc::clone(&output);
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            helper.help_write();
            done.send(()).unwrap();
        });
        finished
            .recv_timeout(Duration::from_secs(20))
            .expect("the loop's help waited for the slot's lock");
        assert!(output.help_wanted.load(Ordering::SeqCst));
        // Letting go of the lock answers the request: the bytes are written at once.
        output.release(state);
        assert!(output.is_empty());
        drop(a);
        assert_eq!(
            reader(b).join().unwrap(),
            b"queued while the loop could not write"
        );
    }

    #[test]
    fn a_writable_edge_seen_with_nothing_queued_is_used_by_the_next_block_the_slot_queues() {
        let dir = scratch_dir("edge");
        let buffers = buffers(1 << 20, 0, &dir);
        let (a, b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let output = Output::new(raw(&a));
        // The loop sees the socket writable while nothing is queued (the slot's block is
        // still being produced): no new edge will come.
        output.help_write();
        assert!(output.help_wanted.load(Ordering::SeqCst));
        // The next block is queued under the lock (small): the request makes the slot write.
        output.with(|pending| assert!(pending.try_push(&buffers, &[b"late"], 0, usize::MAX)));
        assert!(output.is_empty(), "written at once, not left for an edge");
        drop(a);
        assert_eq!(reader(b).join().unwrap(), b"late");
        assert_eq!(buffers.response_memory.used(), 0);
        std::fs::remove_dir(&dir).unwrap();
    }

    #[test]
    fn an_output_says_it_is_empty_without_its_lock_and_close_gives_everything_back() {
        let dir = scratch_dir("output");
        let buffers = buffers(1000, 1 << 20, &dir);
        let (a, _b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let output = Output::new(raw(&a));
        assert!(output.is_empty());
        // Fill the socket so that what follows is queued.
        let filler = vec![0u8; 1 << 20];
        let handed = output.hand_over(&buffers, &[&filler], 0, Store::Complete);
        assert_eq!(handed.unwrap(), HandOver::Queued);
        assert!(output.with(|pending| pending.try_push(&buffers, &[&[6u8; 1000]], 0, 1000)));
        assert!(!output.is_empty());
        assert!(buffers.disk.used() > 0);
        output.close();
        assert!(output.is_empty());
        assert_eq!(buffers.response_memory.used(), 0);
        assert_eq!(buffers.disk.used(), 0);
        std::fs::remove_dir(&dir).unwrap();
    }
}
