//! WebSocket (RFC 6455), sans-IO: the opening handshake read from a parsed request head
//! ([`handshake`]), client frames decoded in place into events ([`frame::Decoder`]), server
//! frames encoded ([`frame::encode`]), and the rules that close a connection with a code
//! ([`WsError`]): masking, control frames, fragmentation, close codes, UTF-8 of text messages
//! (checked as the bytes stream in, across fragments: [`utf8`]), and the largest message;
//! permessage-deflate (RFC 7692, [`deflate`]): the negotiation, and the inflater (the size
//! limit applies to what a message inflates to) and the deflater.
//!
//! Like the rest of the crate it does no I/O and never buffers a data frame's payload: the
//! decoder unmasks the bytes where they lie and hands them out as they arrive.

pub mod deflate;
pub mod frame;
pub mod handshake;
pub mod utf8;

pub use frame::{encode, encode_close, Decoder, Event, MessageKind, Opcode};
pub use handshake::{accept_key, Handshake, HandshakeError};
pub use utf8::Utf8Stream;

/// Close codes the server sends (RFC 6455 7.4.1).
pub mod close_code {
    /// Normal closure.
    pub const NORMAL: u16 = 1000;
    /// The server is going away (a graceful stop).
    pub const GOING_AWAY: u16 = 1001;
    /// A protocol error.
    pub const PROTOCOL_ERROR: u16 = 1002;
    /// A text message that is not UTF-8.
    pub const INVALID_PAYLOAD: u16 = 1007;
    /// A message larger than `ws_max_message_size`.
    pub const MESSAGE_TOO_BIG: u16 = 1009;
    /// The server met an error (the app failed).
    pub const INTERNAL_ERROR: u16 = 1011;
}

/// Why the connection must be closed, and with which code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WsError {
    /// The close code to send.
    pub code: u16,
    /// Why, for the log (and the close frame's reason).
    pub reason: &'static str,
}

impl WsError {
    const fn protocol(reason: &'static str) -> Self {
        WsError {
            code: close_code::PROTOCOL_ERROR,
            reason,
        }
    }
}

impl std::fmt::Display for WsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.reason, self.code)
    }
}

impl std::error::Error for WsError {}

/// Whether a peer may send close code `code` (RFC 6455 7.4: 1004, 1005, 1006 and 1015 are
/// never sent; 1000-2999 are the protocol's, of which these are defined (RFC 6455 and the
/// IANA registry); 3000-4999 belong to libraries and apps).
pub fn is_valid_close_code(code: u16) -> bool {
    matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999)
}
