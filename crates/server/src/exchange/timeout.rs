//! A request the master judged timed out (`request_timeout`, docs/signals.md "A stuck
//! request"): paying what its client is owed, once, by whoever comes first: the worker's loop
//! thread, woken by the dump signal while the stuck app thread still holds the connection, or
//! the stuck thread itself if it returns before the loop got to it.
//!
//! What is owed was settled when the master marked the request (one CAS on the app thread's
//! sub-slot, [`ThreadSlot::mark_timed_out`], against the app thread's claim of its response,
//! [`ThreadSlot::claim_response`]): a 503 with `Connection: close` when no byte of the
//! response was written, else only the shutdown of the connection. Paying takes the debt with
//! a second CAS ([`ThreadSlot::take_owed`]) under the connection's output lock, while the
//! connection is not closed: the connection closes its output under that lock before its fd
//! closes, so the bytes never reach a reused fd. The 503 goes through the connection's
//! [`crate::transport::Link`] (the TLS transport will encrypt it there), then both directions
//! are shut down: the client sees the 503 and EOF, the stuck thread's later reads and writes
//! fail, and the fd stays the connection's until its holder closes it.
//!
//! The 503 is counted as a response the server wrote and access-logged here, once; the stuck
//! request's own exchange counts and logs nothing ([`super::Exchange::complete`]).

use std::io;
use std::sync::Arc;
use std::time::Duration;

use super::Exchange;
use crate::access_log::{LoggedRequest, LoggedTls, RequestLine};
use crate::dump_signal::TIMEOUT_RESPONSE;
use crate::pending::Output;
use crate::scoreboard::{monotonic_ns, Counted, Owed, ThreadSlot};
use crate::shared::WorkerShared;

impl Exchange {
    /// Claims the response before its first byte goes to the socket or the poller (one load
    /// and one CAS on this thread's own sub-slot line, once per request): an error when the
    /// master judged the request timed out first. The exchange is then `timed_out`: nothing of
    /// its response is written, and the connection closes.
    pub(crate) fn claim_response(&mut self) -> io::Result<()> {
        if self.response_claimed {
            return Ok(());
        }
        let claimed = self
            .shared
            .thread_slot(self.ctx.thread)
            .is_none_or(|thread| thread.claim_response());
        if claimed {
            self.response_claimed = true;
            return Ok(());
        }
        self.timed_out = true;
        self.keep_alive = false;
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "request_timeout: the request was answered 503",
        ))
    }

    /// True once the exchange found its request judged timed out by the master (its first
    /// response write failed for it): the app's late result is dropped, and the error that
    /// write raised is no app error.
    pub fn timed_out(&self) -> bool {
        self.timed_out
    }

    /// A stuck request that returned after the master judged it timed out: pays what its
    /// client is owed if the loop has not yet ([`pay_owed`]).
    pub(super) fn pay_if_owed(&mut self) {
        let Some(thread) = self.shared.thread_slot(self.ctx.thread) else {
            return;
        };
        if let Some((request, owed)) = thread.owed_by_owner() {
            let output = Arc::clone(self.parts.output());
            pay_owed(&output, thread, request, owed, &self.shared);
        }
    }
}

/// Pays what is owed for request number `request` of `thread` on the connection whose output
/// is `output`: `true` when this caller paid it (nothing was paid before, and the connection
/// is still open).
pub(crate) fn pay_owed(
    output: &Output,
    thread: &ThreadSlot,
    request: u64,
    owed: Owed,
    shared: &WorkerShared,
) -> bool {
    let paid = output.with_open_link(|link| {
        if !thread.take_owed(request, owed) {
            return None;
        }
        let mut written = 0;
        if owed == Owed::Response {
            // A connection whose response never began has an empty socket buffer: it takes
            // these 100-odd bytes at once (a would-block leaves them unsent: the client then
            // sees EOF, as it would have after a kill).
            while written < TIMEOUT_RESPONSE.len() {
                match link.write_vectored(&[TIMEOUT_RESPONSE], written) {
                    Ok(Some(n)) if n > 0 => written += n,
                    _ => break,
                }
            }
        }
        // Asked before the shutdown, which disconnects the socket.
        let peer = crate::listener::peer_address(link.fd());
        let tls = link.with_tls_info(LoggedTls::of);
        link.shutdown();
        Some((written, peer, tls))
    });
    let Some(Some((written, peer, tls))) = paid else {
        return false;
    };
    if owed == Owed::Response {
        account(
            thread,
            written as u64,
            peer.map(|addr| addr.ip()),
            tls,
            shared,
        );
    }
    true
}

/// Counts and access-logs the 503 written for the request `thread` serves, from what its
/// sub-slot keeps (method and target, cut to their scoreboard lengths; no protocol version,
/// no headers: the request's head is with the stuck thread) and the connection's TLS names.
fn account(
    thread: &ThreadSlot,
    sent: u64,
    client: Option<std::net::IpAddr>,
    tls: Option<LoggedTls>,
    shared: &WorkerShared,
) {
    let reading = thread.read();
    let elapsed = Duration::from_nanos(monotonic_ns().saturating_sub(reading.dispatch_ns));
    let counted = Counted::new(&reading.method, 503, 0);
    shared.count_server_response(counted, elapsed.as_micros() as u64, 0, sent);
    let Some(log) = &shared.access_log else {
        return;
    };
    let mut request_line = reading.method;
    request_line.push(b' ');
    request_line.extend_from_slice(&reading.target);
    let head_len = TIMEOUT_RESPONSE
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(TIMEOUT_RESPONSE.len(), |end| end + 4);
    let request = LoggedRequest {
        client,
        line: RequestLine::Raw(&request_line),
        status: 503,
        body_sent: sent.saturating_sub(head_len as u64),
        uncompressed: None,
        request_header: &no_headers,
        response_headers: &[],
        duration: log.format().shows_duration().then_some(elapsed),
        queue: None,
        tls,
    };
    let mut line = Vec::with_capacity(256);
    log.log(&mut line, &request, &mut Default::default());
}

/// The stuck request's headers, for the log: held by its thread, so none.
fn no_headers<'a>(_name: &[u8]) -> Option<&'a [u8]> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::WorkerConfig;
    use crate::listener::Local;
    use crate::scoreboard::Scoreboard;
    use crate::transport::Link;
    use std::io::Read;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;
    use std::sync::Arc;

    fn worker() -> WorkerShared {
        let scoreboard = Arc::new(Scoreboard::new(1, 2).unwrap());
        WorkerShared::new(
            WorkerConfig::default(),
            vec![Local::Unix(String::new())],
            None,
            scoreboard,
            0,
            u64::MAX,
            None,
        )
    }

    #[test]
    fn the_503_is_paid_once_then_the_connection_is_shut_both_ways() {
        let shared = worker();
        let (mut client, server) = UnixStream::pair().unwrap();
        server.set_nonblocking(true).unwrap();
        let output = Output::new(Link::Plain(server.as_raw_fd()));
        let thread = shared.thread_slot(0).unwrap();
        thread.begin_request(b"GET", b"/stuck", server.as_raw_fd());
        thread.mark_timed_out(1);
        assert!(!thread.claim_response(), "the app thread lost the claim");
        assert!(pay_owed(&output, thread, 1, Owed::Response, &shared));
        assert!(
            !pay_owed(&output, thread, 1, Owed::Response, &shared),
            "paid once, by whoever came first"
        );
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).unwrap();
        assert_eq!(answer, TIMEOUT_RESPONSE);
        // The stuck thread's own reads see EOF from now on.
        let mut byte = [0u8; 1];
        assert_eq!(
            Link::Plain(server.as_raw_fd()).read(&mut byte).unwrap(),
            Some(0)
        );
        let totals = shared.scoreboard().totals();
        assert_eq!(totals.bytes_out, TIMEOUT_RESPONSE.len() as u64);
    }

    #[test]
    fn over_tls_the_503_is_sealed_then_close_notify_then_the_shutdown() {
        use crate::tls::conn::tests::connected;
        let shared = worker();
        let (conn, mut client) = connected();
        let link = Link::Tls(crate::transport::TlsLink::new(&conn));
        let output = Output::new(link);
        let thread = shared.thread_slot(0).unwrap();
        thread.begin_request(b"GET", b"/stuck", conn.fd());
        thread.mark_timed_out(1);
        assert!(!thread.claim_response());
        assert!(pay_owed(&output, thread, 1, Owed::Response, &shared));
        while client.pull() {}
        assert_eq!(client.got, TIMEOUT_RESPONSE, "decrypted whole");
        assert!(client.closed, "a clean end: close_notify after it");
        // The stuck thread's own reads and writes fail or end from now on.
        let mut byte = [0u8; 1];
        assert!(!matches!(link.read(&mut byte), Ok(Some(n)) if n > 0));
        assert!(link.write_vectored(&[b"late"], 0).is_err());
    }

    #[test]
    fn a_closed_connection_is_never_written_and_its_debt_stays() {
        let shared = worker();
        let (mut client, server) = UnixStream::pair().unwrap();
        let output = Output::new(Link::Plain(server.as_raw_fd()));
        let thread = shared.thread_slot(1).unwrap();
        thread.begin_request(b"GET", b"/stuck", server.as_raw_fd());
        thread.mark_timed_out(1);
        output.close();
        assert!(!pay_owed(&output, thread, 1, Owed::Response, &shared));
        assert_eq!(thread.owed(), Some((1, Owed::Response)));
        drop(server);
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).unwrap();
        assert!(answer.is_empty());
    }

    #[test]
    fn a_response_under_way_is_only_cut_short() {
        let shared = worker();
        let (mut client, server) = UnixStream::pair().unwrap();
        let output = Output::new(Link::Plain(server.as_raw_fd()));
        let thread = shared.thread_slot(0).unwrap();
        thread.begin_request(b"GET", b"/stream", server.as_raw_fd());
        assert!(thread.claim_response());
        thread.mark_timed_out(1);
        assert!(pay_owed(&output, thread, 1, Owed::Shutdown, &shared));
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).unwrap();
        assert!(answer.is_empty(), "nothing written, only EOF");
        assert_eq!(shared.scoreboard().totals().bytes_out, 0);
    }
}
