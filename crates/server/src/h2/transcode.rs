//! A stream's response, written by its exchange as HTTP/1.1 bytes, read back as a client
//! would read it and turned into what `h2` sends (BRIEF decision 2): the head (its `:status`
//! and fields, names lowercased, connection-specific fields dropped), DATA (a chunked body
//! decoded, its trailer section made a trailing HEADERS), 1xx heads as informational
//! HEADERS. Resumable at any byte: an exchange writes a head and its body in any pieces.
//!
//! It must not decide anything about the exchange's framing (what it wrote is the truth: a
//! response to HEAD, a 204 or a 304 has no body; a body without a length or chunks ends when
//! the exchange says the response is complete).

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, Response, StatusCode};

/// What the bytes fed so far told.
#[derive(Debug)]
pub(crate) enum Out {
    /// A 1xx head (100 Continue, 103 Early Hints).
    Informational(Response<()>),
    /// The final head; `end`: no body follows (END_STREAM on HEADERS).
    Head(Response<()>, bool),
    /// Body bytes.
    Data(Bytes),
    /// The trailer section that ends the response.
    Trailers(HeaderMap),
    /// The response is complete (END_STREAM on an empty DATA frame).
    End,
}

/// The bytes were not an HTTP/1.1 response an exchange writes (a broken head, a bad chunk):
/// the stream is reset.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Malformed;

#[derive(Debug)]
enum State {
    Head,
    Length(u64),
    /// A chunk's size line (in `line`).
    ChunkSize,
    /// Bytes of the current chunk left.
    ChunkData(u64),
    /// The CRLF after a chunk's data: bytes of it left.
    ChunkEnd(u8),
    /// The trailer section (in `line`).
    Trailers,
    /// Body until the exchange says the response is complete.
    UntilComplete,
    Done,
}

/// The largest response head or trailer section taken (an exchange's own head is far
/// smaller).
const MAX_HEAD: usize = 256 * 1024;

/// One stream's response reader.
#[derive(Debug)]
pub(crate) struct Transcoder {
    state: State,
    /// A head, a size line or a trailer section, until it is complete.
    line: Vec<u8>,
    head_request: bool,
}

impl Transcoder {
    /// A reader of the response to a request (`head_request`: HEAD, whose response has no
    /// body whatever its head says).
    pub(crate) fn new(head_request: bool) -> Transcoder {
        Transcoder {
            state: State::Head,
            line: Vec::new(),
            head_request,
        }
    }

    /// True once the response is complete.
    pub(crate) fn is_done(&self) -> bool {
        matches!(self.state, State::Done)
    }

    /// True before any byte of the final head was fed.
    pub(crate) fn nothing_sent(&self) -> bool {
        matches!(self.state, State::Head) && self.line.is_empty()
    }

    /// Reads `input`, pushing what it told to `out`. Bytes after the response's end are
    /// refused.
    pub(crate) fn feed(&mut self, mut input: &[u8], out: &mut Vec<Out>) -> Result<(), Malformed> {
        while !input.is_empty() {
            match self.state {
                State::Head => {
                    let taken = self.take_line(input, b"\r\n\r\n")?;
                    input = &input[taken..];
                    if self.line.ends_with(b"\r\n\r\n") {
                        self.head(out)?;
                    }
                }
                State::Length(left) => {
                    let n = (left.min(input.len() as u64)) as usize;
                    out.push(Out::Data(Bytes::copy_from_slice(&input[..n])));
                    input = &input[n..];
                    if left == n as u64 {
                        out.push(Out::End);
                        self.state = State::Done;
                    } else {
                        self.state = State::Length(left - n as u64);
                    }
                }
                State::UntilComplete => {
                    out.push(Out::Data(Bytes::copy_from_slice(input)));
                    input = &[];
                }
                State::ChunkSize => {
                    let taken = self.take_line(input, b"\r\n")?;
                    input = &input[taken..];
                    if self.line.ends_with(b"\r\n") {
                        let size = chunk_size(&self.line)?;
                        self.line.clear();
                        self.state = if size == 0 {
                            State::Trailers
                        } else {
                            State::ChunkData(size)
                        };
                    }
                }
                State::ChunkData(left) => {
                    let n = (left.min(input.len() as u64)) as usize;
                    out.push(Out::Data(Bytes::copy_from_slice(&input[..n])));
                    input = &input[n..];
                    self.state = if left == n as u64 {
                        State::ChunkEnd(2)
                    } else {
                        State::ChunkData(left - n as u64)
                    };
                }
                State::ChunkEnd(left) => {
                    let expected: &[u8] = if left == 2 { b"\r\n" } else { b"\n" };
                    let n = usize::from(left).min(input.len());
                    if input[..n] != expected[..n] {
                        return Err(Malformed);
                    }
                    input = &input[n..];
                    self.state = if n == usize::from(left) {
                        State::ChunkSize
                    } else {
                        State::ChunkEnd(left - n as u8)
                    };
                }
                State::Trailers => {
                    let taken = self.take_line(input, b"\r\n")?;
                    input = &input[taken..];
                    if self.line == b"\r\n" || self.line.ends_with(b"\r\n\r\n") {
                        self.trailers(out)?;
                    }
                }
                State::Done => return Err(Malformed),
            }
        }
        Ok(())
    }

    /// The exchange says the response is complete: a body without a length ends here.
    /// Anything else unfinished is a broken response.
    pub(crate) fn finish(&mut self, out: &mut Vec<Out>) -> Result<(), Malformed> {
        match self.state {
            State::Done => Ok(()),
            State::UntilComplete => {
                out.push(Out::End);
                self.state = State::Done;
                Ok(())
            }
            _ => Err(Malformed),
        }
    }

    /// Appends `input` to `line` up to and including the first `end` it completes; how many
    /// bytes it took.
    fn take_line(&mut self, input: &[u8], end: &[u8]) -> Result<usize, Malformed> {
        // Look from a little before the bytes already held (the end may straddle the feeds).
        let start = self.line.len().saturating_sub(end.len() - 1);
        let before = self.line.len();
        self.line.extend_from_slice(input);
        let taken = match memchr::memmem::find(&self.line[start..], end) {
            Some(at) => start + at + end.len() - before,
            None => input.len(),
        };
        self.line.truncate(before + taken);
        if self.line.len() > MAX_HEAD {
            return Err(Malformed);
        }
        Ok(taken)
    }

    fn head(&mut self, out: &mut Vec<Out>) -> Result<(), Malformed> {
        let mut fields = [httparse::EMPTY_HEADER; 128];
        let mut parsed = httparse::Response::new(&mut fields);
        if !matches!(parsed.parse(&self.line), Ok(httparse::Status::Complete(_))) {
            return Err(Malformed);
        }
        let status = StatusCode::from_u16(parsed.code.ok_or(Malformed)?).map_err(|_| Malformed)?;
        let mut response = Response::new(());
        *response.status_mut() = status;
        let mut chunked = false;
        let mut length = None;
        for field in parsed.headers.iter() {
            let name = HeaderName::from_bytes(field.name.as_bytes()).map_err(|_| Malformed)?;
            if is_connection_specific(&name) {
                if name == http::header::TRANSFER_ENCODING {
                    chunked = field.value.eq_ignore_ascii_case(b"chunked");
                }
                continue;
            }
            if name == http::header::CONTENT_LENGTH {
                let text = std::str::from_utf8(field.value).map_err(|_| Malformed)?;
                length = Some(text.trim().parse::<u64>().map_err(|_| Malformed)?);
            }
            let value = HeaderValue::from_bytes(field.value).map_err(|_| Malformed)?;
            response.headers_mut().append(name, value);
        }
        self.line.clear();
        if status.is_informational() {
            out.push(Out::Informational(response));
            return Ok(());
        }
        let bodiless = self.head_request
            || status == StatusCode::NO_CONTENT
            || status == StatusCode::NOT_MODIFIED;
        self.state = if bodiless || (!chunked && length == Some(0)) {
            State::Done
        } else if chunked {
            State::ChunkSize
        } else if let Some(length) = length {
            State::Length(length)
        } else {
            State::UntilComplete
        };
        out.push(Out::Head(response, self.is_done()));
        Ok(())
    }

    fn trailers(&mut self, out: &mut Vec<Out>) -> Result<(), Malformed> {
        let mut fields = [httparse::EMPTY_HEADER; 64];
        let map = match httparse::parse_headers(&self.line, &mut fields) {
            Ok(httparse::Status::Complete((_, fields))) => {
                let mut map = HeaderMap::new();
                for field in fields.iter() {
                    let name =
                        HeaderName::from_bytes(field.name.as_bytes()).map_err(|_| Malformed)?;
                    let value = HeaderValue::from_bytes(field.value).map_err(|_| Malformed)?;
                    if !is_connection_specific(&name) {
                        map.append(name, value);
                    }
                }
                map
            }
            _ => return Err(Malformed),
        };
        self.line.clear();
        self.state = State::Done;
        out.push(if map.is_empty() {
            Out::End
        } else {
            Out::Trailers(map)
        });
        Ok(())
    }
}

/// Fields HTTP/2 forbids (RFC 9113 8.2.2).
fn is_connection_specific(name: &HeaderName) -> bool {
    use http::header::{CONNECTION, TRANSFER_ENCODING, UPGRADE};
    name == CONNECTION
        || name == TRANSFER_ENCODING
        || name == UPGRADE
        || name == "keep-alive"
        || name == "proxy-connection"
}

/// The size of a chunk size line (`<hex>[;ext]\r\n`).
fn chunk_size(line: &[u8]) -> Result<u64, Malformed> {
    let digits = &line[..line.len() - 2];
    let digits = digits
        .split(|&b| b == b';')
        .next()
        .unwrap_or_default()
        .trim_ascii();
    let text = std::str::from_utf8(digits).map_err(|_| Malformed)?;
    if text.is_empty() {
        return Err(Malformed);
    }
    u64::from_str_radix(text, 16).map_err(|_| Malformed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `bytes` one byte at a time and in one piece: both tell the same.
    fn run(head_request: bool, bytes: &[u8]) -> Vec<String> {
        let mut whole = Vec::new();
        Transcoder::new(head_request)
            .feed(bytes, &mut whole)
            .unwrap();
        let mut split = Vec::new();
        let mut t = Transcoder::new(head_request);
        for byte in bytes.chunks(1) {
            t.feed(byte, &mut split).unwrap();
        }
        let whole = describe(whole);
        assert_eq!(whole.concat(), describe(split).concat());
        whole
    }

    fn describe(events: Vec<Out>) -> Vec<String> {
        let mut data = String::new();
        let mut out = Vec::new();
        for event in events {
            if let Out::Data(bytes) = &event {
                data.push_str(std::str::from_utf8(bytes).unwrap());
                continue;
            }
            if !data.is_empty() {
                out.push(format!("data {data}"));
                data.clear();
            }
            out.push(match event {
                Out::Informational(r) => format!("info {}", r.status().as_u16()),
                Out::Head(r, end) => {
                    let mut fields: Vec<String> = r
                        .headers()
                        .iter()
                        .map(|(n, v)| format!("{n}={}", v.to_str().unwrap()))
                        .collect();
                    fields.sort();
                    format!(
                        "head {} {} end={end}",
                        r.status().as_u16(),
                        fields.join(",")
                    )
                }
                Out::Trailers(map) => format!("trailers {map:?}"),
                Out::End => "end".into(),
                Out::Data(_) => unreachable!(),
            });
        }
        if !data.is_empty() {
            out.push(format!("data {data}"));
        }
        out
    }

    #[test]
    fn content_length() {
        let events = run(
            false,
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: keep-alive\r\nX-A: b\r\n\r\nhello",
        );
        assert_eq!(
            events,
            [
                "head 200 content-length=5,x-a=b end=false",
                "data hello",
                "end"
            ]
        );
    }

    #[test]
    fn chunked_with_trailers() {
        let events = run(
            false,
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n2\r\nde\r\n0\r\nX-Sum: 9\r\n\r\n",
        );
        assert_eq!(
            events,
            [
                "head 200  end=false",
                "data abcde",
                "trailers {\"x-sum\": \"9\"}"
            ]
        );
    }

    #[test]
    fn chunked_without_trailers_ends() {
        let events = run(
            false,
            b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n\r\n",
        );
        assert_eq!(events, ["head 201  end=false", "data a", "end"]);
    }

    #[test]
    fn continue_then_the_final_head() {
        let events = run(
            false,
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
        );
        assert_eq!(events, ["info 100", "head 204  end=true"]);
    }

    #[test]
    fn head_request_has_no_body() {
        let events = run(true, b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n");
        assert_eq!(events, ["head 200 content-length=5 end=true"]);
    }

    #[test]
    fn body_until_complete() {
        let mut t = Transcoder::new(false);
        let mut out = Vec::new();
        t.feed(b"HTTP/1.1 200 OK\r\n\r\nabc", &mut out).unwrap();
        assert!(!t.is_done());
        t.finish(&mut out).unwrap();
        assert_eq!(describe(out), ["head 200  end=false", "data abc", "end"]);
    }

    #[test]
    fn refuses_bytes_after_the_end_and_an_unfinished_body() {
        let mut t = Transcoder::new(false);
        let mut out = Vec::new();
        t.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nab", &mut out)
            .unwrap_err();
        let mut t = Transcoder::new(false);
        t.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\na", &mut out)
            .unwrap();
        assert_eq!(t.finish(&mut out), Err(Malformed));
        let mut t = Transcoder::new(false);
        assert_eq!(t.feed(b"garbage\r\n\r\n", &mut out), Err(Malformed));
    }
}
