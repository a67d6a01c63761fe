//! The error responses the server writes without the app: a rejected head (400, 414, 431, 501
//! ...), a timed-out head or body (408) and a refused request (503), through the connection's
//! link (encrypted on a TLS connection); and the plain-text 400 for a plain HTTP request on a
//! TLS port, written raw. Also used by the slots for a rejected pipelined head.
//!
//! It writes one short response and marks the connection closed; it must not decide when a
//! connection is rejected.

use std::net::IpAddr;

use tines_proto::response::encode_error_response_with;
use tines_proto::{DateCache, ParseError};

use crate::access_log::{LoggedRequest, LoggedTls, RequestLine};
use crate::connection::Connection;
use crate::exchange::SlotContext;
use crate::listener::Peer;
use crate::scoreboard::Counted;
use crate::shared::WorkerShared;

/// Writes the error response for a rejected head and marks the connection closed.
pub(crate) fn reject(
    conn: &mut Connection,
    err: &ParseError,
    shared: &WorkerShared,
    ctx: &mut SlotContext,
) {
    crate::log::debug(&format!(
        "rejected request ({}): {}",
        err.status(),
        err.reason()
    ));
    write_error(conn, err.status(), shared, &mut ctx.date, &mut ctx.out);
}

/// Writes the `429` of a request over its client's rate limit (ADR 0038) with the refusal's
/// `Retry-After`, `RateLimit-Policy` and `RateLimit`, and marks the connection closed (its
/// body, if any, unread: the caller lingers). Counted and access-logged as the other
/// responses the server writes itself; never toward `max_requests`.
pub(crate) fn refuse_rate_limited(
    conn: &mut Connection,
    refusal: &crate::rate_limit::Refusal,
    shared: &WorkerShared,
    ctx: &mut SlotContext,
) {
    // Its head was parsed: the access log names the client the limit counted, not its proxy.
    let client = conn.client_ip(&shared.config.trusted_proxies);
    write_error_for(
        conn,
        429,
        &refusal.fields(),
        client,
        shared,
        &mut ctx.date,
        &mut ctx.out,
    );
}

pub(super) fn write_error(
    conn: &mut Connection,
    code: u16,
    shared: &WorkerShared,
    date: &mut DateCache,
    out: &mut Vec<u8>,
) {
    write_error_with(conn, code, &[], shared, date, out)
}

pub(super) fn write_error_with(
    conn: &mut Connection,
    code: u16,
    extra: &[(&[u8], &[u8])],
    shared: &WorkerShared,
    date: &mut DateCache,
    out: &mut Vec<u8>,
) {
    let peer = peer_ip(conn);
    write_error_for(conn, code, extra, peer, shared, date, out)
}

/// The peer's address (`None`: a Unix-socket peer).
fn peer_ip(conn: &Connection) -> Option<IpAddr> {
    match conn.peer {
        Peer::Tcp(addr) => Some(addr.ip()),
        Peer::Unix => None,
    }
}

/// [`write_error_with`], access-logged with `client` as the client's address.
#[allow(clippy::too_many_arguments)] // write_error_with's, and the logged client
fn write_error_for(
    conn: &mut Connection,
    code: u16,
    extra: &[(&[u8], &[u8])],
    client: Option<IpAddr>,
    shared: &WorkerShared,
    date: &mut DateCache,
    out: &mut Vec<u8>,
) {
    out.clear();
    encode_error_response_with(out, code, date.now(), &shared.config.server_header, extra);
    let head_len = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(out.len(), |end| end + 4);
    // RFC 9110 9.3.2: a response to HEAD has no body, even an error response (the head
    // failed to parse, but its first bytes say whether it was a HEAD).
    let mut bytes = &out[..];
    if conn.buffer().starts_with(b"HEAD ") {
        bytes = &out[..head_len];
    }
    let body_sent = (bytes.len() - head_len) as u64;
    count_refused(conn, code, bytes.len() as u64, shared);
    let _ = conn.reject(bytes);
    out.clear();
    log_refused(conn, code, body_sent, client, shared);
}

/// The body of the 400 a plain HTTP request on a TLS port gets (nginx's 497 says as much).
const PLAIN_HTTP_ON_TLS: &[u8] =
    b"This port speaks HTTPS: the plain HTTP request was sent to an HTTPS port.\n";

/// Writes the plain-text 400 for a plain HTTP request on a TLS port (`Connection: close`),
/// raw on the socket, not through the session (the client speaks no TLS; the handshake never
/// began); counted and access-logged as the other error responses.
pub(super) fn write_plain_http_on_tls(
    conn: &mut Connection,
    shared: &WorkerShared,
    date: &mut DateCache,
    out: &mut Vec<u8>,
) {
    out.clear();
    out.extend_from_slice(b"HTTP/1.1 400 Bad Request\r\nDate: ");
    out.extend_from_slice(date.now());
    if !shared.config.server_header.is_empty() {
        out.extend_from_slice(b"\r\nServer: ");
        out.extend_from_slice(&shared.config.server_header);
    }
    out.extend_from_slice(
        b"\r\nConnection: close\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: ",
    );
    out.extend_from_slice(
        itoa::Buffer::new()
            .format(PLAIN_HTTP_ON_TLS.len())
            .as_bytes(),
    );
    out.extend_from_slice(b"\r\n\r\n");
    out.extend_from_slice(PLAIN_HTTP_ON_TLS);
    count_refused(conn, 400, out.len() as u64, shared);
    // Best effort, as `Connection::reject`: a fresh socket takes these 200-odd bytes at once.
    let _ = crate::io::write_all_from(conn.fd(), &[out], 0, std::time::Duration::ZERO);
    out.clear();
    let peer = peer_ip(conn);
    log_refused(conn, 400, PLAIN_HTTP_ON_TLS.len() as u64, peer, shared);
}

/// Counts a response of `sent` bytes the server wrote itself in the worker's counters, before
/// it is written:
/// the method as the request's first token (`OTHER` when it is not a registered one, or
/// none came), the time since its head began, no queue wait.
fn count_refused(conn: &mut Connection, code: u16, sent: u64, shared: &WorkerShared) {
    let received = conn.buffer();
    let method = received
        .split(|&b| b == b' ')
        .next()
        .filter(|token| token.len() < received.len())
        .unwrap_or(b"");
    let duration = conn
        .head_started
        .map_or(0, |started| started.elapsed().as_micros() as u64);
    let counted = Counted::new(method, code, 0);
    let bytes = std::mem::take(&mut conn.received);
    shared.count_server_response(counted, duration, bytes, sent);
}

/// The longest raw request line an access-log line quotes for a refused request.
const LOGGED_LINE: usize = 1024;

/// Access-logs a response the server wrote itself, with the request line as received (its
/// first line, if any came; a refused head is not parsed further) and `client`: the peer's
/// address (headers that would name a forwarded client were not read), or for a `429` the
/// client its rate limit counted.
fn log_refused(
    conn: &Connection,
    code: u16,
    body_sent: u64,
    client: Option<IpAddr>,
    shared: &WorkerShared,
) {
    let Some(log) = &shared.access_log else {
        return;
    };
    let received = conn.buffer();
    let first = &received[..received.len().min(LOGGED_LINE)];
    let line_end = first
        .iter()
        .position(|&b| b == b'\r' || b == b'\n')
        .unwrap_or(first.len());
    let request = LoggedRequest {
        client,
        // A stream's head was synthesized by role A: logged with the client's HTTP/2.0.
        line: if conn.link().is_h2() {
            RequestLine::RawH2(&first[..line_end])
        } else {
            RequestLine::Raw(&first[..line_end])
        },
        status: code,
        body_sent,
        uncompressed: None,
        request_header: &no_headers,
        response_headers: &[],
        duration: log
            .format()
            .shows_duration()
            .then(|| conn.head_started.map(|started| started.elapsed()))
            .flatten(),
        queue: None,
        tls: conn.link().with_tls_info(LoggedTls::of),
    };
    let mut line = Vec::with_capacity(256);
    log.log(&mut line, &request, &mut Default::default());
}

/// A refused head's headers, for the log: not parsed, so none.
fn no_headers<'a>(_name: &[u8]) -> Option<&'a [u8]> {
    None
}
