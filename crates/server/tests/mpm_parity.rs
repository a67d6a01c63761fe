//! `mpm_parity`: scripted conversations (raw bytes in over a real loopback socket, everything
//! read until the server closes) run against every MPM — prefork, thread, event, and event with
//! the app on the loop thread (`threads = 0`) — which must all give the same bytes, with the
//! `Date` header's value masked. Each conversation also states what the reference transcript
//! (prefork's) must contain, so four equally wrong answers do not pass.
//!
//! Every conversation ends with the server closing the connection (a `Connection: close`
//! request, an error, HTTP/1.0, a timeout), so "read to EOF" captures the whole exchange
//! including whether the server kept or closed the connection. No conversation sends bytes the
//! server does not read before closing (that would turn its close into a reset and lose the
//! response).

mod support;

use std::io::{Read, Write};
use std::time::Duration;

use support::{describe_request, read_whole_body, TestServer};
use tines_server::{App, Exchange, Mpm, WorkerConfig};

/// The size of `/big`'s body.
const BIG: usize = 1 << 20;

/// Deterministic responses: `/big` is 1 MiB of a counting pattern with Content-Length, `/none`
/// returns without starting a response (the server answers 500), `/stream` has no declared
/// length (chunked for HTTP/1.1, close-delimited for HTTP/1.0); anything else echoes the
/// request (method, target, headers in order, body) followed by `<end>\n`.
struct Parity;

fn big_body() -> Vec<u8> {
    (0..BIG / 4)
        .flat_map(|i| (i as u32).to_be_bytes())
        .collect()
}

impl App for Parity {
    fn serve(&self, mut exchange: Box<Exchange>) -> Box<Exchange> {
        let Some(body) = read_whole_body(&mut exchange) else {
            let status = exchange.fault().unwrap_or(400);
            exchange.fail(status);
            return exchange;
        };
        let target = exchange.target().to_vec();
        match &target[..] {
            b"/none" => return exchange,
            b"/big" => {
                let big = big_body();
                let ct: [(&[u8], &[u8]); 1] = [(b"Content-Type", b"application/octet-stream")];
                exchange
                    .begin_response(b"200 OK", ct, Some(big.len() as u64))
                    .unwrap();
                let _ = exchange.write_body(&big);
                let _ = exchange.finish();
                return exchange;
            }
            b"/stream" => {
                exchange
                    .begin_response(b"200 OK", std::iter::empty(), None)
                    .unwrap();
                for part in [&b"one,"[..], b"two,", b"three"] {
                    let _ = exchange.write_body(part);
                }
                let _ = exchange.finish();
                return exchange;
            }
            _ => {}
        }
        let mut out = describe_request(&exchange, &body);
        out.extend_from_slice(END);
        let ct: [(&[u8], &[u8]); 1] = [(b"Content-Type", b"text/plain")];
        exchange
            .begin_response(b"200 OK", ct, Some(out.len() as u64))
            .unwrap();
        let _ = exchange.write_body(&out);
        let _ = exchange.finish();
        exchange
    }
}

/// How long a conversation waits for the server's next bytes (see `converse`).
const READ_TIMEOUT: Duration = Duration::from_secs(3);

/// The end of every echo body: a conversation waits for it to know a response is complete.
const END: &[u8] = b"<end>\n";

enum Step {
    /// Write these bytes.
    Send(Vec<u8>),
    /// Read until the transcript holds this many occurrences of the marker in all.
    WaitFor(&'static [u8], usize),
}

fn send(bytes: impl AsRef<[u8]>) -> Step {
    Step::Send(bytes.as_ref().to_vec())
}

/// The four variants, each with the same settings.
fn variants() -> Vec<(&'static str, WorkerConfig)> {
    let base = |mpm: Mpm| {
        let mut config = support::test_config(mpm);
        config.header_timeout = Duration::from_millis(300);
        config.header_timeout_max = Duration::from_millis(300);
        config.keepalive_timeout = Duration::from_secs(5);
        config.max_body_size = 1000;
        config.limits.max_request_line = 64;
        config.limits.max_headers = 10;
        // Bodies over 16 bytes go to a temporary file (read before dispatch, every MPM).
        config.request_buffer_memory = 16;
        config
    };
    let mut inline = base(Mpm::Event);
    inline.threads = 0;
    vec![
        ("prefork", base(Mpm::Prefork)),
        ("thread", base(Mpm::Thread)),
        ("event", base(Mpm::Event)),
        ("event threads=0", inline),
    ]
}

fn count(haystack: &[u8], needle: &[u8]) -> usize {
    haystack
        .windows(needle.len())
        .filter(|w| *w == needle)
        .count()
}

/// Runs the steps on a new connection and reads to EOF; the transcript, with a visible note
/// if the server did not close in time.
fn converse(server: &TestServer, steps: &[Step]) -> Vec<u8> {
    let mut stream = server.connect();
    // Shorter than the keep-alive timeout (5 s): every EOF in a transcript is the server
    // closing the connection on its own account, never an idle keep-alive expiring; a server
    // that keeps a connection it should close shows as `<read error: WouldBlock>`.
    stream.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
    let mut transcript = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut read = |stream: &mut std::net::TcpStream, transcript: &mut Vec<u8>| -> bool {
        match stream.read(&mut buf) {
            Ok(0) => false,
            Ok(n) => {
                transcript.extend_from_slice(&buf[..n]);
                true
            }
            Err(err) => {
                transcript.extend_from_slice(format!("<read error: {:?}>", err.kind()).as_bytes());
                false
            }
        }
    };
    for step in steps {
        match step {
            Step::Send(bytes) => {
                if let Err(err) = stream.write_all(bytes) {
                    transcript
                        .extend_from_slice(format!("<write error: {:?}>", err.kind()).as_bytes());
                    return transcript;
                }
            }
            Step::WaitFor(marker, n) => {
                while count(&transcript, marker) < *n {
                    if !read(&mut stream, &mut transcript) {
                        return transcript;
                    }
                }
            }
        }
    }
    while read(&mut stream, &mut transcript) {}
    transcript
}

/// Replaces every `Date` header value with `<masked>`.
fn mask_date(transcript: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(transcript.len());
    let mut rest = transcript;
    while let Some(pos) = rest.windows(8).position(|w| w == b"\r\nDate: ") {
        out.extend_from_slice(&rest[..pos + 8]);
        out.extend_from_slice(b"<masked>");
        rest = &rest[pos + 8..];
        let end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .unwrap_or(rest.len());
        rest = &rest[end..];
    }
    out.extend_from_slice(rest);
    out
}

fn show(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    if text.len() > 2000 {
        format!("{}… ({} bytes)", &text[..2000], bytes.len())
    } else {
        text.into_owned()
    }
}

/// Runs the conversation against every variant; all transcripts must equal prefork's, which
/// must contain each of `expect` (in order).
fn parity(steps: &[Step], expect: &[&[u8]]) -> Vec<u8> {
    let mut reference: Option<Vec<u8>> = None;
    for (name, config) in variants() {
        let server = TestServer::start(config, Parity);
        let transcript = mask_date(&converse(&server, steps));
        drop(server);
        match &reference {
            None => {
                for problem in [&b"<read error"[..], b"<write error"] {
                    assert!(
                        !transcript.windows(problem.len()).any(|w| w == problem),
                        "{name}: the server did not close the connection by itself:\n{}",
                        show(&transcript)
                    );
                }
                let mut from = 0;
                for fragment in expect {
                    let found = transcript[from..]
                        .windows(fragment.len())
                        .position(|w| w == *fragment);
                    let Some(at) = found else {
                        panic!(
                            "{name}: expected {:?} (in order) in the transcript:\n{}",
                            String::from_utf8_lossy(fragment),
                            show(&transcript)
                        );
                    };
                    from += at + fragment.len();
                }
                reference = Some(transcript);
            }
            Some(reference) => {
                if &transcript != reference {
                    let at = transcript
                        .iter()
                        .zip(reference.iter())
                        .position(|(a, b)| a != b)
                        .unwrap_or(transcript.len().min(reference.len()));
                    let start = at.saturating_sub(200);
                    panic!(
                        "{name} differs from prefork at byte {at} (lengths {} and {}):\n--- prefork from byte {start}:\n{}\n--- {name} from byte {start}:\n{}",
                        reference.len(),
                        transcript.len(),
                        show(&reference[start.min(reference.len())..]),
                        show(&transcript[start.min(transcript.len())..]),
                    );
                }
            }
        }
    }
    reference.unwrap()
}

const CLOSE: &[u8] = b"GET /last HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";

#[test]
fn keep_alive_three_requests() {
    let transcript = parity(
        &[
            send(b"GET /one HTTP/1.1\r\nHost: a\r\n\r\n"),
            Step::WaitFor(END, 1),
            send(b"POST /two HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello"),
            Step::WaitFor(END, 2),
            // The head in two writes.
            send(b"GET /three HTTP/1.1\r\nHo"),
            send(b"st: a\r\nConnection: close\r\n\r\n"),
        ],
        &[
            b"HTTP/1.1 200 OK\r\n",
            b"GET /one\n",
            b"HTTP/1.1 200 OK\r\n",
            b"\n\nhello<end>\n",
            b"HTTP/1.1 200 OK\r\n",
            b"Connection: close\r\n",
            b"GET /three\n",
        ],
    );
    assert_eq!(count(&transcript, b"HTTP/1.1 200 OK\r\n"), 3);
}

#[test]
fn pipelining_with_head() {
    let transcript = parity(
        &[send(
            b"GET /a HTTP/1.1\r\nHost: a\r\n\r\nHEAD /b HTTP/1.1\r\nHost: a\r\n\r\nPOST /c HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nxyzGET /d HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        )],
        &[
            b"GET /a\n",
            b"HTTP/1.1 200 OK\r\n",
            b"HTTP/1.1 200 OK\r\n",
            b"POST /c\n",
            b"\n\nxyz<end>\n",
            b"GET /d\n",
        ],
    );
    assert_eq!(count(&transcript, b"HTTP/1.1 200 OK\r\n"), 4);
    assert!(
        !transcript.windows(7).any(|w| w == b"HEAD /b"),
        "a response to HEAD has no body"
    );
}

#[test]
fn content_length_bodies_in_pieces() {
    // A small body (the event loop reads it ahead) and a larger one (streamed through the
    // app), each arriving in several writes.
    let large = "0123456789".repeat(10);
    parity(
        &[
            send(b"POST /small HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhe"),
            send(b"ll"),
            send(b"o"),
            Step::WaitFor(END, 1),
            send(b"POST /large HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n"),
            send(&large[..30]),
            send(&large[30..]),
            Step::WaitFor(END, 2),
            send(CLOSE),
        ],
        &[
            b"POST /small\n",
            b"\n\nhello<end>\n",
            b"POST /large\n",
            format!("\n\n{large}<end>\n").as_bytes(),
            b"GET /last\n",
        ],
    );
}

#[test]
fn chunked_request_body_echoed() {
    parity(
        &[
            send(
                b"POST /c HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
            ),
            send(b"6;ext=1\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n"),
            Step::WaitFor(END, 1),
            send(CLOSE),
        ],
        &[
            b"HTTP/1.1 200 OK\r\n",
            b"\n\nhello world<end>\n",
            b"GET /last\n",
        ],
    );
}

#[test]
fn expect_100_continue() {
    parity(
        &[
            send(
                b"PUT /up HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n",
            ),
            Step::WaitFor(b"HTTP/1.1 100 Continue\r\n\r\n", 1),
            send(b"data"),
            Step::WaitFor(END, 1),
            send(CLOSE),
        ],
        &[
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n",
            b"\n\ndata<end>\n",
            b"GET /last\n",
        ],
    );
}

#[test]
fn http10_without_keep_alive_closes() {
    let transcript = parity(
        &[send(b"GET /old HTTP/1.0\r\n\r\n")],
        &[
            b"HTTP/1.1 200 OK\r\n",
            b"Connection: close\r\n",
            b"GET /old\n",
        ],
    );
    assert_eq!(count(&transcript, END), 1);
}

#[test]
fn http10_with_keep_alive() {
    parity(
        &[
            send(b"GET /1 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"),
            Step::WaitFor(END, 1),
            // Unknown length under HTTP/1.0: close-delimited.
            send(b"GET /stream HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"),
        ],
        &[
            b"Connection: keep-alive\r\n",
            b"GET /1\n",
            b"Connection: close\r\n",
            b"one,two,three",
        ],
    );
}

#[test]
fn chunked_response_then_close() {
    parity(
        &[
            send(b"GET /stream HTTP/1.1\r\nHost: a\r\n\r\n"),
            Step::WaitFor(b"0\r\n\r\n", 1),
            send(CLOSE),
        ],
        &[
            b"Transfer-Encoding: chunked\r\n",
            b"three",
            b"0\r\n\r\n",
            b"GET /last\n",
        ],
    );
}

#[test]
fn bad_request_line_400() {
    parity(
        &[send(b"GARBAGE\r\n\r\n")],
        &[b"HTTP/1.1 400 ", b"Connection: close\r\n"],
    );
}

#[test]
fn smuggling_content_length_with_transfer_encoding_400() {
    parity(
        &[send(
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        )],
        &[b"HTTP/1.1 400 ", b"Connection: close\r\n"],
    );
}

#[test]
fn unknown_transfer_coding_501() {
    parity(
        &[send(
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        )],
        &[b"HTTP/1.1 501 ", b"Connection: close\r\n"],
    );
}

#[test]
fn request_line_too_long_414() {
    let target = "x".repeat(100);
    parity(
        &[send(format!("GET /{target} HTTP/1.1\r\nHost: a\r\n\r\n"))],
        &[b"HTTP/1.1 414 ", b"Connection: close\r\n"],
    );
}

#[test]
fn too_many_headers_431() {
    let headers: String = (0..12).map(|i| format!("X-H{i}: v\r\n")).collect();
    parity(
        &[send(format!("GET / HTTP/1.1\r\nHost: a\r\n{headers}\r\n"))],
        &[b"HTTP/1.1 431 ", b"Connection: close\r\n"],
    );
}

#[test]
fn body_over_max_body_size_413() {
    // The body is never sent: the server answers from the head.
    parity(
        &[send(
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2000\r\n\r\n",
        )],
        // RFC 9112 9.6: a response after which the server closes says so.
        &[b"HTTP/1.1 413 ", b"Connection: close\r\n"],
    );
}

#[test]
fn header_timeout_408() {
    let transcript = parity(
        &[
            send(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"),
            Step::WaitFor(END, 1),
            // A second head that never finishes.
            send(b"GET /slow HTTP/1.1\r\nHost:"),
        ],
        &[
            b"HTTP/1.1 200 OK\r\n",
            b"HTTP/1.1 408 ",
            b"Connection: close\r\n",
        ],
    );
    assert!(!transcript.windows(6).any(|w| w == b"/slow\n"));
}

#[test]
fn app_without_a_response_500() {
    parity(
        &[send(b"GET /none HTTP/1.1\r\nHost: a\r\n\r\n")],
        &[
            b"HTTP/1.1 500 Internal Server Error\r\n",
            b"Connection: close\r\n",
            b"Internal Server Error\n",
        ],
    );
}

#[test]
fn large_response_read_fully() {
    let transcript = parity(
        &[send(b"GET /big HTTP/1.1\r\nHost: a\r\n\r\n"), send(CLOSE)],
        &[b"HTTP/1.1 200 OK\r\n", b"Content-Length: 1048576\r\n"],
    );
    let head_end = transcript
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap()
        + 4;
    let big = big_body();
    assert_eq!(
        &transcript[head_end..(head_end + BIG).min(transcript.len())],
        &big[..],
        "the 1 MiB body, intact"
    );
    let rest = &transcript[head_end + BIG..];
    assert!(rest.starts_with(b"HTTP/1.1 200 OK\r\n"), "{}", show(rest));
    assert!(rest.ends_with(b"GET /last\n") || rest.windows(10).any(|w| w == b"GET /last\n"));
}
