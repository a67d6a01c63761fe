//! HTTP/2 in the loop and the MPMs (issue 38, ADR 0035), end to end on a real worker and
//! real sockets: h2c with prior knowledge on prefork, thread and event; a listener that
//! speaks both telling HTTP/1.1 from HTTP/2 by the first bytes; `h2` chosen by ALPN on TLS;
//! 100 concurrent streams on one connection; a stream whose client does not read next to one
//! that does; the drain's two-step GOAWAY letting the open stream finish; prefork's one
//! stream at a time; a PROXY header before the preface; `max_queued_requests`' 503 on a
//! stream; an idle connection's GOAWAY at `keepalive_timeout`.
//!
//! The clients: the `h2` crate on a tokio runtime, and raw frames where the test must see the
//! frames themselves (TLS, the GOAWAYs). The certificates are `tests/tls-loop`'s.

mod support;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::{describe_request, read_whole_body, Echo, TestServer};
use tines_server::h2::PREFACE;
use tines_server::listener::H2c;
use tines_server::tls::rustls::pki_types::pem::PemObject;
use tines_server::tls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tines_server::tls::rustls::{self, ClientConfig, ClientConnection, ServerConfig, StreamOwned};
use tines_server::{App, Exchange, Mpm, Peer, StopReason, TrustedProxies, WorkerConfig};

/// The most a test waits for the server (a failure, not a pace: nothing waits on it).
const PATIENCE: Duration = Duration::from_secs(30);

/// Runs `test` on a one-thread tokio runtime, within [`PATIENCE`].
fn block_on<T>(test: impl std::future::Future<Output = T>) -> T {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .unwrap();
    runtime
        .block_on(async { tokio::time::timeout(PATIENCE, test).await })
        .expect("the server answered within the test's patience")
}

/// An h2 client connection to `addr` with prior knowledge, its connection task spawned.
async fn h2_client(
    addr: SocketAddr,
    builder: h2::client::Builder,
) -> h2::client::SendRequest<bytes::Bytes> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (client, connection) = builder.handshake(tcp).await.unwrap();
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// GETs `path` on `client`: the status and the whole body (capacity released as it comes).
async fn get(client: &h2::client::SendRequest<bytes::Bytes>, path: &str) -> (u16, Vec<u8>) {
    let client = client.clone().ready().await.unwrap();
    let mut client = client;
    let request = http::Request::builder()
        .uri(format!("http://localhost{path}"))
        .body(())
        .unwrap();
    let (response, _) = client.send_request(request, true).unwrap();
    let response = response.await.unwrap();
    let status = response.status().as_u16();
    let mut body = response.into_body();
    let mut bytes = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
        bytes.extend_from_slice(&chunk);
    }
    (status, bytes)
}

/// Answers `/big` with [`BIG`] bytes, holds `/gate` until the test opens it (telling it
/// entered), and echoes anything else.
struct Paths {
    entered: Mutex<Sender<()>>,
    open: Mutex<Receiver<()>>,
}

const BIG: usize = 4 << 20;

impl Paths {
    fn new() -> (Paths, Receiver<()>, Sender<()>) {
        let (entered, entered_rx) = channel();
        let (open_tx, open) = channel();
        let paths = Paths {
            entered: Mutex::new(entered),
            open: Mutex::new(open),
        };
        (paths, entered_rx, open_tx)
    }
}

impl App for Paths {
    fn serve(&self, mut exchange: Box<Exchange>) -> Box<Exchange> {
        let body = read_whole_body(&mut exchange).unwrap_or_default();
        let out = match exchange.target() {
            b"/big" => vec![b'x'; BIG],
            b"/gate" => {
                self.entered.lock().unwrap().send(()).unwrap();
                // Bounded: a test that failed before opening it must not hang its worker.
                let _ = self.open.lock().unwrap().recv_timeout(PATIENCE);
                b"through the gate".to_vec()
            }
            _ => describe_request(&exchange, &body),
        };
        let ct: [(&[u8], &[u8]); 1] = [(b"Content-Type", b"text/plain")];
        if exchange
            .begin_response(b"200 OK", ct, Some(out.len() as u64))
            .is_ok()
        {
            let _ = exchange.write_body(&out);
            let _ = exchange.finish();
        }
        exchange
    }
}

fn h2c_get_on(mpm: Mpm, threads: usize) {
    let config = WorkerConfig {
        threads,
        ..support::test_config(mpm)
    };
    let server = TestServer::start_h2c(config, Echo, H2c::Only);
    let addr = server.addr;
    let (status, body) = block_on(async move {
        let client = h2_client(addr, h2::client::Builder::new()).await;
        get(&client, "/hello?x=1").await
    });
    assert_eq!(status, 200);
    let text = String::from_utf8(body).unwrap();
    assert!(text.starts_with("GET /hello?x=1\n"), "{text}");
    // From `:authority` (a header name's case is the synthesizer's).
    assert!(
        text.to_ascii_lowercase().contains("\nhost: localhost\n"),
        "{text}"
    );
    assert_eq!(server.stop(), StopReason::MasterGone);
}

#[test]
fn an_h2c_get_with_prior_knowledge_is_answered_on_prefork() {
    h2c_get_on(Mpm::Prefork, 1);
}

#[test]
fn an_h2c_get_with_prior_knowledge_is_answered_on_thread() {
    h2c_get_on(Mpm::Thread, 2);
}

#[test]
fn an_h2c_get_with_prior_knowledge_is_answered_on_event() {
    h2c_get_on(Mpm::Event, 2);
}

#[test]
fn an_h2c_get_with_prior_knowledge_is_answered_on_event_without_threads() {
    h2c_get_on(Mpm::Event, 0);
}

#[test]
fn a_listener_that_speaks_both_tells_http1_from_http2_by_the_first_bytes() {
    let server = TestServer::start_h2c(support::test_config(Mpm::Thread), Echo, H2c::Both);
    // HTTP/1.1, its first bytes sent one by one: "P" could begin the preface, "PO" cannot.
    let mut http1 = server.connect();
    for byte in b"POST /one HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi"
    {
        http1.write_all(&[*byte]).unwrap();
    }
    let mut answer = Vec::new();
    http1.read_to_end(&mut answer).unwrap();
    let answer = String::from_utf8(answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    assert!(answer.ends_with("POST /one\nHost: x\nContent-Length: 2\nConnection: close\n\nhi"));
    // HTTP/2: the preface, in two writes (a prefix of it waits for the rest).
    let mut raw = server.connect();
    raw.write_all(&PREFACE[..10]).unwrap();
    raw.write_all(&PREFACE[10..]).unwrap();
    raw.write_all(&frame(SETTINGS, 0, 0, &[])).unwrap();
    raw.write_all(&frame(
        HEADERS,
        END_STREAM | END_HEADERS,
        1,
        &get_block("/two", false),
    ))
    .unwrap();
    let (headers, body) = read_response(&mut raw, 1);
    assert_eq!(headers.first(), Some(&STATUS_200), "{headers:?}");
    let body = String::from_utf8(body).unwrap();
    assert!(body.starts_with("GET /two\n"), "{body}");
    // And the h2 crate's client, on the same listener.
    let addr = server.addr;
    let (status, body) = block_on(async move {
        let client = h2_client(addr, h2::client::Builder::new()).await;
        get(&client, "/three").await
    });
    assert_eq!(status, 200);
    assert!(body.starts_with(b"GET /three\n"));
    assert_eq!(server.stop(), StopReason::MasterGone);
}

#[test]
fn a_hundred_concurrent_streams_on_one_connection_are_all_answered_on_thread() {
    let config = WorkerConfig {
        threads: 4,
        ..support::test_config(Mpm::Thread)
    };
    let server = TestServer::start_h2c(config, Echo, H2c::Only);
    let addr = server.addr;
    let answers = block_on(async move {
        let client = h2_client(addr, h2::client::Builder::new()).await;
        let tasks: Vec<_> = (0..100)
            .map(|n| {
                let client = client.clone();
                tokio::spawn(async move { (n, get(&client, &format!("/stream/{n}")).await) })
            })
            .collect();
        let mut answers = Vec::new();
        for task in tasks {
            answers.push(task.await.unwrap());
        }
        answers
    });
    assert_eq!(answers.len(), 100);
    for (n, (status, body)) in answers {
        assert_eq!(status, 200, "stream {n}");
        let expected = format!("GET /stream/{n}\n");
        assert!(body.starts_with(expected.as_bytes()), "stream {n}");
    }
    assert_eq!(server.stop(), StopReason::MasterGone);
}

#[test]
fn a_stream_whose_client_does_not_read_holds_up_no_other_stream() {
    let (paths, _entered, _open) = Paths::new();
    let server = TestServer::start_h2c(support::test_config(Mpm::Thread), paths, H2c::Only);
    let addr = server.addr;
    let (small, big) = block_on(async move {
        // A small stream window (the big response stops at it until the client reads), a
        // connection window that leaves room for the other stream.
        let mut builder = h2::client::Builder::new();
        builder
            .initial_window_size(65_535)
            .initial_connection_window_size(64 << 20);
        let client = h2_client(addr, builder).await;
        let mut sender = client.clone().ready().await.unwrap();
        let request = http::Request::builder()
            .uri("http://localhost/big")
            .body(())
            .unwrap();
        let (big, _) = sender.send_request(request, true).unwrap();
        let big = big.await.unwrap();
        assert_eq!(big.status().as_u16(), 200);
        // Not read yet: the big stream waits for its window, the small one goes by.
        let small = get(&client, "/small").await;
        let mut body = big.into_body();
        let mut received = 0;
        while let Some(chunk) = body.data().await {
            let chunk = chunk.unwrap();
            received += chunk.len();
            let _ = body.flow_control().release_capacity(chunk.len());
        }
        (small, received)
    });
    assert_eq!(small.0, 200);
    assert!(small.1.starts_with(b"GET /small\n"));
    assert_eq!(big, BIG, "the slow reader's response came whole");
    assert_eq!(server.stop(), StopReason::MasterGone);
}

#[test]
fn a_drain_sends_two_goaways_and_lets_the_open_stream_finish() {
    let (paths, entered, open) = Paths::new();
    let mut server = TestServer::start_h2c(support::test_config(Mpm::Thread), paths, H2c::Only);
    let mut raw = server.connect();
    raw.write_all(PREFACE).unwrap();
    raw.write_all(&frame(SETTINGS, 0, 0, &[])).unwrap();
    raw.write_all(&frame(
        HEADERS,
        END_STREAM | END_HEADERS,
        1,
        &get_block("/gate", false),
    ))
    .unwrap();
    entered
        .recv_timeout(PATIENCE)
        .expect("the request reached the app");
    // The master goes away: the worker drains.
    server.close_life_pipe();
    let mut goaways = Vec::new();
    let mut pinged = false;
    while goaways.len() < 2 {
        let (kind, flags, stream, payload) = read_frame(&mut raw).expect("a frame");
        match kind {
            SETTINGS if flags & ACK == 0 => raw.write_all(&frame(SETTINGS, ACK, 0, &[])).unwrap(),
            PING if flags & ACK == 0 => {
                assert_eq!(goaways.len(), 1, "the PING comes with the first GOAWAY");
                pinged = true;
                raw.write_all(&frame(PING, ACK, 0, &payload)).unwrap();
            }
            GOAWAY => {
                assert_eq!(stream, 0);
                let last = u32::from_be_bytes(payload[..4].try_into().unwrap()) & 0x7fff_ffff;
                let code = u32::from_be_bytes(payload[4..8].try_into().unwrap());
                assert_eq!(code, 0, "NO_ERROR");
                goaways.push(last);
            }
            _ => {}
        }
    }
    assert!(pinged);
    assert_eq!(
        goaways,
        [0x7fff_ffff, 1],
        "first every stream, then the real last one"
    );
    open.send(()).unwrap();
    let (headers, body) = read_response(&mut raw, 1);
    assert_eq!(headers.first(), Some(&STATUS_200));
    assert_eq!(body, b"through the gate");
    assert_eq!(server.wait(), StopReason::MasterGone);
}

#[test]
fn prefork_advertises_one_concurrent_stream_and_thread_the_setting() {
    for (mpm, expected) in [(Mpm::Prefork, 1), (Mpm::Thread, 100)] {
        let server = TestServer::start_h2c(support::test_config(mpm), Echo, H2c::Only);
        let mut raw = server.connect();
        raw.write_all(PREFACE).unwrap();
        raw.write_all(&frame(SETTINGS, 0, 0, &[])).unwrap();
        let (kind, flags, _, payload) = read_frame(&mut raw).expect("the server's SETTINGS");
        assert_eq!((kind, flags), (SETTINGS, 0), "{mpm:?}");
        let max_concurrent_streams = payload
            .chunks(6)
            .find(|setting| setting[..2] == [0, 3])
            .map(|setting| u32::from_be_bytes(setting[2..].try_into().unwrap()));
        assert_eq!(max_concurrent_streams, Some(expected), "{mpm:?}");
        assert_eq!(server.stop(), StopReason::MasterGone);
    }
}

#[test]
fn a_proxy_header_comes_before_the_preface_and_names_the_client() {
    for h2c in [H2c::Only, H2c::Both] {
        let config = WorkerConfig {
            proxy_protocol: true,
            trusted_proxies: TrustedProxies::parse(&["127.0.0.1".to_string()]).unwrap(),
            ..support::test_config(Mpm::Thread)
        };
        let server = TestServer::start_h2c(config, PeerEcho, h2c);
        let mut raw = server.connect();
        let mut first = b"PROXY TCP4 192.0.2.7 192.0.2.1 4711 80\r\n".to_vec();
        first.extend_from_slice(&PREFACE[..5]);
        raw.write_all(&first).unwrap();
        raw.write_all(&PREFACE[5..]).unwrap();
        raw.write_all(&frame(SETTINGS, 0, 0, &[])).unwrap();
        raw.write_all(&frame(
            HEADERS,
            END_STREAM | END_HEADERS,
            1,
            &get_block("/", false),
        ))
        .unwrap();
        let (headers, body) = read_response(&mut raw, 1);
        assert_eq!(headers.first(), Some(&STATUS_200), "{h2c:?}");
        assert_eq!(body, b"192.0.2.7:4711", "{h2c:?}");
        assert_eq!(server.stop(), StopReason::MasterGone);
    }
}

#[test]
fn a_stream_past_max_queued_requests_is_answered_503_and_the_others_are_served() {
    let (paths, entered, open) = Paths::new();
    let config = WorkerConfig {
        threads: 1,
        max_queued_requests: 1,
        ..support::test_config(Mpm::Thread)
    };
    let server = TestServer::start_h2c(config, paths, H2c::Only);
    let mut raw = server.connect();
    raw.write_all(PREFACE).unwrap();
    raw.write_all(&frame(SETTINGS, 0, 0, &[])).unwrap();
    raw.write_all(&frame(
        HEADERS,
        END_STREAM | END_HEADERS,
        1,
        &get_block("/gate", false),
    ))
    .unwrap();
    entered
        .recv_timeout(PATIENCE)
        .expect("the first request holds the app thread");
    // The one app thread is taken: the next request waits in the queue, the one after is
    // refused.
    raw.write_all(&frame(
        HEADERS,
        END_STREAM | END_HEADERS,
        3,
        &get_block("/queued", false),
    ))
    .unwrap();
    raw.write_all(&frame(
        HEADERS,
        END_STREAM | END_HEADERS,
        5,
        &get_block("/refused", false),
    ))
    .unwrap();
    let (refused, _) = read_response(&mut raw, 5);
    open.send(()).unwrap();
    // `:status` by its static-table name (8), its value "503" literal or Huffman-coded.
    assert!(
        refused.starts_with(&[0x48, 3, b'5', b'0', b'3'])
            || refused.starts_with(&[0x48, 0x83, 0x6c, 0x0c, 0xff])
            || refused.starts_with(&[0x08, 3, b'5', b'0', b'3'])
            || refused.starts_with(&[0x08, 0x83, 0x6c, 0x0c, 0xff]),
        ":status 503: {refused:?}"
    );
    let mut served = read_responses(&mut raw, &[1, 3]);
    let (headers, body) = served.remove(&1).unwrap();
    assert_eq!(headers.first(), Some(&STATUS_200));
    assert_eq!(body, b"through the gate");
    let (headers, body) = served.remove(&3).unwrap();
    assert_eq!(headers.first(), Some(&STATUS_200));
    assert!(body.starts_with(b"GET /queued\n"));
    assert_eq!(server.stop(), StopReason::MasterGone);
}

#[test]
fn an_idle_http2_connection_is_closed_with_a_goaway_after_keepalive_timeout() {
    let server = TestServer::start_h2c(support::test_config(Mpm::Event), Echo, H2c::Only);
    let mut raw = server.connect();
    raw.write_all(PREFACE).unwrap();
    raw.write_all(&frame(SETTINGS, 0, 0, &[])).unwrap();
    raw.write_all(&frame(
        HEADERS,
        END_STREAM | END_HEADERS,
        1,
        &get_block("/", false),
    ))
    .unwrap();
    let (headers, _) = read_response(&mut raw, 1);
    assert_eq!(headers.first(), Some(&STATUS_200));
    // Nothing more is sent: the server says GOAWAY, then closes.
    let mut goaway = None;
    while let Some((kind, _, _, payload)) = read_frame(&mut raw) {
        if kind == GOAWAY {
            goaway = Some(payload);
        }
    }
    let goaway = goaway.expect("a GOAWAY before the close");
    assert_eq!(&goaway[4..8], &[0, 0, 0, 0], "NO_ERROR");
    // The last GOAWAY names the last stream processed (review 38 finding 4).
    assert_eq!(&goaway[0..4], &[0, 0, 0, 1], "last stream id");
    assert_eq!(server.stop(), StopReason::MasterGone);
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

fn pem(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/tls-loop")
        .join(name)
}

fn tls_server_config() -> Arc<ServerConfig> {
    let chain = CertificateDer::pem_file_iter(pem("leaf.pem"))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(pem("leaf.key")).unwrap();
    let mut config = ServerConfig::builder_with_provider(tines_server::tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Arc::new(config)
}

fn tls_client(alpn: &[u8]) -> ClientConnection {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(pem("ca.pem")).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut config = ClientConfig::builder_with_provider(tines_server::tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    ClientConnection::new(Arc::new(config), ServerName::try_from("localhost").unwrap()).unwrap()
}

#[test]
fn alpn_h2_on_a_tls_listener_speaks_http2_and_http1_1_still_speaks_http1() {
    for mpm in [Mpm::Prefork, Mpm::Thread] {
        let config = WorkerConfig {
            tls: Some(tls_server_config()),
            ..support::test_config(mpm)
        };
        let server = TestServer::start(config, Echo);
        let mut tls = StreamOwned::new(tls_client(b"h2"), server.connect());
        tls.write_all(PREFACE).unwrap();
        tls.write_all(&frame(SETTINGS, 0, 0, &[])).unwrap();
        tls.write_all(&frame(
            HEADERS,
            END_STREAM | END_HEADERS,
            1,
            &get_block("/tls", true),
        ))
        .unwrap();
        assert_eq!(tls.conn.alpn_protocol(), Some(&b"h2"[..]));
        let (headers, body) = read_response(&mut tls, 1);
        assert_eq!(headers.first(), Some(&STATUS_200), "{mpm:?}");
        assert!(body.starts_with(b"GET /tls\n"), "{mpm:?}");

        let mut tls = StreamOwned::new(tls_client(b"http/1.1"), server.connect());
        tls.write_all(b"GET /one HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut answer = Vec::new();
        let _ = tls.read_to_end(&mut answer);
        assert_eq!(tls.conn.alpn_protocol(), Some(&b"http/1.1"[..]));
        assert!(answer.starts_with(b"HTTP/1.1 200 OK\r\n"), "{mpm:?}");
        assert_eq!(server.stop(), StopReason::MasterGone);
    }
}

// Raw frames (RFC 9113 4.1, 6), for the tests that must see them.
const DATA: u8 = 0;
const HEADERS: u8 = 1;
const SETTINGS: u8 = 4;
const PING: u8 = 6;
const GOAWAY: u8 = 7;
const END_STREAM: u8 = 1;
const ACK: u8 = 1;
const END_HEADERS: u8 = 4;
/// HPACK's indexed `:status: 200` (static table entry 8), how the server encodes it.
const STATUS_200: u8 = 0x88;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut out = len.to_be_bytes()[1..].to_vec();
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// A GET's header block: indexed `:method GET` and `:scheme`, literal `:path` and
/// `:authority` (without indexing, no Huffman).
fn get_block(path: &str, https: bool) -> Vec<u8> {
    let mut block = vec![0x82, if https { 0x87 } else { 0x86 }];
    for (index, value) in [(4u8, path), (1, "localhost")] {
        block.push(index);
        block.push(value.len() as u8);
        block.extend_from_slice(value.as_bytes());
    }
    block
}

fn read_frame(from: &mut impl Read) -> Option<(u8, u8, u32, Vec<u8>)> {
    let mut head = [0u8; 9];
    from.read_exact(&mut head).ok()?;
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let stream = u32::from_be_bytes(head[5..9].try_into().unwrap()) & 0x7fff_ffff;
    let mut payload = vec![0; len];
    from.read_exact(&mut payload).ok()?;
    Some((head[3], head[4], stream, payload))
}

/// Reads frames until `stream` ends: its header block (the first HEADERS) and its DATA;
/// acknowledges the server's SETTINGS on the way.
fn read_response(from: &mut (impl Read + Write), stream: u32) -> (Vec<u8>, Vec<u8>) {
    read_responses(from, &[stream]).remove(&stream).unwrap()
}

/// Reads frames until each of `streams` ended (their frames may come interleaved): each
/// one's header block (its first HEADERS) and DATA.
fn read_responses(
    from: &mut (impl Read + Write),
    streams: &[u32],
) -> HashMap<u32, (Vec<u8>, Vec<u8>)> {
    let mut responses: HashMap<u32, (Option<Vec<u8>>, Vec<u8>)> = HashMap::new();
    let mut open = streams.len();
    while open > 0 {
        let (kind, flags, id, payload) = read_frame(from).expect("a frame");
        let ours = streams.contains(&id);
        match kind {
            SETTINGS if flags & ACK == 0 => from.write_all(&frame(SETTINGS, ACK, 0, &[])).unwrap(),
            HEADERS if ours => {
                responses.entry(id).or_default().0.get_or_insert(payload);
            }
            DATA if ours => responses
                .entry(id)
                .or_default()
                .1
                .extend_from_slice(&payload),
            GOAWAY => panic!("GOAWAY before the streams ended: {payload:?}"),
            _ => {}
        }
        if ours && matches!(kind, HEADERS | DATA) && flags & END_STREAM != 0 {
            open -= 1;
        }
    }
    responses
        .into_iter()
        .map(|(id, (headers, body))| (id, (headers.expect("a HEADERS frame"), body)))
        .collect()
}
