//! A WebSocket session over a TLS transport (`wss://`): its reads and writes go through the
//! connection's `Link`, so the session decrypts the client's frames and encrypts its own.
//! Over a socket pair, with a rustls client on the other end (the test certificates of
//! `tests/tls-loop`).

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use super::*;
use crate::connection::Readiness;
use crate::listener::Peer;
use crate::tls::conn::TlsConn;
use crate::transport::Transport;

fn pem(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/tls-loop")
        .join(name)
}

fn configs() -> (Arc<rustls::ServerConfig>, Arc<rustls::ClientConfig>) {
    let chain = CertificateDer::pem_file_iter(pem("leaf.pem"))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(pem("leaf.key")).unwrap();
    let server = rustls::ServerConfig::builder_with_provider(crate::tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(pem("ca.pem")).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let client = rustls::ClientConfig::builder_with_provider(crate::tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    (Arc::new(server), Arc::new(client))
}

fn readable(fd: std::os::fd::RawFd) {
    crate::io::wait_fd(fd, false, Instant::now() + Duration::from_secs(10), "test").unwrap();
}

#[test]
fn a_session_over_tls_reads_the_client_s_frames_and_writes_its_own_encrypted() {
    let (server_config, client_config) = configs();
    let (ours, theirs) = UnixStream::pair().unwrap();
    ours.set_nonblocking(true).unwrap();
    let tls = TlsConn::new(OwnedFd::from(ours), &server_config).unwrap();
    let mut conn = Connection::new(Transport::Tls(tls), Peer::Unix, 0);
    let fd = conn.fd();

    let client = std::thread::spawn(move || {
        let name = ServerName::try_from("localhost").unwrap();
        let session = rustls::ClientConnection::new(client_config, name).unwrap();
        let mut stream = rustls::StreamOwned::new(session, theirs);
        stream
            .write_all(b"GET /ws HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .unwrap();
        let mut switched = Vec::new();
        let mut byte = [0u8; 1];
        while !switched.ends_with(b"\r\n\r\n") {
            stream.read_exact(&mut byte).unwrap();
            switched.push(byte[0]);
        }
        // A masked text frame (a zero key leaves the payload as it is).
        stream
            .write_all(&[0x81, 0x80 | 5, 0, 0, 0, 0, b'h', b'e', b'l', b'l', b'o'])
            .unwrap();
        let mut frame = [0u8; 7];
        stream.read_exact(&mut frame).unwrap();
        (switched, frame)
    });

    // The handshake and the head, as the loop reads them.
    let limits = tines_proto::Limits::default();
    loop {
        match conn.on_readable(&limits) {
            Readiness::HeadComplete => break,
            Readiness::Pending => readable(fd),
            other => panic!("{other:?}"),
        }
    }
    assert!(conn.tls().is_some_and(|tls| !tls.handshaking()));
    conn.link()
        .write_all_from(
            &[b"HTTP/1.1 101 Switching Protocols\r\n\r\n"],
            0,
            Duration::from_secs(10),
        )
        .unwrap();
    let mut session = WsSession::new(conn, 0, 0, None, 1 << 20);
    let mut out = Vec::new();
    while out.is_empty() {
        readable(fd);
        assert_ne!(session.read(&mut out, usize::MAX), ReadOutcome::Over);
    }
    match &out[0] {
        WsIncoming::Message { kind, data } => {
            assert_eq!((*kind, &data[..]), (MessageKind::Text, &b"hello"[..]));
        }
        other => panic!("{other:?}"),
    }
    session.send(MessageKind::Text, b"world").unwrap();
    assert_eq!(session.unsent(), 0, "the socket took it");
    let (switched, frame) = client.join().unwrap();
    assert!(switched.starts_with(b"HTTP/1.1 101 "));
    assert_eq!(frame, [0x81, 5, b'w', b'o', b'r', b'l', b'd']);
}
