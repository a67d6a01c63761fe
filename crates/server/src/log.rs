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
