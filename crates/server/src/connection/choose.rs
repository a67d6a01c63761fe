//! Choosing HTTP/2 or HTTP/1.1 for a new connection (ADR 0035, BRIEF decision 6), on the
//! connection's side: a cleartext listener's `h2c` mode (`Only`: HTTP/2 from the first byte;
//! `Both`: the first bytes compared with the connection preface as they arrive), or, on a TLS
//! listener with `http2` on, what ALPN chose once the handshake is done. A PROXY header, when
//! on, comes first (`Phase::ProxyHeader`, then `Phase::Preface`). Split from `connection` for
//! its size; the state machine is the same.
//!
//! It must not build the HTTP/2 connection (the loop does, from [`Connection::into_h2`]) nor
//! parse a byte of HTTP/2 beyond the preface's comparison.

use super::{Connection, Lent, Phase, Protocol, Readiness};
use crate::h2::PREFACE;
use crate::spool::INITIAL_BUFFER;
use crate::transport::{Link, Transport};

/// How a new connection's protocol is chosen, set once at accept.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Http2Choice {
    /// HTTP/1.1 only: nothing to choose.
    #[default]
    No,
    /// `h2c:` listener: HTTP/2 with prior knowledge from the first byte (a bad preface is the
    /// HTTP/2 connection's to refuse: GOAWAY PROTOCOL_ERROR).
    H2cOnly,
    /// `http1+h2c:` listener: HTTP/2 when the first bytes are the preface, else HTTP/1.1.
    H2cBoth,
    /// TLS listener with `http2` on: HTTP/2 when ALPN chose `h2`.
    Alpn,
}

/// What the first bytes say so far.
#[derive(Debug, PartialEq, Eq)]
enum Preface {
    /// A prefix of the preface: wait for more.
    Partial,
    /// The whole preface.
    Whole,
    /// Anything else: HTTP/1.1.
    Other,
}

fn compare(bytes: &[u8]) -> Preface {
    let n = bytes.len().min(PREFACE.len());
    if bytes[..n] != PREFACE[..n] {
        Preface::Other
    } else if n == PREFACE.len() {
        Preface::Whole
    } else {
        Preface::Partial
    }
}

impl Connection {
    /// Has the connection choose its protocol before its first request as `choice` says (a
    /// new connection, before its first read).
    pub(crate) fn choose_protocol(&mut self, choice: Http2Choice) {
        self.choice = choice;
        if choice != Http2Choice::No && self.protocol == Protocol::Http1(Phase::Head) {
            self.protocol = Protocol::Http1(Phase::Preface);
        }
    }

    /// The phase that follows the PROXY header.
    pub(super) fn after_proxy_header(&self) -> Phase {
        match self.choice {
            Http2Choice::No => Phase::Head,
            _ => Phase::Preface,
        }
    }

    /// `Phase::Preface`: reads what the first bytes (or the handshake) say; `None` once the
    /// connection is HTTP/1.1 (`Phase::Head`: the caller parses what was read and reads on),
    /// else what to report (`Readiness::Http2` once it is HTTP/2, its bytes so far buffered).
    #[cold]
    pub(super) fn choose(&mut self) -> Option<Readiness> {
        loop {
            match self.choice {
                Http2Choice::H2cOnly => return Some(Readiness::Http2),
                Http2Choice::H2cBoth => match compare(&self.buf[..self.filled]) {
                    Preface::Whole => return Some(Readiness::Http2),
                    Preface::Other => return self.http1(),
                    Preface::Partial => {}
                },
                Http2Choice::Alpn if !self.tls_handshaking() => {
                    let h2 = self.link.with_tls_info(|info| {
                        info.and_then(|info| info.alpn.as_deref()) == Some(&b"h2"[..])
                    });
                    return if h2 {
                        Some(Readiness::Http2)
                    } else {
                        self.http1()
                    };
                }
                Http2Choice::Alpn => {}
                Http2Choice::No => return self.http1(),
            }
            if self.buf.is_empty() {
                self.buf.resize(INITIAL_BUFFER, 0);
            }
            if self.filled == self.buf.len() {
                // Never with a preface's 24 bytes: HTTP/1.1 parses (and refuses) them.
                return self.http1();
            }
            let space = self.buf.len() - self.filled;
            let parts = &mut **self;
            match parts.link.read(&mut parts.buf[parts.filled..]) {
                Ok(Some(0)) => return Some(Readiness::Closed),
                Ok(Some(n)) => {
                    if self.head_started.is_none() {
                        self.head_started = Some(crate::clock::recent());
                    }
                    self.filled += n;
                    self.received += n as u64;
                    self.maybe_more = n == space;
                }
                Ok(None) => {
                    self.maybe_more = false;
                    if self.head_started.is_none() {
                        if let Link::Tls(tls) = self.link {
                            // The header deadline counts from the ClientHello's first byte.
                            self.head_started = tls.conn().started();
                        }
                    }
                    if self.choice == Http2Choice::Alpn && !self.tls_handshaking() {
                        // The handshake ended in this read: ALPN says.
                        continue;
                    }
                    return Some(Readiness::Pending);
                }
                Err(err) => return Some(Self::read_failed(err)),
            }
        }
    }

    /// What comes before the first head, parsed from the buffered bytes: the PROXY header,
    /// then the choice of protocol; `None` once the bytes are an HTTP/1.1 head's.
    #[cold]
    pub(super) fn before_first_head(&mut self) -> Option<Readiness> {
        if self.awaits_proxy_header() {
            if let Err(err) = self.take_proxy_header() {
                return Some(err);
            }
        }
        if self.protocol == Protocol::Http1(Phase::Preface) {
            return self.choose();
        }
        None
    }

    /// The connection speaks HTTP/1.1: its buffered bytes begin the first head.
    fn http1(&mut self) -> Option<Readiness> {
        self.protocol = Protocol::Http1(Phase::Head);
        None
    }

    /// Takes the connection apart for HTTP/2 (`Readiness::Http2`): its transport, for the
    /// HTTP/2 connection, and its parts (the bytes read so far, who sent them on which
    /// listener, the poller registration still owed).
    pub(crate) fn into_h2(self) -> (Transport, Box<Lent>) {
        let Connection {
            parts, transport, ..
        } = self;
        (transport, parts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_bytes_tell_the_preface_from_an_http1_head_as_they_arrive() {
        assert_eq!(compare(b""), Preface::Partial);
        assert_eq!(compare(b"PRI * HTTP/2"), Preface::Partial);
        assert_eq!(compare(PREFACE), Preface::Whole);
        let mut more = PREFACE.to_vec();
        more.extend_from_slice(b"\0\0\0\x04");
        assert_eq!(compare(&more), Preface::Whole);
        assert_eq!(compare(b"PRI * HTTP/1.1\r\n"), Preface::Other);
        assert_eq!(compare(b"GET / HTTP/1.1\r\n"), Preface::Other);
        assert_eq!(compare(b"P"), Preface::Partial);
    }
}
