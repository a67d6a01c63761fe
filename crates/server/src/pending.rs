//! Response output the slot could not write without waiting: with the `event` MPM an app
//! thread writes what the socket takes at once and leaves the rest here; the loop thread
//! finishes it as the client reads, so a slow reader holds no app thread.
//!
//! The order is: `bytes[sent..]`, then an optional file range (sendfile, from a duplicated fd
//! so that no Python object outlives the app thread's work), then `tail` (bytes produced after
//! the file, such as the chunk trailer and the last chunk).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::io::{send_file_nonblocking, wait_fd, write_vectored_nonblocking};

/// A file range still to send.
#[derive(Debug)]
struct FileRange {
    fd: OwnedFd,
    offset: u64,
    remaining: u64,
}

/// Output waiting for the client. Empty (and allocation-free) until something is deferred.
#[derive(Debug, Default)]
pub struct Pending {
    bytes: Vec<u8>,
    sent: usize,
    file: Option<FileRange>,
    tail: Vec<u8>,
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

impl Pending {
    /// True when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.sent == self.bytes.len() && self.file.is_none() && self.tail.is_empty()
    }

    /// Bytes written to the socket from this queue so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Bytes held in memory (what `max_response_buffer` bounds).
    pub fn buffered(&self) -> usize {
        self.bytes.len() - self.sent + self.tail.len()
    }

    /// Queues `parts`, skipping their first `skip` bytes (already written).
    pub fn push(&mut self, parts: &[&[u8]], mut skip: usize) {
        let target = if self.file.is_some() {
            &mut self.tail
        } else {
            if self.sent == self.bytes.len() {
                self.bytes.clear();
                self.sent = 0;
            }
            &mut self.bytes
        };
        for part in parts {
            if skip >= part.len() {
                skip -= part.len();
                continue;
            }
            target.extend_from_slice(&part[skip..]);
            skip = 0;
        }
    }

    /// Queues `count` bytes of the file from `offset` (after whatever is queued already).
    /// Fails when a file range is already queued: the caller writes that out first.
    pub fn push_file(&mut self, fd: OwnedFd, offset: u64, count: u64) -> Result<(), OwnedFd> {
        if self.file.is_some() || !self.tail.is_empty() {
            return Err(fd);
        }
        if count > 0 {
            self.file = Some(FileRange {
                fd,
                offset,
                remaining: count,
            });
        }
        Ok(())
    }

    /// Drops everything queued (the response was abandoned: the connection closes).
    pub fn discard(&mut self) {
        *self = Pending::default();
    }

    /// True when a file range is queued.
    pub fn has_file(&self) -> bool {
        self.file.is_some()
    }

    /// Writes as much as the socket takes without waiting.
    pub fn write_some(&mut self, fd: RawFd) -> io::Result<Progress> {
        loop {
            if self.sent < self.bytes.len() {
                match write_vectored_nonblocking(fd, &[&self.bytes[self.sent..]], 0)? {
                    Some(n) => {
                        self.sent += n;
                        self.written += n as u64;
                    }
                    None => return Ok(Progress::Blocked),
                }
                continue;
            }
            if let Some(file) = &mut self.file {
                if file.remaining == 0 {
                    self.file = None;
                    continue;
                }
                match send_file_nonblocking(fd, file.fd.as_raw_fd(), file.offset, file.remaining)? {
                    Some(0) => {
                        // The file is shorter than announced: the response cannot be completed.
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "the file ended before its announced length",
                        ));
                    }
                    Some(n) => {
                        file.offset += n;
                        file.remaining -= n;
                        self.written += n;
                    }
                    None => return Ok(Progress::Blocked),
                }
                continue;
            }
            if !self.tail.is_empty() {
                self.bytes.clear();
                std::mem::swap(&mut self.bytes, &mut self.tail);
                self.sent = 0;
                continue;
            }
            // Give the memory back: a connection that once held a large response must not keep
            // it while it idles.
            self.bytes = Vec::new();
            self.tail = Vec::new();
            self.sent = 0;
            return Ok(Progress::Done);
        }
    }

    /// Writes everything, waiting for the client up to `timeout` per wait (backpressure on the
    /// app thread when the app produces more than `max_response_buffer`).
    pub fn write_all(&mut self, fd: RawFd, timeout: Duration) -> io::Result<()> {
        while self.write_some(fd)? == Progress::Blocked {
            wait_fd(fd, true, Instant::now() + timeout, "send")?;
        }
        Ok(())
    }
}

/// A connection's pending output, shared by the thread that owns the connection and the
/// event loop. While an app thread still produces a streamed body, the loop writes what it
/// left pending whenever the socket becomes writable (PEP 3333: transmission continues while
/// the app produces the next block); once the connection is back, the loop finishes it.
///
/// Every operation holds the lock only across non-blocking work (a `sendmsg`/`sendfile` that
/// does not wait, or moving bytes), never across a wait, so the loop never waits long on it.
#[derive(Debug)]
pub struct Output {
    fd: RawFd,
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
        f(&mut self.state().pending)
    }

    /// True when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.state().pending.is_empty()
    }

    /// Writes what the socket takes now (the loop's help while an app thread holds the
    /// connection, and the loop's own writes once it is back).
    pub fn write_some(&self) -> io::Result<Progress> {
        let mut state = self.state();
        if state.closed {
            return Ok(Progress::Done);
        }
        state.pending.write_some(self.fd)
    }

    /// Writes everything, waiting for the client up to `timeout` per wait, without holding
    /// the lock while it waits.
    pub fn write_all(&self, timeout: Duration) -> io::Result<()> {
        while self.write_some()? == Progress::Blocked {
            wait_fd(self.fd, true, Instant::now() + timeout, "send")?;
        }
        Ok(())
    }

    /// Marks the connection closed and drops what is queued.
    pub fn close(&self) {
        let mut state = self.state();
        state.closed = true;
        state.pending.discard();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::net::UnixStream;

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
        pending.push_file(OwnedFd::from(file), 2, 5).unwrap();
        pending.push(&[b":tail"], 0);
        assert_eq!(pending.buffered(), "ead:xx".len() + ":tail".len());
        assert_eq!(
            pending
                .write_some(std::os::fd::AsRawFd::as_raw_fd(&a))
                .unwrap(),
            Progress::Done
        );
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
        let fd = std::os::fd::AsRawFd::as_raw_fd(&a);
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
}
