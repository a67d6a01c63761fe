//! Shared memory the master makes before it forks, so that every worker maps the same pages:
//! one [`SharedMapping`] (`MAP_SHARED`, zero-filled) of a memfd that a new master can map
//! again after an exec (USR2 passes the fd). The rate limits' table and their connection
//! counts live in them (ADR 0038). (The scoreboard still makes its own anonymous mapping: it
//! is never passed on, and moving it here is another change.)
//!
//! Must not: interpret the bytes (the owners lay out their atomics in them), grow or move a
//! mapping, or be used per request: every call here is a syscall.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;

/// One shared, read-write mapping of a memfd, of a fixed length, unmapped on drop (the memfd
/// closed with it).
pub struct SharedMapping {
    ptr: NonNull<u8>,
    len: usize,
    memfd: OwnedFd,
}

// SAFETY: the mapping is plain memory; its owners access it only through atomics.
unsafe impl Send for SharedMapping {}
// SAFETY: as above.
unsafe impl Sync for SharedMapping {}

impl SharedMapping {
    /// `len` zeroed bytes in a new memfd named `name` (close-on-exec), mapped shared: the fd
    /// can be passed to another program, which maps the same pages with [`Self::adopt`].
    pub fn memfd(name: &CStr, len: usize) -> io::Result<Self> {
        // SAFETY: a NUL-terminated name; valid flags.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh fd, owned from here on.
        let memfd = unsafe { OwnedFd::from_raw_fd(fd) };
        let size = libc::off_t::try_from(len)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "mapping too large"))?;
        // SAFETY: a valid fd.
        if unsafe { libc::ftruncate(memfd.as_raw_fd(), size) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Self::map(len, memfd)
    }

    /// Maps the whole of the memfd `fd` (passed by an old master), which this object then
    /// owns: closed on error too.
    pub fn adopt(fd: RawFd) -> io::Result<Self> {
        // SAFETY: the caller hands over an fd it owns.
        let memfd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: `stat` is a valid out-pointer.
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a valid fd and out-pointer.
        if unsafe { libc::fstat(memfd.as_raw_fd(), &mut stat) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let len = usize::try_from(stat.st_size)
            .ok()
            .filter(|&len| len > 0)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "an empty fd"))?;
        Self::map(len, memfd)
    }

    fn map(len: usize, memfd: OwnedFd) -> io::Result<Self> {
        if len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "an empty mapping",
            ));
        }
        // SAFETY: a shared mapping of the memfd with no address hint; the result is checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                memfd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(SharedMapping {
            ptr: NonNull::new(ptr.cast()).expect("mmap returned null without MAP_FAILED"),
            len,
            memfd,
        })
    }

    /// The mapping's first byte (page-aligned).
    pub fn ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    /// Its length in bytes, fixed when it was made.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true: an empty mapping is refused when made.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The memfd (close-on-exec; an upgrade dups it for the new master).
    pub fn fd(&self) -> RawFd {
        self.memfd.as_raw_fd()
    }
}

impl Drop for SharedMapping {
    fn drop(&mut self) {
        // SAFETY: exactly what mmap returned; the owners' references do not outlive self.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memfd_mapping_adopted_again_shares_its_bytes() {
        let first = SharedMapping::memfd(c"tines-test", 4096).unwrap();
        assert_eq!(first.len(), 4096);
        // SAFETY: inside the mapping.
        unsafe { first.ptr().as_ptr().add(100).write_volatile(7) };
        // SAFETY: dup of a valid fd.
        let copy = unsafe { libc::dup(first.fd()) };
        let second = SharedMapping::adopt(copy).unwrap();
        assert_eq!(second.len(), 4096);
        // SAFETY: inside the mapping.
        assert_eq!(unsafe { second.ptr().as_ptr().add(100).read_volatile() }, 7);
        assert!(SharedMapping::memfd(c"tines-test", 0).is_err());
    }
}
