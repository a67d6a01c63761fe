//! One connection's TLS session: rustls' buffered `ClientConnection` driven over the
//! non-blocking socket, so that the rest of `connection` sees plaintext in and out.
//!
//! Reads: ciphertext from the socket into the session (`read_tls`, whose read of the socket is
//! watched: a short read means the socket is drained, the same test the plain path uses to
//! save a read that would block), records decrypted (`process_new_packets`), plaintext copied
//! into the connection's read buffer. Writes: plaintext handed to the session (sealed into
//! records at once after the handshake, held until it ends before), then every record it holds
//! written (`write_tls`). The handshake runs inside both, as the server's first flight arrives.
//! Must not: count anything (the worker does, from `Received` and `handshake_done`).

use std::io::{self, Read, Write};
use std::sync::Arc;

use mio::net::TcpStream;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, HandshakeKind};

use super::Received;

/// A connection's session and what is known of the bytes it holds.
pub struct Session {
    conn: ClientConnection,
    /// Plaintext decrypted and not yet copied out.
    plain: usize,
    /// The last socket read filled the space it was given: more may be waiting.
    socket_full: bool,
    /// The server's close_notify came (after `plain`).
    closed: bool,
    /// The handshake ended and the worker has not yet been told how (`handshake_done`).
    told: bool,
}

/// Reads the socket for `read_tls`, noting whether the read was short (the socket drained).
struct Watched<'a> {
    stream: &'a mut TcpStream,
    full: bool,
}

impl Read for Watched<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let count = self.stream.read(buf)?;
        self.full = count == buf.len();
        Ok(count)
    }
}

impl Session {
    /// A client session to `name`; its ClientHello waits in it until the first `flush`.
    pub fn new(config: &Arc<ClientConfig>, name: &ServerName<'static>) -> Result<Session, String> {
        let conn = ClientConnection::new(config.clone(), name.clone())
            .map_err(|e| format!("TLS set-up: {e}"))?;
        Ok(Session {
            conn,
            plain: 0,
            socket_full: false,
            closed: false,
            told: false,
        })
    }

    /// Whether the handshake is still under way.
    pub fn is_handshaking(&self) -> bool {
        self.conn.is_handshaking()
    }

    /// The protocol the server chose by ALPN, once the handshake has ended.
    pub fn alpn(&self) -> Option<&[u8]> {
        self.conn.alpn_protocol()
    }

    /// Whether records wait to be written.
    pub fn wants_write(&self) -> bool {
        self.conn.wants_write()
    }

    /// Hands plaintext to the session; returns how much it took (all of it unless its
    /// buffer, rustls' limit, is full before the handshake ends).
    pub fn send(&mut self, plain: &[u8]) -> io::Result<usize> {
        self.conn.writer().write(plain)
    }

    /// Writes the records the session holds, until they are all written or the socket is full.
    pub fn flush(&mut self, stream: &mut TcpStream) -> io::Result<()> {
        while self.conn.wants_write() {
            match self.conn.write_tls(stream) {
                Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
                Ok(_) => {}
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error),
            }
        }
        Ok(())
    }

    /// Whether the handshake has just ended: `Some(resumed)` once per session.
    pub fn handshake_done(&mut self) -> Option<bool> {
        if self.told || self.conn.is_handshaking() {
            return None;
        }
        self.told = true;
        Some(self.conn.handshake_kind() == Some(HandshakeKind::Resumed))
    }

    /// Reads plaintext into `space` (which is not empty): what the session holds first, else
    /// what the socket brings, decrypting it and answering the handshake on the way.
    pub fn receive(&mut self, stream: &mut TcpStream, space: &mut [u8]) -> Received {
        loop {
            if self.plain > 0 {
                return match self.conn.reader().read(space) {
                    Ok(count) => {
                        self.plain = self.plain.saturating_sub(count);
                        Received::Bytes {
                            count,
                            filled_buffer: self.plain > 0 || self.socket_full || self.closed,
                        }
                    }
                    Err(error) => Received::Failed(error),
                };
            }
            if self.closed {
                return Received::Eof;
            }
            let mut watched = Watched {
                stream: &mut *stream,
                full: false,
            };
            match self.conn.read_tls(&mut watched) {
                Ok(0) if self.conn.is_handshaking() => {
                    return Received::Tls(
                        "TLS handshake failed: the server closed the connection".into(),
                    )
                }
                Ok(0) => return Received::Eof,
                Ok(_) => self.socket_full = watched.full,
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    return Received::WouldBlock
                }
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => return Received::Failed(error),
            }
            let state = match self.conn.process_new_packets() {
                Ok(state) => state,
                Err(error) => {
                    // The alert rustls queued for the server, on a best-effort basis.
                    let _ = self.flush(stream);
                    return Received::Tls(if self.conn.is_handshaking() {
                        crate::tls::describe(&error)
                    } else {
                        format!("TLS error: {error}")
                    });
                }
            };
            self.plain = state.plaintext_bytes_to_read();
            self.closed = state.peer_has_closed();
            // The handshake's next flight, an answer to a key update, or the requests held
            // until the handshake ended.
            if let Err(error) = self.flush(stream) {
                return Received::Failed(error);
            }
            if self.plain == 0 && !self.closed && !self.socket_full {
                return Received::WouldBlock;
            }
        }
    }
}
