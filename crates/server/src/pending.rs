//! Response output a slot could not write without waiting, on every MPM: the slot writes what
//! the socket takes at once and leaves the rest here; the poller (the loop thread) finishes it
//! as the client reads, so a slow reader holds no slot (ADR 0009).
//!
//! The output is a queue of segments, sent strictly in order: bytes in memory (charged to the
//! worker's response memory budget, `response_buffer_total`, and given back as they are
//! written), file ranges (`wsgi.file_wrapper` bodies: sendfile from a duplicated fd, so that
//! no Python object outlives the slot's work) and spill files (a complete body beyond the
//! memory budget: an unlinked temporary file charged to `buffer_disk_total`, sent with
//! sendfile, which may grow while it is being sent).
//!
//! It owns the queue and its accounting; it must not decide what is buffered (the exchange
//! does) nor when the socket is watched (the reactor does).

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
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
    /// A complete body spilled to a temporary file; `sent` bytes of it are written. The slot
    /// may append while it is being sent.
    Spill { file: SpoolFile, sent: u64 },
}

/// Output waiting for the client. Empty (and allocation-free) until something is deferred.
#[derive(Debug, Default)]
pub struct Pending {
    segments: VecDeque<Segment>,
    /// Unsent bytes held in memory segments.
    memory: usize,
    /// The charge of `memory` against the worker's response memory (created at the first
    /// charged push; [`Pending::push`] in tests queues uncharged).
    held: Option<Held>,
    /// Bytes written so far (to tell progress from an event that wrote nothing).
    written: u64,
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

impl Pending {
    /// True when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.segments.iter().all(|segment| match segment {
            Segment::Memory { bytes, sent } => *sent == bytes.len(),
            Segment::File { remaining, .. } => *remaining == 0,
            Segment::Spill { file, sent } => *sent == file.len(),
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
        for part in parts {
            if skip >= part.len() {
                skip -= part.len();
                continue;
            }
            self.push_bytes(&part[skip..]);
            skip = 0;
        }
    }

    fn push_bytes(&mut self, mut data: &[u8]) {
        self.memory += data.len();
        while !data.is_empty() {
            let room = match self.segments.back() {
                Some(Segment::Memory { bytes, .. }) => MEMORY_PIECE.saturating_sub(bytes.len()),
                _ => 0,
            };
            if room == 0 {
                let first = data.len().min(MEMORY_PIECE);
                self.segments.push_back(Segment::Memory {
                    bytes: Vec::with_capacity(first),
                    sent: 0,
                });
                continue;
            }
            let take = room.min(data.len());
            if let Some(Segment::Memory { bytes, .. }) = self.segments.back_mut() {
                bytes.extend_from_slice(&data[..take]);
            }
            data = &data[take..];
        }
    }

    /// Queues `parts` (from byte `skip` on) in memory if the worker's response memory allows
    /// them and the memory queued for this response stays within `limit`; false (nothing
    /// queued) if not.
    pub fn try_push(
        &mut self,
        buffers: &Arc<Buffers>,
        parts: &[&[u8]],
        skip: usize,
        limit: usize,
    ) -> bool {
        let bytes = remaining(parts, skip);
        if self.memory + bytes > limit {
            return false;
        }
        let held = self
            .held
            .get_or_insert_with(|| Held::new(buffers, Budget::ResponseMemory));
        if !held.try_grow(bytes as u64) {
            return false;
        }
        self.push(parts, skip);
        true
    }

    /// Appends `parts` (from byte `*skip` on) to a temporary file queued after everything
    /// else (the last segment's, when it is a spill file, else a new one), advancing `*skip`
    /// past what was appended. Fails with [`SpoolError::BudgetFull`] when `buffer_disk_total`
    /// has no room for the next part (what came before it stays queued).
    pub fn spill(
        &mut self,
        buffers: &Arc<Buffers>,
        parts: &[&[u8]],
        skip: &mut usize,
    ) -> Result<(), SpoolError> {
        let mut offset = 0;
        for part in parts {
            let end = offset + part.len();
            if *skip < end {
                let data = &part[*skip - offset..];
                if !matches!(self.segments.back(), Some(Segment::Spill { .. })) {
                    let file = SpoolFile::create(buffers).map_err(SpoolError::Io)?;
                    self.segments.push_back(Segment::Spill { file, sent: 0 });
                }
                let Some(Segment::Spill { file, .. }) = self.segments.back_mut() else {
                    unreachable!("pushed above")
                };
                file.append(data)?;
                *skip = end;
            }
            offset = end;
        }
        Ok(())
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

    /// Drops everything queued (the response was abandoned: the connection closes), giving
    /// the memory and disk back and closing the files.
    pub fn discard(&mut self) {
        self.segments = VecDeque::new();
        self.memory = 0;
        if let Some(held) = &mut self.held {
            held.release();
        }
    }

    /// Writes as much as the socket takes without waiting.
    pub fn write_some(&mut self, fd: RawFd) -> io::Result<Progress> {
        loop {
            let Some(front) = self.segments.front_mut() else {
                // Give the memory back: a connection that once held a large response must not
                // keep it while it idles.
                self.segments = VecDeque::new();
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
                Segment::Spill { file, sent } => {
                    // Everything appended so far is out: the file is closed and its disk
                    // given back (more output, if any, starts a new one).
                    if *sent == file.len() {
                        self.segments.pop_front();
                        continue;
                    }
                    match send_file_nonblocking(fd, file.fd(), *sent, file.len() - *sent)? {
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
                self.segments.pop_front();
            }
        }
        while matches!(self.segments.front(), Some(Segment::Memory { bytes, sent }) if *sent == bytes.len())
        {
            self.segments.pop_front();
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

/// A connection's pending output, shared by the thread that owns the connection (a slot) and
/// the poller. While an app thread still produces a streamed body, the loop writes what it
/// left pending whenever the socket becomes writable (PEP 3333: transmission continues while
/// the app produces the next block); once the connection is back, the loop finishes it.
///
/// Every operation holds the lock only across non-blocking work (a `sendmsg`/`sendfile` that
/// does not wait, moving bytes, appending to a spill file in the page cache), never across a
/// wait on the client, so the loop never waits long on it. Whether anything waits is also
/// kept in an atomic flag, so the common case (nothing pending) takes no lock at all.
#[derive(Debug)]
pub struct Output {
    fd: RawFd,
    /// True while the pending output is not empty (written under the lock; read without it).
    queued: AtomicBool,
    state: Mutex<OutputState>,
}

#[derive(Debug, Default)]
struct OutputState {
    pending: Pending,
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
            state: Mutex::new(OutputState::default()),
        }
    }

    fn state(&self) -> MutexGuard<'_, OutputState> {
        self.state
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// Runs `f` on the pending output, under the lock.
    pub fn with<R>(&self, f: impl FnOnce(&mut Pending) -> R) -> R {
        let mut state = self.state();
        let result = f(&mut state.pending);
        self.queued
            .store(!state.pending.is_empty(), Ordering::Release);
        result
    }

    /// True when nothing waits. Takes no lock: only the connection's owner adds output, so
    /// for the owner "empty" stays true until it queues something; anyone else may see a
    /// stale value.
    pub fn is_empty(&self) -> bool {
        !self.queued.load(Ordering::Acquire)
    }

    /// Writes what the socket takes now (the loop's help while an app thread holds the
    /// connection, and the loop's own writes once it is back).
    pub fn write_some(&self) -> io::Result<Progress> {
        let mut state = self.state();
        if state.closed {
            return Ok(Progress::Done);
        }
        let result = state.pending.write_some(self.fd);
        self.queued
            .store(!state.pending.is_empty(), Ordering::Release);
        result
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

    /// Numbers as 4-byte words: any missing, repeated or reordered piece shows.
    fn pattern(from: u32, words: u32) -> Vec<u8> {
        (from..from + words).flat_map(u32::to_be_bytes).collect()
    }

    #[test]
    fn memory_then_a_growing_spill_file_then_memory_arrive_in_order_and_give_their_budgets_back() {
        let dir = scratch_dir("order");
        let buffers = buffers(1 << 20, 64 << 20, &dir);
        let (a, mut b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let fd = raw(&a);
        let memory = pattern(0, 100_000);
        let spilled = pattern(100_000, 1_000_000);
        let grown = pattern(1_100_000, 500_000);
        let tail = pattern(1_600_000, 1000);
        let mut pending = Pending::default();
        assert!(pending.try_push(&buffers, &[&memory], 0, usize::MAX));
        // Over the memory budget: refused, nothing queued or charged.
        assert!(!pending.try_push(&buffers, &[&spilled], 0, usize::MAX));
        assert_eq!(buffers.response_memory.used(), memory.len() as u64);
        let mut skip = 0;
        pending.spill(&buffers, &[&spilled], &mut skip).unwrap();
        assert_eq!(skip, spilled.len());
        assert_eq!(buffers.disk.used(), spilled.len() as u64);
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            0,
            "the file has no name"
        );
        // The socket fills part-way through the file.
        assert_eq!(pending.write_some(fd).unwrap(), Progress::Blocked);
        // The file grows while it is being sent (the slot appends the next item).
        let mut skip = 0;
        pending.spill(&buffers, &[&grown], &mut skip).unwrap();
        assert!(pending.try_push(&buffers, &[&tail], 0, usize::MAX));
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            b.read_to_end(&mut got).unwrap();
            got
        });
        pending.write_all(fd, Duration::from_secs(10)).unwrap();
        assert!(pending.is_empty());
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
    fn memory_is_given_back_as_it_is_written_and_a_full_disk_budget_stops_the_spill() {
        let dir = scratch_dir("budgets");
        let buffers = buffers(4 << 20, 100, &dir);
        let (a, mut b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let fd = raw(&a);
        let big = vec![1u8; 2 << 20];
        let mut pending = Pending::default();
        assert!(pending.try_push(&buffers, &[&big], 0, usize::MAX));
        // A streamed body's per-response limit.
        assert!(!pending.try_push(&buffers, &[b"x"], 0, 2 << 20));
        assert_eq!(pending.write_some(fd).unwrap(), Progress::Blocked);
        let charged = buffers.response_memory.used();
        assert!(
            charged < 2 << 20,
            "the written bytes' charge was given back"
        );
        assert_eq!(charged as usize, pending.buffered());
        let mut skip = 0;
        pending
            .spill(&buffers, &[b"0123456789", &[2u8; 200]], &mut skip)
            .unwrap_err();
        assert_eq!(skip, 10, "the part that fit is queued, the rest is not");
        let mut chunk = vec![0u8; 1 << 16];
        let _ = b.read(&mut chunk).unwrap();
        // The client went away: everything is given back and the file closed.
        pending.discard();
        assert_eq!(buffers.response_memory.used(), 0);
        assert_eq!(buffers.disk.used(), 0);
        std::fs::remove_dir(&dir).unwrap();
    }

    #[test]
    fn an_output_says_it_is_empty_without_its_lock_and_close_gives_everything_back() {
        let dir = scratch_dir("output");
        let buffers = buffers(1 << 20, 1 << 20, &dir);
        let (a, _b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let output = Output::new(raw(&a));
        assert!(output.is_empty());
        output.with(|pending| {
            let mut skip = 0;
            pending.spill(&buffers, &[&[5u8; 1000]], &mut skip).unwrap();
            assert!(pending.try_push(&buffers, &[&[6u8; 1000]], 0, usize::MAX));
        });
        assert!(!output.is_empty());
        output.close();
        assert!(output.is_empty());
        assert_eq!(buffers.response_memory.used(), 0);
        assert_eq!(buffers.disk.used(), 0);
        std::fs::remove_dir(&dir).unwrap();
    }
}
