//! The static file settings as the worker holds them ([`StaticConfig`]): the mounts, each a
//! URL path prefix and the directory it serves, opened once when the worker builds its
//! configuration (the worker's own start, or the master's check before it forks, which only
//! proves the directories open), and the rules that decide what under a mount may be served.
//!
//! It sits below `config` (which holds it) and must not serve anything: the serving is
//! `static_files`, above the exchange. Per request run only [`StaticConfig::mount_for`], a
//! prefix comparison per mount, and the two ways of opening beneath a mount that
//! [`Mount::open`] proves to work before the master forks ([`open_beneath`], [`reopen`]):
//! a kernel or sandbox without them is refused at start, never a 404 for every file.

use std::ffi::CStr;
use std::fmt;
use std::io;
use std::io::Write as _;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One mount: requests whose path is `prefix` or under `prefix/` are answered from `dir`.
#[derive(Clone)]
pub struct Mount {
    /// The URL path prefix, without a trailing `/` (empty: the whole site, `/`).
    pub prefix: Vec<u8>,
    /// The directory served, as configured (absolute).
    pub dir: PathBuf,
    /// The directory, opened when the configuration was built: every file is resolved beneath
    /// this descriptor (`openat2`), never by a path string, so renaming or replacing the
    /// directory afterwards cannot make the worker serve from elsewhere.
    fd: Arc<OwnedFd>,
}

impl Mount {
    /// Opens `dir` (`O_PATH | O_DIRECTORY`: only for resolving beneath it) for `prefix`. Fails
    /// when `dir` does not exist or is not a directory, or when the files under it could not
    /// be opened as `static_files` opens them: `openat2` refused (`ENOSYS` on a kernel before
    /// 5.6 or under valgrind, `EPERM` from a seccomp filter) unless `follow_symlinks` (plain
    /// `openat` then), or `/proc/self/fd` not the kernel's (no procfs mounted).
    pub fn open(prefix: &[u8], dir: &Path, follow_symlinks: bool) -> io::Result<Mount> {
        let mut c_path = dir.as_os_str().as_bytes().to_vec();
        if c_path.contains(&0) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"));
        }
        c_path.push(0);
        // SAFETY: c_path is NUL-terminated and outlives the call.
        let fd = unsafe {
            libc::open(
                c_path.as_ptr().cast(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: open returned a fresh descriptor that nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        if !follow_symlinks {
            let here = open_beneath(fd.as_raw_fd(), c".", libc::O_PATH | libc::O_CLOEXEC).map_err(
                |err| {
                    io::Error::new(
                        err.kind(),
                        format!(
                            "openat2 is unavailable ({err}: a kernel before 5.6, a seccomp \
                             filter or an emulator), and without it files cannot be kept \
                             beneath the directory (static_follow_symlinks does without)"
                        ),
                    )
                },
            )?;
            drop(here);
        }
        probe_reopen(&fd).map_err(|err| {
            io::Error::new(
                err.kind(),
                format!(
                    "/proc/self/fd does not reopen files ({err}): static files are opened \
                     through it to open only regular files (mount procfs on /proc)"
                ),
            )
        })?;
        Ok(Mount {
            prefix: prefix.strip_suffix(b"/").unwrap_or(prefix).to_vec(),
            dir: dir.to_path_buf(),
            fd: Arc::new(fd),
        })
    }

    /// The directory's descriptor (valid while the mount lives).
    pub fn dir_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// How often an `openat2` that answers `EAGAIN` is tried in all: `RESOLVE_BENEATH` refuses a
/// lookup through `..` (an in-mount symlink `sub/up.css -> ../app.css`) that a concurrent
/// rename may have raced, asking the caller to try again; a few tries make that a hit, and
/// one that keeps racing (a rename storm) is a miss, never a loop.
const EAGAIN_TRIES: u32 = 4;

/// Runs `open` until it answers other than `EAGAIN`, at most `tries` times in all (the last
/// `EAGAIN` is the answer then).
fn retry_eagain<T>(tries: u32, mut open: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    let mut left = tries;
    loop {
        match open() {
            Err(err) if err.raw_os_error() == Some(libc::EAGAIN) && left > 1 => left -= 1,
            answer => return answer,
        }
    }
}

/// Opens `name` (relative) beneath `dir` with `flags` by `openat2`, confined to `dir`
/// (`RESOLVE_BENEATH`: `..`, absolute names and symlinks leading out are refused by the
/// kernel; `RESOLVE_NO_MAGICLINKS`: no `/proc/*/fd` jumps), `EAGAIN` retried
/// ([`EAGAIN_TRIES`]).
pub fn open_beneath(dir: RawFd, name: &CStr, flags: libc::c_int) -> io::Result<OwnedFd> {
    let how = open_how(flags, libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS);
    retry_eagain(EAGAIN_TRIES, || openat2(dir, name, &how))
}

/// An `open_how` for `openat2` with `flags` and `resolve`.
fn open_how(flags: libc::c_int, resolve: u64) -> libc::open_how {
    // SAFETY: open_how is plain data; zeroed then filled (it is non-exhaustive).
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = flags as u64;
    how.resolve = resolve;
    how
}

/// One `openat2` call: the descriptor, or the call's error.
fn openat2(dir: RawFd, name: &CStr, how: &libc::open_how) -> io::Result<OwnedFd> {
    // SAFETY: the pointers are valid for the call; the size is the struct's.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir,
            name.as_ptr(),
            how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    } as libc::c_int;
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor that nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// [`open_beneath`] (`beneath`; else unconfined, for `static_follow_symlinks`) answered from
/// the dentry cache only (`RESOLVE_CACHED`, Linux 5.12): `WouldBlock` (EAGAIN) when the lookup
/// would need the disk (issue 39's follow-up: the ASGI loop then hands it to its pool), never
/// retried. A kernel without `RESOLVE_CACHED` (EINVAL) is looked up as [`open_beneath`] does.
pub fn open_cached(
    dir: RawFd,
    name: &CStr,
    flags: libc::c_int,
    beneath: bool,
) -> io::Result<OwnedFd> {
    let mut resolve = libc::RESOLVE_CACHED;
    if beneath {
        resolve |= libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS;
    }
    let err = match openat2(dir, name, &open_how(flags, resolve)) {
        Ok(fd) => return Ok(fd),
        Err(err) => err,
    };
    if err.raw_os_error() != Some(libc::EINVAL) {
        return Err(err);
    }
    if beneath {
        return open_beneath(dir, name, flags);
    }
    // SAFETY: name is NUL-terminated and outlives the call.
    let fd = unsafe { libc::openat(dir, name.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor that nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens for reading (non-blocking, no controlling terminal, closed on exec) the file that
/// `path`, an `O_PATH` descriptor, refers to: the very same file (the kernel follows the
/// descriptor's `/proc/self/fd/N` link to it, not a name), so a caller that `fstat`ed `path`
/// knows what it opens. [`Mount::open`] proved `/proc/self/fd` is the kernel's.
pub fn reopen(path: &OwnedFd) -> io::Result<OwnedFd> {
    reopen_with(
        path,
        libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY,
    )
}

/// [`reopen`] with `flags`.
fn reopen_with(path: &OwnedFd, flags: libc::c_int) -> io::Result<OwnedFd> {
    let mut name = [0u8; 32];
    let mut cursor = &mut name[..];
    // Cannot fail: 14 bytes, at most 10 digits and the NUL fit in 32.
    let _ = write!(cursor, "/proc/self/fd/{}\0", path.as_raw_fd());
    // SAFETY: name holds a NUL-terminated path and outlives the call.
    let fd = unsafe { libc::open(name.as_ptr().cast(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor that nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The device and inode `fstat` gives for `fd`.
fn identity(fd: &OwnedFd) -> io::Result<(u64, u64)> {
    // SAFETY: stat is plain data, all zeroes a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fd is open; st is a valid stat to fill.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((st.st_dev, st.st_ino))
}

/// Proves [`reopen`] opens the file its descriptor refers to (procfs on `/proc`, not another
/// file system or nothing): the directory `dir` reopened is the same device and inode. Done
/// once per mount, so a request pays the reopen's one syscall and no check. (`O_PATH`: a
/// directory the worker may search but not list is still a mount.)
fn probe_reopen(dir: &OwnedFd) -> io::Result<()> {
    let again = reopen_with(dir, libc::O_PATH | libc::O_CLOEXEC)?;
    if identity(&again)? != identity(dir)? {
        return Err(io::Error::other("it reopened another file"));
    }
    Ok(())
}

impl fmt::Debug for Mount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}={}",
            String::from_utf8_lossy(&self.prefix),
            self.dir.display()
        )
    }
}

/// The static file settings (the registry's "Static files" section; docs/settings.md).
#[derive(Clone, Debug)]
pub struct StaticConfig {
    /// `static`: the mounts, in order (the first that matches serves).
    pub mounts: Vec<Mount>,
    /// `static_index`: the file served for a directory (`None`: a directory is a miss).
    pub index: Option<Vec<u8>>,
    /// `static_miss = "app"`: a miss goes to the app; else it gets 404 from Rust.
    pub miss_to_app: bool,
    /// `static_cache_control` (empty: no `Cache-Control`).
    pub cache_control: Vec<u8>,
    /// `static_hashed_cache_control`, for names that carry a content hash.
    pub hashed_cache_control: Vec<u8>,
    /// `static_follow_symlinks`: symbolic links are followed wherever they lead.
    pub follow_symlinks: bool,
    /// `static_hidden`: path segments starting with `.` may be served.
    pub hidden: bool,
}

impl Default for StaticConfig {
    fn default() -> Self {
        StaticConfig {
            mounts: Vec::new(),
            index: None,
            miss_to_app: false,
            cache_control: b"public, max-age=3600".to_vec(),
            hashed_cache_control: b"public, max-age=31536000, immutable".to_vec(),
            follow_symlinks: false,
            hidden: false,
        }
    }
}

impl StaticConfig {
    /// The index in `mounts` of the first mount whose prefix `path` (the request target's
    /// path, before any `?`) is or is under, and what follows the prefix (empty, or starting
    /// with `/`).
    #[inline]
    pub fn mount_for<'p>(&self, path: &'p [u8]) -> Option<(usize, &'p [u8])> {
        self.mounts.iter().enumerate().find_map(|(index, mount)| {
            let rest = path.strip_prefix(mount.prefix.as_slice())?;
            (rest.is_empty() || rest[0] == b'/').then_some((index, rest))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(prefixes: &[&str]) -> StaticConfig {
        let dir = std::env::temp_dir();
        StaticConfig {
            mounts: prefixes
                .iter()
                .map(|prefix| Mount::open(prefix.as_bytes(), &dir, false).unwrap())
                .collect(),
            ..StaticConfig::default()
        }
    }

    #[test]
    fn a_cached_lookup_of_a_name_never_looked_up_would_block_until_it_was() {
        let dir = std::env::temp_dir().join(format!("tines-cached-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("made"), b"x").unwrap();
        let dir_fd = std::fs::File::open(&dir).unwrap();
        let flags = libc::O_PATH | libc::O_CLOEXEC;
        for beneath in [true, false] {
            let name = std::ffi::CString::new(format!("never-{beneath}")).unwrap();
            // No dentry, cached or negative: the lookup would ask the file system.
            let cold = open_cached(dir_fd.as_raw_fd(), &name, flags, beneath).unwrap_err();
            assert_eq!(cold.kind(), io::ErrorKind::WouldBlock, "{beneath}");
            // Looked up once (a negative dentry now), the cache answers.
            let missing = open_beneath(dir_fd.as_raw_fd(), &name, flags).unwrap_err();
            assert_eq!(missing.kind(), io::ErrorKind::NotFound);
            let cached = open_cached(dir_fd.as_raw_fd(), &name, flags, beneath).unwrap_err();
            assert_eq!(cached.kind(), io::ErrorKind::NotFound, "{beneath}");
            // A file just made has its dentry.
            assert!(open_cached(dir_fd.as_raw_fd(), c"made", flags, beneath).is_ok());
        }
        // Confined: a name leading out is never opened. The cache does not answer a `..` under
        // RESOLVE_BENEATH (EAGAIN: cold, so the pool's lookup proper refuses it, EXDEV).
        let out = open_cached(dir_fd.as_raw_fd(), c"../", flags, true).unwrap_err();
        assert_eq!(out.kind(), io::ErrorKind::WouldBlock);
        let out = open_beneath(dir_fd.as_raw_fd(), c"../", flags).unwrap_err();
        assert_eq!(out.raw_os_error(), Some(libc::EXDEV));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_mount_matches_its_prefix_and_what_is_under_it_only() {
        let config = config(&["/static", "/media/"]);
        assert_eq!(
            config.mount_for(b"/static/app.css"),
            Some((0, &b"/app.css"[..]))
        );
        assert_eq!(config.mount_for(b"/static"), Some((0, &b""[..])));
        assert_eq!(config.mount_for(b"/media/a"), Some((1, &b"/a"[..])));
        assert_eq!(config.mounts[1].prefix, b"/media");
        assert!(config.mount_for(b"/staticfiles/a").is_none());
        assert!(config.mount_for(b"/").is_none());
    }

    #[test]
    fn a_root_mount_matches_every_path() {
        let config = config(&[""]);
        assert_eq!(config.mount_for(b"/a/b").unwrap().1, b"/a/b");
        assert_eq!(config.mount_for(b"/").unwrap().1, b"/");
    }

    #[test]
    fn eagain_is_tried_again_a_few_times_then_is_the_answer() {
        let eagain = || io::Error::from_raw_os_error(libc::EAGAIN);
        let mut calls = 0;
        let answer = retry_eagain(4, || {
            calls += 1;
            if calls < 3 {
                Err(eagain())
            } else {
                Ok(calls)
            }
        });
        assert_eq!((answer.unwrap(), calls), (3, 3));
        calls = 0;
        let answer: io::Result<()> = retry_eagain(4, || {
            calls += 1;
            Err(eagain())
        });
        assert_eq!(answer.unwrap_err().raw_os_error(), Some(libc::EAGAIN));
        assert_eq!(calls, 4, "never a loop");
        calls = 0;
        let answer: io::Result<()> = retry_eagain(4, || {
            calls += 1;
            Err(io::Error::from_raw_os_error(libc::ENOENT))
        });
        assert_eq!(
            (answer.is_err(), calls),
            (true, 1),
            "a miss is not tried again"
        );
    }

    /// Makes `openat2` answer `errno` on this thread only (a seccomp filter: a filter
    /// applies to the thread that installs it and the threads and processes it starts).
    fn refuse_openat2_on_this_thread(errno: libc::c_int) {
        let rule = |code: u16, jt: u8, jf: u8, k: u32| libc::sock_filter { code, jt, jf, k };
        let program = [
            // The syscall number (offset 0 of seccomp_data).
            rule((libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16, 0, 0, 0),
            rule(
                (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
                0,
                1,
                libc::SYS_openat2 as u32,
            ),
            rule(
                (libc::BPF_RET | libc::BPF_K) as u16,
                0,
                0,
                libc::SECCOMP_RET_ERRNO | errno as u32,
            ),
            rule(
                (libc::BPF_RET | libc::BPF_K) as u16,
                0,
                0,
                libc::SECCOMP_RET_ALLOW,
            ),
        ];
        let fprog = libc::sock_fprog {
            len: program.len() as u16,
            filter: program.as_ptr().cast_mut(),
        };
        // SAFETY: prctl with valid arguments; fprog and program outlive the calls.
        unsafe {
            assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
            assert_eq!(
                libc::prctl(
                    libc::PR_SET_SECCOMP,
                    libc::SECCOMP_MODE_FILTER,
                    &fprog as *const libc::sock_fprog,
                ),
                0,
                "{}",
                io::Error::last_os_error()
            );
        }
    }

    #[test]
    fn a_mount_is_refused_when_openat2_is_not_available() {
        for errno in [libc::ENOSYS, libc::EPERM] {
            let (refused, followed) = std::thread::spawn(move || {
                refuse_openat2_on_this_thread(errno);
                let dir = std::env::temp_dir();
                (
                    Mount::open(b"/s", &dir, false).map(drop),
                    Mount::open(b"/s", &dir, true).map(drop),
                )
            })
            .join()
            .unwrap();
            let message = refused.unwrap_err().to_string();
            assert!(
                message.starts_with("openat2 is unavailable")
                    && message.contains(&io::Error::from_raw_os_error(errno).to_string()),
                "{message}"
            );
            assert!(followed.is_ok(), "static_follow_symlinks needs no openat2");
        }
        // This thread was never filtered.
        assert!(Mount::open(b"/s", &std::env::temp_dir(), false).is_ok());
    }

    #[test]
    fn a_missing_directory_or_a_file_is_refused() {
        assert!(Mount::open(b"/s", Path::new("/nonexistent/tines"), false).is_err());
        assert!(Mount::open(b"/s", Path::new("/etc/passwd"), false).is_err());
    }
}
