//! Request heads: the request line and header section of RFC 9112 sections 2-6,
//! parsed in place from the connection's read buffer.
//!
//! Owns: syntax checks httparse does not make, size limits, and the reading of
//! the fields that decide framing and connection handling (Content-Length,
//! Transfer-Encoding, Host, Connection, Expect, Upgrade). Must not: read
//! bodies (see `chunked`), build a WSGI environ, or copy header bytes.
//!
//! Decisions (each the strict side of a leniency the RFCs allow):
//! - One empty line (CRLF) before the request line is skipped, as RFC 9112
//!   section 2.2 asks ("at least one"); a second one is a 400. That covers the
//!   stray CRLF some clients send after a body, and nothing more.
//! - Every line ends in CRLF. A bare LF (which section 2.2 MAY accept) and a
//!   bare CR are 400s: a proxy in front that splits lines differently could
//!   otherwise see different headers than we do.
//! - HTTP/1.0 and HTTP/1.1 are served. Any other well-formed `HTTP/x.y`
//!   (0.9, 1.2, 2.0, ...) gets 505; a malformed version gets 400. RFC 9110
//!   section 6.2 would let us treat 1.2 as 1.1, but no such client exists and
//!   refusing costs nothing.
//! - Transfer-Encoding: the only coding we decode is `chunked`, which must be
//!   final and appear once (RFC 9112 section 6.3 and 7), else 400. Any other
//!   coding before it (gzip, deflate, compress, identity, unknown names) is a
//!   501 (RFC 9112 section 6.1: a coding the server does not understand),
//!   since handing an app a still-compressed body would be wrong. Empty list
//!   elements are refused in Transfer-Encoding (not skipped): a front end that
//!   reads `chunked,` differently would desynchronise. Transfer-Encoding in an
//!   HTTP/1.0 request is a 400 (section 6.1: its framing is faulty).
//! - Duplicate Content-Type is a 400: WSGI has one CONTENT_TYPE and the app
//!   must not see a different one than a proxy checked.

use std::mem::MaybeUninit;

use crate::syntax::{is_field_value, is_token};
use crate::target::{check_target, TargetFault};
use crate::Span;
use fields::FieldSummary;

mod fields;

/// Size limits on a request head. Every limit is a 4xx, never a panic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Longest request line, without its CRLF; longer is 414.
    pub max_request_line: usize,
    /// Most header field lines; more is 431.
    pub max_headers: usize,
    /// Largest head (leading CRLF, request line, fields, blank line); larger is 431.
    pub max_head_size: usize,
}

impl Default for Limits {
    /// 8190 bytes per request line (nginx and Apache accept 8 KiB lines, so
    /// real clients never go near it), 100 fields (gunicorn's and Apache's
    /// default), and a 32 KiB head (room for large cookies, while the
    /// per-connection buffer stays small).
    fn default() -> Self {
        Limits {
            max_request_line: 8190,
            max_headers: 100,
            max_head_size: 32768,
        }
    }
}

/// The protocol version of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// HTTP/1.0.
    Http10,
    /// HTTP/1.1.
    Http11,
}

/// How the request body is delimited (RFC 9112 section 6.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyFraming {
    /// No body: neither Content-Length nor Transfer-Encoding was sent.
    None,
    /// Exactly this many bytes follow the head.
    Length(u64),
    /// A chunked body follows; decode it with `ChunkedDecoder`.
    Chunked,
}

/// What the Connection header asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnectionOption {
    /// No `close` or `keep-alive` token: the version's default applies.
    Default,
    /// A `close` token (it wins over `keep-alive`).
    Close,
    /// A `keep-alive` token and no `close`.
    KeepAlive,
}

/// A parsed request head: spans into the buffer it was parsed from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestHead {
    /// The method, case as sent (methods are case-sensitive, RFC 9110 section 9.1).
    pub method: Span,
    /// The request-target, as sent.
    pub target: Span,
    /// The protocol version.
    pub version: Version,
    /// Header fields in order, names as sent, values without surrounding OWS.
    pub headers: Vec<(Span, Span)>,
    /// Bytes of the head including the blank line (and a skipped leading CRLF).
    pub head_len: usize,
    /// How the body is framed.
    pub body: BodyFraming,
    /// What the Connection header asked for.
    pub connection: ConnectionOption,
    /// `Expect: 100-continue` on an HTTP/1.1 request (RFC 9110 section 10.1.1
    /// says to ignore it on HTTP/1.0).
    pub expect_continue: bool,
    /// An Upgrade header was present (for WebSocket later).
    pub upgrade: bool,
    /// Where in `headers` the last `X-Forwarded-Proto` line is, if any: noted while the
    /// lines are read, so the server's scheme decision (a trusted proxy's word) costs no scan
    /// of the fields on the usual request, which has none.
    pub forwarded_proto: Option<u32>,
}

impl Default for RequestHead {
    fn default() -> Self {
        Self::new()
    }
}

impl RequestHead {
    /// An empty head, ready to be filled by `parse_request_head`.
    pub fn new() -> Self {
        RequestHead {
            method: Span::default(),
            target: Span::default(),
            version: Version::Http11,
            headers: Vec::new(),
            head_len: 0,
            body: BodyFraming::None,
            connection: ConnectionOption::Default,
            expect_continue: false,
            upgrade: false,
            forwarded_proto: None,
        }
    }

    /// Resets every field, keeping the capacity of `headers`.
    pub fn clear(&mut self) {
        let mut headers = std::mem::take(&mut self.headers);
        headers.clear();
        *self = RequestHead {
            headers,
            ..RequestHead::new()
        };
    }

    /// Whether the connection may carry another request after this one:
    /// HTTP/1.1 unless `close`; HTTP/1.0 only with `keep-alive` (RFC 9112
    /// section 9.3).
    pub fn keep_alive(&self) -> bool {
        match self.version {
            Version::Http11 => self.connection != ConnectionOption::Close,
            Version::Http10 => self.connection == ConnectionOption::KeepAlive,
        }
    }

    /// Whether the method is exactly `m` (case-sensitive).
    pub fn method_is(&self, buf: &[u8], m: &[u8]) -> bool {
        self.method.of(buf) == m
    }

    /// The value of the first header named `name` (case-insensitive).
    pub fn header<'a>(&self, buf: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
        self.headers
            .iter()
            .find(|(n, _)| n.of(buf).eq_ignore_ascii_case(name))
            .map(|(_, v)| v.of(buf))
    }
}

/// Whether `parse_request_head` found a whole head.
#[derive(Debug, PartialEq, Eq)]
pub enum HeadStatus {
    /// The head is complete; `RequestHead::head_len` bytes were used.
    Complete,
    /// More bytes are needed; the head struct holds nothing useful yet.
    Partial,
}

/// Why a request head was refused. Each fault maps to one status code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// Request line over `max_request_line` (414).
    RequestLineTooLong,
    /// Head over `max_head_size` (431).
    HeadTooLarge,
    /// More than `max_headers` field lines (431).
    TooManyHeaders,
    /// More than one empty line before the request line (400).
    ExtraEmptyLine,
    /// The request line is not `method SP target SP version` (400).
    InvalidRequestLine,
    /// The method is not a token (400).
    InvalidMethod,
    /// The request-target has a bad byte or the wrong form for the method (400).
    InvalidTarget,
    /// The version is not `HTTP/DIGIT.DIGIT` (400).
    InvalidVersion,
    /// A well-formed version other than 1.0 and 1.1 (505).
    UnsupportedVersion,
    /// A field name is not a token, or whitespace precedes the colon (400).
    InvalidHeaderName,
    /// A field value holds a control byte (400).
    InvalidHeaderValue,
    /// A line starts with whitespace: obs-fold (RFC 9112 section 5.2) (400).
    ObsoleteLineFolding,
    /// An LF without a CR before it (400).
    BareLineFeed,
    /// A CR without an LF after it (400).
    BareCarriageReturn,
    /// HTTP/1.1 without Host (RFC 9112 section 3.2) (400).
    MissingHost,
    /// More than one Host field line (400).
    DuplicateHost,
    /// A Host value that is not `host[:port]` (400).
    InvalidHost,
    /// Host names another origin than the absolute-form target's authority (RFC 9110
    /// section 7.2 makes a client send them identical) (400).
    HostNotTargetAuthority,
    /// More than one Content-Type field line (400).
    DuplicateContentType,
    /// More than one Content-Length field line, even with equal values (400).
    DuplicateContentLength,
    /// Content-Length is not `1*DIGIT` or overflows u64 (400).
    InvalidContentLength,
    /// Both Content-Length and Transfer-Encoding (RFC 9112 section 6.3) (400).
    ContentLengthWithTransferEncoding,
    /// Transfer-Encoding on an HTTP/1.0 request (RFC 9112 section 6.1) (400).
    TransferEncodingInHttp10,
    /// Transfer-Encoding whose final coding is not a single `chunked`, or
    /// that is empty or malformed (400).
    InvalidTransferEncoding,
    /// A transfer coding other than `chunked` (501).
    UnsupportedTransferCoding,
}

impl ParseError {
    /// The status code to answer with.
    pub fn status(&self) -> u16 {
        match self {
            ParseError::RequestLineTooLong => 414,
            ParseError::HeadTooLarge | ParseError::TooManyHeaders => 431,
            ParseError::UnsupportedVersion => 505,
            ParseError::UnsupportedTransferCoding => 501,
            _ => 400,
        }
    }

    /// A short text for logs.
    pub fn reason(&self) -> &'static str {
        match self {
            ParseError::RequestLineTooLong => "request line too long",
            ParseError::HeadTooLarge => "request head too large",
            ParseError::TooManyHeaders => "too many header fields",
            ParseError::ExtraEmptyLine => "more than one empty line before the request line",
            ParseError::InvalidRequestLine => "malformed request line",
            ParseError::InvalidMethod => "invalid method",
            ParseError::InvalidTarget => "invalid request-target",
            ParseError::InvalidVersion => "malformed HTTP version",
            ParseError::UnsupportedVersion => "unsupported HTTP version",
            ParseError::InvalidHeaderName => "invalid header field name",
            ParseError::InvalidHeaderValue => "invalid header field value",
            ParseError::ObsoleteLineFolding => "obsolete line folding",
            ParseError::BareLineFeed => "LF without CR",
            ParseError::BareCarriageReturn => "CR without LF",
            ParseError::MissingHost => "HTTP/1.1 request without Host",
            ParseError::DuplicateHost => "more than one Host",
            ParseError::InvalidHost => "invalid Host",
            ParseError::HostNotTargetAuthority => "Host differs from the target's authority",
            ParseError::DuplicateContentType => "more than one Content-Type",
            ParseError::DuplicateContentLength => "more than one Content-Length",
            ParseError::InvalidContentLength => "invalid Content-Length",
            ParseError::ContentLengthWithTransferEncoding => {
                "both Content-Length and Transfer-Encoding"
            }
            ParseError::TransferEncodingInHttp10 => "Transfer-Encoding in an HTTP/1.0 request",
            ParseError::InvalidTransferEncoding => "Transfer-Encoding not ending in one chunked",
            ParseError::UnsupportedTransferCoding => "unsupported transfer coding",
        }
    }
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.reason(), self.status())
    }
}

impl std::error::Error for ParseError {}

/// Header slots kept on the stack: the default `max_headers` (100) fits with
/// room to spare, and the slots are left uninitialised, so a bigger array
/// only costs stack (32 bytes each, 4 KiB in all). Larger limits use the heap.
const STACK_HEADER_SLOTS: usize = 128;

/// Parses the head at the start of `buf` into `head` (cleared and reused: no
/// allocation once its Vec has grown).
///
/// Returns `Partial` while the head is incomplete and within limits; the
/// caller reads more and calls again with the whole buffer (parsing restarts
/// from the first byte, so each call costs O(buffered head), bounded by
/// `max_head_size`). Bytes after `head.head_len` (body, pipelined requests)
/// are not looked at. On `Partial` or `Err` the contents of `head` are
/// unspecified.
pub fn parse_request_head(
    buf: &[u8],
    limits: &Limits,
    head: &mut RequestHead,
) -> Result<HeadStatus, ParseError> {
    head.clear();
    let start = match skip_leading_empty_line(buf)? {
        Some(start) => start,
        None => return Ok(HeadStatus::Partial),
    };
    check_request_line_length(&buf[start..], limits)?;

    let mut stack_slots =
        [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; STACK_HEADER_SLOTS];
    let mut heap_slots = Vec::new();
    let slots = if limits.max_headers <= STACK_HEADER_SLOTS {
        &mut stack_slots[..limits.max_headers]
    } else {
        heap_slots.resize(limits.max_headers, MaybeUninit::uninit());
        &mut heap_slots[..]
    };
    let mut request = httparse::Request::new(&mut []);
    let parsed = request
        .parse_with_uninit_headers(&buf[start..], slots)
        .map_err(|error| map_httparse_error(error, &buf[start..], limits));
    let len = match parsed? {
        httparse::Status::Partial if buf.len() > limits.max_head_size => {
            return Err(ParseError::HeadTooLarge)
        }
        httparse::Status::Partial => return Ok(HeadStatus::Partial),
        httparse::Status::Complete(len) => len,
    };
    let head_len = start + len;
    if head_len > limits.max_head_size || u32::try_from(head_len).is_err() {
        return Err(ParseError::HeadTooLarge);
    }
    check_line_endings(&buf[start..head_len])?;

    // INVARIANT: httparse returns Some for every part of a complete head,
    // and its slices point into `buf`.
    let method = request.method.unwrap_or_default().as_bytes();
    let target = request.path.unwrap_or_default().as_bytes();
    head.method = span_in(buf, method);
    head.target = span_in(buf, target);
    head.version = if request.version == Some(0) {
        Version::Http10
    } else {
        Version::Http11
    };
    head.head_len = head_len;
    check_target(method, target).map_err(|_: TargetFault| ParseError::InvalidTarget)?;

    let mut fields = FieldSummary::new(target);
    for header in request.headers.iter() {
        if !is_field_value(header.value) {
            return Err(ParseError::InvalidHeaderValue);
        }
        let name = header.name.as_bytes();
        fields.note(name, header.value, head.version)?;
        if name.len() == FORWARDED_PROTO.len() && name.eq_ignore_ascii_case(FORWARDED_PROTO) {
            // At most max_headers lines, far below u32::MAX.
            head.forwarded_proto = Some(head.headers.len() as u32);
        }
        head.headers.push((
            span_in(buf, header.name.as_bytes()),
            span_in(buf, header.value),
        ));
    }
    fields.finish(head)?;
    Ok(HeadStatus::Complete)
}

/// The field a trusted proxy names the client's scheme in ([`RequestHead::forwarded_proto`]).
const FORWARDED_PROTO: &[u8] = b"x-forwarded-proto";

/// Skips one leading CRLF (RFC 9112 section 2.2). Returns the offset of the
/// request line, or None if the buffer holds only (part of) that CRLF.
fn skip_leading_empty_line(buf: &[u8]) -> Result<Option<usize>, ParseError> {
    let start = match buf {
        [] | [b'\r'] | [b'\r', b'\n'] => return Ok(None),
        [b'\r', b'\n', ..] => 2,
        [b'\r', ..] => return Err(ParseError::BareCarriageReturn),
        [b'\n', ..] => return Err(ParseError::BareLineFeed),
        _ => 0,
    };
    match buf[start] {
        b'\r' | b'\n' => Err(ParseError::ExtraEmptyLine),
        _ => Ok(Some(start)),
    }
}

/// 414 as soon as the request line is known to exceed the limit, even if
/// its end has not arrived yet.
fn check_request_line_length(buf: &[u8], limits: &Limits) -> Result<(), ParseError> {
    // The line plus CRLF is all that matters; never scan further.
    let window = &buf[..buf.len().min(limits.max_request_line.saturating_add(2))];
    let line_len = match memchr::memchr(b'\n', window) {
        Some(lf) => lf.saturating_sub(usize::from(lf > 0 && window[lf - 1] == b'\r')),
        None => window.len() - usize::from(window.last() == Some(&b'\r')),
    };
    if line_len > limits.max_request_line {
        Err(ParseError::RequestLineTooLong)
    } else {
        Ok(())
    }
}

/// Every CR is followed by LF and every LF preceded by CR (RFC 9112 section 2.2).
///
/// By blocks of 16 bytes, as two bit masks (where the CRs are, where the LFs are; the
/// compiler makes each a vector compare): the head is right when the LFs are exactly the
/// places after a CR. A block that breaks that (or a CR that ends the last one) is looked at
/// byte by byte from there, which gives the first fault in order. Header lines are short,
/// so `memchr2`'s set-up per line cost more than it saved (600 instructions for a 40-byte
/// head), and a block skipped only when it held no CR or LF (440) rarely was (a short line's
/// block holds its ending): 150 this way (callgrind).
fn check_line_endings(head: &[u8]) -> Result<(), ParseError> {
    const BLOCK: usize = 16;
    let blocks = head.chunks_exact(BLOCK);
    let tail_start = head.len() - blocks.remainder().len();
    // Whether the byte before the current block is a CR.
    let mut after_cr = 0u32;
    for (index, block) in blocks.enumerate() {
        let block: &[u8; BLOCK] = block.try_into().expect("chunks_exact gives whole blocks");
        let (crs, lfs) = line_end_masks(block);
        if (crs << 1 | after_cr) & 0xFFFF != lfs {
            return check_line_ends_in(head, (index * BLOCK).saturating_sub(1), head.len());
        }
        after_cr = crs >> (BLOCK - 1);
    }
    let from = if after_cr == 1 {
        tail_start - 1
    } else {
        tail_start
    };
    check_line_ends_in(head, from, head.len())
}

/// Bit `i` of the first mask is set when `block[i]` is a CR, of the second when it is an LF.
#[cfg(target_arch = "x86_64")]
#[inline]
fn line_end_masks(block: &[u8; 16]) -> (u32, u32) {
    use std::arch::x86_64::{_mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_set1_epi8};
    // SAFETY: SSE2 is part of x86_64's baseline (these intrinsics need nothing more), and
    // the unaligned load reads the block's 16 bytes, which the reference guarantees.
    unsafe {
        let bytes = _mm_loadu_si128(block.as_ptr().cast());
        // Each lane's top bit, one per byte: 16 significant bits.
        let crs = _mm_movemask_epi8(_mm_cmpeq_epi8(bytes, _mm_set1_epi8(b'\r' as i8)));
        let lfs = _mm_movemask_epi8(_mm_cmpeq_epi8(bytes, _mm_set1_epi8(b'\n' as i8)));
        (crs as u32, lfs as u32)
    }
}

/// Bit `i` of the first mask is set when `block[i]` is a CR, of the second when it is an LF.
#[cfg(not(target_arch = "x86_64"))]
fn line_end_masks(block: &[u8; 16]) -> (u32, u32) {
    line_end_masks_by_bytes(block)
}

/// [`line_end_masks`] byte by byte: for targets without SSE2, and to check the vector form.
#[cfg(any(test, not(target_arch = "x86_64")))]
fn line_end_masks_by_bytes(block: &[u8; 16]) -> (u32, u32) {
    block
        .iter()
        .enumerate()
        .fold((0, 0), |(crs, lfs), (at, &b)| {
            (
                crs | u32::from(b == b'\r') << at,
                lfs | u32::from(b == b'\n') << at,
            )
        })
}

/// [`check_line_endings`] for the bytes `start..end` of `head`, one by one.
fn check_line_ends_in(head: &[u8], start: usize, end: usize) -> Result<(), ParseError> {
    for at in start..end {
        match head[at] {
            b'\n' if at == 0 || head[at - 1] != b'\r' => return Err(ParseError::BareLineFeed),
            b'\r' if head.get(at + 1) != Some(&b'\n') => {
                return Err(ParseError::BareCarriageReturn)
            }
            _ => {}
        }
    }
    Ok(())
}

/// Turns an httparse error into the fault a client did, looking at the bytes
/// where httparse's own error kind is too coarse. Only runs on errors.
fn map_httparse_error(error: httparse::Error, buf: &[u8], limits: &Limits) -> ParseError {
    let head = &buf[..buf.len().min(limits.max_head_size)];
    let has_bare_cr =
        memchr::memchr_iter(b'\r', head).any(|at| head.get(at + 1).is_some_and(|&b| b != b'\n'));
    let has_bare_lf = memchr::memchr_iter(b'\n', head).any(|at| at == 0 || head[at - 1] != b'\r');
    match error {
        httparse::Error::TooManyHeaders => ParseError::TooManyHeaders,
        _ if has_bare_cr => ParseError::BareCarriageReturn,
        _ if has_bare_lf => ParseError::BareLineFeed,
        httparse::Error::Version => classify_version(head),
        httparse::Error::Token => {
            let line_end = memchr::memchr2(b'\r', b'\n', head);
            let line = &head[..line_end.unwrap_or(head.len())];
            let method_end = memchr::memchr(b' ', line).unwrap_or(line.len());
            if !is_token(&line[..method_end]) {
                ParseError::InvalidMethod
            } else if line_end.is_some() && memchr::memchr_iter(b' ', line).count() != 2 {
                ParseError::InvalidRequestLine
            } else {
                ParseError::InvalidTarget
            }
        }
        httparse::Error::HeaderName
            if memchr::memmem::find(head, b"\n ").is_some()
                || memchr::memmem::find(head, b"\n\t").is_some() =>
        {
            ParseError::ObsoleteLineFolding
        }
        httparse::Error::HeaderName => ParseError::InvalidHeaderName,
        httparse::Error::HeaderValue => ParseError::InvalidHeaderValue,
        httparse::Error::NewLine | httparse::Error::Status => ParseError::InvalidRequestLine,
    }
}

/// 505 for a well-formed `HTTP/x.y` we do not serve, 400 otherwise. Also
/// called on a partial line: `HTTP/2` is known to be unsupported before the
/// minor digit arrives.
fn classify_version(buf: &[u8]) -> ParseError {
    let line_end = memchr::memchr2(b'\r', b'\n', buf);
    let line = &buf[..line_end.unwrap_or(buf.len())];
    let mut parts = line.split(|&b| b == b' ');
    let (Some(_method), Some(_target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return ParseError::InvalidRequestLine;
    };
    const PATTERN: &[u8] = b"HTTP/9.9";
    let shape_ok = version.len() <= PATTERN.len()
        && version.iter().zip(PATTERN).all(|(&b, &p)| {
            if p == b'9' {
                b.is_ascii_digit()
            } else {
                b == p
            }
        });
    let complete = line_end.is_some();
    let major_known_bad = version.len() > 5 && version[5] != b'1';
    if shape_ok && (version.len() == PATTERN.len() || (!complete && major_known_bad)) {
        ParseError::UnsupportedVersion
    } else {
        ParseError::InvalidVersion
    }
}

/// The span of `part`, a subslice of `buf`.
fn span_in(buf: &[u8], part: &[u8]) -> Span {
    let start = part.as_ptr() as usize - buf.as_ptr() as usize;
    // INVARIANT: the caller checked that the head fits in u32 offsets.
    Span {
        start: start as u32,
        end: (start + part.len()) as u32,
    }
}

#[cfg(test)]
mod tests;
