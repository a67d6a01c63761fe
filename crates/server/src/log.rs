//! Error-log lines from Rust, in the same format as Python's logging set-up
//! (`tines.logs`): `[2026-11-22 10:20:00 +0000] [pid] [LEVEL] message`.
//!
//! Written with one `write` to standard error, which the worker inherits from the master
//! (pointing at the error log). Only for faults and lifecycle events: never per request.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

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

/// The least time between two lines of one kind a worker logs about its clients (a failed
/// accept, a failed TLS handshake, a body over `max_body_size`): a lasting failure (EMFILE
/// while connections wait in the queue; a scanner's handshakes; a client retrying a large
/// upload) at one line each was ten a second or more per worker, burying every other line.
const LOG_PERIOD: Duration = Duration::from_secs(1);

/// Which lines of one kind are logged: the first at once, then at most one per
/// [`LOG_PERIOD`], each saying how many were held back since the line before (a count the
/// next line carries; a failure that stops for good leaves its last count unsaid).
#[derive(Debug, Default)]
pub struct LineThrottle {
    last_line: Option<Instant>,
    held_back: u64,
}

impl LineThrottle {
    /// Counts one occurrence at `now`: `Some(held back since the last line)` when this one
    /// is to be logged, `None` when it is held back.
    pub fn note(&mut self, now: Instant) -> Option<u64> {
        match self.last_line {
            Some(last) if now.saturating_duration_since(last) < LOG_PERIOD => {
                self.held_back += 1;
                None
            }
            _ => {
                self.last_line = Some(now);
                Some(std::mem::take(&mut self.held_back))
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lasting_failure_is_logged_once_a_second_with_what_was_held_back() {
        let mut errors = LineThrottle::default();
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        assert_eq!(errors.note(at(0)), Some(0));
        for ms in (100..1000).step_by(100) {
            assert_eq!(errors.note(at(ms)), None, "{ms} ms");
        }
        assert_eq!(errors.note(at(1000)), Some(9));
        assert_eq!(errors.note(at(1100)), None);
        assert_eq!(errors.note(at(5000)), Some(1));
    }
}
