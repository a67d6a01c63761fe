//! Response output the slot could not write without waiting: with the `event` MPM an app
//! thread writes what the socket takes at once and leaves the rest here; the loop thread
//! finishes it as the client reads, so a slow reader holds no app thread.
//!
//! The order is: `bytes[sent..]`, then an optional file range (sendfile, from a duplicated fd
//! so that no Python object outlives the app thread's work), then `tail` (bytes produced after
//! the file, such as the chunk trailer and the last chunk).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
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
                    Some(n) => self.sent += n,
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
        assert_eq!(pending.write_some(std::os::fd::AsRawFd::as_raw_fd(&a)).unwrap(), Progress::Done);
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
