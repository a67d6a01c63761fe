//! The descriptors a thread has opened for reading static files, kept for the next answer of
//! the same file (issue 39's follow-up).
//!
//! A static answer looks its name up as an `O_PATH` descriptor and `fstat`s it (ADR 0036,
//! decision 4), then opened the regular file for reading through `/proc/self/fd/N`: that reopen
//! walks procfs and follows a magic link, about 2.3 µs of kernel time per answer on this VM
//! (`openat2(O_PATH)`, `fstat`, reopen and two `close`s: 3.7 µs against 1.4 µs for a direct
//! `openat2`, `fstat`, `close`), and took the 4 KiB row of `make bench-edge` from 1.03x to
//! 1.42x nginx's CPU per request. Here a thread keeps the read descriptors it opened, keyed by
//! the file's identity (`st_dev`, `st_ino`) from the lookup's `fstat`: the next answer of that
//! file does the lookup and the `fstat` as before (every check is unchanged: the name is
//! confined, the type is a regular file) and reuses the descriptor instead of reopening.
//!
//! Why this is safe: a descriptor is the inode, not a name. While it is held the inode cannot
//! be freed, so its (`st_dev`, `st_ino`) names no other file; reads go by offset (`sendfile`
//! with an offset, `pread`), so sharing one among answers shares no file position; what is
//! read is the file's content now (a file rewritten in place is read anew, and its size and
//! mtime come from the lookup's fresh `fstat`). What it costs: a thread holds at most
//! [`ENTRIES`] descriptors; a file deleted or replaced by a deploy stays open (its disk space
//! held) until its entry is reused, as with nginx's `open_file_cache`. Per thread, so no lock:
//! prefork has one thread, `thread`/`event` an app thread per slot, ASGI its loop.

use std::cell::RefCell;
use std::io;
use std::os::fd::OwnedFd;
use std::rc::Rc;

use super::{Opened, Validators};
use crate::static_mounts;

/// Descriptors a thread keeps: the assets of a page or two. Small, so that a `thread` worker's
/// slots together hold a few hundred descriptors at most.
pub(super) const ENTRIES: usize = 16;

/// A file's identity while a descriptor to it is held: (`st_dev`, `st_ino`).
pub(super) type FileId = (u64, u64);

struct Cache {
    entries: Vec<(FileId, Rc<OwnedFd>)>,
    /// The entry replaced next when full (round robin: no bookkeeping per hit).
    next: usize,
}

thread_local! {
    static CACHE: RefCell<Cache> = const { RefCell::new(Cache { entries: Vec::new(), next: 0 }) };
}

/// The read descriptor of the file `id`: the one this thread holds, or `open()`'s, kept.
pub(super) fn read_descriptor(
    id: FileId,
    open: impl FnOnce() -> io::Result<OwnedFd>,
) -> io::Result<Rc<OwnedFd>> {
    CACHE.with(|cache| {
        let mut cache = cache.borrow_mut();
        if let Some((_, fd)) = cache.entries.iter().find(|(held, _)| *held == id) {
            return Ok(Rc::clone(fd));
        }
        let fd = Rc::new(open()?);
        if cache.entries.len() < ENTRIES {
            cache.entries.push((id, Rc::clone(&fd)));
        } else {
            let at = cache.next;
            cache.entries[at] = (id, Rc::clone(&fd));
            cache.next = (at + 1) % ENTRIES;
        }
        Ok(fd)
    })
}

/// The regular file `path` (of type `kind`, identity `id`) opened for reading: the descriptor
/// this thread holds for it, or reopened from `path` (`open_cache`); `None` for any other type.
pub(super) fn opened(
    kind: libc::mode_t,
    path: &OwnedFd,
    validators: Validators,
    id: FileId,
) -> Option<Opened> {
    if kind != libc::S_IFREG {
        return None;
    }
    let file = read_descriptor(id, || static_mounts::reopen(path)).ok()?;
    Some(Opened { file, validators })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    fn devnull() -> io::Result<OwnedFd> {
        Ok(std::fs::File::open("/dev/null")?.into())
    }

    #[test]
    fn a_file_answered_again_reuses_its_descriptor_and_opens_nothing() {
        let first = read_descriptor((1, 10), devnull).unwrap();
        let again = read_descriptor((1, 10), || panic!("opened again")).unwrap();
        assert_eq!(first.as_raw_fd(), again.as_raw_fd());
        // Another inode of the same device, and the same inode number on another device,
        // are other files.
        let other = read_descriptor((1, 11), devnull).unwrap();
        let elsewhere = read_descriptor((2, 10), devnull).unwrap();
        assert_ne!(other.as_raw_fd(), first.as_raw_fd());
        assert_ne!(elsewhere.as_raw_fd(), first.as_raw_fd());
    }

    #[test]
    fn a_thread_holds_at_most_its_entries_and_a_failed_open_keeps_nothing() {
        std::thread::spawn(|| {
            assert!(
                read_descriptor((9, 1), || Err(io::Error::from_raw_os_error(libc::EACCES)))
                    .is_err()
            );
            let held: Vec<_> = (0..ENTRIES as u64 * 3)
                .map(|ino| read_descriptor((7, ino), devnull).unwrap())
                .collect();
            CACHE.with(|cache| assert_eq!(cache.borrow().entries.len(), ENTRIES));
            // The last ENTRIES stay; the first were let go (their Rc is ours alone now).
            assert_eq!(Rc::strong_count(&held[0]), 1);
            assert_eq!(Rc::strong_count(held.last().unwrap()), 2);
            let last = ENTRIES as u64 * 3 - 1;
            read_descriptor((7, last), || panic!("the newest entry was dropped")).unwrap();
        })
        .join()
        .unwrap();
    }
}
