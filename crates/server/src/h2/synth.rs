//! A stream's request as HTTP/1.1 bytes (ADR 0035, BRIEF decision 2): the head made from the
//! header list `h2` decoded and validated, and the body framing its DATA frames get.
//!
//! `h2` already refuses (RST_STREAM PROTOCOL_ERROR, or a connection error for a bad HPACK
//! field) uppercase or non-token names, connection-specific fields, `te` other than
//! `trailers`, misplaced, repeated, missing or unknown pseudo-headers, a `:status` in a
//! request, NUL, CR, LF and other control bytes in values, an unparsable or inconsistent
//! `content-length`, and DATA that disagrees with it. What it lets through and RFC 9113
//! 8.2.1 forbids, a value starting or ending with whitespace, is refused here; CONNECT is
//! refused (no extended CONNECT: WebSocket stays on HTTP/1.1).
//!
//! It must not judge what HTTP/1.1 judges (the request parser, trusted proxies and the
//! environ see these bytes as they see a client's: a name with an underscore passes).

use http::request::Parts;
use http::{header, Method};

/// Why a stream's request never reaches the loop.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// RFC 9113 8.2-8.3 call it malformed: RST_STREAM PROTOCOL_ERROR.
    Malformed,
    /// CONNECT (a tunnel this server does not make): answered 501.
    Connect,
}

/// The synthesized request head and how its body is framed.
#[derive(Debug)]
pub(crate) struct Synthesized {
    /// `METHOD PATH HTTP/1.1\r\nHost: ..\r\n<fields>\r\n\r\n`.
    pub(crate) head: Vec<u8>,
    /// No `content-length` and a body follows: DATA is chunk-encoded.
    pub(crate) chunked: bool,
    /// The request is HEAD (its response has no DATA).
    pub(crate) head_request: bool,
}

/// The HTTP/1.1 head of the request `parts` (`end_stream`: HEADERS carried END_STREAM).
pub(crate) fn synthesize(parts: &Parts, end_stream: bool) -> Result<Synthesized, Refused> {
    if parts.method == Method::CONNECT {
        return Err(Refused::Connect);
    }
    let path = parts.uri.path_and_query().map_or("/", |path| path.as_str());
    let mut head = Vec::with_capacity(128 + parts.headers.len() * 32);
    head.extend_from_slice(parts.method.as_str().as_bytes());
    head.push(b' ');
    head.extend_from_slice(path.as_bytes());
    head.extend_from_slice(b" HTTP/1.1\r\n");
    let authority = parts.uri.authority();
    if let Some(authority) = authority {
        head.extend_from_slice(b"host: ");
        head.extend_from_slice(authority.as_str().as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    let mut cookies = 0;
    let mut length = false;
    for (name, value) in &parts.headers {
        let bytes = value.as_bytes();
        if bytes.first().is_some_and(is_space) || bytes.last().is_some_and(is_space) {
            return Err(Refused::Malformed);
        }
        if name == header::HOST && authority.is_some() {
            // RFC 9113 8.3.1: :authority wins over Host.
            continue;
        }
        if name == header::COOKIE {
            cookies += 1;
            continue;
        }
        length |= name == header::CONTENT_LENGTH;
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(bytes);
        head.extend_from_slice(b"\r\n");
    }
    if cookies > 0 {
        // RFC 9113 8.2.3: the crumbs are one field again, joined with "; ".
        head.extend_from_slice(b"cookie: ");
        for (i, value) in parts.headers.get_all(header::COOKIE).iter().enumerate() {
            if i > 0 {
                head.extend_from_slice(b"; ");
            }
            head.extend_from_slice(value.as_bytes());
        }
        head.extend_from_slice(b"\r\n");
    }
    let chunked = !end_stream && !length;
    if chunked {
        head.extend_from_slice(b"transfer-encoding: chunked\r\n");
    }
    head.extend_from_slice(b"\r\n");
    Ok(Synthesized {
        head,
        chunked,
        head_request: parts.method == Method::HEAD,
    })
}

fn is_space(byte: &u8) -> bool {
    *byte == b' ' || *byte == b'\t'
}

/// A chunk's size line (`<hex>\r\n`).
pub(crate) fn chunk_size_line(size: usize) -> Vec<u8> {
    let mut line = format!("{size:x}").into_bytes();
    line.extend_from_slice(b"\r\n");
    line
}

/// The last chunk and the trailer section made from the client's trailers.
pub(crate) fn last_chunk(trailers: Option<&http::HeaderMap>) -> Vec<u8> {
    let mut out = b"0\r\n".to_vec();
    for (name, value) in trailers.into_iter().flatten() {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(method: &str, uri: &str, fields: &[(&str, &str)]) -> Parts {
        let mut builder = http::Request::builder().method(method).uri(uri);
        for (name, value) in fields {
            builder = builder.header(*name, *value);
        }
        builder.body(()).unwrap().into_parts().0
    }

    fn text(s: &Synthesized) -> &str {
        std::str::from_utf8(&s.head).unwrap()
    }

    #[test]
    fn get_has_host_from_authority_and_no_body_framing() {
        let p = parts(
            "GET",
            "https://example.com/a?b=1",
            &[
                ("host", "other"),
                ("accept", "*/*"),
                ("x_forwarded_for", "1.2.3.4"),
            ],
        );
        let s = synthesize(&p, true).unwrap();
        assert_eq!(
            text(&s),
            "GET /a?b=1 HTTP/1.1\r\nhost: example.com\r\naccept: */*\r\nx_forwarded_for: 1.2.3.4\r\n\r\n"
        );
        assert!(!s.chunked && !s.head_request);
    }

    #[test]
    fn host_field_is_kept_without_authority() {
        let p = parts("HEAD", "/", &[("host", "h")]);
        let s = synthesize(&p, true).unwrap();
        assert_eq!(text(&s), "HEAD / HTTP/1.1\r\nhost: h\r\n\r\n");
        assert!(s.head_request);
    }

    #[test]
    fn body_without_length_is_chunked() {
        let p = parts("POST", "http://h/u", &[]);
        let s = synthesize(&p, false).unwrap();
        assert_eq!(
            text(&s),
            "POST /u HTTP/1.1\r\nhost: h\r\ntransfer-encoding: chunked\r\n\r\n"
        );
        assert!(s.chunked);
        let with_length = parts("POST", "http://h/u", &[("content-length", "3")]);
        assert!(!synthesize(&with_length, false).unwrap().chunked);
    }

    #[test]
    fn cookie_crumbs_are_joined() {
        let p = parts("GET", "http://h/", &[("cookie", "a=1"), ("cookie", "b=2")]);
        let s = synthesize(&p, true).unwrap();
        assert_eq!(
            text(&s),
            "GET / HTTP/1.1\r\nhost: h\r\ncookie: a=1; b=2\r\n\r\n"
        );
    }

    #[test]
    fn refuses_whitespace_at_a_value_edge_and_connect() {
        assert_eq!(
            synthesize(&parts("GET", "http://h/", &[("x", " v")]), true).unwrap_err(),
            Refused::Malformed
        );
        assert_eq!(
            synthesize(&parts("GET", "http://h/", &[("x", "v\t")]), true).unwrap_err(),
            Refused::Malformed
        );
        assert_eq!(
            synthesize(&parts("CONNECT", "h:443", &[]), true).unwrap_err(),
            Refused::Connect
        );
    }

    #[test]
    fn last_chunk_carries_trailers() {
        let mut trailers = http::HeaderMap::new();
        trailers.insert("x-sum", "7".parse().unwrap());
        assert_eq!(last_chunk(Some(&trailers)), b"0\r\nx-sum: 7\r\n\r\n");
        assert_eq!(last_chunk(None), b"0\r\n\r\n");
        assert_eq!(chunk_size_line(255), b"ff\r\n");
    }
}
