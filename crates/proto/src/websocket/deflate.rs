//! permessage-deflate (RFC 7692): the negotiation of an offer, and a connection's inflater
//! and deflater. Deflate itself is zlib's (the flate2 crate over zlib-rs, which honours a
//! window smaller than 32 KiB).
//!
//! Memory: without context takeover, a message's inflate or deflate state exists only while
//! that message is being read or written, so an idle connection holds none; with it, the state
//! stays (about 32 KiB a direction at 15 window bits, 1 KiB at 8... plus zlib's own tables).

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

use super::{close_code, WsError};

/// The bytes a sender strips from the end of each compressed message, and a receiver adds
/// back (RFC 7692 7.2.1): an empty stored block's tail.
const TAIL: [u8; 4] = [0x00, 0x00, 0xff, 0xff];

/// What the server agreed to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Agreement {
    /// The server starts each message afresh (it keeps no compression state between them).
    pub server_no_context_takeover: bool,
    /// The client starts each message afresh: the server keeps no inflate state between them.
    pub client_no_context_takeover: bool,
    /// The window the server compresses with (8 to 15 bits).
    pub server_window_bits: u8,
}

impl Agreement {
    /// The `Sec-WebSocket-Extensions` value of the server's 101.
    pub fn response_header(&self, offered_server_bits: bool) -> String {
        let mut value = String::from("permessage-deflate");
        if self.server_no_context_takeover {
            value.push_str("; server_no_context_takeover");
        }
        if self.client_no_context_takeover {
            value.push_str("; client_no_context_takeover");
        }
        if offered_server_bits {
            value.push_str(&format!(
                "; server_max_window_bits={}",
                self.server_window_bits
            ));
        }
        value
    }
}

/// One offer's parameters, if it is a valid permessage-deflate offer.
#[derive(Debug, Default, PartialEq, Eq)]
struct Offer {
    server_no_context_takeover: bool,
    client_no_context_takeover: bool,
    server_max_window_bits: Option<u8>,
}

fn window_bits(value: Option<&[u8]>) -> Option<u8> {
    let text = std::str::from_utf8(value?).ok()?.trim_matches('"');
    match text.parse::<u8>() {
        Ok(bits @ 8..=15) if !text.starts_with('0') => Some(bits),
        _ => None,
    }
}

/// Parses one offer (`permessage-deflate; param; param=value`): None when it is another
/// extension, or a permessage-deflate offer with an unknown, repeated or invalid parameter
/// (RFC 7692 5.1: declined).
fn parse_offer(offer: &[u8]) -> Option<Offer> {
    let mut parts = offer.split(|&b| b == b';').map(<[u8]>::trim_ascii);
    if !parts.next()?.eq_ignore_ascii_case(b"permessage-deflate") {
        return None;
    }
    let mut found = Offer::default();
    let mut seen: Vec<&[u8]> = Vec::new();
    for param in parts {
        let mut split = param.splitn(2, |&b| b == b'=');
        let name = split.next()?.trim_ascii();
        let value = split.next().map(<[u8]>::trim_ascii);
        if seen
            .iter()
            .any(|earlier| earlier.eq_ignore_ascii_case(name))
        {
            return None;
        }
        seen.push(name);
        match name.to_ascii_lowercase().as_slice() {
            b"server_no_context_takeover" if value.is_none() => {
                found.server_no_context_takeover = true
            }
            b"client_no_context_takeover" if value.is_none() => {
                found.client_no_context_takeover = true
            }
            b"server_max_window_bits" => found.server_max_window_bits = Some(window_bits(value)?),
            // The client may limit its own window; inflating with 15 bits reads any window.
            b"client_max_window_bits" => {
                if value.is_some() {
                    window_bits(value)?;
                }
            }
            _ => return None,
        }
    }
    Some(found)
}

/// Accepts the first acceptable permessage-deflate offer among the client's
/// `Sec-WebSocket-Extensions` lines `offers`: the agreement, and whether the offer named
/// `server_max_window_bits` (the response names it only then). `max_window_bits` is the
/// server's setting (`ws_server_max_window_bits`, 8 to 15), `no_context_takeover` makes the
/// server keep no compression state between messages whatever the offer says.
pub fn negotiate(
    offers: &[&[u8]],
    max_window_bits: u8,
    no_context_takeover: bool,
) -> Option<(Agreement, bool)> {
    let max_window_bits = max_window_bits.clamp(8, 15);
    offers
        .iter()
        .flat_map(|line| line.split(|&b| b == b','))
        .find_map(parse_offer)
        .map(|offer| {
            let agreement = Agreement {
                server_no_context_takeover: offer.server_no_context_takeover || no_context_takeover,
                client_no_context_takeover: offer.client_no_context_takeover,
                server_window_bits: offer
                    .server_max_window_bits
                    .unwrap_or(15)
                    .min(max_window_bits),
            };
            (agreement, offer.server_max_window_bits.is_some())
        })
}

/// Inflates a connection's compressed messages.
pub struct Inflater {
    state: Option<Decompress>,
    keep: bool,
}

impl Inflater {
    /// For a connection with `agreement`.
    pub fn new(agreement: &Agreement) -> Self {
        Inflater {
            state: None,
            keep: !agreement.client_no_context_takeover,
        }
    }

    /// Inflates the next piece of a compressed message into `out`; `last` for the message's
    /// final piece. Fails with 1009 as soon as the message inflates past `limit` bytes (a
    /// deflate bomb is stopped there, not after), with 1007 for bytes that are not deflate.
    pub fn inflate(
        &mut self,
        piece: &[u8],
        last: bool,
        out: &mut Vec<u8>,
        limit: u64,
    ) -> Result<(), WsError> {
        let state = self
            .state
            .get_or_insert_with(|| Decompress::new_with_window_bits(false, 15));
        let start = out.len();
        let too_big = WsError {
            code: close_code::MESSAGE_TOO_BIG,
            reason: "a message that inflates past ws_max_message_size",
        };
        for input in [piece, if last { &TAIL[..] } else { &[][..] }] {
            let mut input = input;
            while !input.is_empty() {
                if out.len() == out.capacity() {
                    // At most 64 KiB more per call, so a bomb is stopped near the limit.
                    out.reserve_exact((input.len() * 4).clamp(256, 64 * 1024));
                }
                let before_in = state.total_in();
                let before_out = state.total_out();
                let status = state
                    .decompress_vec(input, out, FlushDecompress::Sync)
                    .map_err(|_| WsError {
                        code: close_code::INVALID_PAYLOAD,
                        reason: "a compressed message that is not deflate",
                    })?;
                let used = (state.total_in() - before_in) as usize;
                input = &input[used..];
                if (out.len() - start) as u64 > limit {
                    return Err(too_big);
                }
                let stuck = used == 0 && state.total_out() == before_out;
                if status == Status::StreamEnd || (stuck && out.len() < out.capacity()) {
                    break;
                }
            }
        }
        if last && !self.keep {
            self.state = None;
        }
        Ok(())
    }
}

/// Compresses a connection's messages.
pub struct Deflater {
    state: Option<Compress>,
    keep: bool,
    window_bits: u8,
}

impl Deflater {
    /// For a connection with `agreement`.
    pub fn new(agreement: &Agreement) -> Self {
        Deflater {
            state: None,
            keep: !agreement.server_no_context_takeover,
            window_bits: agreement.server_window_bits,
        }
    }

    /// Appends `message` compressed to `out` (the payload of a frame with RSV1 set).
    pub fn deflate(&mut self, message: &[u8], out: &mut Vec<u8>) {
        let bits = self.window_bits.max(9); // zlib treats 8 as 9 for raw deflate
        let state = self.state.get_or_insert_with(|| {
            Compress::new_with_window_bits(Compression::fast(), false, bits)
        });
        let start = out.len();
        let mut input = message;
        loop {
            if out.capacity() - out.len() < 64 {
                out.reserve(message.len() / 2 + 64);
            }
            let before = state.total_in();
            state
                .compress_vec(input, out, FlushCompress::Sync)
                .expect("deflating into a growing buffer cannot fail");
            input = &input[(state.total_in() - before) as usize..];
            // Done when everything went in and the flush had room to finish.
            if input.is_empty() && out.len() < out.capacity() {
                break;
            }
        }
        if out[start..].ends_with(&TAIL) {
            out.truncate(out.len() - TAIL.len());
        }
        if out.len() == start {
            // Nothing new since the last flush (an empty message with context takeover):
            // zlib writes nothing, but the message must be an empty stored block, which is
            // 0x00 once its tail is taken off (RFC 7692 7.2.3.6).
            out.push(0x00);
        }
        if !self.keep {
            self.state = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agree(line: &str) -> Option<(Agreement, bool)> {
        negotiate(&[line.as_bytes()], 15, false)
    }

    #[test]
    fn the_first_valid_offer_is_taken_and_invalid_ones_declined() {
        let (agreement, named) = agree("permessage-deflate; client_max_window_bits").unwrap();
        assert_eq!(
            agreement,
            Agreement {
                server_no_context_takeover: false,
                client_no_context_takeover: false,
                server_window_bits: 15
            }
        );
        assert!(!named);
        assert_eq!(agreement.response_header(named), "permessage-deflate");
        // A bad first offer is declined; the next one is taken.
        let (agreement, named) = agree(
            "permessage-deflate; server_max_window_bits=7, permessage-deflate; \
             server_max_window_bits=10; client_no_context_takeover",
        )
        .unwrap();
        assert_eq!(agreement.server_window_bits, 10);
        assert!(agreement.client_no_context_takeover && named);
        assert_eq!(
            agreement.response_header(named),
            "permessage-deflate; client_no_context_takeover; server_max_window_bits=10"
        );
        for declined in [
            "x-webkit-deflate-frame",
            "permessage-deflate; unknown",
            "permessage-deflate; server_no_context_takeover; server_no_context_takeover",
            "permessage-deflate; server_max_window_bits=16",
            "permessage-deflate; server_max_window_bits",
            "permessage-deflate; server_max_window_bits=010",
            "permessage-deflate; server_no_context_takeover=1",
        ] {
            assert_eq!(agree(declined), None, "{declined}");
        }
        // The server's own limits win.
        let (agreement, _) = negotiate(&[b"permessage-deflate".as_slice()], 9, true).unwrap();
        assert_eq!(agreement.server_window_bits, 9);
        assert!(agreement.server_no_context_takeover);
    }

    fn round_trip(agreement: &Agreement, messages: &[Vec<u8>]) {
        let mut deflater = Deflater::new(agreement);
        let mut inflater = Inflater::new(agreement);
        for message in messages {
            let mut wire = Vec::new();
            deflater.deflate(message, &mut wire);
            assert!(!wire.ends_with(&TAIL));
            // Inflated in pieces, as frames and reads would bring it.
            let mut out = Vec::new();
            let pieces: Vec<&[u8]> = wire.chunks(7).collect();
            for (index, piece) in pieces.iter().enumerate() {
                inflater
                    .inflate(piece, index + 1 == pieces.len(), &mut out, u64::MAX)
                    .unwrap();
            }
            if pieces.is_empty() {
                inflater.inflate(&[], true, &mut out, u64::MAX).unwrap();
            }
            assert_eq!(&out, message);
        }
    }

    #[test]
    fn messages_round_trip_with_and_without_context_takeover() {
        let messages: Vec<Vec<u8>> = vec![
            b"Hello, hello, hello, hello!".to_vec(),
            b"Hello, hello, hello, hello!".to_vec(),
            Vec::new(),
            (0..200_000u32)
                .flat_map(|n| (n % 251).to_le_bytes())
                .collect(),
            vec![b'a'; 100_000],
        ];
        // The deflater stands for the client here: its context takeover is the inflater's.
        for fresh in [false, true] {
            for bits in [9u8, 12, 15] {
                let agreement = Agreement {
                    server_no_context_takeover: fresh,
                    client_no_context_takeover: fresh,
                    server_window_bits: bits,
                };
                round_trip(&agreement, &messages);
            }
        }
    }

    #[test]
    fn context_takeover_shrinks_a_repeated_message() {
        let agreement = Agreement {
            server_no_context_takeover: false,
            client_no_context_takeover: false,
            server_window_bits: 15,
        };
        let message = b"the same sentence, sent twice over one connection".to_vec();
        let mut deflater = Deflater::new(&agreement);
        let (mut first, mut second) = (Vec::new(), Vec::new());
        deflater.deflate(&message, &mut first);
        deflater.deflate(&message, &mut second);
        assert!(
            second.len() < first.len() / 2,
            "{} vs {}",
            second.len(),
            first.len()
        );
    }

    #[test]
    fn a_deflate_bomb_stops_at_the_limit_and_garbage_is_refused() {
        let agreement = Agreement {
            server_no_context_takeover: true,
            client_no_context_takeover: true,
            server_window_bits: 15,
        };
        let mut wire = Vec::new();
        Deflater::new(&agreement).deflate(&vec![0u8; 50 << 20], &mut wire);
        assert!(wire.len() < 1 << 20); // a 50x bomb at least
        let mut out = Vec::new();
        let error = Inflater::new(&agreement)
            .inflate(&wire, true, &mut out, 1 << 20)
            .unwrap_err();
        assert_eq!(error.code, 1009);
        assert!(
            out.len() < 2 << 20,
            "inflated {} bytes before stopping",
            out.len()
        );
        let error = Inflater::new(&agreement)
            .inflate(
                b"\xff\xff\xff\xff not deflate",
                true,
                &mut Vec::new(),
                1 << 20,
            )
            .unwrap_err();
        assert_eq!(error.code, 1007);
    }
}
