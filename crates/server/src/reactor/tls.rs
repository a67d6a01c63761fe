//! TLS in the loop (ADR 0030): what the loop does for a TLS connection before its first head
//! (the handshake itself runs inside the connection's reads, `Connection::on_readable`,
//! where partial heads wait): the handshake flight the socket did not take, written on the
//! writable edge; the plain-text 400 for a plain HTTP request on a TLS port; and the info
//! lines about failed handshakes, at most one a second per worker (a scanner's handshakes
//! must not bury the log), each saying how many were held back.
//!
//! It must not decrypt or encrypt (the session does) nor decide when a connection is served.

use std::io;
use std::time::Instant;

use super::error_response::write_plain_http_on_tls;
use super::Reactor;
use crate::connection::{Connection, Linger};
use crate::tls::conn::HandshakeFailed;

impl Reactor {
    /// Logs one TLS failure at info (`line`, made only when it is logged), unless another
    /// was logged less than a second ago: then it is counted, and the next line says how
    /// many were held back.
    pub(super) fn log_tls_failure(&mut self, line: impl FnOnce() -> String) {
        let Some(held_back) = self.tls_failures.note(Instant::now()) else {
            return;
        };
        let line = line();
        if held_back == 0 {
            crate::log::info(&line);
        } else {
            crate::log::info(&format!(
                "{line} (and {held_back} more TLS failures since the last such line, not logged)"
            ));
        }
    }

    /// A plain HTTP request came to a TLS port: answers it the plain-text 400 that says so,
    /// raw (not through the session: the client speaks no TLS), counted and access-logged as
    /// the loop's other error responses; then the lingering close (the request is unread).
    /// No slot is used, and the worker goes on.
    pub(super) fn answer_plain_http(&mut self, token: usize, mut conn: Box<Connection>) {
        write_plain_http_on_tls(
            &mut conn,
            &self.shared,
            &mut self.ctx.date,
            &mut self.ctx.out,
        );
        let peer = conn.peer;
        self.log_tls_failure(|| {
            format!("a plain HTTP request from {peer} on a TLS port: answered 400")
        });
        self.linger(token, conn, Linger::UntilEof);
    }

    /// A TLS connection's handshake failed (`err` wraps rustls' reason; the alert is
    /// written): logged with the peer and the reason, and closed.
    pub(super) fn handshake_failed(&mut self, token: usize, conn: &Connection, err: io::Error) {
        let peer = conn.peer;
        self.log_tls_failure(|| {
            let reason = err
                .get_ref()
                .and_then(|inner| inner.downcast_ref::<HandshakeFailed>())
                .map_or_else(|| err.to_string(), |failed| failed.0.to_string());
            format!("TLS handshake with {peer} failed: {reason}")
        });
        self.close(token);
    }

    /// A parked connection's socket became writable: the handshake flight (or an alert) its
    /// session holds is written on. A failure closes it.
    pub(super) fn flush_parked_tls(&mut self, token: usize) {
        let failed = match self.entries[token].parked() {
            Some((conn, _)) => match conn.tls() {
                Some(tls) if tls.wants_write() => tls.flush().is_err(),
                _ => false,
            },
            None => false,
        };
        if failed {
            self.close(token);
        }
    }
}
