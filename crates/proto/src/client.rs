//! Response heads, read from the client side (for `tines bench`).
//!
//! Owns: parsing a response's status line and header section out of a read
//! buffer (httparse underneath), and the decisions a client needs from it:
//! how the body is framed (RFC 9112 section 6.3) and whether the connection
//! can carry another request. Must not: do I/O, read the body (the caller
//! counts Content-Length bytes or hands chunked bytes to `ChunkedDecoder`),
//! or allocate.
//!
//! Choices, from the client's side of RFC 9112 section 6.3:
//! - 1xx, 204 and 304 responses, and any response to HEAD, have no body,
//!   whatever their fields say.
//! - Transfer-Encoding whose final coding is `chunked` wins over
//!   Content-Length; a Transfer-Encoding without a final `chunked` means the
//!   body runs to the close of the connection.
//! - Content-Length must be one decimal number (repeated identical values, as
//!   in `5, 5`, are accepted); differing values are a parse error.
//! - Without either, the body runs to the close of the connection.
//! - Keep-alive: HTTP/1.1 unless `Connection: close`; HTTP/1.0 only with
//!   `Connection: keep-alive`. A close-delimited body always ends the
//!   connection.

use crate::syntax::{list_elements, parse_decimal, trim_ows};

/// Most header fields read from one response head; more is a parse error.
pub const MAX_RESPONSE_HEADERS: usize = 64;

/// How a response's body is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyKind {
    /// No body at all (1xx, 204, 304, a response to HEAD, or Content-Length: 0).
    None,
    /// Exactly this many bytes follow the head.
    Length(u64),
    /// The chunked transfer coding (decode with `ChunkedDecoder`).
    Chunked,
    /// The body runs until the server closes the connection.
    UntilClose,
}

/// A parsed response head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResponseHead {
    /// Bytes of the head, blank line included; the body starts here.
    pub head_len: usize,
    /// The status code.
    pub status: u16,
    /// The minor version of `HTTP/1.x`.
    pub minor_version: u8,
    /// How the body is framed.
    pub body: BodyKind,
    /// Whether the connection may carry another request after this response.
    pub keep_alive: bool,
}

impl ResponseHead {
    /// Whether this is an interim (1xx) response, after which the final one follows.
    pub fn is_interim(&self) -> bool {
        (100..200).contains(&self.status)
    }
}

/// Why a response head was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResponseParseError {
    /// httparse refused the status line or a header line.
    Syntax,
    /// More than `MAX_RESPONSE_HEADERS` fields.
    TooManyHeaders,
    /// The head is larger than the caller's limit without being complete.
    TooLarge,
    /// Content-Length is not a number, or two differing values.
    BadContentLength,
}

impl ResponseParseError {
    /// A short text for reports.
    pub fn reason(&self) -> &'static str {
        match self {
            ResponseParseError::Syntax => "malformed response head",
            ResponseParseError::TooManyHeaders => "too many response header fields",
            ResponseParseError::TooLarge => "response head too large",
            ResponseParseError::BadContentLength => "invalid Content-Length in response",
        }
    }
}

impl std::fmt::Display for ResponseParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.reason())
    }
}

impl std::error::Error for ResponseParseError {}

/// Parses the response head at the start of `buf`.
///
/// `is_head` says the request was HEAD (no body follows whatever the fields
/// say). Returns `Ok(None)` while the head is incomplete and shorter than
/// `max_head_size`.
pub fn parse_response_head(
    buf: &[u8],
    is_head: bool,
    max_head_size: usize,
) -> Result<Option<ResponseHead>, ResponseParseError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_RESPONSE_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    let head_len = match response.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => {
            return if buf.len() >= max_head_size {
                Err(ResponseParseError::TooLarge)
            } else {
                Ok(None)
            };
        }
        Err(httparse::Error::TooManyHeaders) => return Err(ResponseParseError::TooManyHeaders),
        Err(_) => return Err(ResponseParseError::Syntax),
    };
    let status = response.code.ok_or(ResponseParseError::Syntax)?;
    let minor_version = response.version.ok_or(ResponseParseError::Syntax)?;

    let mut content_length: Option<u64> = None;
    let mut chunked = false;
    let mut transfer_encoding = false;
    let mut conn_close = false;
    let mut conn_keep_alive = false;
    for header in response.headers.iter() {
        let name = header.name.as_bytes();
        if name.eq_ignore_ascii_case(b"content-length") {
            for element in header.value.split(|&b| b == b',') {
                let value =
                    parse_decimal(trim_ows(element)).ok_or(ResponseParseError::BadContentLength)?;
                if content_length.is_some_and(|seen| seen != value) {
                    return Err(ResponseParseError::BadContentLength);
                }
                content_length = Some(value);
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            transfer_encoding = true;
            // Only the final coding matters: chunked must be last to delimit.
            chunked = list_elements(header.value)
                .last()
                .is_some_and(|coding| coding.eq_ignore_ascii_case(b"chunked"));
        } else if name.eq_ignore_ascii_case(b"connection") {
            for option in list_elements(header.value) {
                if option.eq_ignore_ascii_case(b"close") {
                    conn_close = true;
                } else if option.eq_ignore_ascii_case(b"keep-alive") {
                    conn_keep_alive = true;
                }
            }
        }
    }

    let no_body = is_head || (100..200).contains(&status) || status == 204 || status == 304;
    let body = if no_body {
        BodyKind::None
    } else if transfer_encoding {
        if chunked {
            BodyKind::Chunked
        } else {
            BodyKind::UntilClose
        }
    } else {
        match content_length {
            Some(0) => BodyKind::None,
            Some(n) => BodyKind::Length(n),
            None => BodyKind::UntilClose,
        }
    };
    let persistent = if minor_version >= 1 {
        !conn_close
    } else {
        conn_keep_alive && !conn_close
    };
    let keep_alive = persistent && body != BodyKind::UntilClose;
    Ok(Some(ResponseHead {
        head_len,
        status,
        minor_version,
        body,
        keep_alive,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> ResponseHead {
        parse_response_head(bytes, false, 8192).unwrap().unwrap()
    }

    #[test]
    fn content_length_body_and_keep_alive() {
        let head = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nOK");
        assert_eq!(head.status, 200);
        assert_eq!(head.head_len, 38);
        assert_eq!(head.body, BodyKind::Length(2));
        assert!(head.keep_alive);
    }

    #[test]
    fn partial_head_needs_more_until_the_limit() {
        assert_eq!(
            parse_response_head(b"HTTP/1.1 200 OK\r\nContent-Le", false, 8192),
            Ok(None)
        );
        assert_eq!(
            parse_response_head(b"HTTP/1.1 200 OK\r\nContent-Le", false, 10),
            Err(ResponseParseError::TooLarge)
        );
    }

    #[test]
    fn chunked_wins_over_content_length() {
        let head = parse(
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        );
        assert_eq!(head.body, BodyKind::Chunked);
        assert!(head.keep_alive);
    }

    #[test]
    fn transfer_encoding_without_final_chunked_reads_to_close() {
        let head = parse(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n");
        assert_eq!(head.body, BodyKind::UntilClose);
        assert!(!head.keep_alive);
    }

    #[test]
    fn no_framing_reads_to_close() {
        let head = parse(b"HTTP/1.1 200 OK\r\nServer: x\r\n\r\nhello");
        assert_eq!(head.body, BodyKind::UntilClose);
        assert!(!head.keep_alive);
    }

    #[test]
    fn bodiless_statuses_and_head() {
        for status in [
            b"100 Continue".as_slice(),
            b"204 No Content",
            b"304 Not Modified",
        ] {
            let mut bytes = b"HTTP/1.1 ".to_vec();
            bytes.extend_from_slice(status);
            bytes.extend_from_slice(b"\r\nContent-Length: 10\r\n\r\n");
            assert_eq!(parse(&bytes).body, BodyKind::None);
        }
        assert!(parse(b"HTTP/1.1 100 Continue\r\n\r\n").is_interim());
        let head =
            parse_response_head(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", true, 8192)
                .unwrap()
                .unwrap();
        assert_eq!(head.body, BodyKind::None);
        assert!(head.keep_alive);
        assert_eq!(
            parse(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n").body,
            BodyKind::None
        );
    }

    #[test]
    fn connection_close_and_http_1_0() {
        assert!(
            !parse(b"HTTP/1.1 200 OK\r\nConnection: Close\r\nContent-Length: 0\r\n\r\n").keep_alive
        );
        assert!(!parse(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n").keep_alive);
        let head = parse(b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n");
        assert!(head.keep_alive);
        assert_eq!(head.minor_version, 0);
    }

    #[test]
    fn content_length_errors() {
        for bad in [b"abc".as_slice(), b"5, 6", b"-1", b""] {
            let mut bytes = b"HTTP/1.1 200 OK\r\nContent-Length: ".to_vec();
            bytes.extend_from_slice(bad);
            bytes.extend_from_slice(b"\r\n\r\n");
            assert_eq!(
                parse_response_head(&bytes, false, 8192),
                Err(ResponseParseError::BadContentLength),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(
            parse(b"HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\n").body,
            BodyKind::Length(5)
        );
    }

    #[test]
    fn syntax_errors_and_too_many_headers() {
        assert_eq!(
            parse_response_head(b"HTTX/1.1 200 OK\r\n\r\n", false, 8192),
            Err(ResponseParseError::Syntax)
        );
        assert_eq!(
            parse_response_head(b"HTTP/1.1 2000 OK\r\n\r\n", false, 8192),
            Err(ResponseParseError::Syntax)
        );
        let mut bytes = b"HTTP/1.1 200 OK\r\n".to_vec();
        for _ in 0..=MAX_RESPONSE_HEADERS {
            bytes.extend_from_slice(b"X: y\r\n");
        }
        bytes.extend_from_slice(b"\r\n");
        assert_eq!(
            parse_response_head(&bytes, false, 1 << 20),
            Err(ResponseParseError::TooManyHeaders)
        );
    }
}
