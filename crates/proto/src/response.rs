//! Response heads: checking what the app hands back (PEP 3333
//! `start_response`) and encoding status lines, fields and chunk framing.
//!
//! Owns: the bytes of a response head and of chunk framing. Must not: decide
//! keep-alive or framing policy (the server's connection state machine does,
//! from `ResponseFraming` and `status_allows_body`), or write to sockets.
//!
//! Every response says `HTTP/1.1`, even to HTTP/1.0 clients: RFC 9110 section
//! 6.2 asks a server to send the highest minor version it supports within the
//! request's major version, and an HTTP/1.0 client must accept that. The
//! server keeps to 1.0 semantics for such clients (no chunked encoding).

use crate::request::Version;
use crate::status::reason_phrase;
use crate::syntax::{is_field_value, is_token, parse_decimal, same_bytes, trim_ows};

/// How a response body is delimited on the wire (RFC 9112 section 6.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResponseFraming {
    /// Content-Length: exactly this many bytes.
    Length(u64),
    /// Transfer-Encoding: chunked (HTTP/1.1 clients only).
    Chunked,
    /// The body ends when the connection closes (HTTP/1.0 clients, unknown length).
    CloseDelimited,
    /// No body at all (1xx, 204, 304, HEAD).
    NoBody,
}

/// What a valid app header means to the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppHeader {
    /// Copy it to the response as it is.
    Plain,
    /// A Content-Length the app promised: the server frames by it.
    ContentLength(u64),
}

/// Why an app header or status was refused (the server answers 500).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResponseHeaderError {
    /// The name is not a token.
    InvalidName,
    /// The value holds CR, LF, NUL or another control byte besides HTAB.
    InvalidValue,
    /// A hop-by-hop field, which PEP 3333 forbids apps to set.
    HopByHop,
    /// Content-Length is not `1*DIGIT` (surrounding whitespace allowed).
    InvalidContentLength,
    /// The status is not `3DIGIT SP reason` with a code from 100 to 599.
    InvalidStatus,
}

impl ResponseHeaderError {
    /// A short text for logs.
    pub fn reason(&self) -> &'static str {
        match self {
            ResponseHeaderError::InvalidName => "invalid header name from app",
            ResponseHeaderError::InvalidValue => "invalid header value from app",
            ResponseHeaderError::HopByHop => "hop-by-hop header from app",
            ResponseHeaderError::InvalidContentLength => "invalid Content-Length from app",
            ResponseHeaderError::InvalidStatus => "invalid status from app",
        }
    }
}

impl std::fmt::Display for ResponseHeaderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.reason())
    }
}

impl std::error::Error for ResponseHeaderError {}

/// Fields that describe one connection, not the message (RFC 9110 section
/// 7.6.1, PEP 3333 "hop-by-hop"); only the server may set them.
const HOP_BY_HOP: [&[u8]; 7] = [
    b"connection",
    b"keep-alive",
    b"proxy-connection",
    b"transfer-encoding",
    b"te",
    b"trailer",
    b"upgrade",
];

/// Checks one header given by the app (WSGI start_response): name must be a
/// token, value must not contain CR, LF, NUL (or other CTLs except HTAB);
/// hop-by-hop headers (Connection, Keep-Alive, Proxy-Connection,
/// Transfer-Encoding, TE, Trailer, Upgrade) are refused (PEP 3333);
/// Content-Length is parsed.
pub fn check_app_header(name: &[u8], value: &[u8]) -> Result<AppHeader, ResponseHeaderError> {
    if !is_token(name) {
        return Err(ResponseHeaderError::InvalidName);
    }
    if !is_field_value(value) {
        return Err(ResponseHeaderError::InvalidValue);
    }
    if HOP_BY_HOP.iter().any(|h| name.eq_ignore_ascii_case(h)) {
        return Err(ResponseHeaderError::HopByHop);
    }
    if name.eq_ignore_ascii_case(b"content-length") {
        let length =
            parse_decimal(trim_ows(value)).ok_or(ResponseHeaderError::InvalidContentLength)?;
        return Ok(AppHeader::ContentLength(length));
    }
    Ok(AppHeader::Plain)
}

/// A memo of the app header lines a slot checked and encoded last, by their position in the
/// app's list: a header with the same bytes at the same position as in the last response is
/// not checked again, and its encoded line is copied whole.
///
/// Why: an app sends nearly the same headers in the same order response after response
/// (`Content-Type`, often `Content-Length`, a framework's fixed ones); checking each byte of
/// each name and value and encoding the line piece by piece cost about 850 of a hello-world
/// request's 12,800 instructions (callgrind); a comparison with the memo costs a few word
/// compares. The memo only ever answers for bytes it checked itself.
#[derive(Default)]
pub struct CheckedHeaders {
    lines: Vec<CheckedLine>,
}

struct CheckedLine {
    /// `name: value\r\n`; empty when the position holds nothing (yet).
    line: Vec<u8>,
    name_len: usize,
    kind: AppHeader,
}

/// Positions remembered: the headers past them are checked every time.
const CHECKED_POSITIONS: usize = 16;
/// Longer lines (a large cookie, a policy) are checked every time rather than kept.
const CHECKED_LINE_MAX: usize = 256;

impl CheckedHeaders {
    /// Checks the app's header at `position` in its list ([`check_app_header`]) and returns
    /// what it means, with its encoded line when the memo keeps one (`None`: encode it with
    /// [`encode_header`]).
    pub fn check(
        &mut self,
        position: usize,
        name: &[u8],
        value: &[u8],
    ) -> Result<(AppHeader, Option<&[u8]>), ResponseHeaderError> {
        if let Some(known) = self.lines.get(position) {
            let line = &known.line;
            if name.len() == known.name_len
                && line.len() == name.len() + value.len() + 4
                && same_bytes(name, &line[..name.len()])
                && same_bytes(value, &line[name.len() + 2..line.len() - 2])
            {
                let known = &self.lines[position];
                return Ok((known.kind, Some(&known.line)));
            }
        }
        let kind = check_app_header(name, value)?;
        let size = name.len() + value.len() + 4;
        if position >= CHECKED_POSITIONS || size > CHECKED_LINE_MAX {
            return Ok((kind, None));
        }
        while self.lines.len() <= position {
            self.lines.push(CheckedLine {
                line: Vec::new(),
                name_len: 0,
                kind: AppHeader::Plain,
            });
        }
        let known = &mut self.lines[position];
        known.line.clear();
        encode_header(&mut known.line, name, value);
        known.name_len = name.len();
        known.kind = kind;
        Ok((kind, Some(&known.line)))
    }
}

/// Parses a WSGI status line "200 OK": 3 digits, space, reason without CR/LF
/// (HTAB, SP, VCHAR, obs-text; may be empty, RFC 9112 section 4). Returns the
/// code, which must be 100 to 599 (RFC 9110 section 15).
pub fn parse_status(status: &[u8]) -> Result<u16, ResponseHeaderError> {
    let [a, b, c, b' ', reason @ ..] = status else {
        return Err(ResponseHeaderError::InvalidStatus);
    };
    let digits = [a, b, c];
    if !digits.iter().all(|d| d.is_ascii_digit()) || !is_field_value(reason) {
        return Err(ResponseHeaderError::InvalidStatus);
    }
    let code = u16::from(a - b'0') * 100 + u16::from(b - b'0') * 10 + u16::from(c - b'0');
    if (100..=599).contains(&code) {
        Ok(code)
    } else {
        Err(ResponseHeaderError::InvalidStatus)
    }
}

/// Whether a response with this status to this method may carry a body
/// (1xx, 204, 304, HEAD: no; RFC 9110 sections 6.4.1 and 9.3.2).
pub fn status_allows_body(code: u16, is_head: bool) -> bool {
    !(is_head || (100..200).contains(&code) || code == 204 || code == 304)
}

/// Appends `HTTP/1.1 <status>\r\n`, where `status` is a checked WSGI status
/// such as `200 OK`. `version` is the request's: the answer says HTTP/1.1
/// either way (see the module header).
pub fn encode_status_line(out: &mut Vec<u8>, version: Version, status: &[u8]) {
    let _ = version;
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status);
    out.extend_from_slice(b"\r\n");
}

/// Appends `name: value\r\n`. The caller has checked both (`check_app_header`)
/// or they are the server's own.
pub fn encode_header(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Appends a chunk-size line: lowercase hex and CRLF, e.g. `1a\r\n`. No
/// extensions. A zero length would end the body, so callers skip empty chunks.
pub fn encode_chunk_size(out: &mut Vec<u8>, len: usize) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut digits = [0u8; 2 * std::mem::size_of::<usize>()];
    let mut at = digits.len();
    let mut rest = len;
    loop {
        at -= 1;
        digits[at] = HEX[rest & 0xf];
        rest >>= 4;
        if rest == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
    out.extend_from_slice(b"\r\n");
}

/// Ends a chunk's data.
pub const CHUNK_END: &[u8] = b"\r\n";

/// The last chunk with an empty trailer section: ends a chunked body.
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// A complete, closing error response (e.g. 400) with a small text body, for
/// errors found before the app runs. `date` is an IMF-fixdate (`DateCache`);
/// an empty `server` leaves the Server field out.
pub fn encode_error_response(out: &mut Vec<u8>, code: u16, date: &[u8], server: &[u8]) {
    encode_error_response_with(out, code, date, server, &[]);
}

/// [`encode_error_response`] with `extra` header fields (such as `Retry-After` on a 503),
/// which the caller guarantees are valid field lines.
pub fn encode_error_response_with(
    out: &mut Vec<u8>,
    code: u16,
    date: &[u8],
    server: &[u8],
    extra: &[(&[u8], &[u8])],
) {
    let reason = reason_phrase(code).as_bytes();
    let mut code_text = itoa::Buffer::new();
    let code_text = code_text.format(code).as_bytes();
    // Body: "400 Bad Request\n".
    let body_len = code_text.len() + 1 + reason.len() + 1;

    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(code_text);
    out.push(b' ');
    out.extend_from_slice(reason);
    out.extend_from_slice(b"\r\n");
    encode_header(out, b"Date", date);
    if !server.is_empty() {
        encode_header(out, b"Server", server);
    }
    encode_header(out, b"Connection", b"close");
    for (name, value) in extra {
        encode_header(out, name, value);
    }
    encode_header(out, b"Content-Type", b"text/plain; charset=utf-8");
    encode_header(
        out,
        b"Content-Length",
        itoa::Buffer::new().format(body_len).as_bytes(),
    );
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(code_text);
    out.push(b' ');
    out.extend_from_slice(reason);
    out.push(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the memo answers for one header, as an encoded line (or the error).
    fn memo_answer(
        memo: &mut CheckedHeaders,
        position: usize,
        name: &[u8],
        value: &[u8],
    ) -> Result<(AppHeader, Vec<u8>), ResponseHeaderError> {
        let (kind, line) = memo.check(position, name, value)?;
        let line = match line {
            Some(line) => line.to_vec(),
            None => {
                let mut out = Vec::new();
                encode_header(&mut out, name, value);
                out
            }
        };
        Ok((kind, line))
    }

    #[test]
    fn the_header_memo_answers_as_the_check_does_whatever_comes_at_each_position() {
        let long = vec![b'v'; 300];
        let headers: [(&[u8], &[u8]); 12] = [
            (b"Content-Type", b"text/plain"),
            (b"Content-Type", b"text/plainx"),
            (b"Content-Length", b"2"),
            (b"Content-Length", b"20"),
            (b"Content-Length", b"two"),
            (b"Connection", b"close"),
            (b"X-Bad\r", b"v"),
            (b"X-Value", b"a\r\nb"),
            (b"X-Long", &long),
            (b"content-type", b"text/plain"),
            (b"Content-Typ", b"etext/plain"),
            (b"Content-Type:", b"text/plain"),
        ];
        let mut memo = CheckedHeaders::default();
        // Every header at every position, after every other one there: hits, misses, a
        // name/value split that differs over the same line bytes, errors in between.
        for position in [0, 1, 15, 16, 20] {
            for (first_name, first_value) in headers {
                for (name, value) in headers {
                    for (n, v) in [(first_name, first_value), (name, value), (name, value)] {
                        let expected = check_app_header(n, v).map(|kind| {
                            let mut out = Vec::new();
                            encode_header(&mut out, n, v);
                            (kind, out)
                        });
                        assert_eq!(memo_answer(&mut memo, position, n, v), expected);
                    }
                }
            }
        }
    }

    #[test]
    fn the_header_memo_keeps_short_lines_at_the_first_positions_only() {
        let mut memo = CheckedHeaders::default();
        assert!(memo.check(0, b"A", b"b").unwrap().1.is_some());
        assert!(memo.check(15, b"A", b"b").unwrap().1.is_some());
        assert!(memo.check(16, b"A", b"b").unwrap().1.is_none());
        assert!(memo.check(1, b"A", &[b'b'; 300]).unwrap().1.is_none());
        assert_eq!(memo.check(0, b"A", b"b").unwrap().1, Some(&b"A: b\r\n"[..]));
    }

    #[test]
    fn accepts_plain_headers_and_parses_content_length() {
        assert_eq!(
            check_app_header(b"Content-Type", b"text/html; charset=utf-8"),
            Ok(AppHeader::Plain)
        );
        assert_eq!(check_app_header(b"X-Tab", b"a\tb"), Ok(AppHeader::Plain));
        assert_eq!(
            check_app_header(b"X-Latin1", "caf\u{e9}".as_bytes()),
            Ok(AppHeader::Plain)
        );
        assert_eq!(
            check_app_header(b"content-length", b" 42 "),
            Ok(AppHeader::ContentLength(42))
        );
    }

    #[test]
    fn rejects_header_injection_in_app_headers() {
        for value in [
            &b"a\r\nSet-Cookie: x"[..],
            b"a\nb",
            b"a\rb",
            b"a\0b",
            b"a\x7fb",
            b"a\x01b",
        ] {
            assert_eq!(
                check_app_header(b"X", value),
                Err(ResponseHeaderError::InvalidValue),
                "{value:?}"
            );
        }
        for name in [&b""[..], b"X Y", b"X:", b"X\r\n", "\u{e9}".as_bytes()] {
            assert_eq!(
                check_app_header(name, b"v"),
                Err(ResponseHeaderError::InvalidName),
                "{name:?}"
            );
        }
    }

    #[test]
    fn rejects_hop_by_hop_app_headers() {
        for name in [
            "Connection",
            "keep-alive",
            "Proxy-Connection",
            "TRANSFER-ENCODING",
            "TE",
            "Trailer",
            "Upgrade",
        ] {
            assert_eq!(
                check_app_header(name.as_bytes(), b"x"),
                Err(ResponseHeaderError::HopByHop),
                "{name}"
            );
        }
    }

    #[test]
    fn rejects_an_app_content_length_that_is_not_digits() {
        for value in [
            &b""[..],
            b"-1",
            b"+1",
            b"1,1",
            b"1 1",
            b"0x1",
            b"99999999999999999999",
        ] {
            assert_eq!(
                check_app_header(b"Content-Length", value),
                Err(ResponseHeaderError::InvalidContentLength)
            );
        }
    }

    #[test]
    fn parses_wsgi_status_lines() {
        assert_eq!(parse_status(b"200 OK"), Ok(200));
        assert_eq!(parse_status(b"404 Not Found"), Ok(404));
        assert_eq!(parse_status(b"599 "), Ok(599));
        assert_eq!(parse_status(b"103 Early Hints"), Ok(103));
        for bad in [
            &b"200"[..],
            b"20 OK",
            b"2000 OK",
            b"200OK",
            b"099 X",
            b"600 X",
            b"abc OK",
            b"200 O\r\nK",
            b"200 \x00",
        ] {
            assert_eq!(
                parse_status(bad),
                Err(ResponseHeaderError::InvalidStatus),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn knows_which_responses_have_no_body() {
        assert!(status_allows_body(200, false));
        assert!(status_allows_body(404, false));
        assert!(!status_allows_body(200, true));
        for code in [100, 101, 103, 204, 304] {
            assert!(!status_allows_body(code, false), "{code}");
        }
    }

    #[test]
    fn encodes_status_lines_as_http11_for_every_client() {
        let mut out = Vec::new();
        encode_status_line(&mut out, Version::Http10, b"200 OK");
        encode_header(&mut out, b"Content-Length", b"5");
        assert_eq!(out, b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n");
    }

    #[test]
    fn encodes_chunk_sizes_in_lowercase_hex() {
        for (len, text) in [
            (0, "0"),
            (1, "1"),
            (26, "1a"),
            (4096, "1000"),
            (usize::MAX, "ffffffffffffffff"),
        ] {
            let mut out = Vec::new();
            encode_chunk_size(&mut out, len);
            assert_eq!(out, format!("{text}\r\n").as_bytes());
        }
    }

    #[test]
    fn encodes_a_closing_error_response() {
        let mut out = Vec::new();
        encode_error_response(&mut out, 400, b"Sun, 06 Nov 1994 08:49:37 GMT", b"tines");
        let expected = "HTTP/1.1 400 Bad Request\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\nServer: tines\r\n\
            Connection: close\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 16\r\n\r\n\
            400 Bad Request\n";
        assert_eq!(String::from_utf8(out).unwrap(), expected);

        let mut out = Vec::new();
        encode_error_response(&mut out, 431, b"D", b"");
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with(
            "HTTP/1.1 431 Request Header Fields Too Large\r\nDate: D\r\nConnection: close\r\n"
        ));
        assert!(text.ends_with("\r\n\r\n431 Request Header Fields Too Large\n"));
    }
}
