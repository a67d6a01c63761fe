//! A TLS test server on 127.0.0.1: rustls' `ServerConnection` over a blocking `TcpStream`, a
//! thread per connection, answering `200 OK` with body `OK` to every request (and closing after
//! a `Connection: close` one), counting responses and handshakes, full and resumed. Its
//! certificates are tests/tls/ (made by tests/tls/make.sh).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{HandshakeKind, ServerConfig, ServerConnection, StreamOwned};

/// A file of tests/tls/.
pub fn cert_path(name: &str) -> String {
    let path: PathBuf = [env!("CARGO_MANIFEST_DIR"), "tests", "tls", name]
        .iter()
        .collect();
    path.to_string_lossy().into_owned()
}

/// What the server saw.
#[derive(Default)]
pub struct Seen {
    /// Responses written (counted before the write, as the plain server does).
    pub responses: AtomicU64,
    /// Handshakes completed in full.
    pub full: AtomicU64,
    /// Handshakes completed by resuming an earlier session.
    pub resumed: AtomicU64,
    /// The server names (SNI) the clients sent, in order (none for an IP address).
    pub names: Mutex<Vec<String>>,
}

/// A running TLS test server.
pub struct TlsServer {
    /// Where it listens.
    pub addr: SocketAddr,
    /// What it saw.
    pub seen: Arc<Seen>,
}

impl TlsServer {
    /// The `https://` URL of `path` on `host` (an IP address or `localhost`) at this port.
    pub fn url(&self, host: &str, path: &str) -> String {
        format!("https://{host}:{}{path}", self.addr.port())
    }

    /// (full, resumed) handshakes so far.
    pub fn handshakes(&self) -> (u64, u64) {
        (
            self.seen.full.load(Ordering::SeqCst),
            self.seen.resumed.load(Ordering::SeqCst),
        )
    }

    /// Responses written so far.
    pub fn count(&self) -> u64 {
        self.seen.responses.load(Ordering::SeqCst)
    }
}

/// Starts the server (its threads live until the test process exits).
pub fn start_tls() -> TlsServer {
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(cert_path("server.pem"))
            .expect("server.pem")
            .collect::<Result<_, _>>()
            .expect("server.pem");
    let key = PrivateKeyDer::from_pem_file(cert_path("server.key")).expect("server.key");
    let config =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .expect("certificate and key");
    let config = Arc::new(config);
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let seen = Arc::new(Seen::default());
    let counters = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let config = config.clone();
            let seen = counters.clone();
            std::thread::spawn(move || serve(stream, config, &seen));
        }
    });
    TlsServer { addr, seen }
}

fn serve(stream: TcpStream, config: Arc<ServerConfig>, seen: &Seen) {
    let _ = stream.set_nodelay(true);
    let Ok(conn) = ServerConnection::new(config) else {
        return;
    };
    let mut tls = StreamOwned::new(conn, stream);
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    let mut counted = false;
    loop {
        let end = loop {
            if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            match tls.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        if !counted {
            counted = true;
            match tls.conn.handshake_kind() {
                Some(HandshakeKind::Resumed) => seen.resumed.fetch_add(1, Ordering::SeqCst),
                _ => seen.full.fetch_add(1, Ordering::SeqCst),
            };
            if let Some(name) = tls.conn.server_name() {
                seen.names.lock().unwrap().push(name.to_string());
            }
        }
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        buf.drain(..end);
        let close = head.contains("\r\nconnection: close");
        let connection = if close { "Connection: close\r\n" } else { "" };
        let response = format!("HTTP/1.1 200 OK\r\n{connection}Content-Length: 2\r\n\r\nOK");
        seen.responses.fetch_add(1, Ordering::SeqCst);
        if tls
            .write_all(response.as_bytes())
            .and_then(|()| tls.flush())
            .is_err()
        {
            seen.responses.fetch_sub(1, Ordering::SeqCst);
            return;
        }
        if close {
            tls.conn.send_close_notify();
            let _ = tls.flush();
            return;
        }
    }
}
