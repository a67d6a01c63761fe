//! Sans-IO HTTP/1.1 for Tines: bytes in, results out.
//!
//! This crate owns the wire format: parsing request heads (with the framing
//! rules that stop request smuggling), decoding chunked bodies, checking what a
//! WSGI/ASGI app hands back, and encoding response heads. It must not do I/O,
//! spawn threads, touch Python, or allocate on the hot path once its reusable
//! buffers have grown. The server crate drives it from its connection state
//! machine; tests drive it from byte strings. `client` reads response heads
//! for the load generator (`tines bench`); `path` is a target's path as
//! the server's path rules compare it (decoded once, on segment boundaries); `proxy` reads the PROXY protocol header a
//! load balancer sends before the first request (`proxy_protocol`); `websocket` is RFC 6455:
//! the opening handshake, client frames decoded in place, server frames encoded.
//!
//! Where HTTP allows a choice, the strict reading is taken: a request that one
//! parser could read two ways is refused rather than guessed at.

pub mod chunked;
pub mod client;
pub mod date;
pub mod fuzzing;
pub mod path;
pub mod proxy;
pub mod request;
pub mod response;
pub mod status;
mod syntax;
mod target;
pub mod websocket;

pub use chunked::{ChunkedDecoder, ChunkedError, ChunkedEvent};
pub use date::DateCache;
pub use path::{normal_prefix, NormalPath, PathFault};
pub use proxy::{parse_proxy_header, ProxyError, ProxyHeader, ProxyStatus};
pub use request::{
    parse_request_head, BodyFraming, ConnectionOption, HeadStatus, Limits, ParseError, RequestHead,
    Version,
};
/// Whether `bytes` is an RFC 9110 token (a method, a header name): for settings that name them.
pub use syntax::{is_token, same_bytes};

/// A byte range into the connection's read buffer (heads are never copied).
///
/// Offsets are `u32` to keep `RequestHead` small; `parse_request_head` refuses
/// heads that would not fit (they are far over any sane `max_head_size`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Span {
    /// Offset of the first byte.
    pub start: u32,
    /// Offset one past the last byte.
    pub end: u32,
}

impl Span {
    /// The bytes this span covers in `buf`, the buffer it was parsed from.
    ///
    /// Panics if `buf` is shorter than the span, which means a caller mixed up
    /// buffers.
    pub fn of<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        &buf[self.start as usize..self.end as usize]
    }

    /// Number of bytes covered.
    pub fn len(&self) -> usize {
        (self.end - self.start) as usize
    }

    /// Whether the span covers no bytes.
    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }
}

#[cfg(test)]
mod tests {
    use super::Span;

    #[test]
    fn span_slices_the_buffer_it_came_from() {
        let span = Span { start: 4, end: 7 };
        assert_eq!(span.of(b"GET /ab HTTP/1.1"), b"/ab");
        assert_eq!(span.len(), 3);
        assert!(!span.is_empty());
        assert!(Span::default().is_empty());
    }
}
