//! The error responses the server writes without the app: a rejected head (400, 414, 431, 501
//! ...), a timed-out head or body (408) and a refused request (503). Also used by the slots
//! for a rejected pipelined head.
//!
//! It writes one short response and marks the connection closed; it must not decide when a
//! connection is rejected.

use tines_proto::response::encode_error_response_with;
use tines_proto::{DateCache, ParseError};

use crate::config::WorkerConfig;
use crate::connection::Connection;
use crate::exchange::SlotContext;

/// Writes the error response for a rejected head and marks the connection closed.
pub(crate) fn reject(
    conn: &mut Connection,
    err: &ParseError,
    config: &WorkerConfig,
    ctx: &mut SlotContext,
) {
    crate::log::debug(&format!(
        "rejected request ({}): {}",
        err.status(),
        err.reason()
    ));
    write_error(conn, err.status(), config, &mut ctx.date, &mut ctx.out);
}

pub(super) fn write_error(
    conn: &mut Connection,
    code: u16,
    config: &WorkerConfig,
    date: &mut DateCache,
    out: &mut Vec<u8>,
) {
    write_error_with(conn, code, &[], config, date, out)
}

pub(super) fn write_error_with(
    conn: &mut Connection,
    code: u16,
    extra: &[(&[u8], &[u8])],
    config: &WorkerConfig,
    date: &mut DateCache,
    out: &mut Vec<u8>,
) {
    out.clear();
    encode_error_response_with(out, code, date.now(), &config.server_header, extra);
    // RFC 9110 9.3.2: a response to HEAD has no body, even an error response (the head
    // failed to parse, but its first bytes say whether it was a HEAD).
    let mut bytes = &out[..];
    if conn.buffer().starts_with(b"HEAD ") {
        if let Some(end) = out.windows(4).position(|w| w == b"\r\n\r\n") {
            bytes = &out[..end + 4];
        }
    }
    let _ = conn.reject(bytes);
    out.clear();
}
