//! `TlsConn` against a real rustls client over a socket pair (both ends non-blocking, driven
//! step by step from the test's thread: every interleaving is the test's choice, none a
//! sleep's). The certificates: `crates/server/tests/tls/` (`make.sh` there remakes them).
//! Its fixtures serve the tests of the output paths over TLS too (`pending`).

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig};

use super::{handshake_failure, is_plain_http, TlsConn};
use crate::tls::provider;

const ROOT: &[u8] = include_bytes!("../../../tests/tls/root.pem");
const LEAF: &[u8] = include_bytes!("../../../tests/tls/leaf.pem");
const LEAF_KEY: &[u8] = include_bytes!("../../../tests/tls/leaf.key");

fn server_config() -> Arc<ServerConfig> {
    let chain = CertificateDer::pem_slice_iter(LEAF)
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(LEAF_KEY).unwrap();
    Arc::new(
        ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap(),
    )
}

fn client_config(versions: &[&'static rustls::SupportedProtocolVersion]) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ROOT) {
        roots.add(cert.unwrap()).unwrap();
    }
    Arc::new(
        ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(versions)
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

/// The client end: a rustls client on a non-blocking socket.
pub(crate) struct Client {
    tls: ClientConnection,
    pub(crate) sock: UnixStream,
    /// Plaintext received so far.
    pub(crate) got: Vec<u8>,
    /// The server's close_notify was seen (a clean end).
    pub(crate) closed: bool,
}

impl Client {
    /// Writes the client's pending records as far as the socket takes them.
    fn push(&mut self) {
        while self.tls.wants_write() {
            match self.tls.write_tls(&mut self.sock) {
                Ok(_) => {}
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => return,
                Err(err) => panic!("client write: {err}"),
            }
        }
    }

    /// Reads and decrypts what the socket holds now; false when nothing was there.
    pub(crate) fn pull(&mut self) -> bool {
        let mut any = false;
        loop {
            match self.tls.read_tls(&mut self.sock) {
                Ok(0) => return any,
                Ok(_) => any = true,
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => return any,
                Err(err) => panic!("client read: {err}"),
            }
            let state = self.tls.process_new_packets().expect("client records");
            let mut chunk = vec![0; state.plaintext_bytes_to_read()];
            self.tls.reader().read_exact(&mut chunk).unwrap();
            self.got.extend_from_slice(&chunk);
            if state.peer_has_closed() {
                self.closed = true;
            }
            self.push();
        }
    }

    /// Seals `data` and writes it.
    pub(crate) fn send(&mut self, data: &[u8]) {
        self.tls.writer().write_all(data).unwrap();
        self.push();
    }
}

/// A server `TlsConn` and a client on a socket pair, before the handshake.
fn pair(versions: &[&'static rustls::SupportedProtocolVersion]) -> (Box<TlsConn>, Client) {
    let (server, client) = UnixStream::pair().unwrap();
    server.set_nonblocking(true).unwrap();
    client.set_nonblocking(true).unwrap();
    let conn = TlsConn::new(OwnedFd::from(server), &server_config()).unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let tls = ClientConnection::new(client_config(versions), name).unwrap();
    let client = Client {
        tls,
        sock: client,
        got: Vec::new(),
        closed: false,
    };
    (conn, client)
}

/// Runs the handshake to its end on both sides (each step reads what the other wrote).
fn handshake(conn: &TlsConn, client: &mut Client) {
    let mut buf = [0u8; 64];
    for _ in 0..16 {
        client.push();
        assert_eq!(conn.read(&mut buf).unwrap(), None, "no plaintext yet");
        client.pull();
        if !conn.handshaking() && !client.tls.is_handshaking() {
            assert!(conn.started().is_some());
            return;
        }
    }
    panic!("the handshake did not finish");
}

/// A server `TlsConn` and a client on a socket pair, after the handshake.
pub(crate) fn connected() -> (Box<TlsConn>, Client) {
    let (conn, mut client) = pair(rustls::DEFAULT_VERSIONS);
    handshake(&conn, &mut client);
    (conn, client)
}

/// Reads from `conn` until `want` bytes came (the client's records are already written).
fn read_all(conn: &TlsConn, want: usize) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while got.len() < want {
        match conn.read(&mut buf).unwrap() {
            Some(0) => panic!("EOF after {} bytes", got.len()),
            Some(n) => got.extend_from_slice(&buf[..n]),
            None => panic!("blocked after {} bytes", got.len()),
        }
    }
    got
}

/// Sets a socket buffer's size (`SO_SNDBUF`, `SO_RCVBUF`).
pub(crate) fn set_buffer(sock: libc::c_int, option: libc::c_int, bytes: libc::c_int) {
    // SAFETY: one c_int option value on an open socket.
    let rc = unsafe {
        libc::setsockopt(
            sock,
            libc::SOL_SOCKET,
            option,
            (&raw const bytes).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0);
}

#[test]
fn a_request_and_its_response_cross_tls_1_3_and_1_2() {
    for versions in [
        &[&rustls::version::TLS13][..],
        &[&rustls::version::TLS12][..],
    ] {
        let (conn, mut client) = pair(versions);
        assert!(conn.handshaking());
        assert!(conn.started().is_none(), "no byte came yet");
        handshake(&conn, &mut client);
        let request = b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n";
        client.send(request);
        assert!(conn.input_waiting());
        assert_eq!(read_all(&conn, request.len()), request);
        let head = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n";
        let parts: [&[u8]; 2] = [head, b"OK"];
        assert_eq!(
            conn.write_vectored(&parts, 0).unwrap(),
            Some(head.len() + 2)
        );
        assert!(!conn.wants_write(), "the socket took the record");
        client.pull();
        assert_eq!(client.got, [&head[..], b"OK"].concat());
        // `skip` skips plaintext already written.
        assert_eq!(conn.write_vectored(&parts, head.len()).unwrap(), Some(2));
        client.pull();
        assert!(client.got.ends_with(b"OKOK"));
        assert!(!conn.input_waiting());
        let mut buf = [0u8; 16];
        assert_eq!(conn.read(&mut buf).unwrap(), None, "nothing more");
    }
}

#[test]
fn a_read_fills_its_buffer_and_leaves_the_rest_in_the_session_for_the_next() {
    let (conn, mut client) = connected();
    let request: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
    client.send(&request);
    let mut small = [0u8; 100];
    // A full buffer: the caller reads again (the socket may hold more, without an edge).
    assert_eq!(conn.read(&mut small).unwrap(), Some(100));
    assert_eq!(small[..], request[..100]);
    // Decrypted plaintext waits in the session: a read or a wait need no socket byte.
    assert!(conn.input_waiting());
    conn.wait(false, Instant::now(), "read").unwrap();
    let rest = read_all(&conn, request.len() - 100);
    assert_eq!(rest[..], request[100..]);
    assert!(!conn.input_waiting());
}

#[test]
fn records_split_at_every_byte_are_read_whole_once_their_last_byte_came() {
    let (conn, mut client) = connected();
    let message = b"POST /x HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc";
    client.tls.writer().write_all(message).unwrap();
    let mut record = Vec::new();
    client.tls.write_tls(&mut record).unwrap();
    let mut buf = [0u8; 256];
    for split in 1..record.len() {
        (&client.sock).write_all(&record[..split]).unwrap();
        assert_eq!(conn.read(&mut buf).unwrap(), None, "split at {split}");
        (&client.sock).write_all(&record[split..]).unwrap();
        assert_eq!(
            conn.read(&mut buf).unwrap(),
            Some(message.len()),
            "split at {split}"
        );
        assert_eq!(&buf[..message.len()], message);
        // The next record, sealed with the next sequence number.
        client.tls.writer().write_all(message).unwrap();
        record.clear();
        client.tls.write_tls(&mut record).unwrap();
    }
}

#[test]
fn a_large_response_on_a_small_socket_leaves_a_backlog_that_flush_writes_in_order() {
    let (conn, mut client) = connected();
    // The smallest socket buffers: the server's writes fill them at once.
    set_buffer(conn.fd(), libc::SO_SNDBUF, 4096);
    set_buffer(client.sock.as_raw_fd(), libc::SO_RCVBUF, 4096);
    let body: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    let head = b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n";
    let parts: [&[u8]; 2] = [head, &body];
    let total = head.len() + body.len();
    let mut written = 0;
    let (mut backlogs, mut refusals) = (0, 0);
    while written < total {
        match conn.write_vectored(&parts, written).unwrap() {
            Some(n) => {
                assert!(
                    n > 0 && n <= 64 * 1024,
                    "one call seals at most 64 KiB: {n}"
                );
                written += n;
                backlogs += usize::from(conn.wants_write());
            }
            None => {
                // Nothing more is sealed while the backlog waits: the client reads.
                assert!(conn.wants_write());
                refusals += 1;
                assert!(client.pull());
            }
        }
    }
    assert!(backlogs > 0 && refusals > 0, "the socket was too small");
    while !conn.flush().unwrap() {
        assert!(client.pull());
    }
    assert!(!conn.wants_write());
    while client.got.len() < total {
        assert!(client.pull());
    }
    assert_eq!(client.got.len(), total);
    assert_eq!(client.got[..head.len()], head[..]);
    assert!(client.got[head.len()..] == body[..], "in order, whole");
}

#[test]
fn write_all_from_writes_the_backlog_too_waiting_for_the_client() {
    let (conn, client) = connected();
    set_buffer(conn.fd(), libc::SO_SNDBUF, 4096);
    let body = vec![b'x'; 300_000];
    let Client {
        tls: client_tls,
        sock,
        ..
    } = client;
    sock.set_nonblocking(false).unwrap();
    let reader = std::thread::spawn(move || {
        let mut stream = rustls::StreamOwned::new(client_tls, sock);
        let mut got = vec![0u8; 300_000];
        stream.read_exact(&mut got).unwrap();
        got
    });
    conn.write_all_from(&[&body], 0, Duration::from_secs(60))
        .unwrap();
    assert!(!conn.wants_write(), "all of it is in the socket");
    assert_eq!(reader.join().unwrap(), body);
}

#[test]
fn a_file_is_read_sealed_and_sent_in_blocks() {
    let (conn, mut client) = connected();
    set_buffer(conn.fd(), libc::SO_SNDBUF, 4096);
    let data: Vec<u8> = (0..200_000u32).map(|i| (i % 241) as u8).collect();
    let path = std::env::temp_dir().join(format!("tines-tls-file-{}", std::process::id()));
    std::fs::write(&path, &data).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    // From an offset, to the end and one byte past it.
    let (offset, count) = (1000u64, data.len() as u64 - 1000);
    let mut sent = 0;
    while sent < count {
        match conn
            .send_file(file.as_raw_fd(), offset + sent, count - sent)
            .unwrap()
        {
            Some(n) => {
                assert!(n > 0 && n <= 64 * 1024);
                sent += n;
            }
            None => assert!(client.pull()),
        }
    }
    let past = conn.send_file(file.as_raw_fd(), offset + sent, 10);
    while !conn.flush().unwrap() {
        assert!(client.pull());
    }
    assert_eq!(past.unwrap(), Some(0), "the file's end");
    while client.got.len() < count as usize {
        assert!(client.pull());
    }
    assert!(client.got[..] == data[1000..]);
}

#[test]
fn shutdown_write_sends_close_notify_then_the_eof_and_reads_go_on_raw() {
    let (conn, mut client) = connected();
    conn.write_vectored(&[b"last"], 0).unwrap();
    conn.shutdown_write();
    client.pull();
    assert_eq!(client.got, b"last");
    assert!(client.closed, "close_notify came after the last record");
    let mut byte = [0u8; 1];
    assert_eq!(
        (&client.sock).read(&mut byte).unwrap(),
        0,
        "then the socket's EOF"
    );
    // Nothing is sealed after it; what the client still sends is read as it is.
    assert!(conn.write_vectored(&[b"more"], 0).is_err());
    client.send(b"late");
    let mut raw = [0u8; 256];
    let n = conn.read_raw(&mut raw).unwrap().unwrap();
    assert_eq!(raw[0], 0x17, "an application-data record, not decrypted");
    assert!(n > 4);
}

#[test]
fn dropping_an_established_connection_sends_close_notify() {
    let (conn, mut client) = connected();
    drop(conn);
    client.pull();
    assert!(client.closed, "a clean end, not a truncation");
    // A connection dropped during its handshake sends nothing more.
    let (conn, mut client) = pair(rustls::DEFAULT_VERSIONS);
    client.push();
    let mut buf = [0u8; 16];
    assert_eq!(conn.read(&mut buf).unwrap(), None);
    let mut flight = vec![0u8; 64 * 1024];
    let n = (&client.sock).read(&mut flight).unwrap();
    assert_eq!(flight[0], 0x16, "the server's flight: {n} bytes");
    drop(conn);
    assert_eq!(
        (&client.sock).read(&mut flight).unwrap(),
        0,
        "then EOF alone"
    );
}

#[test]
fn the_clients_close_notify_and_a_bare_eof_are_both_the_end() {
    let (conn, mut client) = connected();
    client.send(b"bye");
    client.tls.send_close_notify();
    client.push();
    let mut buf = [0u8; 16];
    assert_eq!(conn.read(&mut buf).unwrap(), Some(3), "the bytes first");
    assert_eq!(conn.read(&mut buf).unwrap(), Some(0));
    let (conn, client) = connected();
    drop(client);
    assert_eq!(conn.read(&mut buf).unwrap(), Some(0));
}

#[test]
fn a_plain_request_is_told_apart_and_left_in_the_socket_for_a_plain_answer() {
    let (conn, client) = pair(rustls::DEFAULT_VERSIONS);
    let request = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    (&client.sock).write_all(request).unwrap();
    let mut buf = [0u8; 64];
    let err = conn.read(&mut buf).unwrap_err();
    assert!(is_plain_http(&err), "{err}");
    assert!(handshake_failure(&err).is_none());
    assert!(conn.started().is_some(), "its first byte started the clock");
    let answer = b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n";
    assert_eq!(conn.write_raw(answer).unwrap(), Some(answer.len()));
    let mut got = vec![0u8; answer.len()];
    (&client.sock).read_exact(&mut got).unwrap();
    assert_eq!(&got[..], answer, "in plain text");
    let n = conn.read_raw(&mut buf).unwrap().unwrap();
    assert_eq!(&buf[..n], request, "nothing of it was taken");
    // The same bytes handed over after a PROXY header.
    let (conn, _client) = pair(rustls::DEFAULT_VERSIONS);
    assert!(is_plain_http(&conn.feed(request).unwrap_err()));
}

#[test]
fn a_failed_handshake_is_reported_with_its_reason_after_the_alert() {
    let (conn, client) = pair(rustls::DEFAULT_VERSIONS);
    // A handshake record whose message is no ClientHello.
    (&client.sock)
        .write_all(&[0x16, 0x03, 0x01, 0x00, 0x04, 0x02, 0x00, 0x00, 0x00])
        .unwrap();
    let mut buf = [0u8; 64];
    let err = conn.read(&mut buf).unwrap_err();
    assert!(handshake_failure(&err).is_some(), "{err}");
    assert!(!is_plain_http(&err));
    let mut alert = [0u8; 7];
    (&client.sock).read_exact(&mut alert).unwrap();
    assert_eq!(alert[0], 0x15, "an alert record");
    assert!(conn.read(&mut buf).is_err(), "the session stays failed");
    // Garbage that is not a letter goes to rustls too, and fails.
    let (conn, client) = pair(rustls::DEFAULT_VERSIONS);
    (&client.sock).write_all(&[0x00; 8]).unwrap();
    assert!(handshake_failure(&conn.read(&mut buf).unwrap_err()).is_some());
}

#[test]
fn bytes_read_before_the_session_are_fed_to_it_and_the_handshake_goes_on() {
    let (conn, mut client) = pair(rustls::DEFAULT_VERSIONS);
    let mut hello = Vec::new();
    client.tls.write_tls(&mut hello).unwrap();
    // The first half came with a PROXY header; the rest is in the socket.
    let half = hello.len() / 2;
    conn.feed(&hello[..half]).unwrap();
    assert!(conn.started().is_some());
    (&client.sock).write_all(&hello[half..]).unwrap();
    handshake(&conn, &mut client);
    client.send(b"GET");
    assert_eq!(read_all(&conn, 3), b"GET");
}

#[test]
fn read_by_waits_for_the_client_and_times_out_at_its_deadline() {
    let (conn, client) = connected();
    let mut buf = [0u8; 16];
    let err = conn
        .read_by(&mut buf, Instant::now(), "request body read")
        .unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::TimedOut);
    let Client { tls, sock, .. } = client;
    sock.set_nonblocking(false).unwrap();
    let (gate_tx, gate_rx) = std::sync::mpsc::channel::<()>();
    let writer = std::thread::spawn(move || {
        let mut stream = rustls::StreamOwned::new(tls, sock);
        gate_rx.recv().unwrap();
        stream.write_all(b"body").unwrap();
        stream
    });
    gate_tx.send(()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut got = Vec::new();
    while got.len() < 4 {
        let n = conn
            .read_by(&mut buf, deadline, "request body read")
            .unwrap();
        assert!(n > 0);
        got.extend_from_slice(&buf[..n]);
    }
    assert_eq!(got, b"body");
    drop(writer.join().unwrap());
}

#[test]
fn writes_before_the_handshake_finished_are_refused() {
    let (conn, _client) = pair(rustls::DEFAULT_VERSIONS);
    assert!(conn.write_vectored(&[b"early"], 0).is_err());
    assert!(conn.send_file(0, 0, 1).is_err());
}

#[test]
fn a_read_that_needs_a_write_answers_the_clients_key_update() {
    let (conn, mut client) = connected();
    // TLS 1.3 KeyUpdate asking for ours: the read that meets it seals our answer.
    client.tls.refresh_traffic_keys().unwrap();
    client.send(b"after");
    assert_eq!(read_all(&conn, 5), b"after");
    conn.write_vectored(&[b"reply"], 0).unwrap();
    client.pull();
    assert_eq!(client.got, b"reply", "decrypted with the updated keys");
    client.send(b"again");
    assert_eq!(read_all(&conn, 5), b"again");
}

#[test]
fn a_close_notify_the_socket_did_not_take_is_flushed_before_the_shutdown() {
    let (conn, mut client) = connected();
    set_buffer(conn.fd(), libc::SO_SNDBUF, 4096);
    let body = vec![b'y'; 60_000];
    assert_eq!(conn.write_vectored(&[&body], 0).unwrap(), Some(body.len()));
    assert!(conn.wants_write());
    conn.shutdown_write();
    assert!(conn.wants_write(), "close_notify waits behind the records");
    assert!(conn.unacknowledged().unwrap() > 0);
    while !conn.flush().unwrap() {
        assert!(client.pull());
        assert!(!client.closed, "not before the records");
    }
    while client.pull() {}
    assert_eq!(client.got.len(), body.len());
    assert!(client.closed, "a shutdown made at once would have lost it");
    let mut byte = [0u8; 1];
    assert_eq!(
        (&client.sock).read(&mut byte).unwrap(),
        0,
        "the shutdown came once close_notify was out"
    );
}

#[test]
fn the_request_that_comes_with_the_clients_finished_is_read_with_it() {
    let (conn, mut client) = pair(&[&rustls::version::TLS13]);
    let request = b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n";
    // Written before the handshake ended: sent right behind the client's Finished.
    client.tls.writer().write_all(request).unwrap();
    client.push();
    let mut buf = [0u8; 256];
    assert_eq!(conn.read(&mut buf).unwrap(), None, "the server's flight");
    client.pull();
    assert!(!client.tls.is_handshaking());
    assert!(conn.handshaking(), "its Finished is in the socket, unread");
    assert_eq!(conn.read(&mut buf).unwrap(), Some(request.len()));
    assert_eq!(&buf[..request.len()], request);
    assert!(!conn.handshaking());
}
