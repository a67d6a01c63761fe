//! TLS in the loop (issue 37, ADR 0030), end to end on a real worker and real sockets with a
//! rustls client: the handshake before the first head on every MPM, where partial heads wait
//! and under the header deadline; a handshake flight larger than the socket buffers; a plain
//! HTTP request on the TLS port (its plain-text 400); garbage; a PROXY header before the
//! ClientHello; the loop's own error responses, encrypted.
//!
//! The certificates (`tests/tls-loop/`, ECDSA P-256, valid for a century) were made with:
//!
//! ```text
//! openssl ecparam -name prime256v1 -genkey -noout -out ca.key
//! openssl req -x509 -new -key ca.key -sha256 -days 36500 -subj "/CN=tines tls-loop test CA" \
//!     -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign -out ca.pem
//! openssl ecparam -name prime256v1 -genkey -noout | openssl pkcs8 -topk8 -nocrypt -out leaf.key
//! openssl req -new -key leaf.key -subj /CN=localhost -out leaf.csr
//! openssl x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -days 36500 -sha256 -extfile ext.cnf -out leaf.pem
//! ```
//!
//! `ext.cnf`: `subjectAltName=DNS:localhost,IP:127.0.0.1` (and serverAuth); `big.pem` is the
//! same key certified with 2,000 more names, a 44 KB certificate.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use support::{Echo, TestServer};
use tines_server::scoreboard::metrics::class_index;
use tines_server::tls::rustls::pki_types::pem::PemObject;
use tines_server::tls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tines_server::tls::rustls::{self, ClientConfig, ClientConnection, ServerConfig, StreamOwned};
use tines_server::{App, Exchange, Mpm, Peer, TrustedProxies, WorkerConfig};

fn pem(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/tls-loop")
        .join(name)
}

/// The server's TLS configuration: `cert` (a file of `tests/tls-loop`) and the leaf key.
fn server_config(cert: &str) -> Arc<ServerConfig> {
    let chain = CertificateDer::pem_file_iter(pem(cert))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(pem("leaf.key")).unwrap();
    let config = ServerConfig::builder_with_provider(tines_server::tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    Arc::new(config)
}

fn client_config() -> Arc<ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(pem("ca.pem")).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = ClientConfig::builder_with_provider(tines_server::tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    Arc::new(config)
}

fn client() -> ClientConnection {
    ClientConnection::new(client_config(), ServerName::try_from("localhost").unwrap()).unwrap()
}

fn tls_config(mpm: Mpm, cert: &str) -> WorkerConfig {
    WorkerConfig {
        tls: Some(server_config(cert)),
        ..support::test_config(mpm)
    }
}

type Tls = StreamOwned<ClientConnection, TcpStream>;

fn connect(server: &TestServer) -> Tls {
    StreamOwned::new(client(), server.connect())
}

/// Reads one response (head and a `Content-Length` body): the status line's code, the head,
/// the body. `None` when the connection ends first.
fn read_response(stream: &mut impl Read) -> Option<(u16, String, Vec<u8>)> {
    let mut bytes = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        if let Some(pos) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos + 4;
        }
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return None,
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
        }
    };
    let head = String::from_utf8_lossy(&bytes[..head_end]).to_string();
    let status = head.split(' ').nth(1)?.parse().ok()?;
    let length: usize = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0);
    let mut body = bytes[head_end..].to_vec();
    while body.len() < length {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return None,
            Ok(n) => body.extend_from_slice(&buf[..n]),
        }
    }
    Some((status, head, body))
}

fn get(stream: &mut Tls, target: &str) -> (u16, String, Vec<u8>) {
    let request = format!("GET {target} HTTP/1.1\r\nHost: localhost\r\n\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    read_response(stream).expect("a response")
}

const MPMS: [Mpm; 3] = [Mpm::Prefork, Mpm::Thread, Mpm::Event];

#[test]
fn requests_over_tls_are_served_on_every_mpm_and_the_loop_s_own_errors_are_encrypted() {
    for mpm in MPMS {
        let server = TestServer::start(tls_config(mpm, "leaf.pem"), Echo);
        let mut stream = connect(&server);
        for target in ["/one", "/two"] {
            let (status, _, body) = get(&mut stream, target);
            assert_eq!(status, 200, "{mpm:?}");
            assert!(
                body.starts_with(format!("GET {target}\n").as_bytes()),
                "{mpm:?}: {}",
                String::from_utf8_lossy(&body)
            );
        }
        // A head the loop refuses: its 400 comes through the session.
        stream
            .write_all(b"GET / HTTP/1.1\r\nBad Header\r\n\r\n")
            .unwrap();
        let (status, head, _) = read_response(&mut stream).expect("the 400, encrypted");
        assert_eq!(status, 400, "{mpm:?}");
        assert!(head.contains("Connection: close"), "{head}");

        // A head that stops half-way after the handshake: the loop's 408, encrypted.
        let mut stream = connect(&server);
        stream.write_all(b"GET / HTTP/1.1\r\nHost: loc").unwrap();
        let (status, _, _) = read_response(&mut stream).expect("the 408, encrypted");
        assert_eq!(status, 408, "{mpm:?}");
        server.stop();
    }
}

#[test]
fn a_handshake_flight_larger_than_the_socket_buffers_is_written_as_the_client_reads() {
    for mpm in MPMS {
        let server = TestServer::start(tls_config(mpm, "big.pem"), Echo);
        for _ in 0..3 {
            let tcp = TcpStream::connect(server.addr).unwrap();
            set_receive_buffer(&tcp, 2048);
            tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut stream = StreamOwned::new(client(), tcp);
            let (status, _, _) = get(&mut stream, "/big");
            assert_eq!(status, 200, "{mpm:?}");
            assert!(
                stream.conn.peer_certificates().unwrap()[0].len() > 40_000,
                "the big certificate came whole"
            );
        }
        server.stop();
    }
}

fn set_receive_buffer(stream: &TcpStream, bytes: libc::c_int) {
    use std::os::fd::AsRawFd;
    // SAFETY: setsockopt with a valid int option value and its size.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&bytes as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0);
}

/// The bytes a fresh client sends first: its ClientHello.
fn client_hello() -> Vec<u8> {
    let mut conn = client();
    let mut hello = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut hello).unwrap();
    }
    hello
}

#[test]
fn a_client_hello_sent_one_byte_at_a_time_is_closed_at_the_header_deadline_while_others_are_served()
{
    for mpm in MPMS {
        let server = TestServer::start(tls_config(mpm, "leaf.pem"), Echo);
        let hello = client_hello();
        let mut slow = server.connect();
        slow.write_all(&hello[..1]).unwrap();
        // Another client is served meanwhile (on prefork too: the handshake waits in the
        // poller, not in the one slot).
        let mut other = connect(&server);
        assert_eq!(get(&mut other, "/meanwhile").0, 200, "{mpm:?}");
        // The slow client sends a byte each time a read finds nothing for 200 ms: the
        // header deadline (2 s) closes it long before its ClientHello is whole.
        slow.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut sent = 1;
        let closed = loop {
            let mut byte = [0u8; 1];
            match slow.read(&mut byte) {
                Ok(0) => break true,
                Ok(_) => break false,
                Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(err) if err.kind() == std::io::ErrorKind::TimedOut => {}
                Err(_) => break true,
            }
            assert!(
                sent < hello.len(),
                "{mpm:?}: the whole ClientHello was sent"
            );
            if slow.write_all(&hello[sent..sent + 1]).is_err() {
                break true;
            }
            sent += 1;
        };
        assert!(closed, "{mpm:?}: the server answered a partial ClientHello");
        // The worker goes on.
        assert_eq!(get(&mut connect(&server), "/after").0, 200, "{mpm:?}");
        server.stop();
    }
}

#[test]
fn a_plain_http_request_on_the_tls_port_gets_a_plain_400_and_garbage_is_closed() {
    for mpm in MPMS {
        let server = TestServer::start(tls_config(mpm, "leaf.pem"), Echo);
        let mut plain = server.connect();
        plain
            .write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .unwrap();
        let mut answer = Vec::new();
        let _ = plain.read_to_end(&mut answer);
        let answer = String::from_utf8_lossy(&answer);
        assert!(
            answer.starts_with("HTTP/1.1 400 Bad Request\r\n"),
            "{answer}"
        );
        assert!(answer.contains("\r\nConnection: close\r\n"), "{answer}");
        assert!(answer.ends_with("sent to an HTTPS port.\n"), "{answer}");
        let refused = server
            .scoreboard
            .totals()
            .metrics
            .by_class(class_index(400));
        assert_eq!(refused, 1, "{mpm:?}: the 400 is counted");

        // Neither a record nor a request: closed without an answer.
        let mut garbage = server.connect();
        garbage.write_all(b"\x00\x01\x02\x03garbage").unwrap();
        let mut answer = Vec::new();
        let _ = garbage.read_to_end(&mut answer);
        assert!(
            answer.is_empty() || answer[0] == 0x15,
            "{mpm:?}: at most an alert: {answer:?}"
        );
        // A record that is no ClientHello: the handshake fails (an alert), closed.
        let mut bad = server.connect();
        bad.write_all(b"\x16\x03\x01\x00\x05hello").unwrap();
        let mut answer = Vec::new();
        let _ = bad.read_to_end(&mut answer);
        assert!(
            answer.is_empty() || answer[0] == 0x15,
            "{mpm:?}: {answer:?}"
        );

        // The worker serves on.
        assert_eq!(get(&mut connect(&server), "/after").0, 200, "{mpm:?}");
        server.stop();
    }
}

/// Answers the peer the worker took the client for.
struct PeerEcho;

impl App for PeerEcho {
    fn serve(&self, mut exchange: Box<Exchange>) -> Box<Exchange> {
        let peer = match exchange.peer() {
            Peer::Tcp(addr) => addr.to_string(),
            Peer::Unix => "unix".to_string(),
        };
        exchange
            .begin_response(b"200 OK", [], Some(peer.len() as u64))
            .unwrap();
        exchange.write_body(peer.as_bytes()).unwrap();
        let _ = exchange.finish();
        exchange
    }
}

#[test]
fn a_proxy_header_comes_first_in_plaintext_then_the_handshake() {
    const LINE: &[u8] = b"PROXY TCP4 192.0.2.7 192.0.2.1 4711 443\r\n";
    for mpm in MPMS {
        let config = WorkerConfig {
            proxy_protocol: true,
            trusted_proxies: TrustedProxies::parse(&["127.0.0.1".to_string()]).unwrap(),
            ..tls_config(mpm, "leaf.pem")
        };
        let server = TestServer::start(config, PeerEcho);
        // The header and the ClientHello in one write: the bytes after the header go to the
        // session.
        let mut conn = client();
        let mut first = LINE.to_vec();
        while conn.wants_write() {
            conn.write_tls(&mut first).unwrap();
        }
        let mut tcp = server.connect();
        tcp.write_all(&first).unwrap();
        let mut stream = StreamOwned::new(conn, tcp);
        let (status, _, body) = get(&mut stream, "/");
        assert_eq!(
            (status, &body[..]),
            (200, &b"192.0.2.7:4711"[..]),
            "{mpm:?}"
        );

        // The header alone, then the handshake once it was read.
        let mut tcp = server.connect();
        tcp.write_all(LINE).unwrap();
        let mut stream = StreamOwned::new(client(), tcp);
        let (status, _, body) = get(&mut stream, "/");
        assert_eq!(
            (status, &body[..]),
            (200, &b"192.0.2.7:4711"[..]),
            "{mpm:?}"
        );

        // No header: closed unanswered, as on a plain port.
        let mut stream = connect(&server);
        let request = b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n";
        let answered = stream
            .write_all(request)
            .ok()
            .and_then(|()| read_response(&mut stream));
        assert!(answered.is_none(), "{mpm:?}");
        server.stop();
    }
}

thread_local! {
    /// On the thread that runs the loop: whether the app's interpreter is held (as the Python
    /// app's run_loop_thread and wait do with the GIL).
    static HELD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// An app with an interpreter lock, as the Python one: its loop thread holds it, releases it
/// in `wait`, and answers whether it held it while serving.
struct Interpreter;

impl App for Interpreter {
    fn serve(&self, mut exchange: Box<Exchange>) -> Box<Exchange> {
        let held: &[u8] = if HELD.with(|held| held.get()) {
            b"held"
        } else {
            b"free"
        };
        exchange
            .begin_response(b"200 OK", [], Some(held.len() as u64))
            .unwrap();
        exchange.write_body(held).unwrap();
        let _ = exchange.finish();
        exchange
    }

    fn run_loop_thread(&self, body: &mut dyn FnMut()) {
        HELD.with(|held| held.set(true));
        body();
        HELD.with(|held| held.set(false));
    }

    fn wait(&self, wait: &mut dyn FnMut()) {
        HELD.with(|held| held.set(false));
        wait();
        HELD.with(|held| held.set(true));
    }
}

/// Picks the certificate (during the handshake, on the thread that runs it) and records
/// whether the interpreter was held then.
#[derive(Debug)]
struct Observed {
    key: Arc<rustls::sign::CertifiedKey>,
    held: Arc<std::sync::Mutex<Vec<bool>>>,
}

impl rustls::server::ResolvesServerCert for Observed {
    fn resolve(
        &self,
        _hello: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        self.held.lock().unwrap().push(HELD.with(|held| held.get()));
        Some(Arc::clone(&self.key))
    }
}

#[test]
fn prefork_s_loop_lets_the_interpreter_go_while_it_runs_a_handshake() {
    let chain = CertificateDer::pem_file_iter(pem("leaf.pem"))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(pem("leaf.key")).unwrap();
    let provider = tines_server::tls::provider();
    let key = rustls::sign::CertifiedKey::from_der(chain, key, &provider).unwrap();
    let held = Arc::new(std::sync::Mutex::new(Vec::new()));
    let resolver = Observed {
        key: Arc::new(key),
        held: Arc::clone(&held),
    };
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(resolver));
    let config = WorkerConfig {
        tls: Some(Arc::new(config)),
        ..support::test_config(Mpm::Prefork)
    };
    let server = TestServer::start(config, Interpreter);
    for _ in 0..3 {
        let mut stream = connect(&server);
        let (status, _, body) = get(&mut stream, "/");
        // The app runs with it held (the loop's thread keeps it while it works)...
        assert_eq!((status, &body[..]), (200, &b"held"[..]));
    }
    // ...and the handshakes ran without it.
    assert_eq!(*held.lock().unwrap(), [false, false, false]);
    server.stop();
}
