//! The access log: formatted and written by Rust, buffered per worker, appended with
//! `O_APPEND` so several workers can share one file. No Python runs for it.
//!
//! Format: Apache/NCSA `combined`, timestamps in UTC:
//! `127.0.0.1 - - [22/Nov/2026:10:20:00 +0000] "GET / HTTP/1.1" 200 2 "-" "curl/8.0"`.
//! Quotes, backslashes and control bytes in logged request fields are escaped as `\xHH`
//! (as Apache does), so a client cannot forge log lines.
//!
//! It owns the line format and the buffered sink, and is given the request's fields
//! ([`LoggedRequest`]): it must not depend on the exchange that fills them in.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::net::IpAddr;
use std::sync::Mutex;

use tines_proto::Version;

use crate::clock::LogClock;
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

fn push_escaped(line: &mut Vec<u8>, bytes: &[u8]) {
    for &b in bytes {
        if b == b'"' || b == b'\\' || !(0x20..0x7f).contains(&b) {
            let _ = write!(line, "\\x{b:02x}");
        } else {
            line.push(b);
        }
    }
}

/// What the access log records of one finished exchange (filled in by
/// [`crate::exchange::Exchange`], so that this module needs nothing from it).
pub struct LoggedRequest<'a> {
    /// The client's address as the app saw it (`REMOTE_ADDR`: behind a trusted proxy, the
    /// forwarded one); `None` for a Unix-socket peer without a forwarded address.
    pub client: Option<IpAddr>,
    /// The connection's peer (the proxy, when there is one), kept as its own field.
    pub peer: Peer,
    /// The request method, as sent.
    pub method: &'a [u8],
    /// The request target, as sent.
    pub target: &'a [u8],
    /// The protocol version.
    pub version: Version,
    /// The response status (0 if none was sent).
    pub status: u16,
    /// Body bytes sent.
    pub body_sent: u64,
    /// The first `Referer` header, if any.
    pub referer: Option<&'a [u8]>,
    /// The first `User-Agent` header, if any.
    pub user_agent: Option<&'a [u8]>,
}

/// Formats one `combined` line (with the trailing newline) for a finished exchange.
pub fn format_combined(line: &mut Vec<u8>, request: &LoggedRequest<'_>, clock: &mut LogClock) {
    // `%h` is the address the app saw, as gunicorn's `%(h)s` and Apache's mod_remoteip do.
    match request.client {
        Some(ip) => {
            let _ = write!(line, "{ip}");
        }
        None => line.push(b'-'),
    }
    line.extend_from_slice(b" - - [");
    line.extend_from_slice(clock.now());
    line.extend_from_slice(b"] \"");
    push_escaped(line, request.method);
    line.push(b' ');
    push_escaped(line, request.target);
    line.extend_from_slice(match request.version {
        Version::Http10 => b" HTTP/1.0\" ",
        Version::Http11 => b" HTTP/1.1\" ",
    });
    let mut digits = itoa::Buffer::new();
    line.extend_from_slice(digits.format(request.status).as_bytes());
    line.push(b' ');
    if request.body_sent == 0 {
        line.push(b'-');
    } else {
        line.extend_from_slice(digits.format(request.body_sent).as_bytes());
    }
    for value in [request.referer, request.user_agent] {
        line.extend_from_slice(b" \"");
        match value {
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
    fn escapes_quotes_and_control_bytes() {
        let mut line = Vec::new();
        push_escaped(&mut line, b"a\"b\\c\x01");
        assert_eq!(line, b"a\\x22b\\x5cc\\x01");
    }
}
