//! A connection's pending output as the slot and the loop share it ([`Output`]): the slot
//! copies large blocks and appends to spill files outside the lock and publishes them under
//! it; the loop never waits for the lock while a slot holds the connection.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use super::queue::{copy_pieces, remaining, Pending, Progress};
use super::spill::SpillFile;
use super::LOCKED_COPY;
use crate::spool::{Buffers, SpoolError};
use crate::transport::Link;

/// Where [`Output::hand_over`] may keep bytes the socket did not take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Store {
    /// A body still being produced by a producer that waits on its own (an ASGI `send`): at
    /// most this many bytes in memory for the response.
    Streamed(usize),
    /// A body still being produced by a slot that would otherwise wait for the client (a
    /// WSGI stream, ADR 0024): at most `memory` bytes in memory for the response, then
    /// (once its client was found slow, or while a spill range is its last segment) spill
    /// files, at most `cap` unsent bytes in all. No spill file grows past `cap` (a block that
    /// would take it there starts a new one), so the files on disk hold at most `2 * cap`:
    /// the one being sent, and the later ones, all unsent.
    Spooled {
        /// The response's share of memory (`max_response_buffer`).
        memory: usize,
        /// Unsent bytes the response may leave in all (`max_stream_buffer`).
        cap: u64,
        /// Bytes beyond the memory may start a spill file: the client did not keep pace.
        spill: bool,
    },
    /// A complete body: memory while the worker's budget allows, then a spill file.
    Complete,
}

/// Waits until `link` is writable (true) or `deadline` passes (false).
pub(crate) fn writable_by(link: Link, deadline: Instant) -> io::Result<bool> {
    match link.wait(true, deadline, "send") {
        Ok(()) => Ok(true),
        Err(err) if err.kind() == io::ErrorKind::TimedOut => Ok(false),
        Err(err) => Err(err),
    }
}

impl Store {
    /// The memory the response may hold.
    fn memory(self) -> usize {
        match self {
            Store::Streamed(limit) | Store::Spooled { memory: limit, .. } => limit,
            Store::Complete => usize::MAX,
        }
    }

    /// Whether `bytes` more may wait behind the `unsent` bytes queued (computed only for a
    /// capped store: it walks the queue).
    fn has_room(self, unsent: impl FnOnce() -> u64, bytes: usize) -> bool {
        match self {
            Store::Spooled { cap, .. } => unsent().saturating_add(bytes as u64) <= cap,
            Store::Streamed(_) | Store::Complete => true,
        }
    }

    /// Whether bytes beyond the memory may go to a spill file, when the queue's last segment
    /// is a spill range or not (`ends_in_spill`).
    fn spills(self, ends_in_spill: bool) -> bool {
        match self {
            Store::Streamed(_) => false,
            Store::Spooled { spill, .. } => spill || ends_in_spill,
            Store::Complete => true,
        }
    }

    /// Whether this is a stream that may spill (its blocks come over time, so once one
    /// spilled, the next go on to disk while a spill range is queued last).
    fn streams_to_disk(self) -> bool {
        matches!(self, Store::Spooled { .. })
    }

    /// Whether `bytes` more may be appended to a spill file of `len` bytes. A stream's file
    /// stays queued as long as its client never catches up, and its sent bytes stay on disk
    /// (and charged) until it closes: past the cap, a new file is started, and the old one
    /// closes once its last range is sent.
    fn may_append(self, len: u64, bytes: usize) -> bool {
        match self {
            Store::Spooled { cap, .. } => len.saturating_add(bytes as u64) <= cap,
            Store::Streamed(_) | Store::Complete => true,
        }
    }
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
/// bytes; copies up to `LOCKED_COPY`); large copies and spill-file writes happen outside it
/// and are published under it. The loop, while a slot holds the
/// connection, does not even wait for that: [`Output::help_write`] only tries the lock, and
/// when it cannot write (the lock is taken, or a block is being staged) it leaves a request
/// that the owner answers as soon as it publishes or lets go of the lock, so that no
/// writability edge is lost. Whether anything waits is also kept in an atomic flag, so the
/// common case (nothing pending) takes no lock at all.
#[derive(Debug)]
pub struct Output {
    /// The connection's I/O handle (a copy of its transport's: see [`Output::close`]).
    link: Link,
    /// The socket's fd, copied when the output is made: [`Output::fd`] answers from it, with
    /// no lock and without reaching through `link` (a TLS link points into the transport,
    /// which may be gone once the output is closed; a number is only a number).
    fd: std::os::fd::RawFd,
    /// True while the pending output is not empty (written under the lock; read without it).
    queued: AtomicBool,
    /// The loop saw the socket writable but could not write: the owner writes for it.
    pub(super) help_wanted: AtomicBool,
    state: Mutex<OutputState>,
}

/// What the lock of an [`Output`] guards.
#[derive(Debug, Default)]
pub(super) struct OutputState {
    pub(super) pending: Pending,
    /// The owner is copying or appending bytes outside the lock, to be published after
    /// everything queued.
    staging: bool,
    /// The connection was dropped (its fd is about to close): nothing may be written.
    closed: bool,
}

impl Output {
    /// The output of the connection whose I/O handle is `link` (the connection owns the fd and
    /// calls [`Output::close`] before closing it).
    pub fn new(link: Link) -> Output {
        Output {
            fd: link.fd(),
            link,
            queued: AtomicBool::new(false),
            help_wanted: AtomicBool::new(false),
            state: Mutex::new(OutputState::default()),
        }
    }

    pub(super) fn state(&self) -> MutexGuard<'_, OutputState> {
        self.state
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// Publishes whether anything waits: queued segments, or records a TLS session sealed
    /// and the socket did not take (its backlog: the output is not finished until that is
    /// written too, and the loop watches the socket for it). The link is not asked once the
    /// output is closed (a TLS link points into a transport that may be gone).
    pub(super) fn note_queued(&self, state: &OutputState) {
        self.queued.store(
            !state.pending.is_empty() || (!state.closed && self.link.wants_write()),
            Ordering::Release,
        );
    }

    /// Releases the owner's lock, then writes for the loop if it asked while the lock was
    /// taken (called only when nothing is being staged).
    pub(super) fn release(&self, state: MutexGuard<'_, OutputState>) {
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
                let _ = state.pending.write_some(self.link);
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

    /// True when nothing waits (no segment, no TLS backlog noted). Takes no lock: only the
    /// connection's owner adds output, so for the owner "empty" stays true until it queues
    /// something; anyone else may see a stale value. An owner whose own write left a TLS
    /// backlog notes it with [`Output::note_backlog`].
    pub fn is_empty(&self) -> bool {
        !self.queued.load(Ordering::Acquire)
    }

    /// Notes the TLS backlog the owner's own write left (written straight from its memory,
    /// the queue being empty): the output is then not finished, and the loop that finishes
    /// it writes the backlog (the connection's owner only).
    pub fn note_backlog(&self) {
        let state = self.state();
        self.note_queued(&state);
        self.release(state);
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
                let progress = pending.write_some(self.link);
                if let Err(err) = progress {
                    self.note_queued(&state);
                    drop(state);
                    return Err(err);
                }
                if pending.is_empty() {
                    while written < total {
                        match self.link.write_vectored(parts, written) {
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
            let limit = store.memory();
            // Past a stream's cap nothing more is queued: the slot waits (ADR 0024).
            let room = bytes == 0 || store.has_room(|| pending.unsent(), bytes);
            // A stream that spills keeps spilling (into the same file, up to its cap) until
            // what it spilled is sent.
            let ends_in_spill = pending.ends_in_spill();
            let to_memory = room && !(store.streams_to_disk() && ends_in_spill);
            let queued_now = bytes == 0
                || (to_memory
                    && bytes <= LOCKED_COPY
                    && pending.try_push(buffers, parts, written, limit));
            let staging = if queued_now {
                None
            } else if to_memory && bytes > LOCKED_COPY && pending.reserve(buffers, bytes, limit) {
                Some(Staging::Copy)
            } else if room && store.spills(ends_in_spill) {
                let target = pending.spill_target();
                Some(Staging::Spill(
                    target.filter(|file| store.may_append(file.len(), bytes)),
                ))
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
        let bytes = remaining(parts, 0);
        if bytes > LOCKED_COPY || !store.has_room(|| 0, bytes) {
            return false;
        }
        let limit = store.memory();
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
    /// the slot's own next write. On TLS the write then waits for the session's lock, whose
    /// holders only seal a block and write without waiting (ADR 0030).
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
        if !matches!(state.pending.write_some(self.link), Ok(Progress::Done)) {
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
        let backlog = self.link.wants_write();
        let result = state.pending.write_some(self.link);
        // The client took bytes: queued ones, or a TLS backlog it emptied (ciphertext sealed
        // earlier, counted as written then).
        let moved = state.pending.written() > before || (backlog && !self.link.wants_write());
        self.note_queued(&state);
        result.map(|progress| (progress, moved))
    }

    /// Writes everything, waiting for the client up to `timeout` per wait, without holding
    /// the lock while it waits.
    pub fn write_all(&self, timeout: Duration) -> io::Result<()> {
        while self.write_some()? == Progress::Blocked {
            self.link.wait(true, Instant::now() + timeout, "send")?;
        }
        Ok(())
    }

    /// Writes what is pending, waiting for the client until `deadline` at most (the
    /// connection's owner only): true when all of it was written, false when the deadline
    /// passed first.
    pub fn write_all_until(&self, deadline: Instant) -> io::Result<bool> {
        while self.write_some()? == Progress::Blocked {
            if !writable_by(self.link, deadline)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Runs `f` with the connection's link under the lock, unless the connection was closed
    /// (its fd may be another file's by now): what lets a thread that does not hold the
    /// connection (the loop answering a timed-out request) write to it safely. `None` when
    /// closed. Waits for the lock: its holders never keep it across a wait on the client.
    pub fn with_open_link<R>(&self, f: impl FnOnce(Link) -> R) -> Option<R> {
        let state = self.state();
        (!state.closed).then(|| f(self.link))
    }

    /// The connection's fd, to find the output of a connection known by it; never for I/O
    /// (after [`Output::close`] it may be another file's). Safe to ask at any time: the loop
    /// asks the outputs of its dispatched entries, whose connections a slot may have dropped
    /// already.
    pub fn fd(&self) -> std::os::fd::RawFd {
        self.fd
    }

    /// Bytes written to the socket from this output so far (a waiting sender's progress).
    pub fn written(&self) -> u64 {
        self.with(|pending| pending.written())
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
