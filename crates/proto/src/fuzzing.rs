//! Invariant checks shared by the cargo-fuzz targets (`fuzz/`) and the ordinary test that
//! replays their corpora (`tests/fuzz_corpus.rs`), so both check exactly the same things.
//!
//! Each function takes arbitrary bytes and panics when an invariant breaks; it must never
//! panic for any other reason. They assert properties, not just "no crash".

use crate::chunked::{ChunkedDecoder, ChunkedError, ChunkedEvent};
use crate::proxy::{parse_proxy_header, ProxyHeader, ProxyStatus, MAX_V2_PAYLOAD};
use crate::request::{parse_request_head, HeadStatus, Limits, RequestHead};
use crate::response::{check_app_header, encode_header, parse_status};

/// Small limits, so that the fuzzer reaches the 414 and 431 paths with short inputs.
const TINY: Limits = Limits {
    max_request_line: 32,
    max_headers: 4,
    max_head_size: 128,
};

/// `parse_request_head` never panics; a Complete head lies within the input, its spans within
/// the head, and it parses the same on its own; no strict prefix of it is Complete; errors
/// carry one of the statuses the server answers with.
pub fn check_request_head(input: &[u8]) {
    for limits in [Limits::default(), TINY] {
        let mut head = RequestHead::new();
        match parse_request_head(input, &limits, &mut head) {
            Ok(HeadStatus::Complete) => {
                let len = head.head_len;
                assert!(len <= input.len(), "head_len past the input");
                assert!(!head.method.is_empty() && !head.target.is_empty());
                let spans = [head.method, head.target]
                    .into_iter()
                    .chain(head.headers.iter().flat_map(|(n, v)| [*n, *v]));
                for span in spans {
                    assert!(
                        span.start <= span.end && span.end as usize <= len,
                        "a span outside the head"
                    );
                }
                let mut again = RequestHead::new();
                assert_eq!(
                    parse_request_head(&input[..len], &limits, &mut again),
                    Ok(HeadStatus::Complete)
                );
                assert_eq!(again.head_len, len);
                assert_eq!(again.headers.len(), head.headers.len());
                let mut shorter = RequestHead::new();
                assert_ne!(
                    parse_request_head(&input[..len - 1], &limits, &mut shorter),
                    Ok(HeadStatus::Complete),
                    "a strict prefix of a head parsed as complete"
                );
            }
            Ok(HeadStatus::Partial) => {}
            Err(err) => assert!(
                matches!(err.status(), 400 | 414 | 431 | 501 | 505),
                "status {}",
                err.status()
            ),
        }
    }
}

/// What feeding a chunked body in windows of `step` bytes produced: the decoded data, the bytes
/// consumed, and whether the body ended.
type Decoded = Result<(Vec<u8>, usize, bool), ChunkedError>;

fn decode_in_steps(data: &[u8], step: usize) -> Decoded {
    let mut decoder = ChunkedDecoder::new(1024);
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < data.len() {
        let window = &data[pos..(pos + step).min(data.len())];
        let (consumed, event) = decoder.decode(window)?;
        assert!(consumed <= window.len(), "consumed more than given");
        match event {
            ChunkedEvent::Data(range) => {
                assert!(
                    range.start < range.end && range.end <= consumed,
                    "a data range outside what was consumed"
                );
                out.extend_from_slice(&window[range]);
            }
            ChunkedEvent::NeedMore => {
                assert_eq!(consumed, window.len(), "NeedMore left input unconsumed")
            }
            ChunkedEvent::End => {
                pos += consumed;
                let (after, event) = decoder.decode(&data[pos..])?;
                assert_eq!(
                    (after, event),
                    (0, ChunkedEvent::End),
                    "bytes consumed after the end"
                );
                return Ok((out, pos, true));
            }
        }
        pos += consumed;
    }
    Ok((out, pos, false))
}

/// The chunked decoder gives the same data, end and error whether a body arrives whole or in
/// small pieces (the first input byte picks the piece size); it never consumes more than it
/// was given, and nothing after the last chunk.
pub fn check_chunked(input: &[u8]) {
    let Some((&seed, data)) = input.split_first() else {
        return;
    };
    let whole = decode_in_steps(data, data.len().max(1));
    let pieces = decode_in_steps(data, usize::from(seed % 7) + 1);
    match (&whole, &pieces) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "the split changed the decoded body"),
        (Err(_), Err(_)) => {}
        _ => panic!("the split changed the outcome: whole {whole:?}, pieces {pieces:?}"),
    }
}

/// A header the app may send never puts CR, LF or NUL on the wire except the line's own CRLF;
/// an accepted status line is a code from 100 to 599 with no line break.
pub fn check_response_header(input: &[u8]) {
    if let Ok(code) = parse_status(input) {
        assert!((100..=599).contains(&code));
        assert!(!input.contains(&b'\r') && !input.contains(&b'\n') && !input.contains(&0));
    }
    let Some((&seed, rest)) = input.split_first() else {
        return;
    };
    let cut = usize::from(seed).min(rest.len());
    let (name, value) = rest.split_at(cut);
    if check_app_header(name, value).is_ok() {
        let mut out = Vec::new();
        encode_header(&mut out, name, value);
        assert!(out.ends_with(b"\r\n"));
        let line = &out[..out.len() - 2];
        assert!(
            !line.iter().any(|&b| b == b'\r' || b == b'\n' || b == 0),
            "an accepted header injects a line break or NUL"
        );
    }
}

/// `parse_proxy_header` never panics and is incremental: the outcome is decided by a prefix
/// (Partial until then) and never changes as bytes are added; a Complete header lies within
/// the input, is no longer than the spec's limits, and parses the same on its own.
pub fn check_proxy_header(input: &[u8]) {
    // Past the longest header the outcome is decided: no need to look at longer prefixes.
    let longest = 16 + MAX_V2_PAYLOAD + 1;
    let whole = parse_proxy_header(input);
    let mut decided = None;
    for cut in 0..=input.len().min(longest) {
        let outcome = parse_proxy_header(&input[..cut]);
        match (outcome, decided) {
            (Ok(ProxyStatus::Partial), None) => {}
            (Ok(ProxyStatus::Partial), Some(_)) => panic!("a decided prefix became Partial"),
            (outcome, None) => decided = Some(outcome),
            (outcome, Some(first)) => assert_eq!(outcome, first, "the outcome changed"),
        }
    }
    if let Some(first) = decided {
        assert_eq!(whole, first, "the whole input disagrees with its prefix");
    }
    if let Ok(ProxyStatus::Complete { consumed, header }) = whole {
        assert!(consumed <= input.len(), "consumed past the input");
        assert!(consumed <= 16 + MAX_V2_PAYLOAD, "a header over the cap");
        if input[0] == b'P' {
            assert!(
                consumed <= crate::proxy::MAX_V1_LENGTH,
                "a v1 line over 107 bytes"
            );
            assert_eq!(&input[consumed - 2..consumed], b"\r\n");
            assert_ne!(header, ProxyHeader::Local, "LOCAL is a v2 command");
        }
        let again = parse_proxy_header(&input[..consumed]);
        assert_eq!(again, whole);
    }
}

/// What a run of the WebSocket decoder made: the messages (joined from their pieces) and the
/// control frames, in order, and the close code of a broken rule.
type WebSocketRun = (Vec<(u8, Vec<u8>)>, Option<u16>);

fn decode_frames_in_steps(data: &[u8], step: usize) -> WebSocketRun {
    use crate::websocket::{Decoder, Event, MessageKind};
    let mut decoder = Decoder::new(1 << 16);
    let mut buffer: Vec<u8> = Vec::new();
    let mut seen = Vec::new();
    let mut message: Vec<u8> = Vec::new();
    for piece in data.chunks(step) {
        buffer.extend_from_slice(piece);
        loop {
            let before = buffer.len();
            let (used, event) = match decoder.decode(&mut buffer) {
                Ok(result) => result,
                Err(err) => return (seen, Some(err.code)),
            };
            assert!(
                used <= before,
                "the decoder used more bytes than it was given"
            );
            let made = event.is_some();
            match event {
                Some(Event::Data {
                    kind,
                    payload,
                    last,
                    ..
                }) => {
                    message.extend_from_slice(payload);
                    if last {
                        let tag = if kind == MessageKind::Text { 1 } else { 2 };
                        if tag == 1 {
                            assert!(
                                std::str::from_utf8(&message).is_ok(),
                                "a text message passed that is not UTF-8"
                            );
                        }
                        seen.push((tag, std::mem::take(&mut message)));
                    }
                }
                Some(Event::Ping(payload)) => seen.push((9, payload.to_vec())),
                Some(Event::Pong(payload)) => seen.push((10, payload.to_vec())),
                Some(Event::Close { code, reason }) => {
                    let mut bytes = code.map_or(Vec::new(), |c| c.to_be_bytes().to_vec());
                    bytes.extend_from_slice(reason.as_bytes());
                    seen.push((8, bytes));
                }
                None => {}
            }
            buffer.drain(..used);
            if used == 0 && !made {
                break;
            }
        }
    }
    (seen, None)
}

/// The WebSocket frame decoder never panics, never uses more bytes than it was given, lets
/// no text message through that is not UTF-8, and decodes the same messages and control
/// frames, or fails with the same code, whether the bytes arrive whole or in small pieces (the
/// first input byte picks the piece size).
pub fn check_websocket_frames(input: &[u8]) {
    let Some((&seed, data)) = input.split_first() else {
        return;
    };
    let whole = decode_frames_in_steps(data, data.len().max(1));
    let pieces = decode_frames_in_steps(data, usize::from(seed % 7) + 1);
    assert_eq!(whole, pieces, "the split changed what was decoded");
}
