//! SKELETON (branch tls-base only; helper A replaces every `todo!`): one TLS connection, the
//! rustls session and its socket, owned by `Transport::Tls` and reached by `Link::Tls`.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rustls::{ServerConfig, ServerConnection};

use super::TlsInfo;

/// The first bytes on a TLS listener were a plain HTTP request (a letter, not a TLS record):
/// the error a TLS read returns, so the connection answers its plain-text 400.
#[derive(Debug)]
pub struct PlainHttpOnTls;

impl std::fmt::Display for PlainHttpOnTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a plain HTTP request on a TLS port")
    }
}

impl std::error::Error for PlainHttpOnTls {}

/// The handshake failed (rustls' reason): the error a TLS read returns; the alert, if any, is
/// already written.
#[derive(Debug)]
pub struct HandshakeFailed(pub rustls::Error);

impl std::fmt::Display for HandshakeFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TLS handshake failed: {}", self.0)
    }
}

impl std::error::Error for HandshakeFailed {}

/// One TLS connection: its socket and its session (behind a lock: the loop and an app thread
/// may both write a connection's output, ADR 0030).
pub struct TlsConn {
    fd: OwnedFd,
    session: Mutex<ServerConnection>,
    info: OnceLock<TlsInfo>,
    started: OnceLock<Instant>,
}

impl std::fmt::Debug for TlsConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConn").field("fd", &self.fd).finish_non_exhaustive()
    }
}

#[allow(unused_variables, missing_docs, clippy::missing_errors_doc)]
impl TlsConn {
    /// A server session on the accepted socket `fd` (non-blocking), before its handshake.
    pub fn new(fd: OwnedFd, config: &Arc<ServerConfig>) -> io::Result<Box<TlsConn>> {
        let session = ServerConnection::new(Arc::clone(config)).map_err(io::Error::other)?;
        Ok(Box::new(TlsConn {
            fd,
            session: Mutex::new(session),
            info: OnceLock::new(),
            started: OnceLock::new(),
        }))
    }
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
    /// What the handshake told, once it finished.
    pub fn info(&self) -> Option<&TlsInfo> {
        self.info.get()
    }
    /// When the first byte of the ClientHello (or of a PROXY header before it) came.
    pub fn started(&self) -> Option<Instant> {
        self.started.get().copied()
    }
    /// True until the handshake finished.
    pub fn handshaking(&self) -> bool {
        todo!("A")
    }
    /// True while ciphertext waits for the socket (a handshake flight, a record the socket
    /// did not take): the loop watches for writable and calls `flush`.
    pub fn wants_write(&self) -> bool {
        todo!("A")
    }
    /// Writes waiting ciphertext; true when none is left.
    pub fn flush(&self) -> io::Result<bool> {
        todo!("A")
    }
    pub fn read(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        todo!("A")
    }
    pub fn input_waiting(&self) -> bool {
        todo!("A")
    }
    pub fn read_by(&self, buf: &mut [u8], deadline: Instant, what: &str) -> io::Result<usize> {
        todo!("A")
    }
    pub fn write_vectored(&self, parts: &[&[u8]], skip: usize) -> io::Result<Option<usize>> {
        todo!("A")
    }
    pub fn write_all_from(&self, parts: &[&[u8]], written: usize, timeout: Duration) -> io::Result<()> {
        todo!("A")
    }
    pub fn send_file(&self, file_fd: RawFd, offset: u64, count: u64) -> io::Result<Option<u64>> {
        todo!("A")
    }
    pub fn wait(&self, write: bool, deadline: Instant, what: &str) -> io::Result<()> {
        todo!("A")
    }
    pub fn unacknowledged(&self) -> io::Result<usize> {
        todo!("A")
    }
    pub fn shutdown_write(&self) {
        todo!("A")
    }
    pub fn shutdown(&self) {
        todo!("A")
    }
}
