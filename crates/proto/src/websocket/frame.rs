//! Frames (RFC 6455 5): the server's decoder of client frames and its encoder of its own.
//!
//! The decoder reads from the start of the caller's buffer and says how many bytes it used:
//! a frame header once it is whole; a control frame (at most 125 bytes of payload) once it is
//! all there; a data frame's payload in whatever pieces have arrived, unmasked in place and
//! handed out at once (never gathered: a message may be larger than memory should hold). It
//! enforces every rule a client's frames must follow, and the message size limit, and tells
//! the code to close with when one is broken.

use super::utf8::Utf8Stream;
use super::{is_valid_close_code, WsError};
use crate::websocket::close_code;

/// A frame's opcode (RFC 6455 5.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Opcode {
    /// The next fragment of a message.
    Continuation = 0x0,
    /// A text message (or its first fragment).
    Text = 0x1,
    /// A binary message (or its first fragment).
    Binary = 0x2,
    /// The closing handshake.
    Close = 0x8,
    /// A ping.
    Ping = 0x9,
    /// A pong.
    Pong = 0xa,
}

impl Opcode {
    fn from_u8(value: u8) -> Option<Opcode> {
        Some(match value {
            0x0 => Opcode::Continuation,
            0x1 => Opcode::Text,
            0x2 => Opcode::Binary,
            0x8 => Opcode::Close,
            0x9 => Opcode::Ping,
            0xa => Opcode::Pong,
            _ => return None,
        })
    }

    fn is_control(self) -> bool {
        (self as u8) & 0x8 != 0
    }
}

/// What kind of message data belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MessageKind {
    /// UTF-8 text (checked as it arrives).
    Text,
    /// Bytes.
    Binary,
}

/// What the decoder found.
#[derive(Debug, PartialEq, Eq)]
pub enum Event<'a> {
    /// The next bytes of a message's payload, unmasked; `last` on the message's final piece
    /// (which may be empty).
    Data {
        /// The message's kind (its first fragment's).
        kind: MessageKind,
        /// The bytes.
        payload: &'a [u8],
        /// The message ends with these bytes.
        last: bool,
        /// The message is compressed (permessage-deflate: RSV1 on its first frame); its
        /// bytes are to be inflated, and its text checked after inflation.
        compressed: bool,
    },
    /// A ping with its payload (to be answered by a pong with the same payload).
    Ping(&'a [u8]),
    /// A pong.
    Pong(&'a [u8]),
    /// The client closes: its code (none when its close frame had no payload) and reason.
    Close {
        /// The code it sent.
        code: Option<u16>,
        /// The reason it gave (valid UTF-8).
        reason: &'a str,
    },
}

#[derive(Clone, Copy, Debug)]
enum State {
    /// Between frames.
    Header,
    /// Inside a data frame's payload.
    Payload {
        remaining: u64,
        mask: [u8; 4],
        /// Payload bytes of this frame already unmasked (the mask's phase).
        offset: u64,
        fin: bool,
    },
    /// A rule was broken, or the client's close frame came: nothing more is read.
    Done,
}

/// Decodes one connection's client frames.
#[derive(Debug)]
pub struct Decoder {
    state: State,
    /// The kind of the message whose fragments are arriving, and whether it is compressed
    /// (None between messages).
    message: Option<(MessageKind, bool)>,
    /// permessage-deflate was negotiated: RSV1 may mark a message compressed.
    deflate: bool,
    /// Payload bytes of the current message so far.
    message_len: u64,
    max_message_size: u64,
    utf8: Utf8Stream,
}

/// The longest control frame payload (RFC 6455 5.5).
const MAX_CONTROL: u64 = 125;

/// XORs `data` with `mask`, starting at phase `offset` of the mask.
fn unmask(data: &mut [u8], mask: [u8; 4], offset: u64) {
    let phase = (offset % 4) as usize;
    let rotated = [
        mask[phase],
        mask[(phase + 1) % 4],
        mask[(phase + 2) % 4],
        mask[(phase + 3) % 4],
    ];
    let word = u32::from_ne_bytes(rotated);
    let mut chunks = data.chunks_exact_mut(4);
    for chunk in &mut chunks {
        let value = u32::from_ne_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]) ^ word;
        chunk.copy_from_slice(&value.to_ne_bytes());
    }
    for (byte, key) in chunks.into_remainder().iter_mut().zip(rotated) {
        *byte ^= key;
    }
}

impl Decoder {
    /// A decoder that refuses messages larger than `max_message_size` bytes (1009).
    pub fn new(max_message_size: u64) -> Self {
        Decoder {
            state: State::Header,
            message: None,
            deflate: false,
            message_len: 0,
            max_message_size,
            utf8: Utf8Stream::default(),
        }
    }

    /// A decoder for a connection that negotiated permessage-deflate (RFC 7692): a message's
    /// first frame may have RSV1 set, and that message's bytes are handed out compressed (the
    /// size limit then applies after inflation, [`super::deflate::Inflater`]; its wire size
    /// may exceed the limit only by deflate's worst-case growth).
    pub fn with_deflate(max_message_size: u64) -> Self {
        Decoder {
            deflate: true,
            ..Decoder::new(max_message_size)
        }
    }

    /// Decodes from the start of `buf`: the bytes used, and the event they made (none when
    /// they were only a header, or more bytes are needed: then 0 bytes are used until the
    /// header, or the control frame, is whole). `Err` when the client broke a rule: close
    /// with its code; nothing more is decoded after it, nor after the client's close.
    pub fn decode<'a>(&mut self, buf: &'a mut [u8]) -> Result<(usize, Option<Event<'a>>), WsError> {
        let result = self.step(buf);
        if result.is_err() {
            self.state = State::Done;
        }
        result
    }

    fn step<'a>(&mut self, buf: &'a mut [u8]) -> Result<(usize, Option<Event<'a>>), WsError> {
        match self.state {
            State::Done => Ok((0, None)),
            State::Header => self.header(buf),
            State::Payload {
                remaining,
                mask,
                offset,
                fin,
            } => {
                let take = remaining.min(buf.len() as u64) as usize;
                if take == 0 && remaining > 0 {
                    return Ok((0, None));
                }
                let data = &mut buf[..take];
                unmask(data, mask, offset);
                let (kind, compressed) = self.message.unwrap_or((MessageKind::Binary, false));
                if kind == MessageKind::Text && !compressed && !self.utf8.feed(data) {
                    return Err(WsError {
                        code: close_code::INVALID_PAYLOAD,
                        reason: "a text message is not UTF-8",
                    });
                }
                let remaining = remaining - take as u64;
                let last = fin && remaining == 0;
                self.state = if remaining == 0 {
                    State::Header
                } else {
                    State::Payload {
                        remaining,
                        mask,
                        offset: offset + take as u64,
                        fin,
                    }
                };
                if last {
                    self.end_message()?;
                }
                Ok((
                    take,
                    Some(Event::Data {
                        kind,
                        payload: &buf[..take],
                        last,
                        compressed,
                    }),
                ))
            }
        }
    }

    fn end_message(&mut self) -> Result<(), WsError> {
        let message = self.message.take();
        self.message_len = 0;
        if message == Some((MessageKind::Text, false)) && !self.utf8.finish() {
            return Err(WsError {
                code: close_code::INVALID_PAYLOAD,
                reason: "a text message ends inside a UTF-8 sequence",
            });
        }
        Ok(())
    }

    fn header<'a>(&mut self, buf: &'a mut [u8]) -> Result<(usize, Option<Event<'a>>), WsError> {
        if buf.len() < 2 {
            return Ok((0, None));
        }
        let fin = buf[0] & 0x80 != 0;
        let rsv1 = buf[0] & 0x40 != 0;
        if buf[0] & 0x30 != 0 || (rsv1 && !self.deflate) {
            return Err(WsError::protocol("reserved bits set with no extension"));
        }
        let opcode =
            Opcode::from_u8(buf[0] & 0x0f).ok_or(WsError::protocol("a reserved opcode"))?;
        if rsv1 && !matches!(opcode, Opcode::Text | Opcode::Binary) {
            // RFC 7692 6.1: only a message's first frame says it is compressed.
            return Err(WsError::protocol(
                "RSV1 set on a control or continuation frame",
            ));
        }
        if buf[1] & 0x80 == 0 {
            return Err(WsError::protocol("a client frame is not masked"));
        }
        let (length, mut at) = match buf[1] & 0x7f {
            126 => {
                if buf.len() < 4 {
                    return Ok((0, None));
                }
                (u64::from(u16::from_be_bytes([buf[2], buf[3]])), 4)
            }
            127 => {
                if buf.len() < 10 {
                    return Ok((0, None));
                }
                let mut bytes = [0u8; 8];
                bytes.copy_from_slice(&buf[2..10]);
                let length = u64::from_be_bytes(bytes);
                if length >> 63 != 0 {
                    return Err(WsError::protocol("a payload length with its top bit set"));
                }
                (length, 10)
            }
            short => (u64::from(short), 2),
        };
        if buf.len() < at + 4 {
            return Ok((0, None));
        }
        let mask = [buf[at], buf[at + 1], buf[at + 2], buf[at + 3]];
        at += 4;
        if opcode.is_control() {
            if !fin {
                return Err(WsError::protocol("a fragmented control frame"));
            }
            if length > MAX_CONTROL {
                return Err(WsError::protocol("a control frame longer than 125 bytes"));
            }
            let end = at + length as usize;
            if buf.len() < end {
                return Ok((0, None)); // a control frame is handed out whole
            }
            unmask(&mut buf[at..end], mask, 0);
            let payload = &buf[at..end];
            let event = match opcode {
                Opcode::Ping => Event::Ping(payload),
                Opcode::Pong => Event::Pong(payload),
                _ => {
                    self.state = State::Done;
                    close_event(payload)?
                }
            };
            return Ok((end, Some(event)));
        }
        let (kind, compressed) = match (opcode, self.message) {
            (Opcode::Continuation, Some(message)) => message,
            (Opcode::Continuation, None) => {
                return Err(WsError::protocol(
                    "a continuation frame with no message to continue",
                ))
            }
            (_, Some(_)) => {
                return Err(WsError::protocol(
                    "a new message before the last one's final fragment",
                ))
            }
            (Opcode::Text, None) => (MessageKind::Text, rsv1),
            (_, None) => (MessageKind::Binary, rsv1),
        };
        // Compressed bytes may outgrow what they inflate to by deflate's worst case (5 bytes
        // per 16 KiB block, and the block headers).
        let limit = if compressed {
            self.max_message_size
                .saturating_add(self.max_message_size / 1024 + 64)
        } else {
            self.max_message_size
        };
        if self.message_len.saturating_add(length) > limit {
            return Err(WsError {
                code: close_code::MESSAGE_TOO_BIG,
                reason: "a message larger than ws_max_message_size",
            });
        }
        self.message = Some((kind, compressed));
        self.message_len += length;
        if length == 0 {
            // Nothing to wait for: an empty frame (the end of a message, maybe).
            if fin {
                self.end_message()?;
            }
            return Ok((
                at,
                Some(Event::Data {
                    kind,
                    payload: &buf[at..at],
                    last: fin,
                    compressed,
                }),
            ));
        }
        self.state = State::Payload {
            remaining: length,
            mask,
            offset: 0,
            fin,
        };
        Ok((at, None))
    }
}

/// The event of a client's close frame payload (RFC 6455 5.5.1, 7.4).
fn close_event(payload: &[u8]) -> Result<Event<'_>, WsError> {
    match payload.len() {
        0 => Ok(Event::Close {
            code: None,
            reason: "",
        }),
        1 => Err(WsError::protocol("a close frame with a one-byte payload")),
        _ => {
            let code = u16::from_be_bytes([payload[0], payload[1]]);
            if !is_valid_close_code(code) {
                return Err(WsError::protocol("a close code a peer may not send"));
            }
            let reason = std::str::from_utf8(&payload[2..]).map_err(|_| WsError {
                code: close_code::INVALID_PAYLOAD,
                reason: "a close reason that is not UTF-8",
            })?;
            Ok(Event::Close {
                code: Some(code),
                reason,
            })
        }
    }
}

/// Appends a server frame (never masked, RFC 6455 5.1) with `payload`: `fin` false for a
/// fragment that more follow.
pub fn encode(out: &mut Vec<u8>, opcode: Opcode, payload: &[u8], fin: bool) {
    out.push(if fin { 0x80 } else { 0 } | opcode as u8);
    let length = payload.len();
    if length < 126 {
        out.push(length as u8);
    } else if length <= usize::from(u16::MAX) {
        out.push(126);
        out.extend_from_slice(&(length as u16).to_be_bytes());
    } else {
        out.push(127);
        out.extend_from_slice(&(length as u64).to_be_bytes());
    }
    out.extend_from_slice(payload);
}

/// Appends a close frame with `code` and `reason` (cut to fit the 125 bytes of a control
/// frame, at a character boundary).
pub fn encode_close(out: &mut Vec<u8>, code: u16, reason: &str) {
    let mut cut = reason.len().min(MAX_CONTROL as usize - 2);
    while !reason.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut payload = Vec::with_capacity(2 + cut);
    payload.extend_from_slice(&code.to_be_bytes());
    payload.extend_from_slice(&reason.as_bytes()[..cut]);
    encode(out, Opcode::Close, &payload, true);
}

#[cfg(test)]
mod tests {
    use super::*;

    const MASK: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];

    /// A masked client frame.
    fn client_frame(first: u8, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![first];
        let length = payload.len();
        if length < 126 {
            out.push(0x80 | length as u8);
        } else if length <= 0xffff {
            out.push(0x80 | 126);
            out.extend_from_slice(&(length as u16).to_be_bytes());
        } else {
            out.push(0x80 | 127);
            out.extend_from_slice(&(length as u64).to_be_bytes());
        }
        out.extend_from_slice(&MASK);
        out.extend(payload.iter().enumerate().map(|(i, b)| b ^ MASK[i % 4]));
        out
    }

    /// Owned events, for comparing.
    #[derive(Debug, PartialEq, Eq)]
    enum Seen {
        Data(MessageKind, Vec<u8>, bool),
        Ping(Vec<u8>),
        Pong(Vec<u8>),
        Close(Option<u16>, String),
    }

    /// Feeds `wire` `step` bytes at a time (as reads would bring them), keeping unused bytes
    /// as a connection's buffer does; the events, and the error if one came.
    fn run(decoder: &mut Decoder, wire: &[u8], step: usize) -> (Vec<Seen>, Option<WsError>) {
        let mut buffer: Vec<u8> = Vec::new();
        let mut seen = Vec::new();
        for piece in wire.chunks(step.max(1)) {
            buffer.extend_from_slice(piece);
            loop {
                let (used, event) = match decoder.decode(&mut buffer) {
                    Ok(result) => result,
                    Err(err) => return (seen, Some(err)),
                };
                let made = event.is_some();
                if let Some(event) = event {
                    seen.push(match event {
                        Event::Data {
                            kind,
                            payload,
                            last,
                            ..
                        } => Seen::Data(kind, payload.to_vec(), last),
                        Event::Ping(payload) => Seen::Ping(payload.to_vec()),
                        Event::Pong(payload) => Seen::Pong(payload.to_vec()),
                        Event::Close { code, reason } => Seen::Close(code, reason.to_owned()),
                    });
                }
                buffer.drain(..used);
                if used == 0 && !made {
                    break;
                }
            }
        }
        (seen, None)
    }

    /// The messages `seen` holds, joined from their pieces, and the control events.
    fn messages(seen: &[Seen]) -> Vec<Seen> {
        let mut out = Vec::new();
        let mut current: Option<(MessageKind, Vec<u8>)> = None;
        for event in seen {
            match event {
                Seen::Data(kind, bytes, last) => {
                    let entry = current.get_or_insert_with(|| (*kind, Vec::new()));
                    entry.1.extend_from_slice(bytes);
                    if *last {
                        let (kind, bytes) = current.take().unwrap();
                        out.push(Seen::Data(kind, bytes, true));
                    }
                }
                other => out.push(match other {
                    Seen::Ping(p) => Seen::Ping(p.clone()),
                    Seen::Pong(p) => Seen::Pong(p.clone()),
                    Seen::Close(c, r) => Seen::Close(*c, r.clone()),
                    Seen::Data(..) => unreachable!(),
                }),
            }
        }
        out
    }

    #[test]
    fn messages_arrive_whole_however_the_bytes_are_split() {
        let big = vec![b'x'; 70_000];
        let mut wire = client_frame(0x81, "héllo".as_bytes());
        wire.extend(client_frame(0x02, b"frag")); // binary, first fragment
        wire.extend(client_frame(0x89, b"ping in between")); // a control frame inside
        wire.extend(client_frame(0x00, b"ment"));
        wire.extend(client_frame(0x80, b"")); // an empty final continuation
        wire.extend(client_frame(0x82, &big));
        wire.extend(client_frame(0x8a, b""));
        wire.extend(client_frame(0x88, &[0x03, 0xe8, b'b', b'y', b'e']));
        let expected = vec![
            Seen::Data(MessageKind::Text, "héllo".as_bytes().to_vec(), true),
            Seen::Ping(b"ping in between".to_vec()),
            Seen::Data(MessageKind::Binary, b"fragment".to_vec(), true),
            Seen::Data(MessageKind::Binary, big.clone(), true),
            Seen::Pong(Vec::new()),
            Seen::Close(Some(1000), "bye".to_owned()),
        ];
        for step in [1, 2, 3, 7, 125, 4096, wire.len()] {
            let mut decoder = Decoder::new(1 << 20);
            let (seen, error) = run(&mut decoder, &wire, step);
            assert_eq!(error, None, "step {step}");
            assert_eq!(messages(&seen), expected, "step {step}");
        }
    }

    #[test]
    fn a_data_frame_is_handed_out_as_it_arrives() {
        let mut decoder = Decoder::new(1 << 20);
        let wire = client_frame(0x82, &[9u8; 1000]);
        let (seen, _) = run(&mut decoder, &wire[..500], 100);
        let got: usize = seen
            .iter()
            .map(|event| match event {
                Seen::Data(_, bytes, last) => {
                    assert!(!last);
                    bytes.len()
                }
                other => panic!("{other:?}"),
            })
            .sum();
        assert_eq!(got, 500 - 8); // all but the 8-byte header (2 + 2 length... + 4 mask)
    }

    fn error_of(wire: &[u8], max: u64) -> Option<WsError> {
        run(&mut Decoder::new(max), wire, wire.len()).1
    }

    #[test]
    fn each_broken_rule_closes_with_its_code() {
        let unmasked = [0x81, 0x02, b'h', b'i'];
        let cases: Vec<(Vec<u8>, u16)> = vec![
            (unmasked.to_vec(), 1002),
            (client_frame(0xc1, b"rsv1"), 1002),
            (client_frame(0xa1, b"rsv2"), 1002),
            (client_frame(0x83, b"op 3"), 1002),
            (client_frame(0x8b, b"op 11"), 1002),
            (client_frame(0x09, b"fragmented ping"), 1002),
            (client_frame(0x89, &[0u8; 126]), 1002),
            (client_frame(0x80, b"continuation first"), 1002),
            (
                [client_frame(0x01, b"a"), client_frame(0x81, b"b")].concat(),
                1002,
            ),
            (client_frame(0x88, &[0x03]), 1002),
            (client_frame(0x88, &[0x03, 0xed]), 1002), // 1005
            (client_frame(0x88, &[0x03, 0xee]), 1002), // 1006
            (client_frame(0x88, &[0x03, 0xe7]), 1002), // 999
            (client_frame(0x88, &[0x13, 0x88]), 1002), // 5000
            (client_frame(0x88, &[0x03, 0xe8, 0xff]), 1007),
            (client_frame(0x81, b"\xff"), 1007),
            (
                [client_frame(0x01, b"\xce"), client_frame(0x80, b"")].concat(),
                1007,
            ),
            (client_frame(0x82, &[0u8; 101]), 1009),
            (
                [
                    client_frame(0x02, &[0u8; 60]),
                    client_frame(0x80, &[0u8; 41]),
                ]
                .concat(),
                1009,
            ),
        ];
        for (index, (wire, code)) in cases.iter().enumerate() {
            let error = error_of(wire, 100);
            assert_eq!(
                error.map(|e| e.code),
                Some(*code),
                "case {index}: {error:?}"
            );
        }
        // 64-bit lengths with the top bit set are refused before any payload is awaited.
        let mut huge = vec![0x82, 0x80 | 127];
        huge.extend_from_slice(&(1u64 << 63).to_be_bytes());
        huge.extend_from_slice(&MASK);
        assert_eq!(error_of(&huge, u64::MAX).map(|e| e.code), Some(1002));
        // Valid codes and a text message split inside a code point pass.
        for code in [1000u16, 1001, 1003, 1007, 1011, 1014, 3000, 4999] {
            let mut payload = code.to_be_bytes().to_vec();
            payload.extend_from_slice("ok ✓".as_bytes());
            assert_eq!(error_of(&client_frame(0x88, &payload), 100), None, "{code}");
        }
        let split = [client_frame(0x01, b"\xe2\x9c"), client_frame(0x80, b"\x93")].concat();
        assert_eq!(error_of(&split, 100), None);
    }

    #[test]
    fn an_invalid_text_fragment_fails_before_the_message_ends() {
        let mut decoder = Decoder::new(1 << 20);
        let wire = [
            client_frame(0x01, "κόσμε".as_bytes()),
            client_frame(0x00, b"\xed\xa0\x80"),
        ]
        .concat();
        let (seen, error) = run(&mut decoder, &wire, wire.len());
        assert_eq!(error.map(|e| e.code), Some(1007));
        assert_eq!(seen.len(), 1); // the valid first fragment came out; nothing after
                                   // Nothing is decoded after an error.
        assert_eq!(decoder.decode(&mut client_frame(0x81, b"x")), Ok((0, None)));
    }

    #[test]
    fn with_deflate_rsv1_marks_a_compressed_message_on_its_first_frame_only() {
        // Compressed text is not checked as UTF-8 on the wire (it is after inflation).
        let mut wire = client_frame(0x41, b"\xf2\x48"); // RSV1, text, first fragment
        wire.extend(client_frame(0x80, b"\xcd"));
        let mut decoder = Decoder::with_deflate(100);
        let mut buffer = wire.clone();
        let mut compressed_flags = Vec::new();
        let mut offset = 0;
        while offset < buffer.len() {
            let (used, event) = decoder.decode(&mut buffer[offset..]).unwrap();
            if let Some(Event::Data { compressed, .. }) = event {
                compressed_flags.push(compressed);
            }
            assert!(used > 0);
            offset += used;
        }
        assert_eq!(compressed_flags, [true, true]);
        // Without the extension, or on a continuation or control frame, RSV1 is an error.
        assert_eq!(
            error_of(&client_frame(0xc1, b"x"), 100).map(|e| e.code),
            Some(1002)
        );
        for wire in [
            [client_frame(0x01, b"a"), client_frame(0xc0, b"b")].concat(),
            client_frame(0xc9, b"ping"),
        ] {
            let error = run(&mut Decoder::with_deflate(100), &wire, wire.len()).1;
            assert_eq!(error.map(|e| e.code), Some(1002));
        }
    }

    #[test]
    fn nothing_is_decoded_after_the_client_s_close() {
        let mut decoder = Decoder::new(100);
        let wire = [client_frame(0x88, b""), client_frame(0x81, b"late")].concat();
        let (seen, error) = run(&mut decoder, &wire, wire.len());
        assert_eq!(
            (seen, error),
            (vec![Seen::Close(None, String::new())], None)
        );
    }

    #[test]
    fn server_frames_are_unmasked_with_the_shortest_length() {
        for (length, header) in [
            (0usize, 2usize),
            (125, 2),
            (126, 4),
            (65_535, 4),
            (65_536, 10),
        ] {
            let mut out = Vec::new();
            encode(&mut out, Opcode::Binary, &vec![1u8; length], true);
            assert_eq!(out.len(), header + length);
            assert_eq!(out[0], 0x82);
            assert_eq!(out[1] & 0x80, 0);
        }
        let mut out = Vec::new();
        encode(&mut out, Opcode::Text, b"part", false);
        assert_eq!(&out[..2], &[0x01, 4]);
        let mut out = Vec::new();
        encode_close(&mut out, 1001, &"é".repeat(100));
        assert_eq!(out[0], 0x88);
        assert!(out[1] as usize <= 125);
        assert_eq!(&out[2..4], &1001u16.to_be_bytes());
        assert!(std::str::from_utf8(&out[4..]).is_ok());
    }

    #[test]
    fn unmasking_at_any_phase_matches_byte_by_byte() {
        let data: Vec<u8> = (0..=255).collect();
        for offset in 0..8u64 {
            for len in [0usize, 1, 3, 4, 5, 17, 256] {
                let mut fast = data[..len].to_vec();
                unmask(&mut fast, MASK, offset);
                let slow: Vec<u8> = data[..len]
                    .iter()
                    .enumerate()
                    .map(|(i, b)| b ^ MASK[(offset as usize + i) % 4])
                    .collect();
                assert_eq!(fast, slow, "offset {offset} len {len}");
            }
        }
    }
}
