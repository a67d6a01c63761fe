//! Error-log lines from Rust, in the same format as Python's logging set-up
//! (`tines.logs`): `[2026-11-22 10:20:00 +0000] [pid] [LEVEL] message`.
//!
//! Written with one `write` to standard error, which the worker inherits from the master
//! (pointing at the error log). Only for faults and lifecycle events: never per request.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::clock::{civil_from_days, unix_seconds};

/// Whether debug lines are written. Set once when a worker starts (from `log_level`); the only
/// process-wide flag in the crate, because logging is process-wide by nature.
static DEBUG: AtomicBool = AtomicBool::new(false);

/// Turns debug lines on or off.
pub fn set_debug(on: bool) {
    DEBUG.store(on, Ordering::Relaxed);
}

/// Whether debug lines are written.
pub fn debug_enabled() -> bool {
    DEBUG.load(Ordering::Relaxed)
}

fn write_line(level: &str, message: &str) {
    let secs = unix_seconds();
    let (year, month, day) = civil_from_days((secs / 86_400) as i64);
    let rem = secs % 86_400;
    let line = format!(
        "[{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} +0000] [{}] [{level}] {message}\n",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        std::process::id()
    );
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// Logs at ERROR.
pub fn error(message: &str) {
    write_line("ERROR", message);
}

/// Logs at WARNING.
pub fn warning(message: &str) {
    write_line("WARNING", message);
}

/// Logs at INFO.
pub fn info(message: &str) {
    write_line("INFO", message);
}

/// Logs at DEBUG when enabled.
pub fn debug(message: &str) {
    if debug_enabled() {
        write_line("DEBUG", message);
    }
}

/// Puts the error log's file `path` on fd 2 again (`USR1`, after a rotation): the master does
/// the same for itself (`tines.logs.reopen`), and a worker's fd 2 would otherwise stay the
/// rotated file for its whole life. `dup2` swaps it atomically, so a line written meanwhile
/// goes to one file or the other, whole; faulthandler and Python's `sys.stderr` write to fd 2
/// by number and follow. A file that cannot be opened (a worker under `user` without the right
/// to it) is logged to the old one, which stays.
pub fn reopen_stderr(path: &str) {
    use std::os::fd::AsRawFd;
    let opened = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path);
    match opened {
        // SAFETY: dup2 onto fd 2 of a file we hold open; the File closes its own fd after.
        Ok(file) => unsafe {
            if libc::dup2(file.as_raw_fd(), 2) < 0 {
                let err = std::io::Error::last_os_error();
                error(&format!("cannot reopen the error log {path}: {err}"));
            }
        },
        Err(err) => error(&format!("cannot reopen the error log {path}: {err}")),
    }
}
