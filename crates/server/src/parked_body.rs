//! A request body read before dispatch, while it is parked in the poller: where its bytes go
//! (the connection's read buffer after the head, up to `request_buffer_memory` and while the
//! worker's `request_buffer_total` allows; beyond that an unlinked temporary file, the
//! buffered bytes moved into it), chunked decoding as the bytes arrive, `max_body_size` for a
//! chunked body as it grows, and the pipelined bytes that follow a chunked body.
//!
//! It is sans-IO: it is handed the bytes the reactor read (`reactor::body` does the reading,
//! the `100 Continue`, the timers and the waits for disk) and what it stores is taken over
//! by the exchange at dispatch ([`ParkedBody::finish`]). It must not touch a socket.

use std::io;
use std::sync::Arc;
use std::time::Instant;

use tines_proto::{BodyFraming, ChunkedDecoder, ChunkedError, ChunkedEvent};

use crate::spool::{Budget, Buffers, Held, SpoolError, SpoolFile, INITIAL_BUFFER};

/// The first size of the body area in memory when the read buffer has no room after the head.
const FIRST_GROWTH: usize = 8 * 1024;

/// How the body is delimited.
#[derive(Debug)]
enum Framing {
    /// `Content-Length`: bytes still to come.
    Length { remaining: u64 },
    /// Chunked: decoded as it arrives.
    Chunked(ChunkedDecoder),
}

/// Where the decoded body is kept.
#[derive(Debug)]
pub enum Stored {
    /// In the read buffer right after the head; the charge against `request_buffer_total`
    /// for the buffer's growth.
    Memory(Held),
    /// In an unlinked temporary file; the read buffer holds only the head.
    File(SpoolFile),
}

/// The connection's read buffer as the body's memory store sees it: the decoded body is kept
/// at `buf[head_len..filled]` (in memory), or nothing is after the head (in a file).
pub struct Area<'a> {
    /// The read buffer.
    pub buf: &'a mut Vec<u8>,
    /// How many bytes of it hold data.
    pub filled: &'a mut usize,
    /// Where the body starts (the head's length).
    pub head_len: usize,
}

/// How much the next read may take.
#[derive(Debug, PartialEq, Eq)]
pub enum Room {
    /// This many bytes can be stored.
    Bytes(usize),
    /// The body needs disk that `buffer_disk_total` does not have now: wait, unread, until
    /// the disk account has `needed` bytes free (nothing was taken, no file was made).
    DiskFull {
        /// The bytes the body must take from the disk budget at once to go on.
        needed: u64,
    },
}

/// Why a body read before dispatch failed, each the request's answer.
#[derive(Debug)]
pub enum BodyFault {
    /// Over `max_body_size` (413).
    TooLarge,
    /// Larger than the whole disk budget for bodies, `buffer_disk_total` (413): it would
    /// wait for room for ever.
    OverDiskBudget,
    /// Bad chunked framing (400).
    BadChunk(ChunkedError),
    /// The temporary file could not be created or written: 507 when the disk (or a quota)
    /// is full, else 500.
    Storage(io::Error),
}

impl BodyFault {
    /// The response status this fault earns.
    pub fn status(&self) -> u16 {
        match self {
            BodyFault::TooLarge | BodyFault::OverDiskBudget => 413,
            BodyFault::BadChunk(err) => err.status(),
            BodyFault::Storage(err) if is_storage_full(err) => 507,
            BodyFault::Storage(_) => 500,
        }
    }
}

fn is_storage_full(err: &io::Error) -> bool {
    matches!(err.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
}

fn storage(err: SpoolError) -> BodyFault {
    match err {
        SpoolError::Io(err) => BodyFault::Storage(err),
        SpoolError::BudgetFull => {
            BodyFault::Storage(io::Error::other("buffer_disk_total reached mid-append"))
        }
    }
}

/// Appends bytes that follow a complete body (a pipelined request) to the read buffer.
fn keep_after_body(area: &mut Area<'_>, rest: &[u8]) {
    if rest.is_empty() {
        return;
    }
    let start = *area.filled;
    if area.buf.len() < start + rest.len() {
        area.buf.resize(start + rest.len(), 0);
    }
    area.buf[start..start + rest.len()].copy_from_slice(rest);
    *area.filled += rest.len();
}

/// What the exchange takes over at dispatch: the whole decoded body.
#[derive(Debug)]
pub struct FinishedBody {
    /// Where the decoded bytes are (in memory: `buf[head_len..head_len + length]`).
    pub stored: Stored,
    /// Decoded body bytes.
    pub length: u64,
    /// The body came chunked (the app is told its decoded length instead).
    pub chunked: bool,
}

/// A request body being read before dispatch.
#[derive(Debug)]
pub struct ParkedBody {
    framing: Framing,
    stored: Stored,
    /// Decoded body bytes stored so far.
    length: u64,
    /// Raw body bytes taken off the socket so far (for `body_min_rate`).
    pub received: u64,
    /// When reading the body started (`body_timeout` with `body_min_rate`).
    pub started: Instant,
    /// When bytes last arrived (`body_timeout` per wait without `body_min_rate`).
    pub last_progress: Instant,
    /// Body bytes that came with the head, not stored yet (they are stored as room allows).
    pub early: Vec<u8>,
    complete: bool,
    memory_limit: u64,
    max_body_size: u64,
    /// The most one read of a chunked body takes (see [`ParkedBody::wanted`]).
    pipelined_room: usize,
    /// A Content-Length body over `memory_limit`: its first room moves it to a file.
    to_file: bool,
    /// A Content-Length body in a file has its whole remaining length reserved on the disk
    /// budget (all or nothing), so it never stalls half-read for want of disk.
    whole_reserved: bool,
    /// The loop has it on its list of bodies waiting for disk room (`reactor::body`).
    pub waiting_for_disk: bool,
}

impl ParkedBody {
    /// Starts a body of `framing` (a Content-Length over `memory_limit` goes to a file from
    /// its first room on; the file is made only once the disk budget has room for it). `max_head_size` bounds chunk extensions and trailers, as when streaming,
    /// and (with the first read buffer's size) one read of a chunked body.
    pub fn new(
        framing: BodyFraming,
        buffers: &Arc<Buffers>,
        memory_limit: u64,
        max_body_size: u64,
        max_head_size: usize,
    ) -> ParkedBody {
        let framing = match framing {
            BodyFraming::Chunked => Framing::Chunked(ChunkedDecoder::new(max_head_size)),
            BodyFraming::Length(remaining) => Framing::Length { remaining },
            BodyFraming::None => Framing::Length { remaining: 0 },
        };
        let to_file = matches!(framing, Framing::Length { remaining } if remaining > memory_limit);
        let stored = Stored::Memory(Held::new(buffers, Budget::RequestMemory));
        let now = Instant::now();
        let complete = matches!(framing, Framing::Length { remaining: 0 });
        ParkedBody {
            framing,
            stored,
            length: 0,
            received: 0,
            started: now,
            last_progress: now,
            early: Vec::new(),
            complete,
            memory_limit,
            max_body_size,
            pipelined_room: INITIAL_BUFFER.max(max_head_size + 1),
            to_file,
            whole_reserved: false,
            waiting_for_disk: false,
        }
    }

    /// True once the whole body is stored.
    pub fn is_complete(&self) -> bool {
        self.complete
    }

    /// True while the body is kept in a temporary file.
    pub fn in_file(&self) -> bool {
        matches!(self.stored, Stored::File(_))
    }

    /// Raw bytes the next read may take at most (a Content-Length body is never read past its
    /// end, so a pipelined request stays in the socket; a chunked body's end is known only
    /// once read, so its reads take at most `pipelined_room` bytes: what a read brings past
    /// the end never needs more room than one request head).
    pub fn wanted(&self, at_most: usize) -> usize {
        match self.framing {
            Framing::Length { remaining } => (remaining.min(at_most as u64)) as usize,
            Framing::Chunked(_) => at_most.min(self.pipelined_room),
        }
    }

    /// Makes room for up to `want` more bytes (decoded bytes never outnumber raw ones): grows
    /// the memory area (charged to `request_buffer_total`) up to `request_buffer_memory`;
    /// beyond that, or when the total refuses, moves the body to a temporary file, whose
    /// room is reserved against `buffer_disk_total`: a Content-Length body's whole remaining
    /// length at once (all or nothing, so two such bodies never starve each other), a
    /// chunked body's (length unknown) read by read. The budget is checked before a file is
    /// made; a Content-Length body larger than the whole budget is too large (413).
    pub fn room(
        &mut self,
        area: &mut Area<'_>,
        buffers: &Arc<Buffers>,
        want: usize,
    ) -> Result<Room, BodyFault> {
        if want == 0 {
            return Ok(Room::Bytes(0));
        }
        if let (Stored::Memory(held), false) = (&mut self.stored, self.to_file) {
            let end = (area.head_len as u64).saturating_add(self.memory_limit);
            let cap = end.saturating_sub(*area.filled as u64) as usize;
            let free = area.buf.len().saturating_sub(*area.filled);
            if cap > 0 && free > 0 {
                return Ok(Room::Bytes(free.min(cap).min(want)));
            }
            if cap > 0 {
                let current = area.buf.len().max(*area.filled);
                let grown = ((current.max(FIRST_GROWTH) * 2) as u64).min(end) as usize;
                if held.try_grow((grown - current) as u64) {
                    area.buf.resize(grown, 0);
                    return Ok(Room::Bytes((grown - *area.filled).min(want)));
                }
            }
        }
        if let Stored::Memory(_) = self.stored {
            // Over the per-request limit or the worker's total: spill to a file, once the
            // disk budget has room for what the body must take at once.
            let body = area.head_len..*area.filled;
            let claim = match self.framing {
                Framing::Length { remaining } => remaining,
                Framing::Chunked(_) => 1,
            };
            let needed = body.len() as u64 + claim;
            if needed > buffers.disk.limit() {
                // It would wait for ever.
                return Err(BodyFault::OverDiskBudget);
            }
            if buffers.disk.limit().saturating_sub(buffers.disk.used()) < needed {
                // The buffered bytes stay in memory until the disk has room.
                return Ok(Room::DiskFull { needed });
            }
            let mut file = SpoolFile::create(buffers).map_err(BodyFault::Storage)?;
            if !body.is_empty() {
                match file.append(&area.buf[body]) {
                    Ok(()) => {}
                    // Another thread took the room meanwhile.
                    Err(SpoolError::BudgetFull) => return Ok(Room::DiskFull { needed }),
                    Err(err) => return Err(storage(err)),
                }
            }
            area.buf.truncate(area.head_len);
            area.buf.shrink_to_fit();
            *area.filled = area.head_len;
            self.stored = Stored::File(file);
        }
        let Stored::File(file) = &mut self.stored else {
            unreachable!("moved to a file above")
        };
        match self.framing {
            Framing::Length { remaining } => {
                if !self.whole_reserved {
                    if !file.try_reserve(remaining) {
                        return Ok(Room::DiskFull { needed: remaining });
                    }
                    self.whole_reserved = true;
                }
                // `want` is at most `remaining` (`wanted`), all reserved.
                Ok(Room::Bytes(want))
            }
            Framing::Chunked(_) => match file.reserve_up_to(want as u64) {
                0 => Ok(Room::DiskFull { needed: 1 }),
                reserved => Ok(Room::Bytes(reserved as usize)),
            },
        }
    }

    /// Gives back disk room reserved for a read that brought fewer bytes (or none); a
    /// Content-Length body keeps its whole reservation until its bytes fill it.
    pub fn release_reserved(&mut self) {
        if let (Stored::File(file), false) = (&mut self.stored, self.whole_reserved) {
            file.release_reserved();
        }
    }

    /// Stores raw body bytes the reactor read (at most the room it was given): decodes a
    /// chunked body, counts it against `max_body_size`, and once the body ends keeps what
    /// follows it (a pipelined request) in the read buffer after the body.
    pub fn take(&mut self, area: &mut Area<'_>, bytes: &[u8]) -> Result<(), BodyFault> {
        self.received += bytes.len() as u64;
        self.last_progress = Instant::now();
        let mut pos = 0;
        while pos < bytes.len() && !self.complete {
            match &mut self.framing {
                Framing::Length { remaining } => {
                    let n = (bytes.len() - pos).min(*remaining as usize);
                    *remaining -= n as u64;
                    self.complete = *remaining == 0;
                    self.put(area, &bytes[pos..pos + n])?;
                    pos += n;
                }
                Framing::Chunked(decoder) => {
                    let (consumed, event) =
                        decoder.decode(&bytes[pos..]).map_err(BodyFault::BadChunk)?;
                    let at = pos;
                    pos += consumed;
                    match event {
                        ChunkedEvent::Data(range) => {
                            let data = &bytes[at + range.start..at + range.end];
                            if self.max_body_size > 0
                                && self.length + data.len() as u64 > self.max_body_size
                            {
                                return Err(BodyFault::TooLarge);
                            }
                            self.put(area, data)?;
                        }
                        ChunkedEvent::NeedMore => {}
                        ChunkedEvent::End => self.complete = true,
                    }
                }
            }
        }
        if self.complete && pos < bytes.len() {
            keep_after_body(area, &bytes[pos..]);
        }
        Ok(())
    }

    /// Stores the first `room` of the body bytes that came with the head ([`ParkedBody::early`])
    /// like [`ParkedBody::take`]; the rest stays early for the next room, unless the body
    /// ended: then all that follows its end (in these `room` bytes and after them) is kept in
    /// the read buffer after the body, the start of the next request.
    pub fn take_early(&mut self, area: &mut Area<'_>, room: usize) -> Result<(), BodyFault> {
        let mut bytes = std::mem::take(&mut self.early);
        let room = room.min(bytes.len());
        let taken = self.take(area, &bytes[..room]);
        bytes.drain(..room);
        if taken.is_ok() && self.complete {
            keep_after_body(area, &bytes);
        } else {
            self.early = bytes;
        }
        taken
    }

    fn put(&mut self, area: &mut Area<'_>, data: &[u8]) -> Result<(), BodyFault> {
        if data.is_empty() {
            return Ok(());
        }
        match &mut self.stored {
            Stored::Memory(_) => {
                let start = *area.filled;
                if area.buf.len() < start + data.len() {
                    // Only when the caller stored more than the room it was given.
                    area.buf.resize(start + data.len(), 0);
                }
                area.buf[start..start + data.len()].copy_from_slice(data);
                *area.filled += data.len();
            }
            Stored::File(file) => file.append(data).map_err(storage)?,
        }
        self.length += data.len() as u64;
        Ok(())
    }

    /// The stored body, once complete, for the exchange.
    pub fn finish(self) -> FinishedBody {
        FinishedBody {
            chunked: matches!(self.framing, Framing::Chunked(_)),
            stored: self.stored,
            length: self.length,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::WorkerConfig;

    fn buffers(memory_total: u64, disk: u64, dir: &std::path::Path) -> Arc<Buffers> {
        let config = WorkerConfig {
            request_buffer_total: memory_total,
            buffer_disk_total: disk,
            request_buffer_dir: dir.to_path_buf(),
            ..WorkerConfig::default()
        };
        Arc::new(Buffers::new(&config))
    }

    fn temp_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("tines-parked-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Feeds `raw` in pieces of `step` bytes, as reads would, each within the room given;
    /// returns how many were taken (the rest would still be in the socket).
    fn feed(
        body: &mut ParkedBody,
        buf: &mut Vec<u8>,
        filled: &mut usize,
        head_len: usize,
        buffers: &Arc<Buffers>,
        raw: &[u8],
        step: usize,
    ) -> Result<usize, BodyFault> {
        let mut pos = 0;
        while pos < raw.len() && !body.is_complete() {
            let want = body.wanted(step.min(raw.len() - pos));
            let mut area = Area {
                buf,
                filled,
                head_len,
            };
            let room = match body.room(&mut area, buffers, want)? {
                Room::Bytes(n) => n,
                Room::DiskFull { .. } => panic!("disk full"),
            };
            body.take(&mut area, &raw[pos..pos + room])?;
            body.release_reserved();
            pos += room;
        }
        Ok(pos)
    }

    fn file_contents(file: &SpoolFile) -> Vec<u8> {
        let mut out = vec![0u8; file.len() as usize];
        let n = file.read_at(0, &mut out).unwrap();
        out.truncate(n);
        out
    }

    #[test]
    fn a_chunked_body_is_decoded_right_after_the_head_and_a_pipelined_request_is_kept_after_it() {
        let dir = temp_dir("chunked");
        let buffers = buffers(1 << 20, 1 << 20, &dir);
        let head = b"POST / HTTP/1.1\r\n\r\n";
        let mut buf = head.to_vec();
        let mut filled = head.len();
        let mut body = ParkedBody::new(BodyFraming::Chunked, &buffers, 1 << 16, 0, 4096);
        let raw = b"5\r\nhello\r\n1;ext=1\r\n \r\n6\r\nworld!\r\n0\r\nX-T: 1\r\n\r\nGET /next HTTP/1.1\r\n\r\n";
        let taken = feed(
            &mut body,
            &mut buf,
            &mut filled,
            head.len(),
            &buffers,
            raw,
            3,
        )
        .unwrap();
        assert!(body.is_complete());
        // What came in the read that ended the body is kept; the rest is still unread.
        let mut next = buf[head.len() + 12..filled].to_vec();
        assert!(!next.is_empty());
        next.extend_from_slice(&raw[taken..]);
        let finished = body.finish();
        assert_eq!(finished.length, 12);
        assert!(finished.chunked);
        assert_eq!(&buf[head.len()..head.len() + 12], b"hello world!");
        assert_eq!(next, b"GET /next HTTP/1.1\r\n\r\n");
        assert!(buffers.request_memory.used() > 0);
        drop(finished);
        assert_eq!(buffers.request_memory.used(), 0);
        std::fs::remove_dir(&dir).unwrap();
    }

    /// Stores a body's early bytes as the reactor does: slice by slice, as room allows.
    fn feed_early(
        body: &mut ParkedBody,
        buf: &mut Vec<u8>,
        filled: &mut usize,
        head_len: usize,
        buffers: &Arc<Buffers>,
    ) {
        while !body.is_complete() && !body.early.is_empty() {
            let mut area = Area {
                buf,
                filled,
                head_len,
            };
            let want = body.early.len();
            let room = match body.room(&mut area, buffers, want).unwrap() {
                Room::Bytes(n) => n,
                Room::DiskFull { .. } => panic!("disk full"),
            };
            body.take_early(&mut area, room).unwrap();
            body.release_reserved();
        }
    }

    /// A body-carrying head in an 8 KiB read buffer (`filled` up to it) and the pipelined
    /// request that follows its body.
    fn head_and_next_request() -> (&'static [u8], Vec<u8>, Vec<u8>, usize) {
        let head = b"POST / HTTP/1.1\r\n\r\n";
        let next = [
            b"GET /a HTTP/1.1\r\nX-Pad: ".as_slice(),
            &[b'p'; 2000],
            b"\r\n\r\n",
        ]
        .concat();
        let mut buf = head.to_vec();
        buf.resize(8192, 0);
        (head, next, buf, head.len())
    }

    #[test]
    fn every_byte_after_a_chunked_body_that_came_with_the_head_is_kept_past_the_first_slice() {
        let dir = temp_dir("early");
        let buffers = buffers(1 << 20, 1 << 20, &dir);
        let (head, next, mut buf, mut filled) = head_and_next_request();
        // The memory limit (one slice) is smaller than what came with the head.
        let mut body = ParkedBody::new(BodyFraming::Chunked, &buffers, 100, 0, 4096);
        body.early = [b"5\r\nhello\r\n0\r\n\r\n".as_slice(), &next].concat();
        feed_early(&mut body, &mut buf, &mut filled, head.len(), &buffers);
        assert!(body.is_complete());
        assert!(body.early.is_empty());
        assert_eq!(&buf[head.len()..head.len() + 5], b"hello");
        assert_eq!(&buf[head.len() + 5..filled], &next[..]);
        std::fs::remove_dir(&dir).unwrap();
    }

    #[test]
    fn every_byte_after_a_chunked_body_is_kept_when_it_ends_in_a_partial_disk_reservation() {
        let dir = temp_dir("early-file");
        // Memory for 100 body bytes; disk for 300: the body moves to a file and the early
        // bytes are stored in slices of what the disk account reserves.
        let buffers = buffers(1 << 20, 300, &dir);
        let data = [b'd'; 250];
        let (head, next, mut buf, mut filled) = head_and_next_request();
        let mut body = ParkedBody::new(BodyFraming::Chunked, &buffers, 100, 0, 4096);
        body.early = [b"fa\r\n".as_slice(), &data, b"\r\n0\r\n\r\n", &next].concat();
        feed_early(&mut body, &mut buf, &mut filled, head.len(), &buffers);
        assert!(body.is_complete() && body.in_file());
        assert_eq!(&buf[head.len()..filled], &next[..]);
        let finished = body.finish();
        let Stored::File(file) = &finished.stored else {
            panic!("not in a file")
        };
        assert_eq!(file_contents(file), data);
        drop(finished);
        std::fs::remove_dir(&dir).unwrap();
    }

    #[test]
    fn a_body_over_the_memory_limit_moves_what_was_buffered_into_a_file_and_appends_the_rest() {
        let dir = temp_dir("spill");
        let buffers = buffers(1 << 20, 1 << 20, &dir);
        let head = b"POST / HTTP/1.1\r\n\r\n";
        let mut buf = head.to_vec();
        let mut filled = head.len();
        let mut body = ParkedBody::new(BodyFraming::Chunked, &buffers, 20_000, 0, 4096);
        let data: Vec<u8> = (0..50_000u32).map(|i| (i % 251) as u8).collect();
        let mut raw = Vec::new();
        for piece in data.chunks(7_000) {
            raw.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
            raw.extend_from_slice(piece);
            raw.extend_from_slice(b"\r\n");
        }
        raw.extend_from_slice(b"0\r\n\r\nNEXT");
        // One read brings the body's end and the next request's first bytes.
        feed(
            &mut body,
            &mut buf,
            &mut filled,
            head.len(),
            &buffers,
            &raw,
            1 << 20,
        )
        .unwrap();
        assert!(body.in_file());
        assert_eq!(buffers.request_memory.used(), 0);
        let finished = body.finish();
        let Stored::File(file) = &finished.stored else {
            panic!("not in a file")
        };
        assert_eq!(file_contents(file), data);
        assert_eq!(&buf[head.len()..filled], b"NEXT");
        assert_eq!(buffers.disk.used(), 50_000);
        drop(finished);
        assert_eq!(buffers.disk.used(), 0);
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        std::fs::remove_dir(&dir).unwrap();
    }

    #[test]
    fn the_worker_total_sends_a_small_body_to_a_file() {
        let dir = temp_dir("total");
        let buffers = buffers(0, 100, &dir);
        let head = b"H";
        let mut buf = head.to_vec();
        let mut filled = 1;
        let mut body = ParkedBody::new(BodyFraming::Length(30), &buffers, 1 << 16, 0, 4096);
        feed(
            &mut body,
            &mut buf,
            &mut filled,
            1,
            &buffers,
            &[7u8; 30],
            64,
        )
        .unwrap();
        assert!(body.is_complete() && body.in_file());
        assert_eq!(buffers.disk.used(), 30);
        let finished = body.finish();
        let Stored::File(file) = &finished.stored else {
            panic!("not in a file")
        };
        assert_eq!(file_contents(file), [7u8; 30]);
        std::fs::remove_dir(&dir).unwrap();
    }

    #[test]
    fn a_content_length_body_reserves_its_whole_length_or_waits_for_it_without_making_a_file() {
        let dir = temp_dir("whole");
        let buffers = buffers(0, 50, &dir);
        let (mut first_buf, mut first_filled) = (b"H".to_vec(), 1);
        let (mut second_buf, mut second_filled) = (b"H".to_vec(), 1);
        let mut first = ParkedBody::new(BodyFraming::Length(30), &buffers, 1 << 16, 0, 4096);
        let mut second = ParkedBody::new(BodyFraming::Length(30), &buffers, 1 << 16, 0, 4096);
        // The first takes its whole length although only 10 bytes have come yet.
        feed(
            &mut first,
            &mut first_buf,
            &mut first_filled,
            1,
            &buffers,
            &[1u8; 10],
            64,
        )
        .unwrap();
        assert_eq!(buffers.disk.used(), 30);
        let mut area = Area {
            buf: &mut second_buf,
            filled: &mut second_filled,
            head_len: 1,
        };
        assert_eq!(
            second.room(&mut area, &buffers, 30).unwrap(),
            Room::DiskFull { needed: 30 }
        );
        assert!(!second.in_file());
        assert_eq!(buffers.disk.used(), 30);
        // The first always completes; once it is gone the second fits.
        feed(
            &mut first,
            &mut first_buf,
            &mut first_filled,
            1,
            &buffers,
            &[1u8; 20],
            64,
        )
        .unwrap();
        assert!(first.is_complete());
        assert_eq!(buffers.disk.used(), 30);
        drop(first);
        assert_eq!(
            second.room(&mut area, &buffers, 30).unwrap(),
            Room::Bytes(30)
        );
        assert!(second.in_file());
        std::fs::remove_dir(&dir).unwrap();
    }

    #[test]
    fn a_content_length_body_larger_than_the_whole_disk_budget_is_refused() {
        let dir = temp_dir("over-disk");
        let buffers = buffers(0, 10, &dir);
        let mut buf = b"H".to_vec();
        let mut filled = 1;
        let mut body = ParkedBody::new(BodyFraming::Length(30), &buffers, 1 << 16, 0, 4096);
        let result = feed(
            &mut body,
            &mut buf,
            &mut filled,
            1,
            &buffers,
            &[7u8; 10],
            64,
        );
        assert!(matches!(result, Err(BodyFault::OverDiskBudget)));
        std::fs::remove_dir(&dir).unwrap();
    }

    #[test]
    fn a_chunked_body_that_must_spill_while_the_disk_budget_is_full_waits_for_its_buffered_bytes() {
        let dir = temp_dir("chunked-wait");
        let buffers = buffers(0, 10, &dir);
        assert!(buffers.disk.try_take(10));
        let mut buf = b"H".to_vec();
        let mut filled = 1;
        let mut body = ParkedBody::new(BodyFraming::Chunked, &buffers, 1 << 16, 0, 4096);
        let mut area = Area {
            buf: &mut buf,
            filled: &mut filled,
            head_len: 1,
        };
        assert_eq!(
            body.room(&mut area, &buffers, 64).unwrap(),
            Room::DiskFull { needed: 1 }
        );
        assert!(!body.in_file());
        buffers.disk.give_back(10);
        assert_eq!(body.room(&mut area, &buffers, 64).unwrap(), Room::Bytes(10));
        std::fs::remove_dir(&dir).unwrap();
    }

    #[test]
    fn a_chunked_body_growing_past_max_body_size_is_too_large() {
        let dir = temp_dir("large");
        let buffers = buffers(1 << 20, 1 << 20, &dir);
        let mut buf = Vec::new();
        let mut filled = 0;
        let mut body = ParkedBody::new(BodyFraming::Chunked, &buffers, 1 << 16, 8, 4096);
        let result = feed(
            &mut body,
            &mut buf,
            &mut filled,
            0,
            &buffers,
            b"5\r\nhello\r\n5\r\nworld\r\n0\r\n\r\n",
            64,
        );
        assert!(matches!(result, Err(BodyFault::TooLarge)));
        std::fs::remove_dir(&dir).unwrap();
    }

    #[test]
    fn a_content_length_body_is_never_read_past_its_end() {
        let dir = temp_dir("length");
        let buffers = buffers(1 << 20, 1 << 20, &dir);
        let body = ParkedBody::new(BodyFraming::Length(5), &buffers, 1 << 16, 0, 4096);
        assert_eq!(body.wanted(65536), 5);
        std::fs::remove_dir(&dir).unwrap();
    }
}
