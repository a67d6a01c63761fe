//! Where a worker keeps bytes that wait for a slow client, and the budgets that bound them:
//! request bodies read before dispatch and response output handed to the poller, in memory up
//! to per-worker totals (`request_buffer_total`, `response_buffer_total`), beyond them in
//! temporary files (`request_buffer_dir`) up to `buffer_disk_total`.
//!
//! Every temporary file is unlinked from birth (`O_TMPFILE`; on a file system without it, a
//! `mkstemp` name unlinked at once), so a crash or a `SIGKILL` leaves nothing behind: the
//! kernel frees the blocks when the last descriptor closes.
//!
//! It owns the accounting and the files; it must not read from or write to a socket, nor
//! decide when to buffer (the reactor and the exchange do).

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::config::WorkerConfig;

/// The first read buffer of a connection. 8 KiB holds the head of nearly every request
/// (browsers send 0.5–2 KiB) and a small body; larger heads grow it up to `max_head_size`.
/// Kept here, below both, because a body read before dispatch sizes its reads of pipelined
/// bytes by it (`parked_body`) as the connection sizes its buffer (`connection`).
pub(crate) const INITIAL_BUFFER: usize = 8 * 1024;

/// A budget of bytes shared by the threads of one worker: a lock-free counter with a limit.
#[derive(Debug)]
pub struct Account {
    used: AtomicU64,
    limit: u64,
    /// One thread at a time touches it ([`WorkerConfig::serves_on_one_thread`]): a load and a
    /// store, not a locked compare-and-swap (two per small response, ADR 0015).
    one_thread: bool,
}

impl Account {
    /// An empty account that allows `limit` bytes, used by any thread of the worker.
    pub fn new(limit: u64) -> Account {
        Account::for_threads(limit, false)
    }

    /// An empty account that allows `limit` bytes; `one_thread`: only one thread uses it.
    pub fn for_threads(limit: u64, one_thread: bool) -> Account {
        Account {
            used: AtomicU64::new(0),
            limit,
            one_thread,
        }
    }

    /// Sets `used` to what `next` makes of it, unless `next` says `None`; the old value, as
    /// `fetch_update` returns it.
    fn update(&self, mut next: impl FnMut(u64) -> Option<u64>) -> Result<u64, u64> {
        if self.one_thread {
            let used = self.used.load(Ordering::Relaxed);
            return match next(used) {
                Some(new) => {
                    self.used.store(new, Ordering::Relaxed);
                    Ok(used)
                }
                None => Err(used),
            };
        }
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, next)
    }

    /// Takes `bytes` from the budget if they fit; false (and nothing taken) if not.
    pub fn try_take(&self, bytes: u64) -> bool {
        self.update(|used| used.checked_add(bytes).filter(|total| *total <= self.limit))
            .is_ok()
    }

    /// Takes as much of `bytes` as the budget has room for (all, part or none); returns what
    /// was taken.
    pub fn take_up_to(&self, bytes: u64) -> u64 {
        let mut taken = 0;
        let _ = self.update(|used| {
            taken = bytes.min(self.limit.saturating_sub(used));
            (taken > 0).then_some(used + taken)
        });
        taken
    }

    /// Gives `bytes` taken earlier back.
    pub fn give_back(&self, bytes: u64) {
        let before = self.update(|used| Some(used.wrapping_sub(bytes)));
        debug_assert!(
            before.is_ok_and(|before| before >= bytes),
            "gave back more than was taken"
        );
    }

    /// Bytes taken now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Acquire)
    }

    /// The budget.
    pub fn limit(&self) -> u64 {
        self.limit
    }
}

/// Which of a worker's budgets a [`Held`] charge is taken from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Budget {
    /// Memory for request bodies read before dispatch (`request_buffer_total`).
    RequestMemory,
    /// Memory for response output handed to the poller (`response_buffer_total`).
    ResponseMemory,
    /// Temporary files, both directions (`buffer_disk_total`).
    Disk,
}

/// A worker's buffer budgets and its temporary-file directory (one per worker, shared by its
/// threads through an `Arc`).
#[derive(Debug)]
pub struct Buffers {
    /// `request_buffer_total`.
    pub request_memory: Account,
    /// `response_buffer_total`.
    pub response_memory: Account,
    /// `buffer_disk_total`.
    pub disk: Account,
    dir: PathBuf,
}

impl Buffers {
    /// The budgets `config` sets.
    pub fn new(config: &WorkerConfig) -> Buffers {
        let one_thread = config.serves_on_one_thread();
        Buffers {
            request_memory: Account::for_threads(config.request_buffer_total, one_thread),
            response_memory: Account::for_threads(config.response_buffer_total, one_thread),
            disk: Account::for_threads(config.buffer_disk_total, one_thread),
            dir: config.request_buffer_dir.clone(),
        }
    }

    /// The account of `budget`.
    pub fn account(&self, budget: Budget) -> &Account {
        match budget {
            Budget::RequestMemory => &self.request_memory,
            Budget::ResponseMemory => &self.response_memory,
            Budget::Disk => &self.disk,
        }
    }

    /// The temporary-file directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// Bytes charged to one of a worker's budgets, given back when dropped (so a connection that
/// closes mid-body, or a response abandoned by a client that went away, frees its share).
#[derive(Debug)]
pub struct Held {
    buffers: Arc<Buffers>,
    budget: Budget,
    bytes: u64,
}

impl Held {
    /// A charge of nothing yet against `budget`.
    pub fn new(buffers: &Arc<Buffers>, budget: Budget) -> Held {
        Held {
            buffers: Arc::clone(buffers),
            budget,
            bytes: 0,
        }
    }

    /// Charges `bytes` more if the budget allows; false (and nothing charged) if not.
    pub fn try_grow(&mut self, bytes: u64) -> bool {
        if bytes == 0 {
            return true;
        }
        let taken = self.buffers.account(self.budget).try_take(bytes);
        if taken {
            self.bytes += bytes;
        }
        taken
    }

    /// Charges as much of `bytes` more as the budget allows; returns what was charged.
    pub fn grow_up_to(&mut self, bytes: u64) -> u64 {
        let taken = self.buffers.account(self.budget).take_up_to(bytes);
        self.bytes += taken;
        taken
    }

    /// Gives back up to `bytes` of the charge (what was written out or dropped).
    pub fn shrink(&mut self, bytes: u64) {
        let bytes = bytes.min(self.bytes);
        if bytes > 0 {
            self.buffers.account(self.budget).give_back(bytes);
            self.bytes -= bytes;
        }
    }

    /// Gives the whole charge back.
    pub fn release(&mut self) {
        self.shrink(self.bytes);
    }

    /// The bytes charged now.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The worker's budgets this charge belongs to.
    pub fn buffers(&self) -> &Arc<Buffers> {
        &self.buffers
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.release();
    }
}

/// Why bytes could not be added to a temporary file.
#[derive(Debug)]
pub enum SpoolError {
    /// The worker's `buffer_disk_total` is reached: wait until other files are freed.
    BudgetFull,
    /// The file system refused (`ENOSPC`, `EDQUOT`, an I/O error).
    Io(io::Error),
}

impl SpoolError {
    /// True when the disk (or a quota) is full: the request gets 507.
    pub fn is_storage_full(&self) -> bool {
        matches!(self, SpoolError::Io(err)
            if matches!(err.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT)))
    }
}

impl std::fmt::Display for SpoolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpoolError::BudgetFull => write!(f, "buffer_disk_total reached"),
            SpoolError::Io(err) => write!(f, "{err}"),
        }
    }
}

/// An unlinked temporary file that bytes are appended to and read back from (by offset, so
/// readers never move a shared position), charged to the worker's disk budget.
#[derive(Debug)]
pub struct SpoolFile {
    file: File,
    len: u64,
    /// The disk charge: the bytes written plus `reserved`.
    held: Held,
    /// Bytes charged ahead of the appends that will use them ([`SpoolFile::reserve_up_to`]).
    reserved: u64,
}

impl SpoolFile {
    /// Creates an empty temporary file in the worker's `request_buffer_dir`.
    pub fn create(buffers: &Arc<Buffers>) -> io::Result<SpoolFile> {
        Ok(SpoolFile {
            file: temp_file(buffers.dir())?,
            len: 0,
            held: Held::new(buffers, Budget::Disk),
            reserved: 0,
        })
    }

    /// Charges up to `bytes` to the disk budget ahead of the appends that will use them (a
    /// reader must know the bytes it takes off a socket can be stored before it reads them);
    /// returns the bytes reserved (0 when the budget is full).
    pub fn reserve_up_to(&mut self, bytes: u64) -> u64 {
        let taken = self.held.grow_up_to(bytes);
        self.reserved += taken;
        taken
    }

    /// Charges exactly `bytes` to the disk budget ahead of the appends that will use them,
    /// or nothing (false) when the budget has not that much room.
    pub fn try_reserve(&mut self, bytes: u64) -> bool {
        let taken = self.held.try_grow(bytes);
        if taken {
            self.reserved += bytes;
        }
        taken
    }

    /// Gives back what [`SpoolFile::reserve_up_to`] or [`SpoolFile::try_reserve`] reserved
    /// and no append used.
    pub fn release_reserved(&mut self) {
        self.held.shrink(self.reserved);
        self.reserved = 0;
    }

    /// Appends `bytes`, charging them to the disk budget first (from the reservation, then
    /// the budget).
    pub fn append(&mut self, bytes: &[u8]) -> Result<(), SpoolError> {
        let count = bytes.len() as u64;
        let from_reserve = self.reserved.min(count);
        if !self.held.try_grow(count - from_reserve) {
            return Err(SpoolError::BudgetFull);
        }
        self.reserved -= from_reserve;
        if let Err(err) = self.file.write_all_at(bytes, self.len) {
            // A write that failed part-way (a full disk) may have left blocks past `len`:
            // cut them off, so that the file holds no more than its charge says.
            let _ = self.file.set_len(self.len);
            self.held.shrink(count);
            return Err(SpoolError::Io(err));
        }
        self.len += bytes.len() as u64;
        Ok(())
    }

    /// Bytes written so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True when nothing was written.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Reads bytes from `offset` into `buf`; 0 at the end.
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        if offset >= self.len {
            return Ok(0);
        }
        let want = buf.len().min((self.len - offset) as usize);
        self.file.read_at(&mut buf[..want], offset)
    }

    /// The file's descriptor (for `sendfile`; it stays open as long as this value).
    pub fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

/// Opens a new temporary file in `dir` that has no name: `O_TMPFILE`, or where the file system
/// lacks it, `mkostemp` and an immediate unlink (a crash between the two is the only window
/// in which a name exists).
pub fn temp_file(dir: &Path) -> io::Result<File> {
    let path = CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in request_buffer_dir"))?;
    // SAFETY: `path` is a valid NUL-terminated string; the flags and mode are plain integers.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC,
            0o600 as libc::c_uint,
        )
    };
    if fd >= 0 {
        // SAFETY: `open` returned a fresh descriptor that nobody else owns.
        return Ok(unsafe { File::from_raw_fd(fd) });
    }
    let err = io::Error::last_os_error();
    if !matches!(
        err.raw_os_error(),
        Some(libc::EOPNOTSUPP) | Some(libc::EISDIR)
    ) {
        return Err(err);
    }
    let mut template = dir.as_os_str().as_bytes().to_vec();
    template.extend_from_slice(b"/.tines-spool-XXXXXX\0");
    // SAFETY: `template` is a writable NUL-terminated buffer ending in six X's, as mkostemp
    // requires; it replaces them in place.
    let fd = unsafe { libc::mkostemp(template.as_mut_ptr().cast(), libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `mkostemp` returned a fresh descriptor that nobody else owns.
    let file = unsafe { File::from_raw_fd(fd) };
    // SAFETY: `template` now holds the created file's NUL-terminated path.
    if unsafe { libc::unlink(template.as_ptr().cast()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buffers(disk: u64) -> Arc<Buffers> {
        let config = WorkerConfig {
            buffer_disk_total: disk,
            request_buffer_total: 100,
            ..WorkerConfig::default()
        };
        Arc::new(Buffers::new(&config))
    }

    #[test]
    fn an_account_refuses_what_would_pass_its_limit_and_takes_back_what_is_given() {
        // Atomic (a worker with app threads) and plain (one thread at a time): the same rules.
        for one_thread in [false, true] {
            let account = Account::for_threads(10, one_thread);
            assert!(account.try_take(6));
            assert!(!account.try_take(5));
            assert!(account.try_take(4));
            account.give_back(6);
            assert_eq!(account.used(), 4);
            assert!(account.try_take(6));
            account.give_back(7);
            assert_eq!(account.take_up_to(20), 7);
            assert_eq!(account.take_up_to(1), 0);
            assert_eq!(account.used(), 10);
        }
    }

    #[test]
    fn a_held_charge_is_given_back_when_dropped() {
        let buffers = buffers(1000);
        let mut held = Held::new(&buffers, Budget::RequestMemory);
        assert!(held.try_grow(60));
        assert!(!held.try_grow(41));
        held.shrink(10);
        assert_eq!(buffers.request_memory.used(), 50);
        drop(held);
        assert_eq!(buffers.request_memory.used(), 0);
    }

    #[test]
    fn a_spool_file_has_no_name_reads_back_what_was_appended_and_respects_the_disk_budget() {
        let dir = std::env::temp_dir().join(format!("tines-spool-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = WorkerConfig {
            buffer_disk_total: 10,
            request_buffer_dir: dir.clone(),
            ..WorkerConfig::default()
        };
        let buffers = Arc::new(Buffers::new(&config));
        let mut file = SpoolFile::create(&buffers).unwrap();
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        file.append(b"hello ").unwrap();
        assert!(matches!(file.append(b"world"), Err(SpoolError::BudgetFull)));
        file.append(b"you!").unwrap();
        assert_eq!(buffers.disk.used(), 10);
        let mut out = [0u8; 16];
        let n = file.read_at(3, &mut out).unwrap();
        assert_eq!(&out[..n], b"lo you!");
        drop(file);
        assert_eq!(buffers.disk.used(), 0);
        std::fs::remove_dir(&dir).unwrap();
    }

    #[test]
    fn a_reservation_takes_what_the_disk_budget_has_left_and_appends_use_it_first() {
        let dir = std::env::temp_dir().join(format!("tines-spool-reserve-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = WorkerConfig {
            buffer_disk_total: 10,
            request_buffer_dir: dir.clone(),
            ..WorkerConfig::default()
        };
        let buffers = Arc::new(Buffers::new(&config));
        let mut file = SpoolFile::create(&buffers).unwrap();
        file.append(b"abc").unwrap();
        assert_eq!(file.reserve_up_to(100), 7);
        assert_eq!(file.reserve_up_to(1), 0);
        file.append(b"defg").unwrap();
        assert_eq!(buffers.disk.used(), 10);
        file.release_reserved();
        assert_eq!(buffers.disk.used(), 7);
        assert!(file.append(b"hijk").is_err());
        file.append(b"hij").unwrap();
        drop(file);
        assert_eq!(buffers.disk.used(), 0);
        std::fs::remove_dir(&dir).unwrap();
    }
}
