//! Response spill files: a complete body beyond the memory budget, or a WSGI stream beyond its
//! share of it (ADR 0024), goes to an unlinked temporary file that the slot appends to and the
//! loop sends from, by offset.

use std::io;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex};

use crate::spool::{Buffers, SpoolError, SpoolFile};

/// A response spill file, shared by the queue's ranges (the loop sends from its fd) and the
/// slot (which appends to it without the output's lock). The descriptor and its disk charge
/// go when the last holder drops it: once every range is sent and the slot appends no more.
#[derive(Debug)]
pub struct SpillFile {
    /// `appender`'s descriptor, stable for the file's life (read with sendfile by offset, so
    /// no shared position).
    pub(super) fd: RawFd,
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

    /// The file's length: every byte appended, sent or not (what it holds on disk and is
    /// charged for until it closes).
    pub(super) fn len(&self) -> u64 {
        self.appender
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .len()
    }

    /// Appends `parts` from byte `*skip` on, advancing `*skip` past what was appended;
    /// returns the file's length before and after (the bytes to publish), and why it stopped
    /// early if it did ([`SpoolError::BudgetFull`] when `buffer_disk_total` has no room for
    /// the next part; the parts before it are appended and charged).
    pub(super) fn append(
        &self,
        parts: &[&[u8]],
        skip: &mut usize,
    ) -> (u64, u64, Result<(), SpoolError>) {
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
