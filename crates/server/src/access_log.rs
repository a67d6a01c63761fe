//! The access log: formatted and written by Rust, buffered per worker, appended with
//! `O_APPEND` so several workers can share one file. No Python runs for it.
//!
//! Formats ([`Format`], `access_log_format`): `combined` (Apache/NCSA, the default), `common`,
//! `json` (one object per line), or a custom layout of gunicorn's `%(atom)s` atoms, so a
//! gunicorn `access_log_format` carries over (and Apache's two TLS ones, `{SSL_PROTOCOL}x` and
//! `{SSL_CIPHER}x`). Timestamps are in UTC:
//! `127.0.0.1 - - [22/Nov/2026:10:20:00 +0000] "GET / HTTP/1.1" 200 2 "-" "curl/8.0"`.
//! Quotes, backslashes, control bytes and bytes past ASCII in logged request fields are
//! escaped as `\xHH` (as Apache does; in JSON strings as `\u00HH`), so a client cannot forge
//! log lines.
//!
//! It owns the line formats and the buffered sink, and is given the request's fields
//! ([`LoggedRequest`]): it must not depend on the exchange that fills them in.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tines_proto::Version;

use crate::clock::LogClock;
use crate::tls::TlsInfo;

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
    format: Format,
    exclude: Vec<Vec<u8>>,
    pid: u32,
}

fn open_append(path: &str) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

impl AccessLog {
    /// Opens the log: `-` is standard output, anything else a file opened for appending.
    /// Lines are laid out by `format`; requests whose path matches a pattern of `exclude`
    /// (exact, or a prefix when it ends with `*`) are not logged. Opened in the worker: the
    /// pid logged is the worker's.
    pub fn open(spec: &str, format: Format, exclude: Vec<Vec<u8>>) -> io::Result<AccessLog> {
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
            format,
            exclude,
            pid: std::process::id(),
        })
    }

    /// The layout of its lines.
    pub fn format(&self) -> &Format {
        &self.format
    }

    /// Whether a request for `target` is left out of the log (`access_log_exclude`).
    pub fn excludes(&self, target: &[u8]) -> bool {
        if self.exclude.is_empty() {
            return false;
        }
        let path = split_target(target).0;
        self.exclude
            .iter()
            .any(|pattern| match pattern.strip_suffix(b"*") {
                Some(prefix) => path.starts_with(prefix),
                None => path == pattern.as_slice(),
            })
    }

    /// Formats `request` into `line` (cleared first) and appends it, unless its path is
    /// excluded.
    pub fn log(&self, line: &mut Vec<u8>, request: &LoggedRequest<'_>, clock: &mut LogClock) {
        if self.excludes(request.line.target()) {
            return;
        }
        line.clear();
        self.format.write(line, request, clock, self.pid);
        self.append(line);
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

/// Appends `bytes` with quotes, backslashes, control bytes and bytes past ASCII as `\xHH`.
fn push_escaped(line: &mut Vec<u8>, bytes: &[u8]) {
    for &b in bytes {
        if b == b'"' || b == b'\\' || !(0x20..0x7f).contains(&b) {
            let _ = write!(line, "\\x{b:02x}");
        } else {
            line.push(b);
        }
    }
}

/// Appends `bytes` escaped as [`push_escaped`] does, or `-` when empty.
fn push_field(line: &mut Vec<u8>, bytes: &[u8]) {
    if bytes.is_empty() {
        line.push(b'-');
    } else {
        push_escaped(line, bytes);
    }
}

/// Appends `bytes` as a JSON string: ASCII only, each byte a character (bytes are read as
/// latin-1, as WSGI reads them), so any request gives a valid line.
pub(crate) fn push_json_string(line: &mut Vec<u8>, bytes: &[u8]) {
    line.push(b'"');
    for &b in bytes {
        match b {
            b'"' => line.extend_from_slice(b"\\\""),
            b'\\' => line.extend_from_slice(b"\\\\"),
            0x20..=0x7e => line.push(b),
            _ => {
                let _ = write!(line, "\\u{b:04x}");
            }
        }
    }
    line.push(b'"');
}

/// Splits a request target into its path and its query (without the `?`; empty if none).
fn split_target(target: &[u8]) -> (&[u8], &[u8]) {
    match target.iter().position(|&b| b == b'?') {
        Some(at) => (&target[..at], &target[at + 1..]),
        None => (target, b""),
    }
}

/// The protocol a parsed request came by, as the log shows it (`%(H)s`, the request line's
/// last word): an HTTP/2 stream's head is synthesized as HTTP/1.1 (ADR 0035), so its version
/// alone would say `HTTP/1.1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// HTTP/1.0.
    Http10,
    /// HTTP/1.1.
    Http11,
    /// An HTTP/2 stream.
    Http2,
}

impl Protocol {
    /// The protocol of a request whose head says `version`, `h2` on an HTTP/2 stream
    /// ([`crate::transport::Link::is_h2`]).
    #[inline]
    pub fn of(version: Version, h2: bool) -> Protocol {
        if h2 {
            return Protocol::Http2;
        }
        match version {
            Version::Http10 => Protocol::Http10,
            Version::Http11 => Protocol::Http11,
        }
    }

    /// Its name in a request line.
    pub fn name(self) -> &'static [u8] {
        match self {
            Protocol::Http10 => b"HTTP/1.0",
            Protocol::Http11 => b"HTTP/1.1",
            Protocol::Http2 => b"HTTP/2.0",
        }
    }
}

/// The request line as the log knows it.
#[derive(Clone, Copy, Debug)]
pub enum RequestLine<'a> {
    /// A request the server parsed.
    Parsed {
        /// The method, as sent.
        method: &'a [u8],
        /// The request target, as sent.
        target: &'a [u8],
        /// The protocol it came by.
        protocol: Protocol,
    },
    /// The first line of a request the server refused before it was parsed (400, 408,
    /// 414, 431 ...), as received: empty when nothing came.
    Raw(&'a [u8]),
    /// The first line of a request the server refused on an HTTP/2 stream: the line role A
    /// synthesized from the stream's pseudo-headers (`METHOD TARGET HTTP/1.1`, ADR 0035),
    /// logged with the protocol the client used, `HTTP/2.0`.
    RawH2(&'a [u8]),
}

impl<'a> RequestLine<'a> {
    /// The raw line's space-separated parts (at most three).
    fn raw_part(line: &'a [u8], index: usize) -> &'a [u8] {
        line.splitn(3, |&b| b == b' ').nth(index).unwrap_or(b"")
    }

    /// The method (empty when unknown).
    pub fn method(&self) -> &'a [u8] {
        match *self {
            RequestLine::Parsed { method, .. } => method,
            RequestLine::Raw(line) | RequestLine::RawH2(line) => Self::raw_part(line, 0),
        }
    }

    /// The request target (empty when unknown).
    pub fn target(&self) -> &'a [u8] {
        match *self {
            RequestLine::Parsed { target, .. } => target,
            RequestLine::Raw(line) | RequestLine::RawH2(line) => Self::raw_part(line, 1),
        }
    }

    /// The protocol (empty when unknown).
    pub fn protocol(&self) -> &'a [u8] {
        match *self {
            RequestLine::Parsed { protocol, .. } => protocol.name(),
            RequestLine::Raw(line) => Self::raw_part(line, 2),
            RequestLine::RawH2(_) => Protocol::Http2.name(),
        }
    }

    /// Appends the whole line, escaped (`-` when nothing came).
    fn push(&self, line: &mut Vec<u8>) {
        match *self {
            RequestLine::Parsed { method, target, .. } => {
                push_escaped(line, method);
                line.push(b' ');
                push_escaped(line, target);
                line.push(b' ');
                line.extend_from_slice(self.protocol());
            }
            RequestLine::RawH2(_) => {
                push_escaped(line, self.method());
                line.push(b' ');
                push_escaped(line, self.target());
                line.push(b' ');
                line.extend_from_slice(self.protocol());
            }
            RequestLine::Raw(raw) => push_field(line, raw),
        }
    }
}

/// What the access log records of one finished exchange (filled in by
/// [`crate::exchange::Exchange`], or by the loop for a response it wrote itself, so that this
/// module needs nothing from either).
pub struct LoggedRequest<'a> {
    /// The client's address as the app saw it (`REMOTE_ADDR`: behind a trusted proxy, the
    /// forwarded one); `None` for a Unix-socket peer without a forwarded address.
    pub client: Option<IpAddr>,
    /// The request line.
    pub line: RequestLine<'a>,
    /// The response status (0 if none was sent).
    pub status: u16,
    /// Body bytes sent: after compression, the compressed bytes (as nginx's
    /// `$body_bytes_sent` and Apache's `%B` count them), without chunked framing.
    pub body_sent: u64,
    /// The body's bytes before compression (the app's), for a compressed response only.
    pub uncompressed: Option<u64>,
    /// The value of the first request header of a name (lower-case), if any.
    pub request_header: &'a dyn Fn(&[u8]) -> Option<&'a [u8]>,
    /// The values of the response headers the format names
    /// ([`Format::response_header_names`]), in that order; shorter (or empty) when the
    /// response had none of them.
    pub response_headers: &'a [Option<Vec<u8>>],
    /// From the slot taking the request to its end (when the format shows it).
    pub duration: Option<Duration>,
    /// From the request being ready (head, and a body read before dispatch) to the slot
    /// taking it: the wait for an app thread (when the format shows it).
    pub queue: Option<Duration>,
    /// The connection's TLS protocol and suite; `None` on a plain connection (or one whose
    /// handshake did not finish).
    pub tls: Option<LoggedTls>,
}

/// What the access log shows of a TLS connection: two static names, so a line (and a
/// [`DeferredLine`]) carries them without a copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoggedTls {
    /// mod_ssl's `SSL_PROTOCOL` (`TLSv1.2`, `TLSv1.3`).
    pub protocol: &'static str,
    /// mod_ssl's `SSL_CIPHER`: the suite's OpenSSL name.
    pub cipher: &'static str,
}

impl LoggedTls {
    /// What the log shows of `info` (`None` for a plain connection), as
    /// [`crate::transport::Link::with_tls_info`] hands it.
    pub fn of(info: Option<&TlsInfo>) -> Option<LoggedTls> {
        info.map(|info| LoggedTls {
            protocol: info.protocol,
            cipher: info.cipher,
        })
    }
}

/// An access-log line whose response was still being written when its exchange ended (a body
/// handed to the poller: a large file, a response the client reads slowly): an owned copy of
/// what the line shows, written once the response's bytes have gone out or the connection
/// dropped them, with the body bytes really sent and the time until then.
pub struct DeferredLine {
    client: Option<IpAddr>,
    method: Vec<u8>,
    target: Vec<u8>,
    protocol: Protocol,
    status: u16,
    body_sent: u64,
    uncompressed: Option<u64>,
    request_headers: Vec<(Vec<u8>, Vec<u8>)>,
    response_headers: Vec<Option<Vec<u8>>>,
    started: Instant,
    queue: Option<Duration>,
    tls: Option<LoggedTls>,
}

impl DeferredLine {
    /// A copy of `request` (a parsed one), its request headers `headers`, the exchange
    /// having started at `started`.
    pub fn new<'h>(
        request: &LoggedRequest<'_>,
        headers: impl Iterator<Item = (&'h [u8], &'h [u8])>,
        started: Instant,
    ) -> Self {
        DeferredLine {
            client: request.client,
            method: request.line.method().to_vec(),
            target: request.line.target().to_vec(),
            protocol: match request.line {
                RequestLine::Parsed { protocol, .. } => protocol,
                RequestLine::Raw(_) => Protocol::Http11,
                RequestLine::RawH2(_) => Protocol::Http2,
            },
            status: request.status,
            body_sent: request.body_sent,
            uncompressed: request.uncompressed,
            request_headers: headers
                .map(|(name, value)| (name.to_vec(), value.to_vec()))
                .collect(),
            response_headers: request.response_headers.to_vec(),
            started,
            queue: request.queue,
            tls: request.tls,
        }
    }

    /// Writes the line to `log`, `unsent` bytes of the response's body (as sent: compressed
    /// when it is; not its head or chunk framing) never having been written. The bytes sent,
    /// and `{ratio}n`'s output side, are what is left.
    pub fn write(self, log: &AccessLog, unsent: u64) {
        let find = |name: &[u8]| {
            self.request_headers
                .iter()
                .find(|(header, _)| header.eq_ignore_ascii_case(name))
                .map(|(_, value)| value.as_slice())
        };
        let request = LoggedRequest {
            client: self.client,
            line: RequestLine::Parsed {
                method: &self.method,
                target: &self.target,
                protocol: self.protocol,
            },
            status: self.status,
            body_sent: self.body_sent.saturating_sub(unsent),
            uncompressed: self.uncompressed,
            request_header: &find,
            response_headers: &self.response_headers,
            duration: log
                .format()
                .shows_duration()
                .then(|| self.started.elapsed()),
            queue: self.queue,
            tls: self.tls,
        };
        let mut line = Vec::with_capacity(256);
        log.log(&mut line, &request, &mut LogClock::default());
    }
}

/// gunicorn's default `access_log_format`, which is Apache's `combined`.
pub const COMBINED: &str = r#"%(h)s %(l)s %(u)s %(t)s "%(r)s" %(s)s %(b)s "%(f)s" "%(a)s""#;
/// Apache's `common` (NCSA) format.
pub const COMMON: &str = r#"%(h)s %(l)s %(u)s %(t)s "%(r)s" %(s)s %(b)s"#;

/// The atoms of a custom format, by name (`tines.config.ACCESS_LOG_ATOMS` says what each
/// shows, for the docs; a test checks the two lists agree).
pub const ATOMS: &[&str] = &[
    "h",
    "l",
    "u",
    "t",
    "r",
    "m",
    "U",
    "q",
    "H",
    "s",
    "b",
    "B",
    "f",
    "a",
    "T",
    "M",
    "D",
    "L",
    "W",
    "p",
    "{Name}i",
    "{Name}o",
    "{SSL_PROTOCOL}x",
    "{SSL_CIPHER}x",
    "{instream}n",
    "{outstream}n",
    "{ratio}n",
];

#[derive(Clone, Debug, PartialEq, Eq)]
enum Atom {
    RemoteAddr,
    Dash,
    Time,
    RequestLine,
    Method,
    Path,
    Query,
    Protocol,
    Status,
    BytesOrDash,
    Bytes,
    Seconds,
    Millis,
    Micros,
    DecimalSeconds,
    QueueMicros,
    Pid,
    /// The TLS protocol (`-` on a plain connection).
    TlsProtocol,
    /// The TLS suite's OpenSSL name (`-` on a plain connection).
    TlsCipher,
    /// A compressed body's bytes before compression (`-` when not compressed): Apache's
    /// mod_deflate note `instream`.
    Uncompressed,
    /// A compressed body's bytes sent (`-` when not compressed): mod_deflate's `outstream`.
    Compressed,
    /// `outstream` over `instream`, a whole percentage (`-` when not compressed):
    /// mod_deflate's `ratio`.
    CompressionRatio,
    /// A request header, by lower-case name.
    RequestHeader(Vec<u8>),
    /// A response header, by its index in [`Format::response_header_names`].
    ResponseHeader(usize),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    Text(Vec<u8>),
    Atom(Atom),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Layout {
    Pieces(Vec<Piece>),
    Json,
}

/// How access-log lines are laid out (`access_log_format`), parsed once in the master (so a
/// bad one stops the start with one line) and again in each worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Format {
    layout: Layout,
    response_headers: Vec<Vec<u8>>,
    /// Lines show the request time.
    duration: bool,
    /// Lines show the queue wait.
    queue: bool,
}

impl Default for Format {
    fn default() -> Self {
        Format::parse("combined").expect("the combined format parses")
    }
}

impl Format {
    /// `combined`, `common`, `json`, or a custom layout of `%(atom)s` atoms (`%%` is a
    /// percent sign); the error names what is wrong.
    pub fn parse(spec: &str) -> Result<Format, String> {
        match spec {
            "combined" => Self::custom(COMBINED),
            "common" => Self::custom(COMMON),
            "json" => Ok(Format {
                layout: Layout::Json,
                response_headers: Vec::new(),
                duration: true,
                queue: true,
            }),
            custom if !custom.contains("%(") => Err(format!(
                "{custom:?} is not combined, common or json, and has no %(atom)s"
            )),
            custom => Self::custom(custom),
        }
    }

    fn custom(spec: &str) -> Result<Format, String> {
        let mut pieces = Vec::new();
        let mut response_headers: Vec<Vec<u8>> = Vec::new();
        let mut text = Vec::new();
        let mut rest = spec;
        while let Some(at) = rest.find('%') {
            text.extend_from_slice(&rest.as_bytes()[..at]);
            let after = &rest[at + 1..];
            if let Some(tail) = after.strip_prefix('%') {
                text.push(b'%');
                rest = tail;
                continue;
            }
            let Some(inner) = after.strip_prefix('(') else {
                return Err(format!(
                    "a lone % at byte {} (atoms are %(name)s; %% is a percent sign)",
                    spec.len() - rest.len() + at
                ));
            };
            let Some(close) = inner.find(')') else {
                return Err(format!("an unclosed %( in {spec:?}"));
            };
            let name = &inner[..close];
            let tail = &inner[close + 1..];
            // `%(x)s` as gunicorn writes them; `d` too, which Python's % formatting allows
            // for numbers.
            let tail = tail
                .strip_prefix('s')
                .or_else(|| tail.strip_prefix('d'))
                .ok_or_else(|| format!("%({name}) must be followed by s, as in %({name})s"))?;
            let atom = Self::atom(name, &mut response_headers)?;
            if !text.is_empty() {
                pieces.push(Piece::Text(std::mem::take(&mut text)));
            }
            pieces.push(Piece::Atom(atom));
            rest = tail;
        }
        text.extend_from_slice(rest.as_bytes());
        if !text.is_empty() {
            pieces.push(Piece::Text(text));
        }
        let shows = |wanted: fn(&Atom) -> bool| {
            pieces
                .iter()
                .any(|piece| matches!(piece, Piece::Atom(atom) if wanted(atom)))
        };
        let duration = shows(|atom| {
            matches!(
                atom,
                Atom::Seconds | Atom::Millis | Atom::Micros | Atom::DecimalSeconds
            )
        });
        let queue = shows(|atom| matches!(atom, Atom::QueueMicros));
        Ok(Format {
            layout: Layout::Pieces(pieces),
            response_headers,
            duration,
            queue,
        })
    }

    fn atom(name: &str, response_headers: &mut Vec<Vec<u8>>) -> Result<Atom, String> {
        let header = |name: &str| -> Result<Vec<u8>, String> {
            if !tines_proto::is_token(name.as_bytes()) {
                return Err(format!("{name:?} is not a header name"));
            }
            Ok(name.to_ascii_lowercase().into_bytes())
        };
        Ok(match name {
            "h" => Atom::RemoteAddr,
            "l" | "u" => Atom::Dash,
            "t" => Atom::Time,
            "r" => Atom::RequestLine,
            "m" => Atom::Method,
            "U" => Atom::Path,
            "q" => Atom::Query,
            "H" => Atom::Protocol,
            "s" => Atom::Status,
            "b" => Atom::BytesOrDash,
            "B" => Atom::Bytes,
            "f" => Atom::RequestHeader(b"referer".to_vec()),
            "a" => Atom::RequestHeader(b"user-agent".to_vec()),
            "T" => Atom::Seconds,
            "M" => Atom::Millis,
            "D" => Atom::Micros,
            "L" => Atom::DecimalSeconds,
            "W" => Atom::QueueMicros,
            "p" => Atom::Pid,
            // Apache's `%{SSL_PROTOCOL}x` and `%{SSL_CIPHER}x`, in gunicorn's `%(...)s`.
            "{SSL_PROTOCOL}x" => Atom::TlsProtocol,
            "{SSL_CIPHER}x" => Atom::TlsCipher,
            // Apache mod_deflate's notes, by the names its documentation's example gives them.
            "{instream}n" => Atom::Uncompressed,
            "{outstream}n" => Atom::Compressed,
            "{ratio}n" => Atom::CompressionRatio,
            _ if name.starts_with('{') && name.ends_with("}i") => {
                Atom::RequestHeader(header(&name[1..name.len() - 2])?)
            }
            _ if name.starts_with('{') && name.ends_with("}o") => {
                let wanted = header(&name[1..name.len() - 2])?;
                let index = match response_headers.iter().position(|n| *n == wanted) {
                    Some(index) => index,
                    None => {
                        response_headers.push(wanted);
                        response_headers.len() - 1
                    }
                };
                Atom::ResponseHeader(index)
            }
            "{SSL_PROTOCOL}e" | "{SSL_CIPHER}e" => {
                return Err(format!(
                    "%({name})s: environ variables are not logged (the access log is written \
                     without Python); %({}x)s shows it",
                    &name[..name.len() - 1]
                ))
            }
            _ if name.starts_with('{') && name.ends_with("}e") => {
                return Err(format!(
                    "%({name})s: environ variables are not logged (the access log is written \
                     without Python); atoms: {}",
                    Self::atom_names()
                ))
            }
            _ => {
                return Err(format!(
                    "unknown atom %({name})s; atoms: {}",
                    Self::atom_names()
                ))
            }
        })
    }

    fn atom_names() -> String {
        ATOMS.join(" ")
    }

    /// The response headers (lower-case names) the format shows: the exchange keeps their
    /// values for the log.
    pub fn response_header_names(&self) -> &[Vec<u8>] {
        &self.response_headers
    }

    /// Whether lines show the request time (a clock read at the request's end).
    pub fn shows_duration(&self) -> bool {
        self.duration
    }

    /// Whether lines show the queue wait (a clock read when the loop hands the request to
    /// an app thread).
    pub fn shows_queue_wait(&self) -> bool {
        self.queue
    }

    /// Appends one line (with its newline) for `request`.
    pub fn write(
        &self,
        line: &mut Vec<u8>,
        request: &LoggedRequest<'_>,
        clock: &mut LogClock,
        pid: u32,
    ) {
        match &self.layout {
            Layout::Json => write_json(line, request, clock, pid),
            Layout::Pieces(pieces) => {
                for piece in pieces {
                    match piece {
                        Piece::Text(text) => line.extend_from_slice(text),
                        Piece::Atom(atom) => write_atom(line, atom, request, clock, pid),
                    }
                }
            }
        }
        line.push(b'\n');
    }
}

fn push_number(line: &mut Vec<u8>, value: impl itoa::Integer) {
    line.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

fn push_client(line: &mut Vec<u8>, client: Option<IpAddr>) {
    match client {
        Some(ip) => {
            let _ = write!(line, "{ip}");
        }
        None => line.push(b'-'),
    }
}

fn push_duration(line: &mut Vec<u8>, duration: Option<Duration>, show: impl Fn(Duration) -> u128) {
    match duration {
        Some(duration) => push_number(line, show(duration)),
        None => line.push(b'-'),
    }
}

fn write_atom(
    line: &mut Vec<u8>,
    atom: &Atom,
    request: &LoggedRequest<'_>,
    clock: &mut LogClock,
    pid: u32,
) {
    match atom {
        Atom::RemoteAddr => push_client(line, request.client),
        Atom::Dash => line.push(b'-'),
        Atom::Time => {
            line.push(b'[');
            line.extend_from_slice(clock.now());
            line.push(b']');
        }
        Atom::RequestLine => request.line.push(line),
        Atom::Method => push_field(line, request.line.method()),
        Atom::Path => push_field(line, split_target(request.line.target()).0),
        Atom::Query => push_escaped(line, split_target(request.line.target()).1),
        Atom::Protocol => push_field(line, request.line.protocol()),
        Atom::Status => push_number(line, request.status),
        Atom::BytesOrDash if request.body_sent == 0 => line.push(b'-'),
        Atom::BytesOrDash | Atom::Bytes => push_number(line, request.body_sent),
        Atom::Seconds => push_duration(line, request.duration, |d| u128::from(d.as_secs())),
        Atom::Millis => push_duration(line, request.duration, |d| d.as_millis()),
        Atom::Micros => push_duration(line, request.duration, |d| d.as_micros()),
        // From the whole microseconds, as `D` shows them (not a float rounded on its own).
        Atom::DecimalSeconds => match request.duration {
            Some(duration) => {
                let micros = duration.as_micros();
                let _ = write!(line, "{}.{:06}", micros / 1_000_000, micros % 1_000_000);
            }
            None => line.push(b'-'),
        },
        Atom::QueueMicros => push_duration(line, request.queue, |d| d.as_micros()),
        Atom::Pid => push_number(line, pid),
        Atom::Uncompressed => match request.uncompressed {
            Some(bytes) => push_number(line, bytes),
            None => line.push(b'-'),
        },
        Atom::Compressed => match request.uncompressed {
            Some(_) => push_number(line, request.body_sent),
            None => line.push(b'-'),
        },
        Atom::CompressionRatio => match request.uncompressed {
            Some(bytes) if bytes > 0 => push_number(line, request.body_sent * 100 / bytes),
            _ => line.push(b'-'),
        },
        Atom::TlsProtocol => {
            push_field(line, request.tls.map_or("", |tls| tls.protocol).as_bytes())
        }
        Atom::TlsCipher => push_field(line, request.tls.map_or("", |tls| tls.cipher).as_bytes()),
        Atom::RequestHeader(name) => {
            push_field(line, (request.request_header)(name).unwrap_or(b""))
        }
        Atom::ResponseHeader(index) => push_field(
            line,
            request
                .response_headers
                .get(*index)
                .and_then(Option::as_deref)
                .unwrap_or(b""),
        ),
    }
}

/// `{"time": ..., ...}`: every field always present, `null` when unknown.
fn write_json(line: &mut Vec<u8>, request: &LoggedRequest<'_>, clock: &mut LogClock, pid: u32) {
    let (path, query) = split_target(request.line.target());
    let optional_string = |line: &mut Vec<u8>, value: &[u8]| {
        if value.is_empty() {
            line.extend_from_slice(b"null");
        } else {
            push_json_string(line, value);
        }
    };
    let optional_micros = |line: &mut Vec<u8>, value: Option<Duration>| match value {
        Some(duration) => push_number(line, duration.as_micros()),
        None => line.extend_from_slice(b"null"),
    };
    line.extend_from_slice(b"{\"time\":\"");
    line.extend_from_slice(clock.iso_now());
    line.extend_from_slice(b"\",\"remote_addr\":");
    match request.client {
        Some(ip) => {
            let _ = write!(line, "\"{ip}\"");
        }
        None => line.extend_from_slice(b"null"),
    }
    line.extend_from_slice(b",\"method\":");
    optional_string(line, request.line.method());
    line.extend_from_slice(b",\"path\":");
    optional_string(line, path);
    line.extend_from_slice(b",\"query\":");
    push_json_string(line, query);
    line.extend_from_slice(b",\"protocol\":");
    optional_string(line, request.line.protocol());
    match request.line {
        RequestLine::Parsed { .. } => {}
        RequestLine::Raw(raw) => {
            line.extend_from_slice(b",\"raw_request_line\":");
            push_json_string(line, raw);
        }
        RequestLine::RawH2(_) => {
            // No line came: the request line as the stream's pseudo-headers give it.
            let mut raw = Vec::new();
            raw.extend_from_slice(request.line.method());
            raw.push(b' ');
            raw.extend_from_slice(request.line.target());
            raw.push(b' ');
            raw.extend_from_slice(request.line.protocol());
            line.extend_from_slice(b",\"raw_request_line\":");
            push_json_string(line, &raw);
        }
    }
    line.extend_from_slice(b",\"status\":");
    push_number(line, request.status);
    line.extend_from_slice(b",\"bytes\":");
    push_number(line, request.body_sent);
    // Only on compressed responses, as the TLS fields only on TLS connections: a line of an
    // uncompressed response is what it was before compression.
    if let Some(bytes) = request.uncompressed {
        line.extend_from_slice(b",\"bytes_uncompressed\":");
        push_number(line, bytes);
    }
    line.extend_from_slice(b",\"duration_us\":");
    optional_micros(line, request.duration);
    line.extend_from_slice(b",\"queue_us\":");
    optional_micros(line, request.queue);
    line.extend_from_slice(b",\"pid\":");
    push_number(line, pid);
    line.extend_from_slice(b",\"referer\":");
    optional_string(line, (request.request_header)(b"referer").unwrap_or(b""));
    line.extend_from_slice(b",\"user_agent\":");
    optional_string(line, (request.request_header)(b"user-agent").unwrap_or(b""));
    // Only on TLS connections, as `raw_request_line` only for refused requests: a plain
    // line is what it was before TLS.
    if let Some(tls) = request.tls {
        line.extend_from_slice(b",\"tls_protocol\":");
        push_json_string(line, tls.protocol.as_bytes());
        line.extend_from_slice(b",\"tls_cipher\":");
        push_json_string(line, tls.cipher.as_bytes());
    }
    line.push(b'}');
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

    fn line_for(spec: &str, request: &LoggedRequest<'_>) -> String {
        let mut line = Vec::new();
        let format = Format::parse(spec).unwrap();
        format.write(&mut line, request, &mut LogClock::default(), 4242);
        String::from_utf8(line).unwrap()
    }

    fn headers<'a>(name: &[u8]) -> Option<&'a [u8]> {
        match name {
            b"user-agent" => Some(b"curl/8.0"),
            b"x-trace" => Some(b"a\"b"),
            _ => None,
        }
    }

    fn request<'a>(response_headers: &'a [Option<Vec<u8>>]) -> LoggedRequest<'a> {
        LoggedRequest {
            client: Some("10.0.0.7".parse().unwrap()),
            line: RequestLine::Parsed {
                method: b"GET",
                target: b"/a/b?x=1&y=\xe9",
                protocol: Protocol::Http11,
            },
            status: 200,
            body_sent: 0,
            uncompressed: None,
            request_header: &headers,
            response_headers,
            duration: Some(Duration::from_micros(1_234_567)),
            queue: Some(Duration::from_micros(89)),
            tls: None,
        }
    }

    const TLS13: LoggedTls = LoggedTls {
        protocol: "TLSv1.3",
        cipher: "TLS_AES_128_GCM_SHA256",
    };

    #[test]
    fn tls_atoms_show_the_protocol_and_cipher_or_a_dash() {
        let spec = "%(s)s %({SSL_PROTOCOL}x)s %({SSL_CIPHER}x)s";
        assert_eq!(line_for(spec, &request(&[])), "200 - -\n");
        let mut tls = request(&[]);
        tls.tls = Some(TLS13);
        assert_eq!(line_for(spec, &tls), "200 TLSv1.3 TLS_AES_128_GCM_SHA256\n");
        // The combined layout is the same on both: TLS shows only where a format asks.
        assert_eq!(
            line_for("combined", &tls).split_once(" [").unwrap().0,
            line_for("combined", &request(&[]))
                .split_once(" [")
                .unwrap()
                .0
        );
    }

    #[test]
    fn compression_atoms_show_both_sizes_or_a_dash() {
        let spec = "%(b)s %(B)s %({instream}n)s %({outstream}n)s %({ratio}n)s";
        let mut plain = request(&[]);
        plain.body_sent = 1000;
        assert_eq!(line_for(spec, &plain), "1000 1000 - - -\n");
        let mut compressed = request(&[]);
        compressed.body_sent = 257;
        compressed.uncompressed = Some(1000);
        assert_eq!(line_for(spec, &compressed), "257 257 1000 257 25\n");
        // JSON: `bytes` is what was sent; the size before only on a compressed line.
        let json = line_for("json", &compressed);
        assert!(
            json.contains(",\"bytes\":257,\"bytes_uncompressed\":1000,"),
            "{json}"
        );
        assert!(!line_for("json", &plain).contains("bytes_uncompressed"));
        // A whole body cut short sends nothing: no ratio of nothing.
        compressed.uncompressed = Some(0);
        compressed.body_sent = 0;
        assert_eq!(line_for(spec, &compressed), "- 0 0 0 -\n");
    }

    #[test]
    fn tls_atoms_come_from_the_handshakes_info() {
        let info = TlsInfo {
            version: 0x0303,
            protocol: "TLSv1.2",
            cipher_suite: 0xc02b,
            cipher: "ECDHE-ECDSA-AES128-GCM-SHA256",
            server_name: None,
            alpn: None,
            resumed: false,
            server_cert_pem: "PEM".into(),
            client_chain_pem: Vec::new(),
            client_subject: None,
            client_issuer: None,
            client_serial: None,
            client_verify: crate::tls::ClientVerify::None,
        };
        assert_eq!(LoggedTls::of(None), None);
        assert_eq!(
            LoggedTls::of(Some(&info)),
            Some(LoggedTls {
                protocol: "TLSv1.2",
                cipher: "ECDHE-ECDSA-AES128-GCM-SHA256"
            })
        );
    }

    #[test]
    fn json_lines_name_tls_only_on_tls_connections() {
        let plain = line_for("json", &request(&[]));
        assert!(!plain.contains("tls_"), "{plain}");
        assert!(plain.ends_with("\"user_agent\":\"curl/8.0\"}\n"), "{plain}");
        let mut tls = request(&[]);
        tls.tls = Some(TLS13);
        let line = line_for("json", &tls);
        assert!(
            line.ends_with(
                "\"user_agent\":\"curl/8.0\",\"tls_protocol\":\"TLSv1.3\",\
                 \"tls_cipher\":\"TLS_AES_128_GCM_SHA256\"}\n"
            ),
            "{line}"
        );
    }

    #[test]
    fn a_deferred_line_keeps_the_tls_names() {
        let file = std::env::temp_dir().join(format!("tines-access-tls-{}", std::process::id()));
        let _ = std::fs::remove_file(&file);
        let log = AccessLog::open(
            file.to_str().unwrap(),
            Format::parse("%({SSL_PROTOCOL}x)s %({SSL_CIPHER}x)s %(b)s").unwrap(),
            Vec::new(),
        )
        .unwrap();
        let mut tls = request(&[]);
        tls.tls = Some(TLS13);
        tls.body_sent = 10;
        DeferredLine::new(&tls, std::iter::empty(), Instant::now()).write(&log, 4);
        log.flush();
        let written = std::fs::read_to_string(&file).unwrap();
        std::fs::remove_file(&file).unwrap();
        assert_eq!(written, "TLSv1.3 TLS_AES_128_GCM_SHA256 6\n");
    }

    #[test]
    fn combined_is_apaches_layout() {
        let line = line_for("combined", &request(&[]));
        let (start, rest) = line.split_once(" [").unwrap();
        assert_eq!(start, "10.0.0.7 - -");
        let rest = rest.split_once("] ").unwrap().1;
        assert_eq!(
            rest,
            "\"GET /a/b?x=1&y=\\xe9 HTTP/1.1\" 200 - \"-\" \"curl/8.0\"\n"
        );
        let common = line_for("common", &request(&[]));
        assert!(
            common.ends_with("\"GET /a/b?x=1&y=\\xe9 HTTP/1.1\" 200 -\n"),
            "{common}"
        );
    }

    #[test]
    fn custom_atoms_show_their_fields() {
        let values = [Some(b"text/plain".to_vec())];
        let line = line_for(
            "%(m)s %(U)s %(q)s %(H)s %(s)d %(B)s %(b)s %(T)s %(M)s %(D)s %(L)s %(W)s %(p)s \
             %({X-Trace}i)s %({content-type}o)s %({missing}i)s 100%%",
            &request(&values),
        );
        assert_eq!(
            line,
            "GET /a/b x=1&y=\\xe9 HTTP/1.1 200 0 - 1 1234 1234567 1.234567 89 4242 \
             a\\x22b text/plain - 100%\n"
        );
    }

    #[test]
    fn a_refused_request_logs_its_raw_line() {
        let mut refused = request(&[]);
        refused.line = RequestLine::Raw(b"GET /x HTTP/9.9");
        refused.status = 505;
        refused.duration = None;
        refused.queue = None;
        let line = line_for("%(r)s|%(m)s|%(U)s|%(H)s|%(s)s|%(D)s|%(W)s", &refused);
        assert_eq!(line, "GET /x HTTP/9.9|GET|/x|HTTP/9.9|505|-|-\n");
        refused.line = RequestLine::Raw(b"");
        let line = line_for("%(r)s|%(m)s|%(U)s", &refused);
        assert_eq!(line, "-|-|-\n");
        // On an HTTP/2 stream, the line role A synthesized, with the client's protocol.
        refused.line = RequestLine::RawH2(b"POST /up\"x HTTP/1.1");
        refused.status = 431;
        let line = line_for("%(r)s|%(m)s|%(U)s|%(H)s|%(s)s", &refused);
        assert_eq!(
            line,
            "POST /up\\x22x HTTP/2.0|POST|/up\\x22x|HTTP/2.0|431\n"
        );
        let json = line_for("json", &refused);
        assert!(
            json.contains(
                "\"protocol\":\"HTTP/2.0\",\"raw_request_line\":\"POST /up\\\"x HTTP/2.0\""
            ),
            "{json}"
        );
    }

    #[test]
    fn json_lines_are_json_whatever_the_bytes() {
        let mut odd = request(&[]);
        odd.line = RequestLine::Raw(b"\x01\"\\\xff");
        let line = line_for("json", &odd);
        assert!(
            line.contains("\"raw_request_line\":\"\\u0001\\\"\\\\\\u00ff\""),
            "{line}"
        );
        assert!(line.is_ascii());
        let line = line_for("json", &request(&[]));
        assert!(
            line.contains("\"method\":\"GET\",\"path\":\"/a/b\",\"query\":\"x=1&y=\\u00e9\""),
            "{line}"
        );
        assert!(line.contains("\"status\":200,\"bytes\":0,\"duration_us\":1234567,\"queue_us\":89,\"pid\":4242,\"referer\":null,\"user_agent\":\"curl/8.0\"}"), "{line}");
    }

    #[test]
    fn bad_formats_are_refused_with_a_reason() {
        for (spec, reason) in [
            ("jsno", "is not combined, common or json"),
            ("%(h)s %(zz)s", "unknown atom %(zz)s"),
            ("%(h)s 5%", "a lone %"),
            ("%(h", "an unclosed %("),
            ("%(h)x", "must be followed by s"),
            ("%({bad name}i)s", "is not a header name"),
            ("%({HOME}e)s", "environ variables are not logged"),
            ("%({SSL_CIPHER}e)s", "%({SSL_CIPHER}x)s shows it"),
            ("%({SSL_VERSION}x)s", "unknown atom"),
        ] {
            let err = Format::parse(spec).unwrap_err();
            assert!(err.contains(reason), "{spec}: {err}");
        }
    }

    #[test]
    fn what_a_format_needs_is_known_before_a_request() {
        let format =
            Format::parse("%(h)s %({Content-Type}o)s %({x-a}o)s %({content-type}o)s").unwrap();
        assert_eq!(
            format.response_header_names(),
            [b"content-type".to_vec(), b"x-a".to_vec()]
        );
        assert!(!format.shows_duration() && !format.shows_queue_wait());
        assert!(Format::parse("%(L)s").unwrap().shows_duration());
        assert!(Format::parse("%(W)s").unwrap().shows_queue_wait());
        assert!(Format::parse("json").unwrap().shows_duration());
        assert!(!Format::parse("combined").unwrap().shows_duration());
    }

    #[test]
    fn an_h2_stream_logs_http_2_0_and_http_1_1_is_unchanged() {
        assert_eq!(Protocol::of(Version::Http11, false), Protocol::Http11);
        assert_eq!(Protocol::of(Version::Http10, false), Protocol::Http10);
        // A stream's synthesized head says HTTP/1.1; the link says HTTP/2.
        assert_eq!(Protocol::of(Version::Http11, true), Protocol::Http2);
        let mut h2 = request(&[]);
        h2.line = RequestLine::Parsed {
            method: b"GET",
            target: b"/a/b?x=1&y=\xe9",
            protocol: Protocol::Http2,
        };
        let line = line_for("combined", &h2);
        let rest = line.split_once("] ").unwrap().1;
        assert_eq!(
            rest,
            "\"GET /a/b?x=1&y=\\xe9 HTTP/2.0\" 200 - \"-\" \"curl/8.0\"\n"
        );
        assert_eq!(line_for("%(H)s", &h2), "HTTP/2.0\n");
        assert!(
            line_for("json", &h2).contains("\"protocol\":\"HTTP/2.0\""),
            "{line}"
        );
        assert_eq!(line_for("%(H)s", &request(&[])), "HTTP/1.1\n");
    }

    #[test]
    fn a_deferred_line_keeps_the_protocol() {
        let file = std::env::temp_dir().join(format!("tines-access-h2-{}", std::process::id()));
        let _ = std::fs::remove_file(&file);
        let log = AccessLog::open(
            file.to_str().unwrap(),
            Format::parse("%(r)s %(b)s").unwrap(),
            Vec::new(),
        )
        .unwrap();
        let mut h2 = request(&[]);
        h2.line = RequestLine::Parsed {
            method: b"POST",
            target: b"/up",
            protocol: Protocol::Http2,
        };
        h2.body_sent = 10;
        DeferredLine::new(&h2, std::iter::empty(), Instant::now()).write(&log, 0);
        DeferredLine::new(&request(&[]), std::iter::empty(), Instant::now()).write(&log, 0);
        log.flush();
        let written = std::fs::read_to_string(&file).unwrap();
        std::fs::remove_file(&file).unwrap();
        assert_eq!(
            written,
            "POST /up HTTP/2.0 10\nGET /a/b?x=1&y=\\xe9 HTTP/1.1 -\n"
        );
    }
}
