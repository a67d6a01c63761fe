//! Drives one whole connection (the state machine, exchange, body decoding, response
//! framing, keep-alive and pipelining) over a socketpair with an echo app: the cargo-fuzz
//! `connection` target and the test that replays its corpus call [`drive_connection`].

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use crate::connection::{Connection, Phase, Protocol, Readiness};
use crate::exchange::{Exchange, SlotContext};
use crate::listener::{Local, Peer};
use crate::scoreboard::Scoreboard;
use crate::shared::WorkerShared;
use crate::slot::serve_connection;
use crate::{App, WorkerConfig};

/// Inputs are cut to this size so the client's whole input fits the socket buffer.
pub const MAX_INPUT: usize = 64 * 1024;

/// Reads the whole body and answers with it (the body error's status when reading fails).
struct Echo;

impl App for Echo {
    fn serve(&self, mut exchange: Box<Exchange>) -> Box<Exchange> {
        let mut body = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match exchange.read_body(&mut buf) {
                Ok(0) => break,
                Ok(n) => body.extend_from_slice(&buf[..n]),
                Err(_) => {
                    let status = exchange.fault().unwrap_or(500);
                    exchange.fail(status);
                    return exchange;
                }
            }
        }
        let headers: [(&[u8], &[u8]); 1] = [(b"Content-Type", b"application/octet-stream")];
        if exchange
            .begin_response(b"200 OK", headers, Some(body.len() as u64))
            .is_ok()
        {
            let _ = exchange.write_body(&body);
            let _ = exchange.finish();
        }
        exchange
    }
}

fn socketpair() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: fds is a valid 2-element array for socketpair to fill.
    let rc = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    assert_eq!(rc, 0, "socketpair failed");
    // SAFETY: both fds are fresh and owned by nobody else.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

/// Sends `input` (cut to [`MAX_INPUT`]) as a client that then half-closes, and serves the
/// connection until it closes. Panics if a response on the wire is not an HTTP/1.1 status line
/// or if the server leaves the connection open after the client's input ended.
pub fn drive_connection(input: &[u8]) {
    let input = &input[..input.len().min(MAX_INPUT)];
    let (client, server) = socketpair();
    let mut client = std::os::unix::net::UnixStream::from(client);
    std::io::Write::write_all(&mut client, input).expect("the input fits the socket buffer");
    client
        .shutdown(std::net::Shutdown::Write)
        .expect("half-close");
    crate::control::set_nonblocking(server.as_raw_fd()).expect("non-blocking");
    let config = WorkerConfig {
        header_timeout: Duration::from_millis(20),
        body_timeout: Duration::from_millis(20),
        send_timeout: Duration::from_millis(20),
        keepalive_timeout: Duration::from_millis(20),
        ..WorkerConfig::default()
    };
    let limits = config.limits;
    let scoreboard = Arc::new(Scoreboard::new(1, 1).expect("scoreboard"));
    let shared = Arc::new(WorkerShared::new(
        config,
        vec![Local::Unix(String::new())],
        None,
        scoreboard,
        0,
        u64::MAX,
        None,
    ));
    serve_until_closed(
        Connection::new(crate::transport::Transport::Plain(server), Peer::Unix, 0),
        &shared,
        limits,
    );
    let mut output = Vec::new();
    let _ = client.read_to_end(&mut output);
    if !output.is_empty() {
        assert!(
            output.starts_with(b"HTTP/1.1 "),
            "the first bytes on the wire are not a status line"
        );
    }
}

/// Serves `conn` until it closes; the connection is dropped (its fd closed) on return.
fn serve_until_closed(
    mut conn: Box<Connection>,
    shared: &Arc<WorkerShared>,
    limits: tines_proto::Limits,
) {
    let mut ctx = Box::new(SlotContext::new());
    loop {
        match conn.on_readable(&limits) {
            Readiness::HeadComplete => {
                let (kept, returned) = serve_connection(conn, ctx, &Echo, shared, None);
                ctx = returned;
                match kept {
                    // The response ended the connection (the reactor would close it, lingering
                    // when the body was not read).
                    Some(next) if matches!(next.protocol, Protocol::Http1(Phase::Closing(_))) => {
                        break
                    }
                    Some(next) => conn = next,
                    None => break,
                }
            }
            Readiness::Pending => {
                // The client wrote everything and half-closed before the first read, so the
                // EOF is already in the socket: a connection parked now would wait for an edge
                // that never comes (the EOF raised its edge before this read).
                panic!("the connection waits for bytes after the client's EOF");
            }
            // A plain transport: never TLS's.
            Readiness::Closed
            | Readiness::BadProxyHeader(_)
            | Readiness::PlainHttpOnTls
            | Readiness::HandshakeFailed(_)
            | Readiness::Http2 => break,
            Readiness::Rejected(err) => {
                crate::reactor::reject(&mut conn, &err, shared, &mut ctx);
                break;
            }
        }
    }
}
