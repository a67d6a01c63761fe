//! The HTTP/2 connection over real TCP sockets on 127.0.0.1: a small loop (this file's
//! `Server`) advances an [`H2Conn`] on the socket's and the waker's readiness and runs each
//! opened stream on a thread of its own, as a slot would; the client is the `h2` crate's own
//! (on a tokio runtime, client side only) or hand-written frames. Synchronised on what the
//! sockets carry and on channels, never on sleeps; the read timeouts only turn a hang into a
//! failure.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, StatusCode};

use super::H2Config;
use super::Wire;
use super::{H2Conn, H2Context, H2Stream, PREFACE};

/// A hang becomes a failure after this long (never a synchronisation).
const SAFETY: Duration = Duration::from_secs(20);

type Slot = Arc<dyn Fn(Box<H2Stream>) + Send + Sync>;

/// A loop serving one connection: advances it when the socket or the waker is ready, and
/// runs each opened stream's `slot` on a thread of its own.
struct Server {
    conn: Arc<H2Conn>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    fn start(config: H2Config, budget: usize, slot: Slot) -> (Server, TcpStream) {
        Server::start_with(config, budget, false, slot)
    }

    /// `inline`: as prefork does, one stream at a time, each run on the loop's own thread
    /// (its blocking calls drive the connection), no waker.
    fn start_with(
        config: H2Config,
        budget: usize,
        inline: bool,
        slot: Slot,
    ) -> (Server, TcpStream) {
        Server::start_timed(config, budget, inline, SAFETY, slot)
    }

    /// `send_timeout`: how long a dropped stream's bytes may wait for the client's window.
    fn start_timed(
        config: H2Config,
        budget: usize,
        inline: bool,
        send_timeout: Duration,
        slot: Slot,
    ) -> (Server, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        client.set_read_timeout(Some(SAFETY)).unwrap();
        let (socket, _) = listener.accept().unwrap();
        socket.set_nonblocking(true).unwrap();
        // SAFETY: a new eventfd, owned from here on.
        let waker = unsafe { OwnedFd::from_raw_fd(libc::eventfd(0, libc::EFD_NONBLOCK)) };
        let conn = Arc::new(H2Conn::new(
            Wire::Plain(socket.into()),
            &[],
            H2Context {
                config,
                inline,
                waker: (!inline).then(|| waker.as_raw_fd()),
                one_stream: inline,
                stream_output_budget: budget,
                send_timeout,
            },
        ));
        let looped = Arc::clone(&conn);
        let thread = std::thread::spawn(move || serve(&looped, &waker, inline, &slot));
        (
            Server {
                conn,
                thread: Some(thread),
            },
            client,
        )
    }

    /// Waits for the loop to see the connection finished.
    fn join(mut self) {
        self.thread.take().unwrap().join().unwrap();
    }
}

fn serve(conn: &H2Conn, waker: &OwnedFd, inline: bool, slot: &Slot) {
    let mut token = 0;
    let mut slots = Vec::new();
    loop {
        let advance = conn.advance(Instant::now());
        for stream in advance.opened {
            token += 1;
            stream.set_token(token);
            if inline {
                slot(stream);
                continue;
            }
            let slot = Arc::clone(slot);
            slots.push(std::thread::spawn(move || slot(stream)));
        }
        if advance.finished {
            break;
        }
        let socket_events = if advance.wants_write {
            libc::POLLIN | libc::POLLOUT
        } else {
            libc::POLLIN
        };
        let mut fds = [
            libc::pollfd {
                fd: conn.fd(),
                events: socket_events,
                revents: 0,
            },
            libc::pollfd {
                fd: waker.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        if conn.needs_advance() {
            continue;
        }
        let timeout = advance.deadline.map_or(SAFETY, |until| {
            until.saturating_duration_since(Instant::now()) + Duration::from_millis(1)
        });
        // SAFETY: two valid pollfds for the duration of the call.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout.as_millis() as i32) };
        assert!(
            ready > 0 || advance.deadline.is_some(),
            "the loop waited {SAFETY:?} for nothing"
        );
        if fds[1].revents != 0 {
            let mut count = [0u8; 8];
            // SAFETY: eight writable bytes.
            unsafe { libc::read(waker.as_raw_fd(), count.as_mut_ptr().cast(), 8) };
        }
    }
    for slot in slots {
        slot.join().unwrap();
    }
}

/// The request's HTTP/1.1 bytes, to their end.
fn read_request(stream: &H2Stream) -> Vec<u8> {
    let mut request = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = match stream.read_by(&mut buf, Instant::now() + SAFETY, "test read") {
            Ok(n) => n,
            Err(e) => panic!("{e} {} got {}", stream.debug(), request.len()),
        };
        if n == 0 {
            return request;
        }
        request.extend_from_slice(&buf[..n]);
    }
}

fn respond(stream: &H2Stream, response: &[u8]) {
    if let Err(err) = stream.write_all_from(&[response], 0, SAFETY) {
        panic!("{err}: {}", stream.debug());
    }
    stream.shutdown_write();
}

/// A slot that sends each request's bytes on `requests` and answers `response`.
fn echoing(requests: mpsc::Sender<Vec<u8>>, response: &'static [u8]) -> Slot {
    let requests = std::sync::Mutex::new(requests);
    Arc::new(move |stream: Box<H2Stream>| {
        let request = read_request(&stream);
        requests.lock().unwrap().send(request).unwrap();
        respond(&stream, response);
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// What the h2 client got: status, fields, body, trailers.
#[derive(Debug)]
struct Got {
    status: StatusCode,
    headers: http::HeaderMap,
    body: Vec<u8>,
    trailers: Option<http::HeaderMap>,
}

/// Sends `request` (with `body` and `trailers`) on a new h2 client connection over
/// `socket`, and reads the whole response.
fn exchange(
    socket: TcpStream,
    request: Request<()>,
    body: &[&'static [u8]],
    trailers: Option<http::HeaderMap>,
    window: u32,
) -> Got {
    runtime().block_on(async move {
        socket.set_nonblocking(true).unwrap();
        let socket = tokio::net::TcpStream::from_std(socket).unwrap();
        let (mut client, connection) = h2::client::Builder::new()
            .initial_window_size(window)
            .handshake::<_, Bytes>(socket)
            .await
            .unwrap();
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let end = body.is_empty() && trailers.is_none();
        let (response, mut send) = client.send_request(request, end).unwrap();
        // h2 buffers what the window does not let go yet.
        for (i, part) in body.iter().enumerate() {
            let last = i + 1 == body.len() && trailers.is_none();
            send.send_data(Bytes::from_static(part), last).unwrap();
        }
        if let Some(trailers) = trailers {
            send.send_trailers(trailers).unwrap();
        }
        let response = response.await.unwrap();
        let (parts, mut recv) = response.into_parts();
        let mut got = Vec::new();
        while let Some(data) = recv.data().await {
            let data = data.unwrap();
            recv.flow_control().release_capacity(data.len()).unwrap();
            got.extend_from_slice(&data);
        }
        let trailers = recv.trailers().await.unwrap();
        Got {
            status: parts.status,
            headers: parts.headers,
            body: got,
            trailers,
        }
    })
}

#[test]
fn get_is_synthesized_and_its_response_transcoded() {
    let (requests, seen) = mpsc::channel();
    let slot = echoing(
        requests,
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: keep-alive\r\nX-Answer: 42\r\n\r\nhello",
    );
    let (server, client) = Server::start(H2Config::default(), 1 << 20, slot);
    let request = Request::get("http://example.com/a/b?c=d")
        .header("accept", "text/plain")
        .header("cookie", "a=1")
        .header("cookie", "b=2")
        .body(())
        .unwrap();
    let got = exchange(client, request, &[], None, 65535);
    assert_eq!(
        String::from_utf8(seen.recv().unwrap()).unwrap(),
        "GET /a/b?c=d HTTP/1.1\r\nhost: example.com\r\naccept: text/plain\r\ncookie: a=1; b=2\r\n\r\n"
    );
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.headers["x-answer"], "42");
    assert_eq!(got.headers["content-length"], "5");
    assert!(got.headers.get("connection").is_none());
    assert_eq!(got.body, b"hello");
    server.join();
}

#[test]
fn post_with_a_length_keeps_its_body_as_it_is() {
    let (requests, seen) = mpsc::channel();
    let slot = echoing(requests, b"HTTP/1.1 204 No Content\r\n\r\n");
    let (server, client) = Server::start(H2Config::default(), 1 << 20, slot);
    let request = Request::post("http://h/upload")
        .header("content-length", "11")
        .body(())
        .unwrap();
    let got = exchange(client, request, &[b"hello ", b"world"], None, 65535);
    assert_eq!(
        String::from_utf8(seen.recv().unwrap()).unwrap(),
        "POST /upload HTTP/1.1\r\nhost: h\r\ncontent-length: 11\r\n\r\nhello world"
    );
    assert_eq!(got.status, StatusCode::NO_CONTENT);
    assert!(got.body.is_empty());
    server.join();
}

#[test]
fn trailers_both_ways_through_chunked_bodies() {
    let (requests, seen) = mpsc::channel();
    let slot = echoing(
        requests,
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-Checksum: 7\r\n\r\n",
    );
    let (server, client) = Server::start(H2Config::default(), 1 << 20, slot);
    let mut trailers = http::HeaderMap::new();
    trailers.insert("x-sent", "yes".parse().unwrap());
    let request = Request::post("http://h/stream").body(()).unwrap();
    let got = exchange(client, request, &[b"ab", b"cde"], Some(trailers), 65535);
    let request = String::from_utf8(seen.recv().unwrap()).unwrap();
    assert!(
        request
            .starts_with("POST /stream HTTP/1.1\r\nhost: h\r\ntransfer-encoding: chunked\r\n\r\n"),
        "{request}"
    );
    // The DATA frames' boundaries are the client's; their bytes and the trailers are not.
    let body = &request[request.find("\r\n\r\n").unwrap() + 4..];
    let mut decoded = Vec::new();
    let mut decoder = tines_proto::chunked::ChunkedDecoder::new(1024);
    let mut at = 0;
    loop {
        let (used, event) = decoder.decode(&body.as_bytes()[at..]).unwrap();
        if let tines_proto::chunked::ChunkedEvent::Data(range) = &event {
            decoded.extend_from_slice(&body.as_bytes()[at..][range.clone()]);
        }
        at += used;
        if event == tines_proto::chunked::ChunkedEvent::End {
            break;
        }
    }
    assert_eq!(decoded, b"abcde");
    assert!(body.ends_with("0\r\nx-sent: yes\r\n\r\n"), "{body:?}");
    assert_eq!(got.body, b"abc");
    assert_eq!(got.trailers.unwrap()["x-checksum"], "7");
    assert!(got.headers.get("transfer-encoding").is_none());
    server.join();
}

#[test]
fn head_response_has_no_data() {
    let (requests, _seen) = mpsc::channel();
    let slot = echoing(requests, b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n");
    let (server, client) = Server::start(H2Config::default(), 1 << 20, slot);
    let request = Request::head("http://h/").body(()).unwrap();
    let got = exchange(client, request, &[], None, 65535);
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.headers["content-length"], "100");
    assert!(got.body.is_empty());
    server.join();
}

#[test]
fn the_window_opens_as_the_body_is_read() {
    // A body four times the stream window arrives only if reading it reopens the window.
    // (The window is the protocol's default: a smaller one races the client's first DATA
    // against our SETTINGS, which the report of issue 38 tells of.)
    static BODY: [u8; 4 * 65535] = [b'x'; 4 * 65535];
    let (requests, seen) = mpsc::channel();
    let slot = echoing(requests, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    let config = H2Config {
        initial_window_size: 65535,
        connection_window_size: 65535,
        ..H2Config::default()
    };
    let (server, client) = Server::start(config, 1 << 20, slot);
    let request = Request::post("http://h/big")
        .header("content-length", BODY.len().to_string())
        .body(())
        .unwrap();
    let got = exchange(client, request, &[&BODY], None, 65535);
    let request = seen.recv().unwrap();
    assert!(request.ends_with(&BODY));
    assert_eq!(got.body, b"ok");
    server.join();
}

#[test]
fn a_large_response_follows_the_clients_window() {
    static BODY: [u8; 300 * 1024] = [b'y'; 300 * 1024];
    let response: &'static [u8] = Box::leak(
        [
            b"HTTP/1.1 200 OK\r\nContent-Length: 307200\r\n\r\n".as_slice(),
            &BODY,
        ]
        .concat()
        .into_boxed_slice(),
    );
    let (requests, _seen) = mpsc::channel();
    // A budget far smaller than the body: writes wait for the window the client opens. The
    // client's WINDOW_UPDATEs (about one per 32 KiB) are far over a control rate of one per
    // second, but they follow our output: no flood.
    let config = H2Config {
        max_control_rate: 1,
        ..H2Config::default()
    };
    let (server, client) = Server::start(config, 16 * 1024, echoing(requests, response));
    let request = Request::get("http://h/big").body(()).unwrap();
    let got = exchange(client, request, &[], None, 65535);
    assert_eq!(got.body.len(), BODY.len());
    server.join();
}

// ---- hand-written frames ----

const SETTINGS: u8 = 0x4;
const WINDOW_UPDATE: u8 = 0x8;
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const DATA: u8 = 0x0;
const RST_STREAM: u8 = 0x3;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const ACK: u8 = 0x1;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut out = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// GET / with :authority "a", HPACK without Huffman or indexing.
const GET_BLOCK: [u8; 6] = [0x82, 0x86, 0x84, 0x01, 0x01, b'a'];

/// The next frame (kind, flags, stream, payload); `None` at a clean EOF. A reset
/// connection fails the test.
fn next_frame(socket: &mut TcpStream) -> Option<(u8, u8, u32, Vec<u8>)> {
    let mut header = [0u8; 9];
    match socket.read_exact(&mut header) {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::UnexpectedEof => return None,
        Err(err) => panic!("reading a frame: {err}"),
    }
    let len = usize::from(header[0]) << 16 | usize::from(header[1]) << 8 | usize::from(header[2]);
    let mut payload = vec![0; len];
    socket.read_exact(&mut payload).unwrap();
    let stream = u32::from_be_bytes(header[5..9].try_into().unwrap()) & 0x7fff_ffff;
    Some((header[3], header[4], stream, payload))
}

/// Reads frames until a GOAWAY: (last stream id, error code).
fn goaway(socket: &mut TcpStream) -> (u32, u32) {
    loop {
        let (kind, _, _, payload) = next_frame(socket).expect("a GOAWAY before the end");
        if kind == GOAWAY {
            let last = u32::from_be_bytes(payload[0..4].try_into().unwrap());
            let code = u32::from_be_bytes(payload[4..8].try_into().unwrap());
            return (last, code);
        }
    }
}

/// Reads to a clean EOF (a reset connection fails).
fn until_eof(socket: &mut TcpStream) {
    while next_frame(socket).is_some() {}
}

fn handshake_bytes() -> Vec<u8> {
    let mut bytes = PREFACE.to_vec();
    bytes.extend(frame(SETTINGS, 0, 0, &[]));
    bytes
}

const ENHANCE_YOUR_CALM: u32 = 0xb;
const PROTOCOL_ERROR: u32 = 0x1;

fn never_called() -> Slot {
    Arc::new(|_| panic!("no stream should open"))
}

/// A flood of `frames` after the handshake is answered GOAWAY ENHANCE_YOUR_CALM, and the
/// connection then closes cleanly.
fn assert_calmed(config: H2Config, slot: Slot, flood: Vec<u8>) {
    let (server, mut client) = Server::start(config, 1 << 20, slot);
    let mut bytes = handshake_bytes();
    bytes.extend(flood);
    client.write_all(&bytes).unwrap();
    let (_, code) = goaway(&mut client);
    assert_eq!(code, ENHANCE_YOUR_CALM);
    until_eof(&mut client);
    server.join();
}

#[test]
fn ping_flood_is_calmed() {
    let config = H2Config {
        max_control_rate: 2,
        ..H2Config::default()
    };
    let flood = (0..40u64)
        .flat_map(|i| frame(PING, 0, 0, &i.to_be_bytes()))
        .collect();
    assert_calmed(config, never_called(), flood);
}

#[test]
fn empty_data_flood_is_calmed() {
    let config = H2Config {
        max_control_rate: 2,
        ..H2Config::default()
    };
    let slot: Slot = Arc::new(drop);
    let mut flood = frame(HEADERS, END_HEADERS, 1, &GET_BLOCK);
    flood.extend((0..40).flat_map(|_| frame(DATA, 0, 1, &[])));
    assert_calmed(config, slot, flood);
}

/// Review 38 finding 8: tiny DATA frames (a byte each) count as control frames: each would
/// cost the stream's unread body a few segments.
#[test]
fn tiny_data_flood_is_calmed() {
    let config = H2Config {
        max_control_rate: 2,
        ..H2Config::default()
    };
    let slot: Slot = Arc::new(drop);
    let mut flood = frame(
        HEADERS,
        END_HEADERS,
        1,
        &[0x83, 0x86, 0x84, 0x01, 0x01, b'a'],
    );
    flood.extend((0..40).flat_map(|_| frame(DATA, 0, 1, b"x")));
    assert_calmed(config, slot, flood);
}

#[test]
fn rapid_reset_is_calmed() {
    let config = H2Config {
        max_reset_rate: 1,
        ..H2Config::default()
    };
    let slot: Slot = Arc::new(drop);
    let flood = (0..20u32)
        .flat_map(|i| {
            let id = 2 * i + 1;
            let mut pair = frame(HEADERS, END_HEADERS, id, &GET_BLOCK);
            pair.extend(frame(RST_STREAM, 0, id, &8u32.to_be_bytes()));
            pair
        })
        .collect();
    assert_calmed(config, slot, flood);
}

#[test]
fn continuation_flood_is_calmed_before_decoding() {
    let config = H2Config {
        max_header_list_size: 1024,
        ..H2Config::default()
    };
    // A literal field that never ends: its bytes span the CONTINUATIONs.
    let mut flood = frame(HEADERS, 0, 1, &[0x00, 0x7f, 0x80, 0x10]);
    for _ in 0..4 {
        flood.extend(frame(CONTINUATION, 0, 1, &[b'a'; 400]));
    }
    assert_calmed(config, never_called(), flood);
}

#[test]
fn bad_preface_is_answered_goaway_and_closed_without_reset() {
    let (server, mut client) = Server::start(H2Config::default(), 1 << 20, never_called());
    let mut bytes = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n".to_vec();
    bytes.extend([b'z'; 200]);
    client.write_all(&bytes).unwrap();
    let (last, code) = goaway(&mut client);
    assert_eq!((last, code), (0, PROTOCOL_ERROR));
    until_eof(&mut client);
    server.join();
}

#[test]
fn graceful_close_takes_two_steps_and_lets_the_open_stream_finish() {
    let (gate, opened) = (mpsc::channel::<()>(), mpsc::channel::<()>());
    let (release, wait) = gate;
    let (started, seen_open) = opened;
    let wait = std::sync::Mutex::new(wait);
    let started = std::sync::Mutex::new(started);
    let slot: Slot = Arc::new(move |stream| {
        let _ = read_request(&stream);
        started.lock().unwrap().send(()).unwrap();
        wait.lock().unwrap().recv().unwrap();
        respond(&stream, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    });
    let (server, mut client) = Server::start(H2Config::default(), 1 << 20, slot);
    let mut bytes = handshake_bytes();
    bytes.extend(frame(HEADERS, END_HEADERS | END_STREAM, 1, &GET_BLOCK));
    client.write_all(&bytes).unwrap();
    seen_open.recv().unwrap();
    assert_eq!(server.conn.open_streams(), 1);
    // From another thread than the loop's: the waker makes the loop advance.
    server.conn.close_gracefully();
    let (last, code) = goaway(&mut client);
    assert_eq!((last, code), (0x7fff_ffff, 0));
    // The server's PING follows; its answer lets the second GOAWAY go.
    let ping = loop {
        let (kind, flags, _, payload) = next_frame(&mut client).unwrap();
        if kind == PING && flags & ACK == 0 {
            break payload;
        }
    };
    client.write_all(&frame(PING, ACK, 0, &ping)).unwrap();
    let (last, code) = goaway(&mut client);
    assert_eq!((last, code), (1, 0));
    release.send(()).unwrap();
    let mut ended = false;
    let mut data = Vec::new();
    let mut frames = Vec::new();
    while let Some((kind, flags, stream, payload)) = next_frame(&mut client) {
        frames.push((kind, flags, stream, payload.clone()));
        if kind == DATA && stream == 1 {
            data.extend_from_slice(&payload);
            ended |= flags & END_STREAM != 0;
        }
    }
    assert_eq!(data, b"ok", "{frames:?}");
    assert!(ended);
    server.join();
}

#[test]
fn a_reset_stream_ends_its_reads_and_fails_its_writes() {
    let (done, result) = mpsc::channel();
    let done = std::sync::Mutex::new(done);
    let (started, seen_start) = mpsc::channel();
    let started = std::sync::Mutex::new(started);
    let slot: Slot = Arc::new(move |stream| {
        // The request's first bytes read, then the client's reset (a stream reset before
        // that never reaches the app).
        let mut request = vec![0u8; 4096];
        let n = stream
            .read_by(&mut request, Instant::now() + SAFETY, "test read")
            .unwrap();
        request.truncate(n);
        started.lock().unwrap().send(()).unwrap();
        request.extend(read_request(&stream));
        let write = stream.write_all_from(&[b"HTTP/1.1 200 OK\r\n\r\n"], 0, SAFETY);
        drop(stream);
        done.lock()
            .unwrap()
            .send((request, write.is_err()))
            .unwrap();
    });
    let (server, mut client) = Server::start(H2Config::default(), 1 << 20, slot);
    let mut bytes = handshake_bytes();
    // POST / without END_STREAM, some body, then the client's RST_STREAM CANCEL.
    bytes.extend(frame(
        HEADERS,
        END_HEADERS,
        1,
        &[0x83, 0x86, 0x84, 0x01, 0x01, b'a'],
    ));
    bytes.extend(frame(DATA, 0, 1, b"partial"));
    client.write_all(&bytes).unwrap();
    seen_start.recv().unwrap();
    client
        .write_all(&frame(RST_STREAM, 0, 1, &8u32.to_be_bytes()))
        .unwrap();
    let (request, failed) = result.recv().unwrap();
    let request = String::from_utf8(request).unwrap();
    assert!(request.starts_with("POST / HTTP/1.1\r\n"), "{request}");
    assert!(!request.ends_with("0\r\n\r\n"), "{request}");
    assert!(failed);
    assert_eq!(server.conn.open_streams(), 0);
    client.shutdown(std::net::Shutdown::Write).unwrap();
    until_eof(&mut client);
    server.join();
}

#[test]
fn a_window_that_never_opens_bounds_the_streams_output() {
    let (done, result) = mpsc::channel();
    let done = std::sync::Mutex::new(done);
    let slot: Slot = Arc::new(move |stream| {
        let _ = read_request(&stream);
        let body = vec![b'z'; 1 << 20];
        let head = b"HTTP/1.1 200 OK\r\nContent-Length: 1048576\r\n\r\n";
        let mut taken = 0;
        let total = head.len() + body.len();
        while taken < total {
            match stream.write_vectored(&[head, &body], taken).unwrap() {
                Some(n) => taken += n,
                None => break,
            }
        }
        let pending = stream.wants_write();
        done.lock().unwrap().send((taken, pending)).unwrap();
    });
    let (server, mut client) = Server::start(H2Config::default(), 32 * 1024, slot);
    let mut bytes = PREFACE.to_vec();
    // SETTINGS_INITIAL_WINDOW_SIZE = 0: no DATA may flow.
    bytes.extend(frame(SETTINGS, 0, 0, &[0, 4, 0, 0, 0, 0]));
    bytes.extend(frame(HEADERS, END_HEADERS | END_STREAM, 1, &GET_BLOCK));
    client.write_all(&bytes).unwrap();
    let (taken, pending) = result.recv().unwrap();
    assert!(taken <= 32 * 1024 + 64, "took {taken}");
    assert!(pending);
    // The stream dropped with its response incomplete: RST_STREAM.
    let reset = loop {
        let (kind, _, stream, payload) = next_frame(&mut client).unwrap();
        if kind == RST_STREAM && stream == 1 {
            break u32::from_be_bytes(payload[..4].try_into().unwrap());
        }
    };
    assert_eq!(reset, 0x2, "INTERNAL_ERROR");
    client.shutdown(std::net::Shutdown::Write).unwrap();
    until_eof(&mut client);
    server.join();
}

#[test]
fn inline_blocking_calls_drive_the_connection_themselves() {
    // Prefork: the slot runs on the loop's thread, so its reads of a body larger than the
    // window and its write of a response larger than the client's window only progress
    // because the blocking calls read and write the socket themselves.
    static BODY: [u8; 4 * 65535] = [b'b'; 4 * 65535];
    static ANSWER: [u8; 200 * 1024] = [b'a'; 200 * 1024];
    let (requests, seen) = mpsc::channel();
    let requests = std::sync::Mutex::new(requests);
    let slot: Slot = Arc::new(move |stream| {
        let request = read_request(&stream);
        requests.lock().unwrap().send(request).unwrap();
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n",
            ANSWER.len()
        );
        stream
            .write_all_from(&[head.as_bytes(), &ANSWER], 0, SAFETY)
            .unwrap();
    });
    let config = H2Config {
        initial_window_size: 65535,
        connection_window_size: 65535,
        ..H2Config::default()
    };
    let (server, client) = Server::start_with(config, 16 * 1024, true, slot);
    let request = Request::post("http://h/both")
        .header("content-length", BODY.len().to_string())
        .body(())
        .unwrap();
    let got = exchange(client, request, &[&BODY], None, 65535);
    assert!(seen.recv().unwrap().ends_with(&BODY));
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.body.len(), ANSWER.len());
    server.join();
}

#[test]
fn continue_is_an_informational_headers_frame() {
    let slot: Slot = Arc::new(|stream| {
        let mut head = Vec::new();
        let mut buf = [0u8; 1024];
        while !head.ends_with(b"\r\n\r\n") {
            let n = stream
                .read_by(&mut buf[..1], Instant::now() + SAFETY, "head")
                .unwrap();
            assert_eq!(n, 1, "the head ends before the body is asked for");
            head.extend_from_slice(&buf[..n]);
        }
        assert!(String::from_utf8(head)
            .unwrap()
            .contains("expect: 100-continue\r\n"));
        stream
            .write_all_from(&[b"HTTP/1.1 100 Continue\r\n\r\n"], 0, SAFETY)
            .unwrap();
        let body = read_request(&stream);
        assert_eq!(body, b"late");
        respond(&stream, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
    });
    let (server, socket) = Server::start(H2Config::default(), 1 << 20, slot);
    let statuses = runtime().block_on(async move {
        socket.set_nonblocking(true).unwrap();
        let socket = tokio::net::TcpStream::from_std(socket).unwrap();
        let (mut client, connection) = h2::client::handshake(socket).await.unwrap();
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let request = Request::post("http://h/continue")
            .header("expect", "100-continue")
            .header("content-length", "4")
            .body(())
            .unwrap();
        let (mut response, mut send) = client.send_request(request, false).unwrap();
        // The body goes only once the server asked for it.
        let informational = std::future::poll_fn(|cx| response.poll_informational(cx))
            .await
            .unwrap()
            .unwrap();
        send.send_data(Bytes::from_static(b"late"), true).unwrap();
        let last = response.await.unwrap();
        (informational.status(), last.status())
    });
    assert_eq!(statuses, (StatusCode::CONTINUE, StatusCode::OK));
    server.join();
}

/// Frames in `bytes` (whole frames only).
fn frames_in(mut bytes: &[u8]) -> Vec<(u8, u8, u32, Vec<u8>)> {
    let mut frames = Vec::new();
    while bytes.len() >= 9 {
        let len = usize::from(bytes[0]) << 16 | usize::from(bytes[1]) << 8 | usize::from(bytes[2]);
        if bytes.len() < 9 + len {
            break;
        }
        let stream = u32::from_be_bytes(bytes[5..9].try_into().unwrap()) & 0x7fff_ffff;
        frames.push((bytes[3], bytes[4], stream, bytes[9..9 + len].to_vec()));
        bytes = &bytes[9 + len..];
    }
    frames
}

#[test]
fn over_tls_the_streams_bytes_go_through_the_session() {
    let (tls, mut client) = crate::tls::conn::tests::connected();
    let conn = H2Conn::new(
        Wire::Tls(tls),
        &[],
        H2Context {
            config: H2Config::default(),
            inline: false,
            waker: None,
            one_stream: false,
            stream_output_budget: 1 << 20,
            send_timeout: SAFETY,
        },
    );
    let mut bytes = handshake_bytes();
    bytes.extend(frame(HEADERS, END_HEADERS | END_STREAM, 1, &GET_BLOCK));
    client.send(&bytes);
    let advance = conn.advance(Instant::now());
    assert!(!advance.finished);
    let [stream] = <[Box<H2Stream>; 1]>::try_from(advance.opened).unwrap();
    assert!(
        stream.info().is_some(),
        "the handshake's facts reach the stream"
    );
    let mut buf = [0u8; 256];
    let n = stream.read(&mut buf).unwrap().unwrap();
    assert_eq!(&buf[..n], b"GET / HTTP/1.1\r\nhost: a\r\n\r\n");
    assert_eq!(stream.read(&mut buf).unwrap(), Some(0));
    let response = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    assert_eq!(
        stream.write_vectored(&[response], 0).unwrap(),
        Some(response.len())
    );
    // The write framed and sealed the response at once: no advance in between.
    client.pull();
    let frames = frames_in(&client.got);
    let data: Vec<_> = frames
        .iter()
        .filter(|(kind, _, id, _)| *kind == DATA && *id == 1)
        .collect();
    assert!(frames
        .iter()
        .any(|(kind, _, id, _)| *kind == HEADERS && *id == 1));
    assert_eq!(data.len(), 1);
    assert_eq!(data[0].3, b"ok");
    assert_eq!(data[0].1 & END_STREAM, END_STREAM);
    drop(stream);
    assert_eq!(conn.open_streams(), 0);
}

#[test]
fn shutdown_lets_a_complete_answer_go_and_resets_an_incomplete_one() {
    // A timed-out request: the loop writes its 503 when nothing was sent, then `shutdown`;
    // a stream whose response had begun is reset alone. Either way the stuck thread's later
    // writes fail, and the other stream is untouched.
    let (done, results) = mpsc::channel();
    let done = std::sync::Mutex::new(done);
    let slot: Slot = Arc::new(move |stream| {
        let _ = read_request(&stream);
        if stream.id() == 1 {
            stream
                .write_all_from(
                    &[b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy"],
                    0,
                    SAFETY,
                )
                .unwrap();
        } else {
            stream
                .write_vectored(&[b"HTTP/1.1 200 OK\r\nContent-Le"], 0)
                .unwrap();
        }
        stream.shutdown();
        let late = stream.write_vectored(&[b"more"], 0);
        done.lock()
            .unwrap()
            .send((stream.id(), late.is_err()))
            .unwrap();
    });
    let (server, mut client) = Server::start(H2Config::default(), 1 << 20, slot);
    let mut bytes = handshake_bytes();
    bytes.extend(frame(HEADERS, END_HEADERS | END_STREAM, 1, &GET_BLOCK));
    bytes.extend(frame(HEADERS, END_HEADERS | END_STREAM, 3, &GET_BLOCK));
    client.write_all(&bytes).unwrap();
    let mut late = [results.recv().unwrap(), results.recv().unwrap()];
    late.sort();
    assert_eq!(late, [(1, true), (3, true)]);
    let (mut answered, mut reset) = (Vec::new(), None);
    while answered.len() < 4 || reset.is_none() || !answered.ends_with(b"busy") {
        let (kind, _, stream, payload) = next_frame(&mut client).unwrap();
        match (kind, stream) {
            (DATA, 1) => answered.extend_from_slice(&payload),
            (RST_STREAM, 3) => reset = Some(u32::from_be_bytes(payload[..4].try_into().unwrap())),
            (RST_STREAM, 1) => panic!("the complete answer was reset"),
            _ => {}
        }
    }
    assert_eq!(answered, b"busy");
    assert_eq!(reset, Some(0x8), "CANCEL");
    client.shutdown(std::net::Shutdown::Write).unwrap();
    until_eof(&mut client);
    server.join();
}

/// Review 38 finding 1: after a flush that left bytes (the client's window is closed), a
/// write wait waits for them to go, not for room the stream has anyway (a slot would spin).
#[test]
fn a_write_wait_after_a_failed_flush_waits_for_the_window() {
    for inline in [false, true] {
        let (done, result) = mpsc::channel();
        let done = std::sync::Mutex::new(done);
        let slot: Slot = Arc::new(move |stream| {
            let _ = read_request(&stream);
            let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
            assert_eq!(
                stream.write_vectored(&[answer], 0).unwrap(),
                Some(answer.len())
            );
            let flushed = stream.flush().unwrap();
            // The window never opens: only the deadline ends the wait.
            let waited = stream.wait(true, Instant::now() + Duration::from_millis(50), "send");
            done.lock()
                .unwrap()
                .send((flushed, waited.is_err(), stream.wants_write()))
                .unwrap();
        });
        let (server, mut client) = Server::start_with(H2Config::default(), 1 << 20, inline, slot);
        let mut bytes = PREFACE.to_vec();
        bytes.extend(frame(SETTINGS, 0, 0, &[0, 4, 0, 0, 0, 0]));
        bytes.extend(frame(HEADERS, END_HEADERS | END_STREAM, 1, &GET_BLOCK));
        client.write_all(&bytes).unwrap();
        let (flushed, timed_out, pending) = result.recv().unwrap();
        assert!(!flushed && pending);
        assert!(
            timed_out,
            "inline {inline}: the wait returned with the bytes still held"
        );
        client.shutdown(std::net::Shutdown::Write).unwrap();
        while next_frame(&mut client).is_some() {}
        server.join();
    }
}

/// Review 38 finding 2: a complete response whose stream was dropped (the exchange is over)
/// while the client's window stays closed is reset CANCEL at the send timeout, not held for
/// ever.
#[test]
fn a_dropped_streams_held_bytes_are_reset_at_the_send_timeout() {
    let slot: Slot = Arc::new(|stream| {
        let _ = read_request(&stream);
        let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
        assert_eq!(
            stream.write_vectored(&[answer], 0).unwrap(),
            Some(answer.len())
        );
        stream.shutdown_write();
        assert!(stream.wants_write());
    });
    let (server, mut client) = Server::start_timed(
        H2Config::default(),
        1 << 20,
        false,
        Duration::from_millis(50),
        slot,
    );
    let mut bytes = PREFACE.to_vec();
    bytes.extend(frame(SETTINGS, 0, 0, &[0, 4, 0, 0, 0, 0]));
    bytes.extend(frame(HEADERS, END_HEADERS | END_STREAM, 1, &GET_BLOCK));
    client.write_all(&bytes).unwrap();
    let reset = loop {
        let (kind, _, stream, payload) = next_frame(&mut client).unwrap();
        assert!(kind != DATA, "the window never opened");
        if kind == RST_STREAM && stream == 1 {
            break u32::from_be_bytes(payload[..4].try_into().unwrap());
        }
    };
    assert_eq!(reset, 0x8, "CANCEL");
    assert_eq!(server.conn.open_streams(), 0);
    client.shutdown(std::net::Shutdown::Write).unwrap();
    while next_frame(&mut client).is_some() {}
    server.join();
}

/// Review 38 finding 3: a stream the client reset before the server took it (HEADERS then
/// RST_STREAM in one write) never reaches the app; the next stream does.
#[test]
fn a_stream_reset_before_it_is_taken_never_reaches_the_app() {
    let (requests, seen) = mpsc::channel();
    let requests = std::sync::Mutex::new(requests);
    let slot: Slot = Arc::new(move |stream| {
        let mut request = Vec::new();
        let mut buf = [0u8; 4096];
        // A reset stream the loop did hand out fails its first read: nothing to serve.
        while let Ok(n) = stream.read_by(&mut buf, Instant::now() + SAFETY, "test read") {
            if n == 0 {
                requests.lock().unwrap().send(request).unwrap();
                return respond(&stream, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
            }
            request.extend_from_slice(&buf[..n]);
        }
    });
    let (server, mut client) = Server::start(H2Config::default(), 1 << 20, slot);
    let mut bytes = handshake_bytes();
    bytes.extend(frame(HEADERS, END_HEADERS | END_STREAM, 1, &GET_BLOCK));
    bytes.extend(frame(RST_STREAM, 0, 1, &8u32.to_be_bytes()));
    // POST /, so that its request tells it apart from stream 1's.
    bytes.extend(frame(
        HEADERS,
        END_HEADERS | END_STREAM,
        3,
        &[0x83, 0x86, 0x84, 0x01, 0x01, b'a'],
    ));
    client.write_all(&bytes).unwrap();
    let first = String::from_utf8(seen.recv().unwrap()).unwrap();
    assert!(first.starts_with("POST / HTTP/1.1\r\n"), "{first}");
    client.shutdown(std::net::Shutdown::Write).unwrap();
    while next_frame(&mut client).is_some() {}
    server.join();
    assert!(seen.try_recv().is_err(), "the reset stream was served");
}

/// Review 38 finding 7: the control frames a download earns free are capped at one rate
/// window's worth: a PING flood after a large response is still calmed.
#[test]
fn a_large_download_does_not_buy_a_control_flood() {
    static ANSWER: [u8; 1 << 20] = [b'a'; 1 << 20];
    let slot: Slot = Arc::new(|stream| {
        let _ = read_request(&stream);
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n",
            ANSWER.len()
        );
        respond_parts(&stream, &[head.as_bytes(), &ANSWER]);
    });
    let config = H2Config {
        max_control_rate: 2,
        ..H2Config::default()
    };
    let (server, mut client) = Server::start(config, 2 << 20, slot);
    let mut bytes = PREFACE.to_vec();
    // The largest stream window, and the connection's opened as far: one control frame each.
    bytes.extend(frame(SETTINGS, 0, 0, &[0, 4, 0x7f, 0xff, 0xff, 0xff]));
    bytes.extend(frame(
        WINDOW_UPDATE,
        0,
        0,
        &(0x7fff_ffffu32 - 65535).to_be_bytes(),
    ));
    bytes.extend(frame(HEADERS, END_HEADERS | END_STREAM, 1, &GET_BLOCK));
    client.write_all(&bytes).unwrap();
    let mut got = 0;
    loop {
        let (kind, flags, stream, payload) = next_frame(&mut client).unwrap();
        if kind == DATA && stream == 1 {
            got += payload.len();
            if flags & END_STREAM != 0 {
                break;
            }
        }
    }
    assert_eq!(got, ANSWER.len());
    let flood: Vec<u8> = (0..60u64)
        .flat_map(|i| frame(PING, 0, 0, &i.to_be_bytes()))
        .collect();
    client.write_all(&flood).unwrap();
    let (_, code) = goaway(&mut client);
    assert_eq!(code, ENHANCE_YOUR_CALM);
    until_eof(&mut client);
    server.join();
}

fn respond_parts(stream: &H2Stream, parts: &[&[u8]]) {
    if let Err(err) = stream.write_all_from(parts, 0, SAFETY) {
        panic!("{err}: {}", stream.debug());
    }
    stream.shutdown_write();
}
