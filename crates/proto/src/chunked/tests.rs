//! Unit tests for `ChunkedDecoder`: whole and byte-at-a-time input, every
//! rejection, and pipelined bytes after the end.

use super::*;

/// Feeds `input` in pieces of `step` bytes, as a connection would (keeping
/// unconsumed bytes, appending new ones). Returns the body and the number of
/// bytes consumed when End came, or the error.
fn decode_in_steps(input: &[u8], step: usize) -> Result<(Vec<u8>, usize), ChunkedError> {
    let mut decoder = ChunkedDecoder::new(1024);
    let mut body = Vec::new();
    let mut pending: Vec<u8> = Vec::new();
    let mut fed = 0;
    let mut total_consumed = 0;
    loop {
        let (consumed, event) = decoder.decode(&pending)?;
        let need_more = event == ChunkedEvent::NeedMore;
        match event {
            ChunkedEvent::Data(range) => {
                assert!(!range.is_empty());
                assert_eq!(range.end, consumed);
                body.extend_from_slice(&pending[range]);
            }
            ChunkedEvent::NeedMore => {
                assert_eq!(consumed, pending.len(), "NeedMore consumes everything");
                if fed == input.len() {
                    panic!("input ended before the body did");
                }
            }
            ChunkedEvent::End => {
                assert!(decoder.is_done());
                return Ok((body, total_consumed + consumed));
            }
        }
        pending.drain(..consumed);
        total_consumed += consumed;
        if need_more {
            let next = (fed + step).min(input.len());
            pending.extend_from_slice(&input[fed..next]);
            fed = next;
        }
    }
}

fn decode_all(input: &[u8]) -> Result<Vec<u8>, ChunkedError> {
    decode_in_steps(input, input.len().max(1)).map(|(body, _)| body)
}

const TWO_CHUNKS: &[u8] = b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";

#[test]
fn decodes_two_chunks() {
    assert_eq!(decode_all(TWO_CHUNKS).unwrap(), b"hello world");
}

#[test]
fn decodes_when_fed_one_byte_at_a_time() {
    let input = b"5;a=b\r\nhello\r\n0006\r\n world\r\n000\r\nX-Checksum: 1\r\n\r\n";
    for step in 1..input.len() {
        let (body, consumed) = decode_in_steps(input, step).unwrap();
        assert_eq!(
            (body.as_slice(), consumed),
            (&b"hello world"[..], input.len()),
            "step {step}"
        );
    }
}

#[test]
fn returns_data_as_a_range_of_the_input() {
    let mut decoder = ChunkedDecoder::new(0);
    let (consumed, event) = decoder.decode(TWO_CHUNKS).unwrap();
    assert_eq!((consumed, event), (8, ChunkedEvent::Data(3..8)));
    let (consumed, event) = decoder.decode(&TWO_CHUNKS[8..]).unwrap();
    assert_eq!((consumed, event), (11, ChunkedEvent::Data(5..11)));
    let (consumed, event) = decoder.decode(&TWO_CHUNKS[19..]).unwrap();
    assert_eq!(
        (consumed, event),
        (TWO_CHUNKS.len() - 19, ChunkedEvent::End)
    );
}

#[test]
fn splits_a_chunk_across_reads() {
    let mut decoder = ChunkedDecoder::new(0);
    assert_eq!(
        decoder.decode(b"a\r\n0123").unwrap(),
        (7, ChunkedEvent::Data(3..7))
    );
    assert_eq!(decoder.decode(b"").unwrap(), (0, ChunkedEvent::NeedMore));
    assert_eq!(
        decoder.decode(b"456789\r").unwrap(),
        (6, ChunkedEvent::Data(0..6))
    );
    assert_eq!(decoder.decode(b"\r").unwrap(), (1, ChunkedEvent::NeedMore));
    assert_eq!(
        decoder.decode(b"\n0\r\n\r\n").unwrap(),
        (6, ChunkedEvent::End)
    );
}

#[test]
fn leaves_pipelined_bytes_after_the_end() {
    let input = b"0\r\n\r\nGET / HTTP/1.1\r\n";
    let mut decoder = ChunkedDecoder::new(0);
    assert_eq!(decoder.decode(input).unwrap(), (5, ChunkedEvent::End));
    assert_eq!(decoder.decode(&input[5..]).unwrap(), (0, ChunkedEvent::End));
    let (_, consumed) = decode_in_steps(b"1\r\nx\r\n0\r\nA: b\r\n\r\nPOST", 3).unwrap();
    assert_eq!(consumed, 17);
}

#[test]
fn accepts_leading_zeros_uppercase_hex_and_quoted_extensions() {
    assert_eq!(decode_all(b"0005\r\nhello\r\n0\r\n\r\n").unwrap(), b"hello");
    assert_eq!(
        decode_all(b"A\r\n0123456789\r\n0\r\n\r\n").unwrap(),
        b"0123456789"
    );
    assert_eq!(
        decode_all(b"5;foo=\"bar baz\"\r\nhello\r\n0\r\n\r\n").unwrap(),
        b"hello"
    );
    assert_eq!(
        decode_all(b"5 ; a\r\nhello\r\n0;last\r\n\r\n").unwrap(),
        b"hello"
    );
    assert_eq!(
        decode_all(b"00000000000000000000005\r\nhello\r\n0\r\n\r\n").unwrap(),
        b"hello"
    );
}

#[test]
fn accepts_the_largest_chunk_size_and_refuses_one_more() {
    let mut decoder = ChunkedDecoder::new(0);
    assert_eq!(
        decoder.decode(b"ffffffffffffffff\r\nab").unwrap(),
        (20, ChunkedEvent::Data(18..20))
    );
    let mut decoder = ChunkedDecoder::new(0);
    assert_eq!(
        decoder.decode(b"10000000000000000\r\n"),
        Err(ChunkedError::ChunkSizeOverflow)
    );
}

#[test]
fn rejects_malformed_size_lines() {
    for input in [
        &b"\r\nhello\r\n0\r\n\r\n"[..],
        b" 5\r\nhello\r\n",
        b"5 \r\nhello\r\n",
        b"0 \r\n\r\n",
        b"-5\r\n",
        b"+5\r\n",
        b"0x5\r\n",
        b"6_0\r\n",
        b"5\nhello\r\n",
        b"5\rhello",
        b";ext\r\n",
        b"g\r\n",
    ] {
        assert_eq!(
            decode_all(input),
            Err(ChunkedError::InvalidChunkSize),
            "{input:?}"
        );
    }
}

#[test]
fn rejects_control_bytes_in_extensions() {
    assert_eq!(
        decode_all(b"5;a\x00b\r\nhello\r\n0\r\n\r\n"),
        Err(ChunkedError::InvalidChunkExtension)
    );
    assert_eq!(
        decode_all(b"5;a\nb\r\nhello\r\n0\r\n\r\n"),
        Err(ChunkedError::InvalidChunkExtension)
    );
    // A bare CR inside an extension is named for the extension, like a bare
    // LF there; a bare CR right after the size stays a size-line error.
    assert_eq!(
        decode_all(b"5;ext=val\rue\r\nhello\r\n"),
        Err(ChunkedError::InvalidChunkExtension)
    );
    assert_eq!(
        decode_all(b"5;a\rb\r\nhello\r\n0\r\n\r\n"),
        Err(ChunkedError::InvalidChunkExtension)
    );
    assert_eq!(
        decode_all(b"5 ;\r\r\nhello\r\n"),
        Err(ChunkedError::InvalidChunkExtension)
    );
    assert_eq!(
        decode_all(b"5 \rx\r\nhello\r\n"),
        Err(ChunkedError::InvalidChunkSize)
    );
}

#[test]
fn a_cr_split_from_its_lf_after_an_extension_still_ends_the_line() {
    let mut decoder = ChunkedDecoder::new(0);
    assert_eq!(decoder.decode(b"5;a=b\r"), Ok((6, ChunkedEvent::NeedMore)));
    assert_eq!(
        decoder.decode(b"\nhello"),
        Ok((6, ChunkedEvent::Data(1..6)))
    );
    let mut decoder = ChunkedDecoder::new(0);
    assert_eq!(decoder.decode(b"0;x\r"), Ok((4, ChunkedEvent::NeedMore)));
    assert_eq!(decoder.decode(b"\n\r\n"), Ok((3, ChunkedEvent::End)));
}

#[test]
fn limits_extension_bytes_per_body() {
    let mut input = b"1;".to_vec();
    input.resize(MAX_EXTENSION_BYTES + 10, b'x');
    assert_eq!(decode_all(&input), Err(ChunkedError::ExtensionsTooLarge));
}

#[test]
fn rejects_data_without_its_crlf() {
    assert_eq!(
        decode_all(b"5\r\nhelloX\r\n0\r\n\r\n"),
        Err(ChunkedError::MissingChunkTerminator)
    );
    assert_eq!(
        decode_all(b"5\r\nhello\rX0\r\n\r\n"),
        Err(ChunkedError::MissingChunkTerminator)
    );
    assert_eq!(
        decode_all(b"5\r\nhello\n0\r\n\r\n"),
        Err(ChunkedError::MissingChunkTerminator)
    );
}

#[test]
fn waits_for_the_final_crlf() {
    let mut decoder = ChunkedDecoder::new(0);
    assert_eq!(
        decoder.decode(b"0\r\n").unwrap(),
        (3, ChunkedEvent::NeedMore)
    );
    assert!(!decoder.is_done());
}

#[test]
fn discards_ordinary_trailers() {
    let input = b"5\r\nhello\r\n0\r\nVary: *\r\nContent-Type: text/plain\r\n\r\n";
    assert_eq!(decode_all(input).unwrap(), b"hello");
}

#[test]
fn rejects_framing_and_routing_trailers() {
    for name in [
        "Content-Length",
        "transfer-encoding",
        "HOST",
        "Trailer",
        "TE",
        "Connection",
        "Upgrade",
    ] {
        let input = format!("0\r\n{name}: 1\r\n\r\n");
        assert_eq!(
            decode_all(input.as_bytes()),
            Err(ChunkedError::ForbiddenTrailer),
            "{name}"
        );
    }
    let long_name = "0\r\nContent-Length-Is-Not-This: 1\r\n\r\n";
    assert!(decode_all(long_name.as_bytes()).is_ok());
}

#[test]
fn rejects_malformed_trailers() {
    for input in [
        &b"0\r\nNo-Colon\r\n\r\n"[..],
        b"0\r\nName : v\r\n\r\n",
        b"0\r\n: v\r\n\r\n",
        b"0\r\nA: b\r\n c\r\n\r\n",
        b"0\r\nA: b\nC: d\r\n\r\n",
        b"0\r\nA: b\x01\r\n\r\n",
        b"0\r\n\rX",
        b"0\r\n\n",
    ] {
        assert_eq!(
            decode_all(input),
            Err(ChunkedError::InvalidTrailer),
            "{input:?}"
        );
    }
}

#[test]
fn limits_the_trailer_section() {
    // "A: 1234\r\n" is 9 bytes; the final CRLF does not count.
    let mut decoder = ChunkedDecoder::new(9);
    assert_eq!(
        decoder.decode(b"0\r\nA: 1234\r\n\r\n"),
        Ok((14, ChunkedEvent::End))
    );
    let mut decoder = ChunkedDecoder::new(9);
    assert_eq!(
        decoder.decode(b"0\r\nA: 12345\r\n\r\n"),
        Err(ChunkedError::TrailersTooLarge)
    );
    assert_eq!(ChunkedError::TrailersTooLarge.status(), 431);
}

#[test]
fn gives_every_error_a_reason() {
    use ChunkedError::*;
    for error in [
        InvalidChunkSize,
        ChunkSizeOverflow,
        InvalidChunkExtension,
        ExtensionsTooLarge,
        MissingChunkTerminator,
        InvalidTrailer,
        ForbiddenTrailer,
        TrailersTooLarge,
    ] {
        assert!(!error.to_string().is_empty());
        assert!(matches!(error.status(), 400 | 431));
    }
}
