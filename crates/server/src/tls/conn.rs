//! TEMP (helper B's tests; dropped at merge for helper A's version): one TLS connection, the
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
    fed: std::sync::atomic::AtomicBool,
    plain: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for TlsConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConn")
            .field("fd", &self.fd)
            .finish_non_exhaustive()
    }
}

/// The socket as rustls' `Read`/`Write` (non-blocking: `WouldBlock` passes through).
struct Socket(RawFd);

impl io::Read for Socket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match crate::io::read_nonblocking(self.0, buf)? {
            Some(n) => Ok(n),
            None => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

impl io::Write for Socket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match crate::io::write_vectored_nonblocking(self.0, &[buf], 0)? {
            Some(n) => Ok(n),
            None => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// TEMP (helper B's tests; helper A's implementation replaces this file).
fn tls_info(session: &ServerConnection) -> TlsInfo {
    let version = match session.protocol_version() {
        Some(rustls::ProtocolVersion::TLSv1_2) => 0x0303,
        _ => 0x0304,
    };
    TlsInfo {
        version,
        protocol: if version == 0x0303 {
            "TLSv1.2"
        } else {
            "TLSv1.3"
        },
        cipher_suite: session
            .negotiated_cipher_suite()
            .map_or(0, |suite| u16::from(suite.suite())),
        cipher: "",
        server_name: session.server_name().map(str::to_owned),
        alpn: session.alpn_protocol().map(<[u8]>::to_vec),
        resumed: false,
        server_cert_pem: Arc::from(""),
        client_chain_pem: Vec::new(),
        client_subject: None,
        client_issuer: None,
        client_serial: None,
        client_verify: super::ClientVerify::None,
    }
}

#[allow(missing_docs, clippy::missing_errors_doc)]
impl TlsConn {
    /// A server session on the accepted socket `fd` (non-blocking), before its handshake.
    pub fn new(fd: OwnedFd, config: &Arc<ServerConfig>) -> io::Result<Box<TlsConn>> {
        let session = ServerConnection::new(Arc::clone(config)).map_err(io::Error::other)?;
        Ok(Box::new(TlsConn {
            fd,
            session: Mutex::new(session),
            info: OnceLock::new(),
            started: OnceLock::new(),
            fed: std::sync::atomic::AtomicBool::new(false),
            plain: std::sync::atomic::AtomicBool::new(false),
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
    fn lock(&self) -> std::sync::MutexGuard<'_, ServerConnection> {
        self.session
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }
    /// True until the handshake finished.
    pub fn handshaking(&self) -> bool {
        self.lock().is_handshaking()
    }
    /// True while ciphertext waits for the socket.
    pub fn wants_write(&self) -> bool {
        self.lock().wants_write()
    }
    /// Writes waiting ciphertext; true when none is left.
    pub fn flush(&self) -> io::Result<bool> {
        let mut session = self.lock();
        Self::flush_locked(&mut session, self.fd())
    }
    fn flush_locked(session: &mut ServerConnection, fd: RawFd) -> io::Result<bool> {
        while session.wants_write() {
            match session.write_tls(&mut Socket(fd)) {
                Ok(_) => {}
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(err) => return Err(err),
            }
        }
        Ok(true)
    }
    /// Ciphertext that came before the session (the bytes after a PROXY header).
    pub fn feed(&self, mut bytes: &[u8]) -> io::Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        self.started.get_or_init(crate::clock::recent);
        let mut session = self.lock();
        while !bytes.is_empty() {
            if session.read_tls(&mut bytes).is_err() {
                break;
            }
        }
        self.fed.store(true, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
    pub fn read(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        let fd = self.fd();
        if self.plain.load(std::sync::atomic::Ordering::Relaxed) {
            return crate::io::read_nonblocking(fd, buf);
        }
        let mut session = self.lock();
        loop {
            match io::Read::read(&mut session.reader(), buf) {
                Ok(n) => return Ok(Some(n)),
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
                Err(err) if err.kind() == io::ErrorKind::UnexpectedEof => return Ok(Some(0)),
                Err(err) => return Err(err),
            }
            if self.started.get().is_none() {
                let mut first = 0u8;
                // SAFETY: one writable byte for the call.
                let n = unsafe {
                    libc::recv(
                        fd,
                        (&raw mut first).cast(),
                        1,
                        libc::MSG_PEEK | libc::MSG_DONTWAIT,
                    )
                };
                if n == 1 && first.is_ascii_uppercase() {
                    // TEMP: later reads (the lingering close) read raw, as A's linger does.
                    self.plain.store(true, std::sync::atomic::Ordering::Relaxed);
                    return Err(io::Error::other(PlainHttpOnTls));
                }
            }
            let fed = self.fed.swap(false, std::sync::atomic::Ordering::Relaxed);
            match if fed {
                Ok(1)
            } else {
                session.read_tls(&mut Socket(fd))
            } {
                Ok(0) => return Ok(Some(0)),
                Ok(_) => {
                    self.started.get_or_init(crate::clock::recent);
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                    Self::flush_locked(&mut session, fd)?;
                    return Ok(None);
                }
                Err(err) => return Err(err),
            }
            if let Err(err) = session.process_new_packets() {
                let _ = Self::flush_locked(&mut session, fd);
                return Err(io::Error::other(HandshakeFailed(err)));
            }
            if !session.is_handshaking() && self.info.get().is_none() {
                let _ = self.info.set(tls_info(&session));
            }
            Self::flush_locked(&mut session, fd)?;
        }
    }
    pub fn input_waiting(&self) -> bool {
        crate::io::input_waiting(self.fd())
    }
    pub fn read_by(&self, buf: &mut [u8], deadline: Instant, what: &str) -> io::Result<usize> {
        loop {
            if let Some(n) = self.read(buf)? {
                return Ok(n);
            }
            crate::io::wait_fd(self.fd(), false, deadline, what)?;
        }
    }
    pub fn write_vectored(&self, parts: &[&[u8]], mut skip: usize) -> io::Result<Option<usize>> {
        let fd = self.fd();
        let mut session = self.lock();
        if !Self::flush_locked(&mut session, fd)? {
            return Ok(None);
        }
        let mut taken = 0;
        for part in parts {
            if skip >= part.len() {
                skip -= part.len();
                continue;
            }
            let n = io::Write::write(&mut session.writer(), &part[skip..])?;
            skip = 0;
            taken += n;
            if n == 0 {
                break;
            }
        }
        // TEMP: the backlog of a write is written here, waiting (A's version leaves it).
        while !Self::flush_locked(&mut session, fd)? {
            crate::io::wait_fd(fd, true, Instant::now() + Duration::from_secs(10), "send")?;
        }
        Ok(Some(taken))
    }
    pub fn write_all_from(
        &self,
        parts: &[&[u8]],
        mut written: usize,
        timeout: Duration,
    ) -> io::Result<()> {
        let total: usize = parts.iter().map(|part| part.len()).sum();
        while written < total {
            match self.write_vectored(parts, written)? {
                Some(n) => written += n,
                None => crate::io::wait_fd(self.fd(), true, Instant::now() + timeout, "send")?,
            }
        }
        Ok(())
    }
    pub fn send_file(&self, file_fd: RawFd, offset: u64, count: u64) -> io::Result<Option<u64>> {
        let mut block = vec![0u8; count.min(16 * 1024) as usize];
        // SAFETY: `block` is writable for its length.
        let n = unsafe {
            libc::pread(
                file_fd,
                block.as_mut_ptr().cast(),
                block.len(),
                offset as libc::off_t,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = n as usize;
        self.write_all_from(&[&block[..n]], 0, Duration::from_secs(10))?;
        Ok(Some(n as u64))
    }
    pub fn wait(&self, write: bool, deadline: Instant, what: &str) -> io::Result<()> {
        crate::io::wait_fd(self.fd(), write, deadline, what)
    }
    pub fn unacknowledged(&self) -> io::Result<usize> {
        crate::io::unacknowledged_output(self.fd())
    }
    pub fn shutdown_write(&self) {
        let fd = self.fd();
        {
            let mut session = self.lock();
            if !session.is_handshaking() {
                session.send_close_notify();
                let _ = Self::flush_locked(&mut session, fd);
            }
        }
        // SAFETY: shutdown on our own open fd.
        unsafe { libc::shutdown(fd, libc::SHUT_WR) };
    }
    pub fn shutdown(&self) {
        // SAFETY: shutdown on our own open fd.
        unsafe { libc::shutdown(self.fd(), libc::SHUT_RDWR) };
    }
}
