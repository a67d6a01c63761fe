//! The access log: formatted and written by Rust, buffered per worker, appended with
//! `O_APPEND` so several workers can share one file. No Python runs for it.
//!
//! Format: Apache/NCSA `combined`, timestamps in UTC:
//! `127.0.0.1 - - [22/Nov/2026:10:20:00 +0000] "GET / HTTP/1.1" 200 2 "-" "curl/8.0"`.
//! Quotes, backslashes and control bytes in logged request fields are escaped as `\xHH`
//! (as Apache does), so a client cannot forge log lines.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use tines_proto::Version;

use crate::exchange::Exchange;
use crate::listener::Peer;

/// Lines are gathered up to this many bytes before a write: one syscall per ~200 requests
/// under load, while the poller flushes whatever is pending each time it goes idle.
const FLUSH_AT: usize = 32 * 1024;

enum Destination {
    Stdout,
    File { path: String, file: File },
}

struct Sink {
    destination: Destination,
    buffer: Vec<u8>,
}

impl Sink {
    fn write_out(&mut self) {
        if self.buffer.is_empty() {
            return;
        }
        let result = match &mut self.destination {
            Destination::Stdout => io::stdout().lock().write_all(&self.buffer),
            Destination::File { file, .. } => file.write_all(&self.buffer),
        };
        if let Err(err) = result {
            crate::log::error(&format!("access log write failed: {err}"));
        }
        self.buffer.clear();
    }
}

/// A worker's access log.
pub struct AccessLog {
    sink: Mutex<Sink>,
}

fn open_append(path: &str) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

impl AccessLog {
    /// Opens the log: `-` is standard output, anything else a file opened for appending.
    pub fn open(spec: &str) -> io::Result<AccessLog> {
        let destination = if spec == "-" {
            Destination::Stdout
        } else {
            Destination::File {
                path: spec.to_string(),
                file: open_append(spec)?,
            }
        };
        Ok(AccessLog {
            sink: Mutex::new(Sink {
                destination,
                buffer: Vec::with_capacity(FLUSH_AT * 2),
            }),
        })
    }

    /// Appends one formatted line (written out once the buffer is large enough).
    pub fn append(&self, line: &[u8]) {
        let mut sink = self
            .sink
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        sink.buffer.extend_from_slice(line);
        if sink.buffer.len() >= FLUSH_AT {
            sink.write_out();
        }
    }

    /// Writes out whatever is buffered.
    pub fn flush(&self) {
        self.sink
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .write_out();
    }

    /// Flushes, then reopens the file (USR1, after log rotation).
    pub fn reopen(&self) {
        let mut sink = self
            .sink
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        sink.write_out();
        if let Destination::File { path, file } = &mut sink.destination {
            match open_append(path) {
                Ok(fresh) => *file = fresh,
                Err(err) => crate::log::error(&format!("cannot reopen access log {path}: {err}")),
            }
        }
    }
}

/// The access-log timestamp, formatted once per second.
#[derive(Default)]
pub struct LogClock {
    second: u64,
    text: Vec<u8>,
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// Converts days since 1970-01-01 to (year, month 1-12, day 1-31) (Howard Hinnant's
/// `civil_from_days`).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

impl LogClock {
    /// `22/Nov/2026:10:20:00 +0000` for now.
    pub fn now(&mut self) -> &[u8] {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        if secs != self.second || self.text.is_empty() {
            self.second = secs;
            let (year, month, day) = civil_from_days((secs / 86_400) as i64);
            let rem = secs % 86_400;
            self.text.clear();
            let _ = write!(
                self.text,
                "{:02}/{}/{}:{:02}:{:02}:{:02} +0000",
                day,
                MONTHS[(month - 1) as usize],
                year,
                rem / 3600,
                rem / 60 % 60,
                rem % 60
            );
        }
        &self.text
    }
}

fn push_escaped(line: &mut Vec<u8>, bytes: &[u8]) {
    for &b in bytes {
        if b == b'"' || b == b'\\' || !(0x20..0x7f).contains(&b) {
            let _ = write!(line, "\\x{b:02x}");
        } else {
            line.push(b);
        }
    }
}

fn header<'a>(exchange: &'a Exchange, name: &[u8]) -> Option<&'a [u8]> {
    exchange
        .headers()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v)
}

/// Formats one `combined` line (with the trailing newline) for a finished exchange.
pub fn format_combined(line: &mut Vec<u8>, exchange: &Exchange, clock: &mut LogClock) {
    match exchange.peer() {
        Peer::Tcp(addr) => {
            let _ = write!(line, "{}", addr.ip());
        }
        Peer::Unix => line.push(b'-'),
    }
    line.extend_from_slice(b" - - [");
    line.extend_from_slice(clock.now());
    line.extend_from_slice(b"] \"");
    push_escaped(line, exchange.method());
    line.push(b' ');
    push_escaped(line, exchange.target());
    line.extend_from_slice(match exchange.version() {
        Version::Http10 => b" HTTP/1.0\" ",
        Version::Http11 => b" HTTP/1.1\" ",
    });
    let mut digits = itoa::Buffer::new();
    line.extend_from_slice(digits.format(exchange.status()).as_bytes());
    line.push(b' ');
    if exchange.body_sent() == 0 {
        line.push(b'-');
    } else {
        line.extend_from_slice(digits.format(exchange.body_sent()).as_bytes());
    }
    for name in [&b"referer"[..], b"user-agent"] {
        line.extend_from_slice(b" \"");
        match header(exchange, name) {
            Some(value) => push_escaped(line, value),
            None => line.push(b'-'),
        }
        line.push(b'"');
    }
    line.push(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_from_days_matches_known_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_414), (2025, 11, 22));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }

    #[test]
    fn escapes_quotes_and_control_bytes() {
        let mut line = Vec::new();
        push_escaped(&mut line, b"a\"b\\c\x01");
        assert_eq!(line, b"a\\x22b\\x5cc\\x01");
    }
}
