//! The static file settings as the worker holds them ([`StaticConfig`]): the mounts, each a
//! URL path prefix and the directory it serves, opened once when the worker builds its
//! configuration (the worker's own start, or the master's check before it forks, which only
//! proves the directories open), and the rules that decide what under a mount may be served.
//!
//! It sits below `config` (which holds it) and must not serve anything: the serving is
//! `static_files`, above the exchange. Nothing here runs per request except
//! [`StaticConfig::mount_for`], a prefix comparison per mount.

use std::fmt;
use std::io;
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
    /// when `dir` does not exist or is not a directory.
    pub fn open(prefix: &[u8], dir: &Path) -> io::Result<Mount> {
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
                .map(|prefix| Mount::open(prefix.as_bytes(), &dir).unwrap())
                .collect(),
            ..StaticConfig::default()
        }
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
    fn a_missing_directory_or_a_file_is_refused() {
        assert!(Mount::open(b"/s", Path::new("/nonexistent/tines")).is_err());
        assert!(Mount::open(b"/s", Path::new("/etc/passwd")).is_err());
    }
}
