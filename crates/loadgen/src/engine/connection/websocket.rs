//! The load generator's side of a WebSocket echo load: the handshake's `101`, then one
//! server frame per response. A child of `connection`, whose fields it reads.

use std::time::Instant;

use tines_proto::client::parse_response_head;

use super::{Connection, Framed, MAX_HEAD};

impl Connection {
    /// WebSocket framing: the handshake's 101, then one server frame per response (`None`:
    /// the 101 was read, go on).
    pub(super) fn frame_websocket(&mut self, position: &mut usize, now: Instant) -> Option<Framed> {
        let bytes = &self.read_buffer[*position..self.read_length];
        if self.awaiting_upgrade {
            return match parse_response_head(bytes, false, MAX_HEAD) {
                Ok(None) => Some(Framed::NeedMore),
                Err(error) => Some(Framed::Malformed(error.reason().into())),
                Ok(Some(head)) if head.status == 101 => {
                    *position += head.head_len;
                    self.awaiting_upgrade = false;
                    // The messages queued behind the handshake may go now.
                    match self.write_pending(now, &[]) {
                        Ok(()) => None,
                        Err(error) => Some(Framed::Malformed(format!(
                            "write after the WebSocket handshake: {error}"
                        ))),
                    }
                }
                Ok(Some(head)) => Some(Framed::Malformed(format!(
                    "the WebSocket handshake was answered {}",
                    head.status
                ))),
            };
        }
        if self.ws_remaining > 0 {
            // A large frame's payload is consumed as it arrives (the buffer never holds it).
            let take = self.ws_remaining.min(bytes.len() as u64);
            *position += take as usize;
            self.ws_remaining -= take;
            if self.ws_remaining > 0 {
                return Some(Framed::NeedMore);
            }
            return self.ws_message.then(|| {
                self.status = 200;
                self.keep_alive = true;
                Framed::Response
            });
        }
        if self.in_flight.is_empty() {
            return Some(Framed::Malformed(
                "a WebSocket frame with no message outstanding".into(),
            ));
        }
        if bytes.len() < 2 {
            return Some(Framed::NeedMore);
        }
        if self.first_byte.is_none() {
            self.first_byte = Some(now);
        }
        let opcode = bytes[0] & 0x0f;
        let (length, header) = match bytes[1] & 0x7f {
            126 if bytes.len() >= 4 => (u64::from(u16::from_be_bytes([bytes[2], bytes[3]])), 4),
            127 if bytes.len() >= 10 => {
                let mut raw = [0u8; 8];
                raw.copy_from_slice(&bytes[2..10]);
                (u64::from_be_bytes(raw), 10)
            }
            126 | 127 => return Some(Framed::NeedMore),
            short => (u64::from(short), 2),
        };
        if opcode != 0x8 && bytes.len() < header + length as usize {
            // The payload arrives over several reads: take what is here, count the rest.
            *position += bytes.len();
            self.ws_remaining = header as u64 + length - bytes.len() as u64;
            self.ws_message = opcode != 0x9 && opcode != 0xa;
            return Some(Framed::NeedMore);
        }
        let total = header + length as usize;
        if bytes.len() < total {
            return Some(Framed::NeedMore);
        }
        if opcode == 0x8 {
            let code = (length >= 2).then(|| u16::from_be_bytes([bytes[2], bytes[3]]));
            return Some(Framed::Malformed(format!(
                "the server closed the WebSocket (code {})",
                code.map_or_else(|| "none".to_string(), |code| code.to_string())
            )));
        }
        *position += total;
        if opcode == 0x9 || opcode == 0xa {
            // A ping or pong is no response; the load generator answers no pings (its runs
            // are shorter than any keep-alive interval).
            return None;
        }
        self.status = 200;
        self.keep_alive = true;
        Some(Framed::Response)
    }
}
