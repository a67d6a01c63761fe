//! What may come before a connection's first request head, on the connection's side: a PROXY
//! header (`proxy_protocol`), read raw even on a TLS listener, where it precedes the
//! ClientHello; and the TLS handshake, which the transport's reads run (ADR 0030). Split from
//! `connection` for its size; the state machine is the same.

use std::io;

use tines_proto::{parse_proxy_header, ProxyHeader, ProxyStatus};

use super::{Connection, Phase, Protocol, Readiness};
use crate::listener::Peer;
use crate::spool::INITIAL_BUFFER;
use crate::tls::conn::{HandshakeFailed, PlainHttpOnTls, TlsConn};
use crate::transport::Transport;

impl Connection {
    /// Its TLS session, on a TLS transport (for the loop: a handshake flight to flush, the
    /// handshake's state).
    pub(crate) fn tls(&self) -> Option<&TlsConn> {
        match &self.transport {
            Transport::Plain(_) | Transport::H2(_) => None,
            Transport::Tls(conn) => Some(conn),
        }
    }

    /// True while a TLS connection's handshake has not finished.
    pub(crate) fn tls_handshaking(&self) -> bool {
        self.tls().is_some_and(TlsConn::handshaking)
    }

    /// What a failed read means: a TLS transport's own errors (a plain request on a TLS port,
    /// a failed handshake) are answered or logged; any other error closes.
    #[cold]
    pub(super) fn read_failed(err: io::Error) -> Readiness {
        match err.get_ref() {
            Some(inner) if inner.is::<PlainHttpOnTls>() => Readiness::PlainHttpOnTls,
            Some(inner) if inner.is::<HandshakeFailed>() => Readiness::HandshakeFailed(err),
            _ => Readiness::Closed,
        }
    }

    /// `proxy_protocol` on a TLS listener: the PROXY header comes in plaintext before the
    /// ClientHello, so it is read from the socket itself (its first byte starts the header
    /// deadline); the bytes after it, the ClientHello's start, go to the session. `None` once
    /// the header is taken (the connection is in `Phase::Head`: the caller reads on through
    /// the session); what to report otherwise.
    #[cold]
    pub(super) fn read_proxy_header_before_tls(&mut self, tls: &TlsConn) -> Option<Readiness> {
        if self.buf.is_empty() {
            self.buf.resize(INITIAL_BUFFER, 0);
        }
        loop {
            if self.filled == self.buf.len() {
                // The longest PROXY header (v2: 16 + 4096 bytes) fits the initial buffer, and
                // the parser refuses longer ones before it fills.
                return Some(Readiness::Closed);
            }
            let parts = &mut **self;
            match crate::io::read_nonblocking(parts.link.fd(), &mut parts.buf[parts.filled..]) {
                Ok(Some(0)) | Err(_) => return Some(Readiness::Closed),
                Ok(None) => return Some(Readiness::Pending),
                Ok(Some(n)) => {
                    if self.head_started.is_none() {
                        self.head_started = Some(crate::clock::recent());
                    }
                    self.filled += n;
                    self.received += n as u64;
                    match self.take_proxy_header() {
                        Ok(()) => {
                            if let Err(err) = tls.feed(&self.buf[..self.filled]) {
                                // A plain request after the header (kept in the buffer, for
                                // the log line of its 400), or a failed handshake.
                                return Some(Self::read_failed(err));
                            }
                            // Not HTTP bytes: the session counts what it decrypts.
                            self.received -= self.filled as u64;
                            self.filled = 0;
                            self.maybe_more = true;
                            return None;
                        }
                        Err(Readiness::Pending) => {}
                        Err(other) => return Some(other),
                    }
                }
            }
        }
    }

    /// Parses the PROXY header at the front of the buffer; once it is complete, takes it off
    /// (the request head then starts at 0), makes its source address the peer, and moves to
    /// `Phase::Head`. `Err` carries what to report: `Pending` while the header is incomplete,
    /// `BadProxyHeader` when it is invalid.
    pub(super) fn take_proxy_header(&mut self) -> Result<(), Readiness> {
        match parse_proxy_header(&self.buf[..self.filled]) {
            Ok(ProxyStatus::Partial) => Err(Readiness::Pending),
            Err(err) => Err(Readiness::BadProxyHeader(err)),
            Ok(ProxyStatus::Complete { consumed, header }) => {
                if let ProxyHeader::Proxied { source, .. } = header {
                    self.peer = Peer::Tcp(source);
                }
                // LOCAL (a health check) and UNKNOWN keep the real peer, as the spec asks.
                let filled = self.filled;
                self.buf.copy_within(consumed..filled, 0);
                self.filled -= consumed;
                self.protocol = Protocol::Http1(self.after_proxy_header());
                Ok(())
            }
        }
    }

    /// True while the PROXY header has not been read (the connection has sent no HTTP yet).
    pub fn awaits_proxy_header(&self) -> bool {
        self.protocol == Protocol::Http1(Phase::ProxyHeader)
    }
}
