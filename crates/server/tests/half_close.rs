//! A client that half-closes (SHUT_WR) right after its request: whatever whole head it sent is
//! served, and the connection closes at once after it; a head cut short by the EOF closes the
//! connection at once, without waiting for the header timeout. The EOF often arrives in the
//! same epoll edge as the last bytes, so the connection must look for it itself.

mod support;

use std::io::{Read, Write};
use std::net::Shutdown;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use support::{read_response, test_config, Echo, TestServer};
use tines_proto::Limits;
use tines_server::connection::{Connection, Readiness};
use tines_server::{Mpm, Peer};

/// A request whose head is exactly `size` bytes (padded with one field).
fn head_of(size: usize) -> Vec<u8> {
    let start = b"GET /h HTTP/1.1\r\nHost: a\r\nX-Pad: ";
    let end = b"\r\n\r\n";
    let mut head = start.to_vec();
    head.resize(size - end.len(), b'p');
    head.extend_from_slice(end);
    assert_eq!(head.len(), size);
    head
}

/// A connection over a socketpair whose client side already sent `input` and half-closed,
/// so the bytes and the EOF are both waiting before the first read.
fn connection_after(input: &[u8]) -> (Box<Connection>, std::os::unix::net::UnixStream) {
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
    assert_eq!(rc, 0);
    // SAFETY: both fds are fresh and owned by nobody else.
    let (client, server) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let mut client = std::os::unix::net::UnixStream::from(client);
    client.write_all(input).unwrap();
    client.shutdown(Shutdown::Write).unwrap();
    tines_server::control::set_nonblocking(server.as_raw_fd()).unwrap();
    (
        Connection::new(
            tines_server::transport::Transport::Plain(server),
            Peer::Unix,
            0,
        ),
        client,
    )
}

#[test]
fn a_whole_head_before_the_eof_is_complete_whatever_its_size() {
    // 8192 and 16384 fill the first read buffer (and its first growth) exactly, so the read
    // after them is the EOF.
    for size in [100, 8191, 8192, 8193, 16384, 32768] {
        let (mut conn, _client) = connection_after(&head_of(size));
        assert!(
            matches!(
                conn.on_readable(&Limits::default()),
                Readiness::HeadComplete
            ),
            "{size}-byte head"
        );
    }
}

#[test]
fn a_partial_head_before_the_eof_closes_instead_of_waiting() {
    for input in [
        &b"GET /foo/bar HTTP/1.0\r\nbaz"[..],
        b"GET / HTTP/1.1\r\nHost: a\r\n",
        b"G",
    ] {
        let (mut conn, _client) = connection_after(input);
        assert!(
            matches!(conn.on_readable(&Limits::default()), Readiness::Closed),
            "{input:?}"
        );
    }
    let (mut conn, _client) = connection_after(b"");
    assert!(matches!(
        conn.on_readable(&Limits::default()),
        Readiness::Closed
    ));
}

#[test]
fn a_refused_head_before_the_eof_is_still_answered() {
    let (mut conn, _client) = connection_after(b"GET / HTTP/1.1\r\nHost: a\r\nA : b\r\n\r\n");
    assert!(matches!(
        conn.on_readable(&Limits::default()),
        Readiness::Rejected(_)
    ));
}

/// True when the next read is EOF (not a timeout, not more bytes).
fn at_eof(stream: &mut std::net::TcpStream) -> bool {
    matches!(stream.read(&mut [0u8; 1]), Ok(0))
}

#[test]
fn a_live_server_serves_then_closes_after_the_clients_half_close() {
    for mpm in [Mpm::Prefork, Mpm::Thread, Mpm::Event] {
        let mut config = test_config(mpm);
        // Far beyond the client's 10 s read timeout: only the EOF may close a cut head. (An
        // answered connection may idle until the keep-alive timeout, 2 s here, before closing:
        // the EOF can come in the edge its last bytes raised, read before the response.)
        config.header_timeout = Duration::from_secs(60);
        let server = TestServer::start(config, Echo);
        for size in [100, 8192, 16384] {
            let mut stream = server.connect();
            stream.write_all(&head_of(size)).unwrap();
            stream.shutdown(Shutdown::Write).unwrap();
            let response = read_response(&mut stream, &mut Vec::new(), false);
            assert_eq!(response.map(|r| r.status), Some(200), "{mpm:?} {size}");
            assert!(
                at_eof(&mut stream),
                "{mpm:?} {size}: not closed after the response"
            );
        }
        let mut stream = server.connect();
        stream.write_all(b"GET /foo/bar HTTP/1.0\r\nbaz").unwrap();
        stream.shutdown(Shutdown::Write).unwrap();
        assert!(at_eof(&mut stream), "{mpm:?}: a cut head left open");
    }
}
